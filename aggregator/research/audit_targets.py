"""What an audit measures: a mechanism on two neighbouring inputs (:class:`AuditTarget`),
the events it may be judged by (:class:`AuditEvent`) and a lazily built registry of
targets (:class:`TargetRegistry`).

The auditor (:mod:`aggregator.research.audit`) and the device-path targets
(:mod:`aggregator.research.audit_device`) both build on these types; neither
needs the other to define them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from protocol.errors import ParameterError
from protocol.rng import FloatArray, RandomSource
from protocol.validation import check_number

__all__ = [
    "DIRECTIONS",
    "AuditEvent",
    "AuditTarget",
    "BoolArray",
    "Direction",
    "Outcomes",
    "Predicate",
    "Ratio",
    "Sampler",
    "TargetRegistry",
]

Direction = Literal["both", "a_over_b"]
DIRECTIONS: tuple[str, ...] = ("both", "a_over_b")
Ratio = Literal["a/b", "b/a"]
Outcomes = npt.NDArray[Any]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
Sampler = Callable[[int, RandomSource], Outcomes]
Predicate = Callable[[Outcomes], BoolArray]


@dataclass(frozen=True, kw_only=True)
class AuditEvent:
    """A named predicate over outcomes (one bool per row), chosen before sampling.

    Attributes:
        name: what the event is, in words (shown in the report).
        predicate: outcomes (the sampler's array) -> bool array, one per outcome.
    """

    name: str
    predicate: Predicate

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ParameterError("name", f"must be a non-empty string, got {self.name!r}")
        if not callable(self.predicate):
            raise ParameterError("predicate", "must be callable")


@dataclass(frozen=True, kw_only=True)
class AuditTarget:
    """A mechanism on two neighbouring inputs, with the epsilon the product prints.

    Attributes:
        name: registry key, ``[a-z0-9-]``.
        claimed: the epsilon the product prints for this neighbour (>= 0).
        sample_a: ``(n, rng) -> n outcomes`` for input ``a`` (the one holding
            the sensitive item): a 2-D array (one row of small ints or bools
            per outcome) or a 1-D array of numbers.
        sample_b: the same for the neighbouring input ``b``.
        direction: ``"both"`` (DP: the ratio is bounded both ways) or
            ``"a_over_b"`` (one-sided ADP: only ``P(E|a) <= e^eps P(E|b)``).
        events: custom events (each is also tried complemented).
        focus: columns of a 2-D outcome where the inputs differ (events on
            the projection and the default statistic use them).
        statistic: outcomes -> one number each, for threshold events; default
            the number of ones over ``focus`` (2-D) or the value (1-D).
        description: the mechanism and the neighbour, in words.
        max_samples: a cap on the samples per input for slow samplers (the
            client's own per-report code); the result records what was drawn.
        law: ``(outcomes of a, outcomes of b) -> p-value`` of a test of the
            outcomes against the mechanism's exact law (``None``: none);
            the audit fails when it is below ``1 - confidence``.
    """

    name: str
    claimed: float
    sample_a: Sampler
    sample_b: Sampler
    direction: Direction = "both"
    events: tuple[AuditEvent, ...] = ()
    focus: tuple[int, ...] = ()
    statistic: Callable[[Outcomes], FloatArray] | None = None
    description: str = ""
    max_samples: int | None = None
    law: Callable[[Outcomes, Outcomes], float] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ParameterError("name", f"must be a non-empty string, got {self.name!r}")
        claimed = self.claimed
        check_number("claimed", claimed, nonnegative=True, finite=False)
        for field in ("sample_a", "sample_b"):
            if not callable(getattr(self, field)):
                raise ParameterError(field, "must be callable")
        if self.direction not in DIRECTIONS:
            raise ParameterError("direction", f"must be one of {DIRECTIONS}, got {self.direction!r}")
        if not all(isinstance(e, AuditEvent) for e in self.events):
            raise ParameterError("events", "must be a tuple of AuditEvent")
        if any(isinstance(c, bool) or not isinstance(c, int | np.integer) or c < 0 for c in self.focus):
            raise ParameterError("focus", f"must be column indices >= 0, got {self.focus!r}")


class TargetRegistry(Mapping[str, AuditTarget]):
    """Name -> target, each built on first use (some claims need quadrature)."""

    def __init__(self, factories: dict[str, Callable[[str], AuditTarget]]) -> None:
        self._factories = factories
        self._built: dict[str, AuditTarget] = {}

    def __getitem__(self, name: str) -> AuditTarget:
        if name not in self._built:
            self._built[name] = self._factories[name](name)
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._factories)

    def __len__(self) -> int:
        return len(self._factories)
