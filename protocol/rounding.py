"""Epsilons rounded up to the printed grid, and their exact integer sums (ledgers).

Every epsilon the project prints or charges is a multiple of ``1e-6`` at or above the exact value.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal
from fractions import Fraction

from .errors import ParameterError

__all__ = ["DIGITS", "epsilon_text", "from_micro", "round_up", "to_micro"]

DIGITS = 6
_DIGITS = DIGITS


def round_up(value: float, digits: int = _DIGITS, slack: float = 0.0) -> float:
    """The smallest multiple of ``10**-digits`` at or above ``value + slack``, always.

    The arithmetic is exact (the double's own rational value), so nothing is
    ever rounded down: ``round_up(1.0000000009) == 1.000001``. ``slack``
    covers a numerical error bound (quadrature results pass theirs). The
    result is the double nearest to that decimal, which is itself at or
    above ``value`` (a double closer to the decimal would be the nearest).
    A double that *is* the nearest double of a grid decimal stands for that
    decimal, so the function is idempotent (``round_up(round_up(x)) ==
    round_up(x)``); no tolerance is involved.
    """
    if math.isinf(value):
        return value
    if math.isnan(value) or math.isnan(slack):
        raise ParameterError("epsilon", "is NaN")
    scale = 10**digits
    if slack == 0.0:  # the same ceiling with integers (a double is n / 2^j): 10x faster than Fraction
        numerator, denominator = value.as_integer_ratio()
        grid = -(-numerator * scale // denominator)
    else:
        grid = math.ceil((Fraction(value) + Fraction(slack)) * scale)
    if slack == 0.0 and (grid - 1) / scale == value:
        return value
    return grid / scale


def to_micro(epsilon: float) -> int:
    """A rounded-up epsilon (a :func:`round_up` result) as an integer count of ``1e-6``.

    Ledgers add these integers, so a sum of charges is exactly the sum of the
    printed decimals (no floating-point drift in either direction).
    """
    if math.isinf(epsilon) or math.isnan(epsilon):
        raise ParameterError("epsilon", f"must be finite to count in micro units, got {epsilon}")
    return round(epsilon * 10**_DIGITS)


def from_micro(micro: int) -> float:
    """Inverse of :func:`to_micro`."""
    return micro / 10**_DIGITS


def epsilon_text(value: float) -> str:
    """An epsilon as a person reads it: 6 significant digits, rounded *up* (a printed charge is never
    below the one the ledger made; ``0.8996671`` prints ``0.899668``)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    step = Decimal(1).scaleb(math.floor(math.log10(abs(value))) - 5)
    return f"{Decimal(repr(value)).quantize(step, rounding=ROUND_CEILING).normalize():f}"  # repr: its shortest decimal
