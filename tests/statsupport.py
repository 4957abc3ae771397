"""Statistical helpers the tests share (import as ``from statsupport import ...``).

Every test that uses these states its false-failure rate: :data:`P_MIN` per test, under the null.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

P_MIN = 1e-6  # each chi-square / binomial / KS test: false-failure rate 1e-6 under the null
Z = 4.9  # two-sided normal quantile for 1e-6


def chisquare_p(observed: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square goodness of fit; cells with expectation < 5 are pooled into the last one."""
    n = observed.sum()
    expected = probs * n
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] < 5:  # fold the small tail into the previous cell
        obs[-2] += obs[-1]
        exp[-2] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def binomial_ok(successes: int, n: int, p: float) -> bool:
    """Two-sided binomial test at :data:`P_MIN`."""
    return bool(stats.binomtest(int(successes), int(n), p).pvalue > P_MIN)


def geometric_pmf(rate: float, support: np.ndarray) -> np.ndarray:
    """``P(G = k)`` on ``support`` for a geometric of ``P(G >= k) = e^{-rate k}``, the last cell ``P(G >= last)``."""
    q = math.exp(-rate)
    probs = (1 - q) * q**support
    probs[-1] = q ** support[-1]
    return probs


def geometric_fits(sample: np.ndarray, rate: float, cells: int = 8) -> bool:
    """Chi-square of ``sample`` against the geometric on ``{0..cells-1, >= cells}`` at :data:`P_MIN`."""
    support = np.arange(cells + 1)
    observed = np.array([int((sample == k).sum()) for k in range(cells)] + [int((sample >= cells).sum())])
    return chisquare_p(observed, geometric_pmf(rate, support)) > P_MIN
