"""Counts of known candidates, with standard errors, intervals and detections.

Bloom metrics (:func:`fit_candidates`), following RAPPOR's decoder
(Erlingsson et al. 2014, Sec. 4; google/rappor ``analysis/R/decode.R``):

1. De-noise the bit counts (:mod:`.counts`) and regress them on the
   candidates' bits (:mod:`.design`).
2. Pick the support. ``method="ols"``: every candidate (the design must have
   full column rank). ``"nnls"``: the candidates with a positive non-negative
   least-squares coefficient. ``"lasso"``: non-negative LASSO with per-column
   penalty ``2 z s_i``, ``s_i`` the null standard deviation of column ``i``'s
   score ``A_i' r`` and ``z = Phi^-1(1 - 1/S)`` (about one null candidate of
   ``S`` enters by chance). ``"auto"`` (default):
   ``"ols"`` while ``S <= 0.8 rows`` and the design has full rank, else
   ``"lasso"`` (RAPPOR switches to LASSO at ``S > 0.8 rows``). The support
   is capped at ``0.8 rows`` (largest scaled coefficients first).
3. Refit the support by least squares (unbiased when the support holds
   every candidate present) with sandwich standard errors; candidates left
   out get estimate 0 and NaN standard error. The LASSO is iterated with
   the candidates it confirms left unpenalized (:func:`_lasso_fit`), which
   removes the shrinkage that otherwise pulls in candidates colliding with
   large ones.
4. Test ``n_i > 0`` one-sidedly with Bonferroni or Benjamini-Hochberg
   control over all ``S`` candidates (:mod:`.testing`).

The standard errors after a selection step are conditional on the selected
support, as in RAPPOR; in the ``"ols"`` regime they are exact for the fixed
population (up to the plug-in of the bit variances).

Direct (unary) metrics need no regression: each item is its own bit
(:func:`direct_estimates`).

Everything is deterministic: the same counts and candidates give the same
result, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from aggregator.analysis.decoding.counts import BitCounts, bit_estimates, check_probabilities
from aggregator.analysis.decoding.dense import small_ols
from aggregator.analysis.decoding.design import (
    Design,
    build_design,
    candidate_bit_table,
    check_bit_table,
)
from aggregator.analysis.decoding.multiple_testing import (
    check_alpha,
    check_correction,
    detect,
    one_sided_p_values,
)
from aggregator.analysis.decoding.normal import quantile
from aggregator.analysis.decoding.solvers import least_squares_refit, nonnegative_lasso
from protocol.encodings import DirectEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.validation import check_probability

Method = Literal["auto", "ols", "nnls", "lasso"]
METHODS: tuple[str, ...] = ("auto", "ols", "nnls", "lasso")
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

# RAPPOR's rule: LASSO once candidates exceed 0.8 x rows; the support is capped there too.
SUPPORT_FRACTION = 0.8
# Rounds of the LASSO with confirmed candidates unpenalized (see _lasso_fit).
_LASSO_ROUNDS = 8


def _json_float(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


@dataclass(frozen=True, kw_only=True, eq=False)
class CandidateFit:
    """Per-candidate counts (number of reports holding the candidate).

    Attributes:
        candidates: the candidates, in the order given.
        estimates: estimated counts (0 for candidates outside the support).
        std_errors: standard errors (NaN outside the support).
        lower, upper: two-sided ``confidence`` interval ``est -+ z se``.
        p_values: one-sided p-values of ``n_i > 0`` (1 outside the support).
        detected: significant after the multiple-testing correction.
        selected: in the fitted support.
        num_reports: ``N``, the reports decoded.
        method: ``"ols"``, ``"nnls"``, ``"lasso"`` or ``"direct"``.
        correction, alpha, confidence: the settings used.
    """

    candidates: tuple[str, ...]
    estimates: FloatArray
    std_errors: FloatArray
    lower: FloatArray
    upper: FloatArray
    p_values: FloatArray
    detected: BoolArray
    selected: BoolArray
    num_reports: int
    method: str
    correction: str
    alpha: float
    confidence: float

    def __post_init__(self) -> None:
        size = len(self.candidates)
        for name in (
            "estimates",
            "std_errors",
            "lower",
            "upper",
            "p_values",
            "detected",
            "selected",
        ):
            arr = np.asarray(getattr(self, name))
            if arr.shape != (size,):
                raise ParameterError(
                    name, f"must have one entry per candidate ({size}), got shape {arr.shape}"
                )
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    @property
    def proportions(self) -> FloatArray:
        """``estimates / N``."""
        return self.estimates / max(self.num_reports, 1)

    def rows(self, *, detected_only: bool = False) -> list[dict[str, Any]]:
        """One JSON-ready dict per candidate, largest estimate first (ties: input order)."""
        order = np.argsort(-self.estimates, kind="stable")
        out = []
        for i in order:
            if detected_only and not self.detected[i]:
                continue
            out.append(
                {
                    "candidate": self.candidates[i],
                    "estimate": float(self.estimates[i]),
                    "std_error": _json_float(self.std_errors[i]),
                    "lower": _json_float(self.lower[i]),
                    "upper": _json_float(self.upper[i]),
                    "proportion": float(self.proportions[i]),
                    "p_value": float(self.p_values[i]),
                    "detected": bool(self.detected[i]),
                    "selected": bool(self.selected[i]),
                }
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "correction": self.correction,
            "alpha": self.alpha,
            "confidence": self.confidence,
            "num_reports": self.num_reports,
            "candidates": self.rows(),
        }


def check_candidates(candidates: Sequence[str]) -> tuple[str, ...]:
    """A non-empty sequence of distinct strings."""
    if isinstance(candidates, str | bytes) or not isinstance(candidates, Sequence):
        raise ParameterError("candidates", "must be a list of strings")
    cands = tuple(candidates)
    if not cands:
        raise ParameterError("candidates", "must not be empty")
    if not all(isinstance(c, str) for c in cands):
        raise ParameterError("candidates", "must contain only strings")
    seen: set[str] = set()
    for c in cands:
        if c in seen:
            raise ParameterError("candidates", f"must be distinct, {c!r} repeats")
        seen.add(c)
    return cands


def _check_settings(alpha: float, correction: str, confidence: float) -> tuple[float, str, float]:
    confidence = check_probability("confidence", confidence, open_low=True, open_high=True)
    return check_alpha(alpha), check_correction(correction), confidence


def _assemble(
    candidates: tuple[str, ...],
    estimates: FloatArray,
    std_errors: FloatArray,
    selected: BoolArray,
    *,
    num_reports: int,
    method: str,
    alpha: float,
    correction: str,
    confidence: float,
) -> CandidateFit:
    z = quantile(0.5 + confidence / 2.0)
    p_values = one_sided_p_values(estimates, std_errors)
    return CandidateFit(
        candidates=candidates,
        estimates=estimates,
        std_errors=std_errors,
        lower=estimates - z * std_errors,
        upper=estimates + z * std_errors,
        p_values=p_values,
        detected=detect(p_values, alpha, correction),
        selected=selected,
        num_reports=num_reports,
        method=method,
        correction=correction,
        alpha=alpha,
        confidence=confidence,
    )


def _selection_z(num_candidates: int) -> float:
    """``Phi^-1(1 - 1/S)``: about one null candidate of ``S`` passes by chance."""
    return quantile(1.0 - 1.0 / max(num_candidates, 2))


def _score_sd(design: Design) -> FloatArray:
    """Null standard deviation of each column's score ``A_i' r``: ``sqrt(sum_r A_ri^2 Var a_r)``."""
    return np.sqrt(
        np.asarray(design.matrix.multiply(design.matrix).T @ design.response_variance).ravel()
    )


def _capped_support(design: Design, x: FloatArray, cap: int) -> IntArray:
    support = np.nonzero(x > 0)[0]
    if support.size > cap:
        sub = design.matrix[:, support]
        strength = x[support] * np.sqrt(np.asarray(sub.multiply(sub).sum(axis=0)).ravel())
        support = np.sort(support[np.argsort(-strength, kind="stable")[:cap]])
    return support.astype(np.int64)


def _refit(design: Design, support: IntArray) -> tuple[IntArray, FloatArray, FloatArray]:
    kept, coef, influence = least_squares_refit(design.matrix, design.response, support)
    return kept, coef, design.coefficient_variances(kept, coef, influence)


def _nnls_fit(design: Design, cap: int) -> tuple[IntArray, FloatArray, FloatArray]:
    x = nonnegative_lasso(design.matrix, design.response, np.zeros(design.matrix.shape[1]))
    return _refit(design, _capped_support(design, x, cap))


def _lasso_fit(design: Design, cap: int) -> tuple[IntArray, FloatArray, FloatArray]:
    """Non-negative LASSO, refitted, with confirmed candidates freed from the penalty.

    Round 1 is the plain LASSO with penalty ``2 z s_i``. Its shrinkage
    leaves part of every large count in the residual, where it pulls in
    candidates sharing bits with it; so candidates whose refitted estimate
    is ``>= z`` standard errors are left unpenalized in the next round
    (adaptive LASSO with zero weight on confirmed terms), until the
    confirmed set stops changing (at most ``_LASSO_ROUNDS`` rounds).
    """
    num = design.matrix.shape[1]
    z = _selection_z(num)
    penalty = 2.0 * z * _score_sd(design)
    confirmed = np.zeros(num, dtype=bool)
    support: IntArray | None = None
    for _ in range(_LASSO_ROUNDS):
        x = nonnegative_lasso(
            design.matrix, design.response, np.where(confirmed, 0.0, penalty), support
        )
        support = _capped_support(design, x, cap)
        kept, coef, var = _refit(design, support)
        strong = np.zeros(num, dtype=bool)
        strong[kept[coef >= z * np.sqrt(np.maximum(var, 0.0))]] = True
        if np.array_equal(strong, confirmed):
            break
        confirmed = strong
    return kept, coef, var


def _solve(
    design: Design, num_candidates: int, method: str
) -> tuple[str, IntArray, FloatArray, FloatArray]:
    cap = max(1, int(SUPPORT_FRACTION * design.num_rows))
    if method in ("auto", "ols") and (method == "ols" or num_candidates <= cap):
        kept, coef, var = _refit(design, np.arange(num_candidates, dtype=np.int64))
        if kept.size == num_candidates:
            return "ols", kept, coef, var
        if method == "ols":
            raise ParameterError(
                "candidates",
                f"{num_candidates - kept.size} of {num_candidates} candidates are not identifiable from "
                f"{design.num_rows} (cohort, bit) rows; use method='lasso' or 'nnls'",
            )
    if method == "nnls":
        return ("nnls", *_nnls_fit(design, cap))
    return ("lasso", *_lasso_fit(design, cap))


def _fit(
    counts: BitCounts, p_star: float, q_star: float, table: IntArray, method: str
) -> tuple[str, IntArray, FloatArray, FloatArray]:
    """``_solve`` on the design; a small OLS fit is done densely with NumPy alone (same answer, no SciPy)."""
    num = table.shape[1]
    rows = int(np.count_nonzero(counts.totals)) * counts.num_bits
    if method == "ols" or (method == "auto" and num <= max(1, int(SUPPORT_FRACTION * rows))):
        small = small_ols(counts, p_star, q_star, table)
        if small is not None:
            return ("ols", *small)
    return _solve(build_design(counts, p_star, q_star, table), num, method)


def fit_bit_table(
    counts: BitCounts,
    probabilities: tuple[float, float],
    bit_table: npt.ArrayLike,
    candidates: Sequence[str],
    *,
    alpha: float = 0.05,
    correction: str = "bonferroni",
    confidence: float = 0.95,
    method: str = "auto",
) -> CandidateFit:
    """:func:`fit_candidates` for explicit ``(p*, q*)`` and bit indices.

    Args:
        counts: the aggregates.
        probabilities: ``(p*, q*)``, ``P(report 1 | bit 0)`` and ``P(report 1 | bit 1)``.
        bit_table: ``(num_cohorts, len(candidates), num_hashes)`` bit indices.
        candidates: distinct strings.
        alpha, correction, confidence, method: see :func:`fit_candidates`.
    """
    cands = check_candidates(candidates)
    alpha, correction, confidence = _check_settings(alpha, correction, confidence)
    if method not in METHODS:
        raise ParameterError("method", f"must be one of {METHODS}, got {method!r}")
    p_star, q_star = probabilities
    check_probabilities(p_star, q_star)
    table = check_bit_table(bit_table, counts, len(cands))
    chosen, kept, coef, var = _fit(counts, p_star, q_star, table, method)
    n = float(counts.num_reports)
    estimates = np.zeros(len(cands))
    std_errors = np.full(len(cands), np.nan)
    estimates[kept] = n * coef
    std_errors[kept] = n * np.sqrt(np.maximum(var, 0.0))
    selected = np.zeros(len(cands), dtype=bool)
    selected[kept] = True
    return _assemble(
        cands,
        estimates,
        std_errors,
        selected,
        num_reports=counts.num_reports,
        method=chosen,
        alpha=alpha,
        correction=correction,
        confidence=confidence,
    )


def fit_candidates(
    counts: BitCounts,
    params: MetricParams,
    level: float | None,
    candidates: Sequence[str],
    *,
    alpha: float = 0.05,
    correction: str = "bonferroni",
    confidence: float = 0.95,
    method: str = "auto",
) -> CandidateFit:
    """Estimate how many reports hold each candidate (module docstring).

    Args:
        counts: aggregates of one metric, window and round.
        params: the metric.
        level: the noise level the reports were made at (a round's level
            for a relaxation round); ``None``: ``params.level``.
        candidates: distinct strings to estimate.
        alpha: family level of the detections.
        correction: ``"bonferroni"`` (family-wise error) or ``"bh"``
            (Benjamini-Hochberg false discovery rate).
        confidence: level of the two-sided intervals.
        method: ``"auto"``, ``"ols"``, ``"nnls"`` or ``"lasso"``.

    Returns:
        A :class:`CandidateFit`. Direct metrics are handed to
        :func:`direct_estimates` (``candidates`` must be in the domain).

    Raises:
        ParameterError: counts of the wrong shape (``counts``), empty or
            repeated candidates (``candidates``), bad settings (named).
    """
    counts.check_shape(params.num_cohorts, params.num_bits)
    if isinstance(params.encoding, DirectEncoding):
        return direct_estimates(
            counts,
            params,
            level,
            candidates,
            alpha=alpha,
            correction=correction,
            confidence=confidence,
        )
    cands = check_candidates(candidates)
    randomizer = params.randomizer(level)
    return fit_bit_table(
        counts,
        randomizer.probabilities(),
        candidate_bit_table(params.encoding, cands),
        cands,
        alpha=alpha,
        correction=correction,
        confidence=confidence,
        method=method,
    )


def direct_estimates(
    counts: BitCounts,
    params: MetricParams,
    level: float | None,
    items: Sequence[str] | None = None,
    *,
    alpha: float = 0.05,
    correction: str = "bonferroni",
    confidence: float = 0.95,
) -> CandidateFit:
    """Per-item counts of a direct (unary) metric: item ``i`` is bit ``i``.

    ``estimate = t_hat``, ``std_error = sqrt(Var t_hat)`` from
    :func:`~.counts.bit_estimates`; detections as in :func:`fit_candidates`.

    Args:
        items: items of the domain to report (default: the whole domain).
    """
    if not isinstance(params.encoding, DirectEncoding):
        raise ParameterError(
            "encoding", f"direct_estimates needs a direct metric, got {params.encoding.kind!r}"
        )
    counts.check_shape(params.num_cohorts, params.num_bits)
    names = check_candidates(list(params.encoding.domain) if items is None else items)
    alpha, correction, confidence = _check_settings(alpha, correction, confidence)
    if counts.num_reports == 0:
        raise ParameterError("counts", "holds no report: nothing to decode")
    index = np.array([params.encoding.bits_of(v)[0] for v in names], dtype=np.int64)
    est, var = bit_estimates(counts, params.randomizer(level))
    return _assemble(
        names,
        est[0, index],
        np.sqrt(var[0, index]),
        np.ones(len(names), dtype=bool),
        num_reports=counts.num_reports,
        method="direct",
        alpha=alpha,
        correction=correction,
        confidence=confidence,
    )
