"""Association: the joint distribution of two variables (docs/decoding.md 9).

**How the two values are linked.** A client reports one *pair metric* per
window whose value is the pair: :func:`pair_value` ``(a, b)`` is one string,
encoded like any value (a Bloom filter of the pair, or a direct encoding over
the product domain, :func:`pair_domain`). The aggregator only keeps bit
counts, and the counts of two separately reported metrics do not identify
their joint; linking two reports would need the server to keep them side by
side. One report of the pair needs neither: it is one value of one metric,
so the client's memoized noise, its one-value-per-window rule, its ledger
and the metric's guarantee (``MetricParams.guarantee``: a categorical pair
replaced by any other pair) cover everything it sends about both variables.

**Estimates.** Over the candidates ``A x B`` (every pair of a candidate of
each variable):

* per cell, the ordinary candidate decoder (:func:`fit_candidates`): counts
  that are unbiased, with standard errors (``estimates``, ``std_errors``);
* the joint distribution on the simplex (``joint``), by ``method``:
  ``"projection"`` (default) is the Euclidean projection of the unbiased
  shares onto the simplex; ``"em"`` maximizes the composite likelihood of the bit counts,
  ``c_jb ~ Binomial(N_j, p* + (q* - p*) sum_i X[(j,b), i] pi_i)`` over the
  simplex with the EM of a mixture whose weights are shared by every
  (cohort, bit) row (:func:`em_bit_counts`). Measured (docs/decoding.md 9)
  the projection is as good or better at equal epsilon, and far faster:
  the EM converges slowly when ``p*`` and ``q*`` are close.

:func:`em_reports` is RAPPOR's association EM (Fanti et al., "Building a
RAPPOR with the Unknown", 2016) for linked per-report data (two filters per
report, e.g. RAPPOR's association files), with standard errors from the
empirical information.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from aggregator.analysis.decoding.counts import BitCounts, check_probabilities
from aggregator.analysis.decoding.design import candidate_bit_table, incidence
from aggregator.analysis.decoding.fit import check_candidates, fit_candidates
from protocol.encodings import DirectEncoding, PrefixEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.validation import check_int

FloatArray = npt.NDArray[np.float64]
PAIR_SEPARATOR = "\x1f"  # ASCII unit separator: never in a candidate of either variable
JOINT_METHODS: tuple[str, ...] = ("projection", "em")
MAX_CELLS = 10_000


def pair_value(a: str, b: str) -> str:
    """The value a client reports for the pair ``(a, b)``: ``a + "\\x1f" + b``.

    >>> pair_value("android", "de") == "android\\x1fde"
    True

    Raises:
        ParameterError: a value holds the separator (field ``value_a`` or ``value_b``).
    """
    for name, value in (("value_a", a), ("value_b", b)):
        if not isinstance(value, str) or PAIR_SEPARATOR in value:
            raise ParameterError(name, f"must be a string without the separator \\x1f, got {value!r}")
    return f"{a}{PAIR_SEPARATOR}{b}"


def _variable(field: str, values: Sequence[str]) -> tuple[str, ...]:
    """A variable's candidates: non-empty, distinct strings; errors name ``field``."""
    try:
        return check_candidates(values)
    except ParameterError as exc:
        raise ParameterError(field, str(exc.detail)) from None


def pair_domain(values_a: Sequence[str], values_b: Sequence[str]) -> tuple[str, ...]:
    """Every pair, ``a``-major: the domain of a direct pair metric and the candidates of a Bloom one."""
    a, b = _variable("values_a", values_a), _variable("values_b", values_b)
    if len(a) * len(b) > MAX_CELLS:
        raise ParameterError("values_b", f"{len(a)} x {len(b)} cells is over {MAX_CELLS}")
    return tuple(pair_value(x, y) for x in a for y in b)


@dataclass(frozen=True, kw_only=True, eq=False)
class JointEstimate:
    """The joint distribution of two variables.

    Attributes:
        values_a, values_b: the candidates (rows, columns).
        joint: ``(A, B)`` shares on the simplex.
        estimates, std_errors: ``(A, B)`` unbiased counts and their standard errors
            (NaN where the candidate decoder left a cell out).
        num_reports: ``N``.
        method: how ``joint`` was made.
    """

    values_a: tuple[str, ...]
    values_b: tuple[str, ...]
    joint: FloatArray
    estimates: FloatArray
    std_errors: FloatArray
    num_reports: int
    method: str

    def marginals(self) -> tuple[FloatArray, FloatArray]:
        return self.joint.sum(axis=1), self.joint.sum(axis=0)

    def rows(self) -> list[dict[str, Any]]:
        """One row per cell, ``a``-major: ``a, b, share, estimate, std_error, proportion, proportion_std_error``."""
        n = max(self.num_reports, 1)
        out = []
        for i, a in enumerate(self.values_a):
            for j, b in enumerate(self.values_b):
                se = float(self.std_errors[i, j])
                out.append({
                    "a": a, "b": b, "share": float(self.joint[i, j]), "estimate": float(self.estimates[i, j]),
                    "std_error": None if np.isnan(se) else se, "proportion": float(self.estimates[i, j]) / n,
                    "proportion_std_error": None if np.isnan(se) else se / n,
                })
        return out

    def to_dict(self) -> dict[str, Any]:
        first, second = self.marginals()
        return {
            "method": self.method, "num_reports": self.num_reports,
            "values_a": list(self.values_a), "values_b": list(self.values_b),
            "marginal_a": [float(x) for x in first], "marginal_b": [float(x) for x in second],
            "cells": self.rows(),
        }


def project_simplex(x: npt.ArrayLike) -> FloatArray:
    """The Euclidean projection of ``x`` onto ``{p >= 0, sum p = 1}`` (sort-based).

    >>> project_simplex([0.7, 0.5, -0.2]).round(6).tolist()
    [0.6, 0.4, 0.0]
    """
    v = np.asarray(x, dtype=np.float64).ravel()
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    rho = np.nonzero(u - css / np.arange(1, v.size + 1) > 0)[0][-1]
    out: FloatArray = np.maximum(v - css[rho] / (rho + 1.0), 0.0)
    return out


def em_bit_counts(
    counts: BitCounts, probabilities: tuple[float, float], bit_table: npt.ArrayLike, *,
    max_iterations: int = 5000, tolerance: float = 1e-10,
) -> FloatArray:
    """Shares on the simplex maximizing the composite binomial likelihood of the bit counts.

    Row ``r = (j, b)`` sees ``c_r`` ones of ``N_j`` reports, each a 1 with
    probability ``P_ri = p* + (q* - p*) X_ri`` under candidate ``i``. The EM
    of a mixture whose weights every row shares: ``pi_i <- pi_i sum_r
    (c_r P_ri / theta_r + (N_j - c_r)(1 - P_ri)/(1 - theta_r)) / sum_r N_j``
    with ``theta_r = sum_i P_ri pi_i``; each step raises the likelihood.
    """
    p_star, q_star = probabilities
    check_probabilities(p_star, q_star)
    table = np.asarray(bit_table, dtype=np.int64)
    kept = np.nonzero(counts.totals > 0)[0]
    if kept.size == 0:
        raise ParameterError("counts", "holds no report: nothing to decode")
    x = incidence(table, kept, counts.num_bits).tocsr()
    ones = counts.ones[kept].ravel().astype(np.float64)
    sizes = np.repeat(counts.totals[kept].astype(np.float64), counts.num_bits)
    gap, total = q_star - p_star, sizes.sum()
    pi = np.full(table.shape[1], 1.0 / table.shape[1])
    tiny = 1e-300
    for _ in range(max_iterations):
        theta = p_star + gap * (x @ pi)
        hit = ones / np.maximum(theta, tiny)
        miss = (sizes - ones) / np.maximum(1.0 - theta, tiny)
        step = pi * (p_star * hit.sum() + (1.0 - p_star) * miss.sum() + gap * (x.T @ (hit - miss))) / total
        step /= step.sum()
        done = np.max(np.abs(step - pi)) < tolerance
        pi = step
        if done:
            break
    return pi


def estimate_joint(
    counts: BitCounts, params: MetricParams, level: float | None, values_a: Sequence[str],
    values_b: Sequence[str], *, method: str = "projection",
) -> JointEstimate:
    """The joint of a pair metric over ``values_a x values_b`` (module docstring).

    Args:
        counts: aggregates of one window and round of the pair metric.
        params: the pair metric (Bloom, or direct over :func:`pair_domain`).
        level: the level the reports were made at (``None``: ``params.level``).
        values_a, values_b: distinct candidates of each variable.
        method: ``"projection"`` or ``"em"``.

    Raises:
        ParameterError: bad candidates (``values_a``, ``values_b``, or a pair outside a direct
            domain: ``candidates``), ``method``, counts (``counts``), a prefix metric (``metric``).
    """
    if method not in JOINT_METHODS:
        raise ParameterError("method", f"must be one of {JOINT_METHODS}, got {method!r}")
    if isinstance(params.encoding, PrefixEncoding):
        raise ParameterError("metric", f"{params.name!r} is a prefix metric: its short-prefix cohorts do not hold "
                             "the pairs whole; a pair metric needs a direct or Bloom encoding")
    cells = pair_domain(values_a, values_b)
    a, b = tuple(values_a), tuple(values_b)
    counts.check_shape(params.num_cohorts, params.num_bits)
    if isinstance(params.encoding, DirectEncoding):
        missing = set(cells) - set(params.encoding.domain)
        if missing:
            raise ParameterError("candidates", f"{len(missing)} pairs are not in the metric's domain, "
                                 f"e.g. {sorted(missing)[0]!r}")
    fit = fit_candidates(counts, params, level, cells)
    n = counts.num_reports
    if method == "em":
        joint = em_bit_counts(counts, params.randomizer(level).probabilities(),
                              candidate_bit_table(params.encoding, cells))
    else:
        joint = project_simplex(fit.estimates / max(n, 1))
    shape = (len(a), len(b))
    return JointEstimate(values_a=a, values_b=b, joint=joint.reshape(shape), estimates=fit.estimates.reshape(shape),
                         std_errors=fit.std_errors.reshape(shape), num_reports=n, method=method)


def log_likelihoods(
    reports: npt.NDArray[np.bool_], cohorts: npt.ArrayLike, bit_table: npt.ArrayLike,
    probabilities: tuple[float, float],
) -> FloatArray:
    """``(N, S)`` log-likelihood of each report under each candidate, up to a per-report constant.

    A report's bits are independent given the candidate's true bits
    ``X_j(i)``: ``log P(x | i) = sum_{b in X_j(i)} (x_b log(q*/p*) + (1 - x_b) log((1-q*)/(1-p*))) + const``.
    """
    p_star, q_star = probabilities
    check_probabilities(p_star, q_star)
    if p_star <= 0.0 or q_star >= 1.0:
        raise ParameterError("probabilities", "per-report likelihoods need 0 < p* and q* < 1")
    rep = np.asarray(reports, dtype=bool)
    coh = np.asarray(cohorts, dtype=np.int64)
    table = np.asarray(bit_table, dtype=np.int64)
    up, down = np.log(q_star / p_star), np.log((1.0 - q_star) / (1.0 - p_star))
    out = np.empty((rep.shape[0], table.shape[1]))
    for j in np.unique(coh):
        rows = np.nonzero(coh == j)[0]
        member = np.zeros((rep.shape[1], table.shape[1]))
        member[table[j], np.arange(table.shape[1])[:, None]] = 1.0  # repeats count once
        ones = rep[rows].astype(np.float64) @ member
        out[rows] = ones * up + (member.sum(axis=0)[None, :] - ones) * down
    return out


def em_reports(
    log_a: FloatArray, log_b: FloatArray, *, max_iterations: int = 2000, tolerance: float = 1e-9,
    chunk: int = 20_000,
) -> tuple[FloatArray, FloatArray]:
    """RAPPOR's association EM on linked reports: ``(joint, std_errors)``, both ``(A, B)``.

    ``pi_ab <- pi_ab mean_r La[r, a] Lb[r, b] / sum_cd La[r, c] pi_cd Lb[r, d]``. Standard
    errors: the empirical information ``J = sum_r s_r s_r'`` of the scores
    ``s_r = (La Lb)[r] / denominator_r - 1``, inverted on the simplex's tangent space.
    """
    la = np.exp(log_a - log_a.max(axis=1, keepdims=True))
    lb = np.exp(log_b - log_b.max(axis=1, keepdims=True))
    n, size_a, size_b = la.shape[0], la.shape[1], lb.shape[1]
    check_int("reports", n, low=1)
    pi = np.full((size_a, size_b), 1.0 / (size_a * size_b))
    for _ in range(max_iterations):
        denom = ((la @ pi) * lb).sum(axis=1)
        step = pi * (la.T @ (lb / denom[:, None])) / n
        step /= step.sum()
        done = np.max(np.abs(step - pi)) < tolerance
        pi = step
        if done:
            break
    denom = ((la @ pi) * lb).sum(axis=1)
    info = np.zeros((size_a * size_b, size_a * size_b))
    for start in range(0, n, chunk):
        part = slice(start, start + chunk)
        scores = (la[part, :, None] * lb[part, None, :]).reshape(-1, size_a * size_b) / denom[part, None] - 1.0
        info += scores.T @ scores
    basis = np.linalg.svd(np.eye(size_a * size_b) - 1.0 / (size_a * size_b))[0][:, : size_a * size_b - 1]
    cov = basis @ np.linalg.pinv(basis.T @ info @ basis) @ basis.T
    return pi, np.sqrt(np.maximum(np.diag(cov), 0.0)).reshape(size_a, size_b)


__all__ = ["JOINT_METHODS", "JointEstimate", "PAIR_SEPARATOR", "em_bit_counts", "em_reports", "estimate_joint",
           "log_likelihoods", "pair_domain", "pair_value", "project_simplex"]
