"""The trusted mode: no noise on the device; the exact bits go to an aggregator trusted with them.

Privacy then comes from the central release mechanisms (:mod:`protocol.central`), which add
their noise to the counts. On the device every local epsilon is infinite, nothing relaxes, and
the level is ``inf``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from ..errors import ParameterError
from ..rng import FloatArray, RandomSource
from .common import BoolArray, ChainLaw, EnclosedChainLaw, Mask, NeighbourRelation, StatesNeighbours


def _nothing_to_relax() -> ParameterError:
    return ParameterError("mode", "the trusted mode has no noise to relax")


@dataclass(frozen=True)
class TrustedMechanism(StatesNeighbours):
    """The exact bits (the ``trusted`` mode)."""

    mode: ClassVar[str] = "trusted"
    randomized: ClassVar[bool] = False
    two_sided: ClassVar[bool] = False
    one_sided: ClassVar[bool] = False
    relaxable: ClassVar[bool] = False
    irr_relaxable: ClassVar[bool] = False
    neighbours: ClassVar[tuple[NeighbourRelation, ...]] = (
        NeighbourRelation("trusted", "set", "one member added to or removed from the set", 1, False),
        NeighbourRelation("trusted", "categorical", "the value replaced by another value", 2, False),
    )

    def policy(self, value_kind: str) -> tuple[str, str]:
        """``(protects, reveals)`` in words."""
        return (
            "nothing on the device: the aggregator is trusted with exact contributions; "
            "privacy comes from the central release mechanism",
            "everything, to the aggregator",
        )

    # --- parameters ---------------------------------------------------
    def check(self, level: float, irr_p: float | None, irr_q: float | None) -> None:
        """Level ``inf``, no IRR."""
        if not math.isinf(level):
            raise ParameterError("level", f"must be inf for the trusted mode, got {level}")
        if irr_p is not None or irr_q is not None:
            raise ParameterError("irr_q", "must be null for the trusted mode")

    def check_metric(self, value_kind: str, none_value: str | None) -> None:
        """Any value kind."""

    # --- probabilities ------------------------------------------------
    def permanent_probabilities(self, level: float) -> tuple[float, float]:
        return (0.0, 1.0)

    def irr_channel(self, irr_p: float | None, irr_q: float | None) -> tuple[float, float] | None:
        return None

    # --- sampling -----------------------------------------------------
    def draw_noise(self, level: float, shape: int | tuple[int, ...], source: RandomSource) -> FloatArray:
        return np.zeros(shape)

    def relax_noise(
        self, noise: npt.ArrayLike, level_from: float, level_to: float, rng: RandomSource | None
    ) -> FloatArray:
        raise _nothing_to_relax()

    def relax_permanent(
        self, bits: npt.ArrayLike, permanent: npt.ArrayLike, level_from: float, level_to: float,
        rng: RandomSource | None,
    ) -> BoolArray:
        raise _nothing_to_relax()

    def relaxed_bit_table(self, level_from: float, level_to: float) -> tuple[Fraction, ...]:
        raise _nothing_to_relax()

    def permanent_from_uniforms(
        self, bits: BoolArray, u: FloatArray, probabilities: tuple[float, float]
    ) -> BoolArray:
        return bits.copy()

    def apply_irr(self, permanent: Mask, below_p: Mask | None, below_q: Mask) -> Mask:
        return permanent

    # --- accounting ---------------------------------------------------
    def bit_epsilon(self, level: float) -> float:
        return math.inf

    def report_epsilon(self, p_star: float, q_star: float, value_kind: str, num_hashes: int) -> float:
        return math.inf

    def chain_epsilon(self, up: float, down: float, value_kind: str, num_hashes: int) -> float:
        return math.inf

    def sequence_bit_epsilon(self, levels: tuple[float, ...]) -> tuple[float, bool]:
        raise ParameterError("mode", f"no sequence accounting for mode {self.mode!r}")

    def check_sequence_privacy(self, levels: tuple[float, ...], epsilon: float) -> bool:
        raise ParameterError("mode", f"no sequence accounting for mode {self.mode!r}")

    def permanent_chain_law(self, levels: tuple[float, ...]) -> ChainLaw:
        raise ParameterError("mode", "the trusted mode has no IRR to relax")

    def enclosed_chain_law(self, levels: tuple[float, ...]) -> EnclosedChainLaw | None:
        raise ParameterError("mode", "the trusted mode has no IRR to relax")
