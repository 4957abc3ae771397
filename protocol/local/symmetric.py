"""The symmetric mode: RAPPOR's permanent randomized response as Laplace noise, ``[b + V > 1/2]``.

``V ~ Laplace(1/level)``: a bit flips with probability ``f/2 = exp(-level/2) / 2``, either way.
Both presence and absence are protected. Relaxing a level draws the new noise conditionally on
the old (:func:`protocol.relaxation.relax_laplace`); the chain of released bits is charged the
proven enclosure of :mod:`protocol.laplace_chain_rigorous` (its law is in :mod:`protocol.laplace_chain`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import numpy.typing as npt

from ..errors import ParameterError
from ..laplace_chain import laplace_permanent_probabilities
from ..laplace_chain_rigorous import (
    MAX_ENCLOSED_LAPLACE_LEVELS,
    enclosed_charge,
    enclosed_pattern_probabilities,
)
from ..relaxation import (
    laplace_bit_conditionals,
    laplace_bit_law,
    relax_laplace,
    relax_laplace_bits,
)
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
)


@dataclass(frozen=True)
class SymmetricMechanism(StatesNeighbours):
    """Two-sided Laplace noise on every bit (the ``symmetric`` mode)."""

    mode: ClassVar[str] = "symmetric"
    randomized: ClassVar[bool] = True
    two_sided: ClassVar[bool] = True
    one_sided: ClassVar[bool] = False
    relaxable: ClassVar[bool] = True
    irr_relaxable: ClassVar[bool] = True
    neighbours: ClassVar[tuple[NeighbourRelation, ...]] = (
        NeighbourRelation("symmetric", "set", "one member added to or removed from the set", 1, False),
        NeighbourRelation("symmetric", "categorical", "the value replaced by another value", 2, False),
    )

    def policy(self, value_kind: str) -> tuple[str, str]:
        """``(protects, reveals)`` in words."""
        return "both presence and absence of every item (two-sided noise)", "nothing beyond the epsilon"

    # --- parameters ---------------------------------------------------
    def check(self, level: float, irr_p: float | None, irr_q: float | None) -> None:
        """The level within range; ``irr_p < irr_q`` given together, or neither."""
        check_noisy_level(level)
        check_irr_probabilities(irr_p, irr_q)
        if (irr_p is None) != (irr_q is None):
            raise ParameterError("irr_q", "irr_p and irr_q go together in the symmetric mode")
        if irr_p is not None and irr_q is not None and not irr_p < irr_q:
            raise ParameterError("irr_q", f"must be > irr_p ({irr_p}), got {irr_q}")

    def check_metric(self, value_kind: str, none_value: str | None) -> None:
        """Any value kind: both directions are protected."""

    # --- probabilities ------------------------------------------------
    def permanent_probabilities(self, level: float) -> tuple[float, float]:
        """``(f/2, 1 - f/2)``."""
        return laplace_permanent_probabilities(level)

    def irr_channel(self, irr_p: float | None, irr_q: float | None) -> tuple[float, float] | None:
        """RAPPOR's IRR ``(P(1 | B'=0), P(1 | B'=1)) = (p, q)``; ``None`` without an IRR."""
        return None if irr_q is None or irr_p is None else (irr_p, irr_q)

    # --- sampling -----------------------------------------------------
    def draw_noise(self, level: float, shape: int | tuple[int, ...], source: RandomSource) -> FloatArray:
        return source.laplace(level, shape)

    def relax_noise(
        self, noise: npt.ArrayLike, level_from: float, level_to: float, rng: RandomSource | None
    ) -> FloatArray:
        return relax_laplace(noise, level_from, level_to, rng)

    def relax_permanent(
        self, bits: npt.ArrayLike, permanent: npt.ArrayLike, level_from: float, level_to: float,
        rng: RandomSource | None,
    ) -> BoolArray:
        """One step of the Laplace chain's bits, the permanent bits as the history."""
        return relax_laplace_bits(bits, permanent, (level_from,), level_to, rng)

    def relaxed_bit_table(self, level_from: float, level_to: float) -> tuple[Fraction, ...]:
        """:func:`~protocol.relaxation.laplace_bit_conditionals` of the two-level chain, ``cond[b][p]``."""
        cond = laplace_bit_conditionals((level_from, level_to))
        return cond[0] + cond[1]

    def permanent_from_uniforms(
        self, bits: BoolArray, u: FloatArray, probabilities: tuple[float, float]
    ) -> BoolArray:
        """Laplace: ``V = F^{-1}(u) > 1/2 - b  <=>  u > F(1/2 - b) = 1 - P(B'=1 | b)``."""
        p0, p1 = probabilities
        # The cut for b=1 (f/2) is below the cut for b=0 (1 - f/2): "above the high cut, or b and above
        # the low one" selects per bit without building a per-bit array of cuts.
        out: BoolArray = (u > 1.0 - p0) | (bits & (u > 1.0 - p1))
        return out

    def apply_irr(self, permanent: Mask, below_p: Mask | None, below_q: Mask) -> Mask:
        """1 when ``u < p``, or when permanent and ``u < q`` (``p < q``: ``u < p`` implies ``u < q``)."""
        if below_p is None:
            raise ParameterError("irr_p", "a symmetric IRR needs irr_p with irr_q")
        return below_p | (permanent & below_q)

    # --- accounting ---------------------------------------------------
    def bit_epsilon(self, level: float) -> float:
        """``ln((1 - f/2) / (f/2))`` (unrounded)."""
        half_f = math.exp(-level / 2.0) / 2.0
        return math.log((1.0 - half_f) / half_f)

    def report_epsilon(self, p_star: float, q_star: float, value_kind: str, num_hashes: int) -> float:
        """Categorical ``k ln(q*(1-p*) / (p*(1-q*)))`` (RAPPOR); set ``k max(ln(q*/p*), ln((1-p*)/(1-q*)))``."""
        k = num_hashes
        if value_kind == "categorical":
            return k * math.log(q_star * (1.0 - p_star) / (p_star * (1.0 - q_star)))
        return k * max(math.log(q_star / p_star), math.log((1.0 - p_star) / (1.0 - q_star)))

    def chain_epsilon(self, up: float, down: float, value_kind: str, num_hashes: int) -> float:
        """Per-bit log-ratios in both directions to a neighbour's epsilon (as :meth:`report_epsilon`)."""
        if value_kind == "categorical":
            return num_hashes * (up + down)
        return num_hashes * max(up, down)

    def sequence_bit_epsilon(self, levels: tuple[float, ...]) -> tuple[float, bool]:
        """The proven upper end of the chain's epsilon, rounded up; exact when that end is within 1e-9.

        Up to :data:`~protocol.laplace_chain_rigorous.MAX_ENCLOSED_LAPLACE_LEVELS` levels the epsilon is
        enclosed in outward-rounded double intervals (closed form per piece); longer chains, or an
        enclosure no better than it, are charged ``levels[-1]``, the continuous-process bound.
        """
        if len(levels) == 1:
            return round_up(self.bit_epsilon(levels[0])), True
        if len(levels) <= MAX_ENCLOSED_LAPLACE_LEVELS:
            high, exact = enclosed_charge(levels)
            if high < levels[-1]:
                return round_up(high), exact
        return round_up(levels[-1]), False

    def check_sequence_privacy(self, levels: tuple[float, ...], epsilon: float) -> bool:
        if len(levels) > MAX_ENCLOSED_LAPLACE_LEVELS:
            raise ParameterError("levels", f"exact check supports at most {MAX_ENCLOSED_LAPLACE_LEVELS} levels")
        if len(levels) == 1:
            return self.bit_epsilon(levels[0]) <= epsilon + 1e-12
        return enclosed_charge(levels)[0] <= epsilon + 1e-12

    def permanent_chain_law(self, levels: tuple[float, ...]) -> ChainLaw:
        """``P(memoized bits at levels | b)``: the law :func:`~protocol.relaxation.relax_laplace_bits` samples."""
        n = len(levels)
        law = laplace_bit_law(levels)
        patterns = [tuple((h >> i) & 1 for i in range(n)) for h in range(1 << n)]
        zero, one = ({patterns[h]: p for h, p in enumerate(law[b]) if p} for b in (0, 1))
        return zero, one

    def enclosed_chain_law(self, levels: tuple[float, ...]) -> EnclosedChainLaw | None:
        """:meth:`permanent_chain_law` proven: the closed forms of the Laplace chain the client samples, as intervals.

        :func:`~protocol.laplace_chain_rigorous.enclosed_pattern_probabilities`; ``P(pattern | 1)`` is
        ``P(complement | 0)`` by symmetry. ``None`` where doubles give no bound.
        """
        probs = enclosed_pattern_probabilities(levels)
        if probs is None:
            return None
        patterns = list(probs)
        return patterns, [[probs[m] for m in patterns], [probs[tuple(1 - v for v in m)] for m in patterns]]
