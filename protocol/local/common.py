"""What the local mechanisms share: the neighbour-relation record, the level range, the threshold.

Every local mechanism (:mod:`protocol.local.symmetric`, :mod:`~protocol.local.asymmetric`,
:mod:`~protocol.local.trusted`) builds on these; the registry (:mod:`protocol.local.base`)
gathers them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from ..errors import ParameterError
from ..validation import check_probability

ValueKind = Literal["set", "categorical"]
BoolArray = npt.NDArray[np.bool_]
Mask = TypeVar("Mask", int, BoolArray)
"""Bits as a numpy bool array or as an integer mask (the SDK's fast path): ``|`` and ``&`` act alike."""

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


@dataclass(frozen=True)
class NeighbourRelation:
    """Which two inputs of one window an epsilon is about (the one statement of each mode).

    Attributes:
        mode, value_kind: the metric kind it applies to.
        sentence: the relation in one sentence (guarantees and docs quote it).
        hashes_changed: bits changed per hash function: 1 (a member, or a
            value against the bit-less none value), 2 (a value replaced).
        one_way: only ``P(z | a) <= e^eps P(z | b)`` for ``a`` holding what
            ``b`` lacks (asymmetric modes); else both directions.
    """

    mode: str
    value_kind: ValueKind
    sentence: str
    hashes_changed: int
    one_way: bool


ChainLaw = tuple[dict[tuple[int, ...], Fraction], dict[tuple[int, ...], Fraction]]
# Patterns of memoized bits over a chain's levels, and P(pattern | b) for b = 0, 1 as doubles (lo, hi) around it.
EnclosedChainLaw = tuple[list[tuple[int, ...]], list[list[tuple[float, float]]]]
"""``P(pattern | b)`` for ``b = 0, 1``: a bit's memoized values along a chain of levels, exact rationals."""


class StatesNeighbours:
    """A mechanism's :meth:`neighbour`: its relation of a value kind, from its ``neighbours`` table."""

    mode: ClassVar[str]
    neighbours: ClassVar[tuple[NeighbourRelation, ...]]

    def neighbour(self, value_kind: str) -> NeighbourRelation:
        for relation in self.neighbours:
            if relation.value_kind == value_kind:
                return relation
        raise ParameterError(
            "mode", f"no neighbour relation for mode {self.mode!r} and value_kind {value_kind!r}"
        )


def check_noisy_level(level: float) -> None:
    """A randomizing mode's level: within ``[MIN_LEVEL, MAX_LEVEL]``."""
    if not MIN_LEVEL <= level <= MAX_LEVEL:
        raise ParameterError(
            "level", f"must be in [{MIN_LEVEL:g}, {MAX_LEVEL:g}] (MIN_LEVEL, MAX_LEVEL), got {level}"
        )


def check_irr_probabilities(irr_p: float | None, irr_q: float | None) -> None:
    for name, value in (("irr_p", irr_p), ("irr_q", irr_q)):
        if value is not None:
            check_probability(name, value)


def exp_half(level: float) -> float:
    """``exp(-level/2)``: RAPPOR's ``f`` (symmetric) or the 0 -> 1 probability (asymmetric); 0 at ``inf``."""
    return 0.0 if math.isinf(level) else math.exp(-level / 2.0)
