"""The standard normal law's tail and quantile from the standard library.

Decoding needs ``1 - Phi(z)`` for p-values and ``Phi^-1(p)`` for interval
and selection multipliers: two functions, which the standard library
computes to full double precision (``math.erfc``; ``NormalDist.inv_cdf``,
Wichura's AS 241). Importing ``scipy.special`` for them cost about a third
of a second of start-up (it loads SciPy's array-API layer), which
``onesided decode-rappor`` pays on every run.

>>> round(quantile(0.975), 6), float(upper_tail(np.array([0.0]))[0])
(1.959964, 0.5)
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

_STANDARD = NormalDist()
_SQRT_HALF = math.sqrt(0.5)


def upper_tail(z: npt.ArrayLike) -> FloatArray:
    """``1 - Phi(z)`` elementwise, accurate far in the upper tail (``erfc``, no ``1 - cdf`` cancellation)."""
    values = np.asarray(z, dtype=np.float64)
    flat = [0.5 * math.erfc(v * _SQRT_HALF) for v in values.ravel().tolist()]
    return np.asarray(flat, dtype=np.float64).reshape(values.shape)


def quantile(p: float) -> float:
    """``Phi^-1(p)`` for ``0 < p < 1``."""
    return _STANDARD.inv_cdf(p)
