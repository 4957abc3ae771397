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
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt

from .errors import ParameterError
from .exact import bernoulli_choose
from .relaxation import relax_exponential, relax_exponential_bits, relax_laplace, relax_laplace_bits
from .rng import FloatArray, RandomSource, as_rng
from .validation import check_probability

Mode = Literal["symmetric", "asymmetric", "trusted"]
MODES: tuple[str, ...] = ("symmetric", "asymmetric", "trusted")
BoolArray = npt.NDArray[np.bool_]

# The highest noise level (rate) a metric or a round may use. The device draws its noise from
# uniforms on a grid of spacing 2**-52 (protocol.rng), so a bit probability exp(-level/2) is
# realized to within a relative 2**-50 * exp(level/2) (the grid plus the rounding of log and
# exp near the cut). At level 32 that is below 1e-8, so the probabilities the accounting uses
# are the ones sampled to far better than the 1e-6 to which epsilons are rounded up; at ~73 and
# above exp(-level/2) falls below the grid (no noise 1 can ever appear: an infinite loss).
# Per-bit epsilon at the cap: 16 (asymmetric), ~16 (symmetric): far past any useful privacy.
MAX_LEVEL = 32.0
# The lowest noise level. A 0 bit is kept with probability 1 - exp(-level/2) ~ level/2, realized on
# the same 2**-52 grid; at 1e-6 that is 5e-7, within a relative 5e-10 of what the accounting uses,
# and decoding (which divides by it) stays finite. Below it the level means "pure noise" in theory
# and, near 5e-324, a kept-probability of exactly 0 and a decoder dividing by zero in practice.
MIN_LEVEL = 1e-6


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

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ParameterError("mode", f"must be one of {MODES}, got {self.mode!r}")
        lv = self.level
        if isinstance(lv, bool) or not isinstance(lv, int | float) or math.isnan(lv):
            raise ParameterError("level", f"must be a number, got {lv!r}")
        if self.mode == "trusted":
            if not math.isinf(lv):
                raise ParameterError("level", f"must be inf for the trusted mode, got {lv}")
            if self.irr_p is not None or self.irr_q is not None:
                raise ParameterError("irr_q", "must be null for the trusted mode")
            return
        if not MIN_LEVEL <= lv <= MAX_LEVEL:
            raise ParameterError(
                "level", f"must be in [{MIN_LEVEL:g}, {MAX_LEVEL:g}] (MIN_LEVEL, MAX_LEVEL), got {lv}"
            )
        for name, value in (("irr_p", self.irr_p), ("irr_q", self.irr_q)):
            if value is not None:
                check_probability(name, value)
        if self.mode == "symmetric":
            if (self.irr_p is None) != (self.irr_q is None):
                raise ParameterError("irr_q", "irr_p and irr_q go together in the symmetric mode")
            if self.irr_p is not None and self.irr_q is not None and not self.irr_p < self.irr_q:
                raise ParameterError("irr_q", f"must be > irr_p ({self.irr_p}), got {self.irr_q}")
        else:
            if self.irr_p is not None:
                raise ParameterError("irr_p", "must be null in the asymmetric mode (1 is always reported 1)")
            if self.irr_q is not None and self.irr_q >= 1.0:
                raise ParameterError("irr_q", f"must be < 1, got {self.irr_q}")

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
        if self.mode == "trusted":
            return (0.0, 1.0)
        if self.mode == "symmetric":
            return (self.f / 2.0, 1.0 - self.f / 2.0)
        return (self.f, 1.0)

    def probabilities(self) -> tuple[float, float]:
        """``(p*, q*) = (P(report 1 | b=0), P(report 1 | b=1))`` including the IRR."""
        p0, p1 = self.permanent_probabilities()
        if not self.has_irr:
            return (p0, p1)
        q = float(self.irr_q)  # type: ignore[arg-type]
        p = 0.0 if self.mode == "asymmetric" else float(self.irr_p)  # type: ignore[arg-type]
        if self.mode == "asymmetric":
            return (p0 + (1 - p0) * q, 1.0)
        return (p0 * q + (1 - p0) * p, p1 * q + (1 - p1) * p)

    def exact_probabilities(self) -> tuple[Fraction, Fraction]:
        """:meth:`probabilities` as the exact rationals :meth:`simulate` samples.

        The composition, without rounding, of the doubles
        :meth:`permanent_probabilities`, ``irr_p`` and ``irr_q``: the law of
        ``report(bits, draw_noise(...))`` had its uniforms no grid.
        """
        p0, p1 = (Fraction(x) for x in self.permanent_probabilities())
        if not self.has_irr:
            return (p0, p1)
        q = Fraction(self.irr_q)  # type: ignore[arg-type]
        p = Fraction(0) if self.mode == "asymmetric" else Fraction(self.irr_p)  # type: ignore[arg-type]
        if self.mode == "asymmetric":
            return (p0 + (1 - p0) * q, Fraction(1))
        return (p0 * q + (1 - p0) * p, p1 * q + (1 - p1) * p)

    # --- sampling -----------------------------------------------------
    def draw_noise(self, shape: int | tuple[int, ...], rng: RandomSource | None = None) -> FloatArray:
        """Fresh memoized noise ``V`` at this level (one uniform per bit)."""
        source = as_rng(rng)
        if self.mode == "symmetric":
            return source.laplace(self.level, shape)
        if self.mode == "asymmetric":
            return source.exponential(self.level, shape)
        return np.zeros(shape)

    def relax_noise(self, noise: npt.ArrayLike, level_to: float, rng: RandomSource | None = None) -> FloatArray:
        """The lazy step from this level to ``level_to`` (Laplace or exponential)."""
        if self.mode == "symmetric":
            return relax_laplace(noise, self.level, level_to, rng)
        if self.mode == "asymmetric":
            return relax_exponential(noise, self.level, level_to, rng)
        raise ParameterError("mode", "the trusted mode has no noise to relax")

    def permanent(self, bits: npt.ArrayLike, noise: npt.ArrayLike) -> BoolArray:
        """Memoized bits ``[b + V > 1/2]``; never leaves the device."""
        return threshold_bits(bits, noise)

    def instantaneous(self, permanent: npt.ArrayLike, rng: RandomSource | None = None) -> BoolArray:
        """The IRR, fresh per transmission: one uniform per bit when the IRR is on."""
        perm = np.asarray(permanent, dtype=bool)
        if not self.has_irr:
            return perm.copy()
        u = as_rng(rng).uniform(perm.shape)
        if self.mode == "asymmetric":
            return perm | (u < float(self.irr_q))  # type: ignore[arg-type]
        q, p = float(self.irr_q), float(self.irr_p)  # type: ignore[arg-type]
        out: BoolArray = (u < p) | (perm & (u < q))  # p < q: u < p implies u < q
        return out

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
        if self.mode == "trusted":
            return b.copy()
        p0, p1 = self.permanent_probabilities()
        if self.mode == "asymmetric":
            return b | (u < p0)  # V = -ln(u)/L > 1/2  <=>  u < exp(-L/2)
        # Laplace: V = F^{-1}(u) > 1/2 - b  <=>  u > F(1/2 - b) = 1 - P(B'=1 | b)
        # The cut for b=1 (f/2) is below the cut for b=0 (1 - f/2): "above the high cut, or b and above
        # the low one" selects per bit without building a per-bit array of cuts.
        out: BoolArray = (u > 1.0 - p0) | (b & (u > 1.0 - p1))
        return out

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
        if self.mode == "trusted":
            return b.copy()
        return bernoulli_choose(rng, self.exact_probabilities(), b)

    def sample_permanent(self, bits: npt.ArrayLike, rng: RandomSource | None = None) -> BoolArray:
        """Fresh permanent bits for simulations: True w.p. ``permanent_probabilities()[b]`` exactly."""
        b = np.asarray(bits, dtype=bool)
        if self.mode == "trusted":
            return b.copy()
        return bernoulli_choose(rng, self.permanent_probabilities(), b)

    def sample_instantaneous(self, permanent: npt.ArrayLike, rng: RandomSource | None = None) -> BoolArray:
        """The IRR for simulations, with its probabilities exactly (:meth:`instantaneous` in law)."""
        perm = np.asarray(permanent, dtype=bool)
        if not self.has_irr:
            return perm.copy()
        q = float(self.irr_q)  # type: ignore[arg-type]
        probs = (q, 1.0) if self.mode == "asymmetric" else (float(self.irr_p), q)  # type: ignore[arg-type]
        return bernoulli_choose(rng, probs, perm)

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
        if self.mode == "asymmetric":
            return relax_exponential_bits(bits, permanent, self.level, level_to, rng)
        if self.mode == "symmetric":
            return relax_laplace_bits(bits, permanent, (self.level,), level_to, rng)
        raise ParameterError("mode", "the trusted mode has no noise to relax")
