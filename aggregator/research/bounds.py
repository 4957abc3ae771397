"""The ADP paper's necessary conditions and its virtual (eps, delta)-DP competitor (Sec. III, VI-A).

Research tools, not mechanisms: the servers never publish with them. They
bound what any eps-DP, (eps, delta)-DP or (eps, p)-ADP sanitizer of a
threshold query can achieve (a "safe" answer wrong with probability
``alpha``, right with probability ``beta``, ``k`` record changes from the
threshold), and :func:`virtual_dp_sanitizer` draws decisions from the best
such DP sanitizer for comparisons with ALap and AGeo.

>>> round(dp_epsilon_lower_bound(alpha=0.01, beta=0.5), 4)
3.912
>>> adp_epsilon_lower_bound(alpha=0.0, beta=0.5) == math.log(2)
True
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from protocol.central import as_counts, check_level
from protocol.rng import RandomSource, as_rng
from protocol.validation import check_int, check_probability

BoolArray = npt.NDArray[np.bool_]

__all__ = [
    "adp_epsilon_lower_bound",
    "approx_dp_delta_lower_bound",
    "dp_beta_upper_bound",
    "dp_epsilon_lower_bound",
    "virtual_dp_sanitizer",
]


def _check_steps(k: Any) -> int:
    """``k``: record changes to the nearest data where the answer flips, an integer ``>= 1``."""
    return check_int("k", k, low=1)


def dp_epsilon_lower_bound(*, alpha: float, beta: float, k: int = 1) -> float:
    """Inequality (5): an eps-DP mechanism that is ``(q, alpha, beta)``-one-sided needs ``eps > ln(beta/alpha)/k``.

    ``k`` is the Hamming distance from the data to the nearest data where
    the answer flips. ``alpha = 0`` gives ``inf`` (no finite eps works).
    """
    a, b, k = check_probability("alpha", alpha), check_probability("beta", beta), _check_steps(k)
    if b == 0:
        return -math.inf
    return math.inf if a == 0 else math.log(b / a) / k


def approx_dp_delta_lower_bound(*, alpha: float, beta: float, epsilon: float, k: int = 1) -> float:
    """Inequality (7): ``delta > (beta - alpha e^(eps k)) / sum_{i=1..k} e^((i-1) eps)``.

    Returned as printed (a negative value means no constraint on delta).
    """
    a, b, k = check_probability("alpha", alpha), check_probability("beta", beta), _check_steps(k)
    e = check_level("epsilon", epsilon)
    return (b - a * math.exp(e * k)) / _geometric_sum(e, k)


def adp_epsilon_lower_bound(*, alpha: float, beta: float, k: int = 1) -> float:
    """Proposition IV.7: an ``(eps, p)``-ADP one-sided mechanism needs ``eps >= ln((1-alpha)/(1-beta))/k``.

    Finite at ``alpha = 0`` (ALap attains it with ``D_p = 1``, Corollary V.6).
    """
    a, b, k = check_probability("alpha", alpha), check_probability("beta", beta), _check_steps(k)
    if b == 1:
        return math.inf
    return math.log((1 - a) / (1 - b)) / k


def _geometric_sum(epsilon: float, k: int) -> float:
    """``sum_{i=1..k} e^((i-1) eps)``."""
    return math.fsum(math.exp((i - 1) * epsilon) for i in range(1, k + 1))


def dp_beta_upper_bound(*, alpha: float, epsilon: float, delta: float = 0.0, k: int) -> float:
    """The best ``beta`` any ``(eps, delta)``-DP sanitizer can reach at distance ``k``: (6) with (3).

    ``min(1, alpha e^(eps k) + delta sum_{i=1..k} e^((i-1) eps))``: the
    paper's virtual competitor (Sec. VI-A), an upper bound, not a mechanism.
    """
    a, d, k = check_probability("alpha", alpha), check_probability("delta", delta), _check_steps(k)
    e = check_level("epsilon", epsilon)
    # alpha e^(eps k) alone reaches 1 once eps k >= ln(1/alpha): stop before exp overflows
    if a > 0 and e * k >= math.log(1.0 / a):
        return 1.0
    if d > 0 and e * (k - 1) >= math.log(1.0 / d):  # the last term of the sum alone reaches 1
        return 1.0
    first = a * math.exp(e * k) if a > 0 else 0.0
    rest = d * _geometric_sum(e, k) if d > 0 else 0.0
    return min(1.0, first + rest)


def virtual_dp_sanitizer(
    counts: npt.ArrayLike,
    threshold: int,
    epsilon: float,
    *,
    alpha: float,
    delta: float = 0.0,
    rng: RandomSource | int | None = None,
) -> BoolArray:
    """"Safe" decisions of the virtual ``(eps, delta)``-DP competitor, for comparisons.

    A count ``c <= t`` is ``k = t + 1 - c`` record changes from the nearest
    unsafe count, so it is called safe with probability
    :func:`dp_beta_upper_bound`; a count above ``t`` with probability ``alpha``.
    """
    c = as_counts(counts, integer=True)
    check_level("epsilon", epsilon)
    a = check_probability("alpha", alpha)
    check_int("threshold", threshold)
    values = np.unique(c)
    beta = np.array([
        dp_beta_upper_bound(alpha=a, epsilon=epsilon, delta=delta, k=int(threshold + 1 - x)) if x <= threshold else a
        for x in values
    ])
    return as_rng(rng).uniform(c.shape) < beta[np.searchsorted(values, c)]
