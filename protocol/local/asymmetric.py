"""The asymmetric mode: one-sided noise, the local form of ADP (Mangat), ``[b + V > 1/2]`` with ``V >= 0``.

``V ~ Exp(level)``: a true 1 always stays 1, a 0 becomes 1 with probability ``exp(-level/2)``. Only
the 1 -> 0 direction is protected (an item *in* the set); a reported 0 is always true, the declared
non-sensitive leak. Relaxing a level is ``min(V, E)`` (:func:`protocol.relaxation.relax_exponential`):
the noise only decreases, so a chain of releases costs its last level alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import numpy.typing as npt

from ..errors import ParameterError, PolicyError
from ..laplace_chain_rigorous import enclosed_exp
from ..relaxation import exponential_keep_probability, relax_exponential, relax_exponential_bits
from ..rng import FloatArray, RandomSource
from ..rounding import round_up
from .common import (
    BoolArray,
    ChainLaw,
    EnclosedChainLaw,
    Mask,
    NeighbourRelation,
    StatesNeighbours,
    check_irr_probabilities,
    check_noisy_level,
    exp_half,
)


@dataclass(frozen=True)
class AsymmetricMechanism(StatesNeighbours):
    """One-sided exponential noise: ones are added, never removed (the ``asymmetric`` mode)."""

    mode: ClassVar[str] = "asymmetric"
    randomized: ClassVar[bool] = True
    two_sided: ClassVar[bool] = False
    one_sided: ClassVar[bool] = True
    relaxable: ClassVar[bool] = True
    irr_relaxable: ClassVar[bool] = True
    neighbours: ClassVar[tuple[NeighbourRelation, ...]] = (
        NeighbourRelation("asymmetric", "set", "one member removed from the set (S' subset of S)", 1, True),
        NeighbourRelation("asymmetric", "categorical",
                          "a sensitive value replaced by the declared none value (which owns no bits)", 1, True),
    )

    def policy(self, value_kind: str) -> tuple[str, str]:
        """``(protects, reveals)`` in words."""
        if value_kind == "categorical":
            return (
                "that the value is a sensitive one rather than the declared none value",
                "which sensitive value it is, against another sensitive value (not hidden at all), and "
                "that a value is none or not a given value when its bits are reported 0",
            )
        return (
            "that an item IS in the set (a reported 1 may be noise)",
            "that an item is NOT in the set, when its bits are reported 0 (a 0 is always true)",
        )

    # --- parameters ---------------------------------------------------
    def check(self, level: float, irr_p: float | None, irr_q: float | None) -> None:
        """The level within range; no ``irr_p`` (1 is always reported 1); ``irr_q < 1``."""
        check_noisy_level(level)
        check_irr_probabilities(irr_p, irr_q)
        if irr_p is not None:
            raise ParameterError("irr_p", "must be null in the asymmetric mode (1 is always reported 1)")
        if irr_q is not None and irr_q >= 1.0:
            raise ParameterError("irr_q", f"must be < 1, got {irr_q}")

    def check_metric(self, value_kind: str, none_value: str | None) -> None:
        """Categorical data needs a declared non-sensitive value: true zeros are revealed."""
        if value_kind == "categorical" and none_value is None:
            raise PolicyError(
                "mode",
                "asymmetric randomization reveals true zeros; for single-valued categorical data "
                "every value is sensitive: declare a non-sensitive none_value or use the symmetric mode",
            )

    # --- probabilities ------------------------------------------------
    def permanent_probabilities(self, level: float) -> tuple[float, float]:
        """``(exp(-level/2), 1)``."""
        return (exp_half(level), 1.0)

    def irr_channel(self, irr_p: float | None, irr_q: float | None) -> tuple[float, float] | None:
        """The one-sided IRR ``(P(1 | B'=0), P(1 | B'=1)) = (q, 1)``; ``None`` without an IRR."""
        return None if irr_q is None else (irr_q, 1.0)

    # --- sampling -----------------------------------------------------
    def draw_noise(self, level: float, shape: int | tuple[int, ...], source: RandomSource) -> FloatArray:
        return source.exponential(level, shape)

    def relax_noise(
        self, noise: npt.ArrayLike, level_from: float, level_to: float, rng: RandomSource | None
    ) -> FloatArray:
        return relax_exponential(noise, level_from, level_to, rng)

    def relax_permanent(
        self, bits: npt.ArrayLike, permanent: npt.ArrayLike, level_from: float, level_to: float,
        rng: RandomSource | None,
    ) -> BoolArray:
        """The exponential chain's bits are a Markov chain of their own: steps compose."""
        return relax_exponential_bits(bits, permanent, level_from, level_to, rng)

    def relaxed_bit_table(self, level_from: float, level_to: float) -> tuple[Fraction, ...]:
        """A 0 stays 0 (it is true); a noise 1 is kept w.p. ``q_to / q_from``; a true 1 stays 1."""
        return (Fraction(0), exponential_keep_probability(level_from, level_to), Fraction(0), Fraction(1))

    def permanent_from_uniforms(
        self, bits: BoolArray, u: FloatArray, probabilities: tuple[float, float]
    ) -> BoolArray:
        """``V = -ln(u)/L > 1/2  <=>  u < exp(-L/2)``."""
        out: BoolArray = bits | (u < probabilities[0])
        return out

    def apply_irr(self, permanent: Mask, below_p: Mask | None, below_q: Mask) -> Mask:
        """1 stays 1; 0 -> 1 when ``u < q``."""
        return permanent | below_q

    # --- accounting ---------------------------------------------------
    def bit_epsilon(self, level: float) -> float:
        """``level / 2`` (only the 1 -> 0 direction is protected)."""
        return level / 2.0

    def report_epsilon(self, p_star: float, q_star: float, value_kind: str, num_hashes: int) -> float:
        """One member removed (ADP): ``k ln(1/p*)``; the other direction is the declared leak."""
        return num_hashes * math.log(1.0 / p_star)

    def chain_epsilon(self, up: float, down: float, value_kind: str, num_hashes: int) -> float:
        """The protected direction only: ``k up``."""
        return num_hashes * up

    def sequence_bit_epsilon(self, levels: tuple[float, ...]) -> tuple[float, bool]:
        """Exactly ``levels[-1] / 2``: a 0 -> 1 bit reads 1...1 0...0 and ``P(all ones | 0) = exp(-L_n / 2)``."""
        return round_up(levels[-1] / 2.0), True

    def check_sequence_privacy(self, levels: tuple[float, ...], epsilon: float) -> bool:
        return levels[-1] / 2.0 <= epsilon + 1e-12

    def permanent_chain_law(self, levels: tuple[float, ...]) -> ChainLaw:
        """b = 1: always 1. b = 0: ones up to some level then zeros, ``P(B_i = 1) = exp(-L_i / 2)``."""
        n = len(levels)
        ones = [Fraction(math.exp(-lv / 2.0)) for lv in levels] + [Fraction(0)]
        zero = {tuple(int(i < j) for i in range(n)): ones[j - 1] - ones[j] if j else 1 - ones[0] for j in range(n + 1)}
        return {k: v for k, v in zero.items() if v}, {(1,) * n: Fraction(1)}

    def enclosed_chain_law(self, levels: tuple[float, ...]) -> EnclosedChainLaw | None:
        """:meth:`permanent_chain_law` proven: a true 1 stays 1; a 0 reads ``j`` ones then zeros with
        probability ``e^{-L_j/2} - e^{-L_{j+1}/2}``, the exponentials enclosed (never libm).
        ``None`` where ``-L/2`` is not exactly a double.
        """
        if any(Fraction(-lv / 2.0) != -Fraction(lv) / 2 for lv in levels):
            return None
        ones = [enclosed_exp(-lv / 2.0) for lv in levels] + [(0.0, 0.0)]
        n = len(levels)
        patterns = [tuple(int(i < j) for i in range(n)) for j in range(n + 1)]
        above = [(1.0, 1.0), *ones[:-1]]  # P(at least j ones | 0), j = 0..n
        zero = [(max(math.nextafter(a[0] - b[1], -math.inf), 0.0), math.nextafter(a[1] - b[0], math.inf))
                for a, b in zip(above, ones, strict=True)]
        return patterns, [zero, [(0.0, 0.0)] * n + [(1.0, 1.0)]]
