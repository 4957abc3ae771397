"""Local (device-side) mechanisms: one class per mode behind :class:`~protocol.local.base.LocalMechanism`."""

from __future__ import annotations

from .asymmetric import AsymmetricMechanism
from .base import MODES, LocalMechanism, local_mechanism, local_mechanisms
from .common import MAX_LEVEL, MIN_LEVEL, NeighbourRelation, ValueKind
from .symmetric import SymmetricMechanism
from .trusted import TrustedMechanism

__all__ = [
    "MAX_LEVEL",
    "MIN_LEVEL",
    "MODES",
    "AsymmetricMechanism",
    "LocalMechanism",
    "NeighbourRelation",
    "SymmetricMechanism",
    "TrustedMechanism",
    "ValueKind",
    "local_mechanism",
    "local_mechanisms",
]
