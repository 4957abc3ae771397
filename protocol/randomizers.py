"""Bit randomizers written as thresholded noise ``[b + V > 1/2]`` (docs/privacy.md).

* symmetric (RAPPOR's permanent randomized response): ``V ~ Laplace(1/level)``;
  a bit flips with probability ``f/2 = exp(-level/2) / 2``.
* asymmetric (Mangat / the local form of ADP): ``V ~ Exp(level) >= 0``; a
  true 1 always stays 1, a 0 becomes 1 with probability ``exp(-level/2)``.
* trusted: no noise, the exact bits (central mechanisms add noise later).

Optional instantaneous randomized response (IRR) is applied afresh on every
transmission: symmetric RAPPOR ``P(1 | B'=1) = q``, ``P(1 | B'=0) = p``;
asymmetric one-sided ``1 -> 1``, ``0 -> 1`` w.p. ``q_irr``.

One function serves one client and a million: everything takes arrays of
shape ``(clients, bits)`` (or ``(bits,)``).

>>> r = Randomizer(mode="symmetric", level=2 * math.log(2))  # f = 0.5
>>> round(r.f, 12), [round(x, 12) for x in r.probabilities()]
(0.5, [0.25, 0.75])
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt

from .errors import ParameterError
from .exact import bernoulli_choose
from .local.base import MODES, LocalMechanism, local_mechanism
from .local.common import MAX_LEVEL, MIN_LEVEL
from .rng import FloatArray, RandomSource, as_rng

__all__ = ["MAX_LEVEL", "MIN_LEVEL", "MODES", "Mode", "Randomizer", "laplace_rate_from_f", "threshold_bits"]

Mode = Literal["symmetric", "asymmetric", "trusted"]
BoolArray = npt.NDArray[np.bool_]


def threshold_bits(bits: npt.ArrayLike, noise: npt.ArrayLike) -> BoolArray:
    """The permanent (memoized) bits: ``b + V > 1/2``."""
    return np.asarray(bits, dtype=np.float64) + np.asarray(noise, dtype=np.float64) > 0.5


def laplace_rate_from_f(f: float) -> float:
    """RAPPOR's ``f`` as a Laplace rate: ``f/2 = exp(-rate/2)/2`` so ``rate = -2 ln f``."""
    if not 0.0 < f < 1.0:
        raise ParameterError("f", f"must be in (0, 1), got {f}")
    return -2.0 * math.log(f)


@dataclass(frozen=True, kw_only=True)
class Randomizer:
    """A bit randomizer at one noise level.

    Attributes:
        mode: ``"symmetric"``, ``"asymmetric"`` or ``"trusted"``.
        level: the noise rate: Laplace rate (symmetric) or exponential rate
            (asymmetric); ignored (must be ``inf``) for trusted.
        irr_p: symmetric IRR ``P(report 1 | permanent 0)``; ``None`` = no IRR.
        irr_q: symmetric IRR ``P(report 1 | permanent 1)``; asymmetric IRR
            ``P(report 1 | permanent 0)``; ``None`` = no IRR.
    """

    mode: Mode
    level: float
    irr_p: float | None = None
    irr_q: float | None = None
    mechanism: LocalMechanism = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        mechanism = local_mechanism(self.mode)
        lv = self.level
        if isinstance(lv, bool) or not isinstance(lv, int | float) or math.isnan(lv):
            raise ParameterError("level", f"must be a number, got {lv!r}")
        mechanism.check(lv, self.irr_p, self.irr_q)
        object.__setattr__(self, "mechanism", mechanism)

    @property
    def has_irr(self) -> bool:
        return self.irr_q is not None

    @property
    def f(self) -> float:
        """RAPPOR's ``f`` (symmetric) or the 0 -> 1 probability ``q`` (asymmetric): ``exp(-level/2)``."""
        return 0.0 if math.isinf(self.level) else math.exp(-self.level / 2.0)

    def with_level(self, level: float) -> Randomizer:
        return Randomizer(mode=self.mode, level=level, irr_p=self.irr_p, irr_q=self.irr_q)

    # --- closed forms -------------------------------------------------
    def permanent_probabilities(self) -> tuple[float, float]:
        """``(P(B'=1 | b=0), P(B'=1 | b=1))`` for the memoized bit."""
        return self.mechanism.permanent_probabilities(self.level)

    def irr_channel(self) -> tuple[float, float] | None:
        """The IRR's ``(P(report 1 | B'=0), P(report 1 | B'=1))``; ``None`` without an IRR."""
        return self.mechanism.irr_channel(self.irr_p, self.irr_q)

    def probabilities(self) -> tuple[float, float]:
        """``(p*, q*) = (P(report 1 | b=0), P(report 1 | b=1))`` including the IRR."""
        p0, p1 = self.permanent_probabilities()
        channel = self.irr_channel()
        if channel is None:
            return (p0, p1)
        p, q = channel
        return (p0 * q + (1 - p0) * p, p1 * q + (1 - p1) * p)

    def exact_probabilities(self) -> tuple[Fraction, Fraction]:
        """:meth:`probabilities` as the exact rationals :meth:`simulate` samples.

        The composition, without rounding, of the doubles
        :meth:`permanent_probabilities`, ``irr_p`` and ``irr_q``: the law of
        ``report(bits, draw_noise(...))`` had its uniforms no grid.
        """
        p0, p1 = (Fraction(x) for x in self.permanent_probabilities())
        channel = self.irr_channel()
        if channel is None:
            return (p0, p1)
        p, q = (Fraction(x) for x in channel)
        return (p0 * q + (1 - p0) * p, p1 * q + (1 - p1) * p)

    # --- sampling -----------------------------------------------------
    def draw_noise(self, shape: int | tuple[int, ...], rng: RandomSource | None = None) -> FloatArray:
        """Fresh memoized noise ``V`` at this level (one uniform per bit)."""
        return self.mechanism.draw_noise(self.level, shape, as_rng(rng))

    def relax_noise(self, noise: npt.ArrayLike, level_to: float, rng: RandomSource | None = None) -> FloatArray:
        """The lazy step from this level to ``level_to`` (Laplace or exponential)."""
        return self.mechanism.relax_noise(noise, self.level, level_to, rng)

    def permanent(self, bits: npt.ArrayLike, noise: npt.ArrayLike) -> BoolArray:
        """Memoized bits ``[b + V > 1/2]``; never leaves the device."""
        return threshold_bits(bits, noise)

    def instantaneous(self, permanent: npt.ArrayLike, rng: RandomSource | None = None) -> BoolArray:
        """The IRR, fresh per transmission: one uniform per bit when the IRR is on."""
        perm = np.asarray(permanent, dtype=bool)
        if self.irr_q is None:
            return perm.copy()
        u = as_rng(rng).uniform(perm.shape)
        below_p = None if self.irr_p is None else u < float(self.irr_p)
        return self.mechanism.apply_irr(perm, below_p, u < float(self.irr_q))

    def report(self, bits: npt.ArrayLike, noise: npt.ArrayLike, rng: RandomSource | None = None) -> BoolArray:
        """What is sent: IRR of the permanent bits. ``rng`` feeds the IRR only."""
        return self.instantaneous(self.permanent(bits, noise), rng)

    def permanent_from_uniforms(self, bits: npt.ArrayLike, u: FloatArray) -> BoolArray:
        """``permanent(bits, V)`` for the noise ``V`` that :meth:`draw_noise` makes from ``u``.

        ``V`` is a monotone function of ``u`` (increasing for Laplace, decreasing
        for the exponential), so ``[b + V > 1/2]`` is a comparison of ``u`` with
        a cut: bit-identical, without computing ``V`` (the million-client path).
        """
        b = np.asarray(bits, dtype=bool)
        return self.mechanism.permanent_from_uniforms(b, u, self.permanent_probabilities())

    def simulate(self, bits: npt.ArrayLike, rng: RandomSource | None = None) -> BoolArray:
        """Fresh noise, then the IRR: the one-shot path for simulations.

        Each report bit is independent given its true bit ``b``, True with
        probability ``exact_probabilities()[b]`` *exactly*
        (:func:`~protocol.exact.bernoulli_choose`: random bytes against the
        binary expansion, about one byte per bit). That is the law of
        ``report(bits, draw_noise(shape, rng), rng)`` with the stated doubles
        as probabilities; it does not consume the stream the same way.
        """
        b = np.asarray(bits, dtype=bool)
        if not self.mechanism.randomized:
            return b.copy()
        return bernoulli_choose(rng, self.exact_probabilities(), b)

    def sample_permanent(self, bits: npt.ArrayLike, rng: RandomSource | None = None) -> BoolArray:
        """Fresh permanent bits for simulations: True w.p. ``permanent_probabilities()[b]`` exactly."""
        b = np.asarray(bits, dtype=bool)
        if not self.mechanism.randomized:
            return b.copy()
        return bernoulli_choose(rng, self.permanent_probabilities(), b)

    def sample_instantaneous(self, permanent: npt.ArrayLike, rng: RandomSource | None = None) -> BoolArray:
        """The IRR for simulations, with its probabilities exactly (:meth:`instantaneous` in law)."""
        perm = np.asarray(permanent, dtype=bool)
        channel = self.irr_channel()
        if channel is None:
            return perm.copy()
        return bernoulli_choose(rng, channel, perm)

    def relax_permanent(
        self, bits: npt.ArrayLike, permanent: npt.ArrayLike, level_to: float, rng: RandomSource | None = None
    ) -> BoolArray:
        """Permanent bits at this level relaxed to ``level_to`` without their noise (simulations of rounds).

        The law of ``permanent(bits, relax_noise(V, level_to))`` jointly with
        ``permanent(bits, V)``, sampled from the bits alone, about one random
        byte per bit; the relaxed bits are at exactly the stated
        ``permanent_probabilities()`` of ``level_to``:

        * asymmetric: :func:`~protocol.relaxation.relax_exponential_bits` (the
          exponential chain's bits are a Markov chain of their own; steps compose);
        * symmetric: :func:`~protocol.relaxation.relax_laplace_bits` with the
          permanent bits as the history (one round after the first release).
          The Laplace chain's bits are not Markov: a second round needs the
          whole pattern of earlier releases (``relax_laplace_bits`` with a
          history, :func:`~protocol.relaxation.extend_pattern`).

        Raises:
            ParameterError: (field ``mode``) a trusted randomizer.
        """
        return self.mechanism.relax_permanent(bits, permanent, self.level, level_to, rng)
