"""What the scenarios share: array types, argument checks, chunking (and the package's figure types)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from aggregator.research.scenarios import Figures, Progress, quiet
from protocol.errors import ParameterError
from protocol.randomizers import Mode

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
MODES: tuple[Mode, ...] = ("symmetric", "asymmetric")


def check_positive_int(field: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ParameterError(field, f"must be an integer >= 1, got {value!r}")


def check_levels(field: str, values: tuple[float, ...]) -> None:
    if not values or any(isinstance(v, bool) or not 0 < v < math.inf for v in values):
        raise ParameterError(field, f"must be a non-empty tuple of finite numbers > 0, got {values!r}")


def chunks(total: int, size: int) -> Iterator[int]:
    """Sizes of consecutive chunks of at most ``size`` adding up to ``total``."""
    for start in range(0, total, size):
        yield min(size, total - start)


__all__ = ["MODES", "Figures", "FloatArray", "IntArray", "Progress", "check_levels", "check_positive_int", "chunks", "quiet"]
