"""Local (device-side) mechanisms behind one interface, and their registry.

A metric's ``mode`` names one :class:`LocalMechanism`; everything that differs between modes (the
probabilities, the noise and its lazy relaxation step, the epsilons of a report and of a chain,
the neighbour relation in one sentence, what can be relaxed) is asked of that object, never
decided by comparing the mode's name. The mode string exists on the wire and in the registry only.

>>> local_mechanism("asymmetric").bit_epsilon(2.0)
1.0
>>> MODES
('symmetric', 'asymmetric', 'trusted')
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, ClassVar, Protocol

import numpy.typing as npt

from ..errors import ParameterError
from ..rng import FloatArray, RandomSource
from .asymmetric import AsymmetricMechanism
from .common import BoolArray, ChainLaw, EnclosedChainLaw, Mask, NeighbourRelation, ValueKind
from .symmetric import SymmetricMechanism
from .trusted import TrustedMechanism

__all__ = [
    "MODES",
    "LocalMechanism",
    "NeighbourRelation",
    "ValueKind",
    "local_mechanism",
    "local_mechanisms",
]

class LocalMechanism(Protocol):
    """What a local mode is: the randomizer of one bit, its relaxation and its accounting.

    Attributes:
        mode: the name on the wire.
        randomized: the device adds noise (``False``: the exact bits are sent).
        two_sided: noise moves bits both ways (a true bit may be reported either way).
        one_sided: a true 1 is always reported 1 (noise only adds ones); only
            the 1 -> 0 direction is protected.
        relaxable: a round may raise the level (lazy relaxation of the memoized noise).
        irr_relaxable: the IRR may be relaxed between rounds (:mod:`protocol.irr_relaxation`).
        neighbours: the neighbour relation of each value kind, one sentence each.
    """

    mode: ClassVar[str]
    randomized: ClassVar[bool]
    two_sided: ClassVar[bool]
    one_sided: ClassVar[bool]
    relaxable: ClassVar[bool]
    irr_relaxable: ClassVar[bool]
    neighbours: ClassVar[tuple[NeighbourRelation, ...]]

    def neighbour(self, value_kind: str) -> NeighbourRelation: ...

    def policy(self, value_kind: str) -> tuple[str, str]: ...

    def check(self, level: float, irr_p: float | None, irr_q: float | None) -> None: ...

    def check_metric(self, value_kind: str, none_value: str | None) -> None: ...

    def permanent_probabilities(self, level: float) -> tuple[float, float]: ...

    def irr_channel(self, irr_p: float | None, irr_q: float | None) -> tuple[float, float] | None: ...

    def draw_noise(self, level: float, shape: int | tuple[int, ...], source: RandomSource) -> FloatArray: ...

    def relax_noise(
        self, noise: npt.ArrayLike, level_from: float, level_to: float, rng: RandomSource | None
    ) -> FloatArray: ...

    def relax_permanent(
        self, bits: npt.ArrayLike, permanent: npt.ArrayLike, level_from: float, level_to: float,
        rng: RandomSource | None,
    ) -> BoolArray: ...

    def relaxed_bit_table(self, level_from: float, level_to: float) -> tuple[Fraction, ...]:
        """``P(relaxed bit = 1 | permanent bit p, true bit b)`` at index ``p + 2 b``, exact rationals: the law
        :meth:`relax_permanent` samples for one step, as a table a vectorized engine draws from."""
        ...

    def permanent_from_uniforms(
        self, bits: BoolArray, u: FloatArray, probabilities: tuple[float, float]
    ) -> BoolArray: ...

    def apply_irr(self, permanent: Mask, below_p: Mask | None, below_q: Mask) -> Mask: ...

    def bit_epsilon(self, level: float) -> float: ...

    def report_epsilon(self, p_star: float, q_star: float, value_kind: str, num_hashes: int) -> float: ...

    def chain_epsilon(self, up: float, down: float, value_kind: str, num_hashes: int) -> float: ...

    def sequence_bit_epsilon(self, levels: tuple[float, ...]) -> tuple[float, bool]: ...

    def check_sequence_privacy(self, levels: tuple[float, ...], epsilon: float) -> bool: ...

    def permanent_chain_law(self, levels: tuple[float, ...]) -> ChainLaw: ...

    def enclosed_chain_law(self, levels: tuple[float, ...]) -> EnclosedChainLaw | None: ...


# The one table from a mode's name to its mechanism.
_REGISTRY: dict[str, LocalMechanism] = {
    mechanism.mode: mechanism
    for mechanism in (SymmetricMechanism(), AsymmetricMechanism(), TrustedMechanism())
}
MODES: tuple[str, ...] = tuple(_REGISTRY)
"""The registered modes, in their documented order."""


def local_mechanism(mode: Any) -> LocalMechanism:
    """The mechanism of ``mode``.

    Raises:
        ParameterError: (field ``mode``) not a registered mode.
    """
    try:
        return _REGISTRY[mode]
    except (KeyError, TypeError):  # TypeError: an unhashable value
        raise ParameterError("mode", f"must be one of {MODES}, got {mode!r}") from None


def local_mechanisms() -> tuple[LocalMechanism, ...]:
    """Every registered mechanism, in the order of :data:`MODES`."""
    return tuple(_REGISTRY.values())
