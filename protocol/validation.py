"""One place for the checks every public parameter goes through.

Each check raises :class:`~protocol.errors.ParameterError` naming the field
and the value it got ("level must be a number in (0, 32], got -1.0"), and
returns the value in its canonical type. ``bool`` is never accepted as a
number (``True`` is an ``int`` in Python). The OpenAPI schemas take their
bounds from the same constants as the checks that call these.

>>> check_int("num_bits", 128, low=1, high=4096)
128
>>> check_number("epsilon", 0.5, positive=True)
0.5
>>> check_probability("irr_q", 1.5)
Traceback (most recent call last):
...
protocol.errors.ParameterError: irr_q must be a probability in [0, 1], got 1.5
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import ParameterError

__all__ = ["check_int", "check_integer_array", "check_number", "check_probability"]


def check_int(field: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """An integer (numpy integers too, never ``bool``) in ``[low, high]`` (either end optional)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ParameterError(field, f"must be an integer, got {value!r}")
    number = int(value)
    if (low is not None and number < low) or (high is not None and number > high):
        lo = "-inf" if low is None else str(low)
        hi = "inf" if high is None else str(high)
        raise ParameterError(field, f"must be an integer in [{lo}, {hi}], got {number}")
    return number


def check_number(
    field: str,
    value: Any,
    *,
    positive: bool = False,
    nonnegative: bool = False,
    finite: bool = True,
    high: float | None = None,
) -> float:
    """A real number (never ``bool`` or NaN).

    Args:
        field: the name in the error.
        value: what was given.
        positive: must be ``> 0``.
        nonnegative: must be ``>= 0``.
        finite: must not be infinite.
        high: inclusive upper bound.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ParameterError(field, f"must be a number, got {value!r}")
    number = float(value)
    if math.isnan(number):
        raise ParameterError(field, "must be a number, got NaN")
    if finite and math.isinf(number):
        raise ParameterError(field, f"must be finite, got {number}")
    if positive and not number > 0:
        raise ParameterError(field, f"must be > 0, got {number}")
    if nonnegative and not number >= 0:
        raise ParameterError(field, f"must be >= 0, got {number}")
    if high is not None and number > high:
        raise ParameterError(field, f"must be <= {high:g}, got {number}")
    return number


def check_probability(field: str, value: Any, *, open_low: bool = False, open_high: bool = False) -> float:
    """A probability in ``[0, 1]`` (ends excluded on request)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ParameterError(field, f"must be a probability in [0, 1], got {value!r}")
    p = float(value)
    low_ok = p > 0.0 if open_low else p >= 0.0
    high_ok = p < 1.0 if open_high else p <= 1.0
    if math.isnan(p) or not (low_ok and high_ok):
        interval = f"{'(' if open_low else '['}0, 1{')' if open_high else ']'}"
        raise ParameterError(field, f"must be a probability in {interval}, got {value!r}")
    return p


def check_integer_array(field: str, value: npt.ArrayLike, *, low: int | None = None) -> npt.NDArray[np.int64]:
    """An array of integers (integer dtype, or floats holding whole numbers), each ``>= low``."""
    array = np.asarray(value)
    if array.dtype == bool or not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise ParameterError(field, f"must hold integers, got dtype {array.dtype}")
    if np.issubdtype(array.dtype, np.floating):
        if not np.all(np.isfinite(array)) or not np.array_equal(array, np.floor(array)):
            raise ParameterError(field, "must hold whole numbers")
    out = array.astype(np.int64)
    if low is not None and out.size and int(out.min()) < low:
        raise ParameterError(field, f"must hold integers >= {low}, got {int(out.min())}")
    return out
