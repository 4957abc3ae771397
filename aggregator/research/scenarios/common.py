"""What the scenarios share: array types, argument checks, chunking (and the package's figure types)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from aggregator.research.scenarios import Figures, Progress, quiet
from protocol.errors import ParameterError
from protocol.randomizers import Mode
from protocol.validation import check_int, check_number

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
MODES: tuple[Mode, ...] = ("symmetric", "asymmetric")
# How a scenario simulates its clients: every client's set and bits, or the cells' counts directly.
METHODS: tuple[str, ...] = ("per-client", "aggregate")


def check_positive_int(field: str, value: Any) -> None:
    check_int(field, value, low=1)


def check_levels(field: str, values: tuple[float, ...]) -> None:
    """A non-empty tuple of finite levels ``> 0`` (each error names ``field``)."""
    if not values:
        raise ParameterError(field, "must be a non-empty tuple of finite numbers > 0")
    for value in values:
        check_number(field, value, positive=True)


def check_method(method: str) -> None:
    if method not in METHODS:
        raise ParameterError("method", f"must be one of {METHODS}, got {method!r}")


def chunks(total: int, size: int) -> Iterator[int]:
    """Sizes of consecutive chunks of at most ``size`` adding up to ``total``."""
    for start in range(0, total, size):
        yield min(size, total - start)


__all__ = ["METHODS", "MODES", "check_method", "Figures", "FloatArray", "IntArray", "Progress", "check_levels", "check_positive_int", "chunks", "quiet"]
