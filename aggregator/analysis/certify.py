"""One-sided certificates: "at most ``t`` reports hold ``v``" (ADP paper; docs/decoding.md).

Only for one-sided noise (the asymmetric randomizer, or the trusted mode):
a bit that is truly 1 is always reported 1, so every report holding ``v``
has all of ``v``'s bits at 1. With ``H_j`` holders of ``v`` in cohort ``j``
and ``c_jb`` reports with bit ``b`` at 1::

    H_j <= m_j = min over v's bits b of c_jb,   H = sum_j H_j <= M = sum_j m_j

**Deterministic bound** (``alpha = 0``): ``U = M``. It holds for every
outcome of the noise, so a certificate ``U <= t`` is never wrong
(the ADP paper's one-sided error with ``alpha = 0``, Def. II.6).

**Binomial bound** (``alpha > 0``). Fix one bit ``b_j`` of ``v`` in every
cohort (a *selection* ``s``) and let ``M_s = sum_j c_{j b_j}``. Each of the
``N - H`` non-holders reports 1 on its selected bit either because that bit
is truly 1 (another member of its set): probability 1, or through the noise:
probability ``q = P(report 1 | bit 0)``, independently of every other
report and bit. A report that is surely 1 dominates a ``Bernoulli(q)`` one, so
``M_s - H`` is stochastically at least ``X ~ Binomial(N - H, q)``: whatever the
other items and however the holders spread over cohorts (all cohorts share
``q``, so the sum over cohorts is one binomial). Let
``F_h(x) = P(Binomial(N - h, q) <= x)`` and ``g(h) = F_h(M - h)``; ``M`` is
the smallest ``M_s``, over ``K = prod_j k_j`` selections (``k_j`` distinct
bits of ``v`` in cohort ``j``). Define::

    U = max{h in [0, M] : g(h) > alpha / K}      (0 if the set is empty)

If ``H > U`` then ``g(H) <= alpha / K``, so for the selection ``s`` achieving the
minimum ``F_H(M_s - H) <= alpha / K``; by the union bound over the ``K``
selections and ``P(F_H(Y) <= a) <= a`` for ``Y`` stochastically at least
``Binomial(N - H, q)``::

    P(H > U) <= K * alpha / K = alpha

and a candidate is certified *safe* at threshold ``t`` when ``U <= t``:
``P(safe and H > t) <= P(H > U) <= alpha``. ``g`` is non-increasing in ``h``
(one more holder adds 1 to ``h`` and removes one ``Bernoulli(q)`` trial), so
``U`` is found by bisection. ``U <= M`` always; ``K = 1`` for a direct metric,
where the bound is the exact binomial one. ``K`` grows with the cohorts:
for many cohorts the bound is conservative (still valid).

The guarantee is per candidate; for a family-wise statement over ``S``
candidates pass ``alpha / S``.

Assumptions: one report per client per window (two reports of one client
share memoized bits, which breaks the independence behind the binomial, not
the deterministic bound); counts are of reports.

Symmetric (two-sided) noise turns true ones into zeros, so no count of
ones bounds the holders: :func:`certify` refuses it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import special

from aggregator.analysis.decoding.counts import BitCounts
from aggregator.analysis.decoding.design import candidate_bit_table, check_bit_table
from aggregator.analysis.decoding.fit import check_candidates
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.validation import check_int, check_probability

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, kw_only=True)
class Certificate:
    """A one-sided answer for one candidate.

    Attributes:
        candidate: the value.
        upper_bound: ``U``, with ``P(count > U) <= alpha`` (``alpha = 0``: always).
        safe: ``U <= threshold``; ``False`` means *obscure*, not *dangerous*.
    """

    candidate: str
    upper_bound: int
    safe: bool

    def to_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "upper_bound": self.upper_bound, "safe": self.safe}


def _check_alpha(alpha: float) -> float:
    """The error level: ``0`` (deterministic bound) or a probability below 1."""
    return check_probability("alpha", alpha, open_high=True)


def _check_threshold(threshold: int) -> int:
    return check_int("threshold", threshold, low=0)


def one_sided_q(params: MetricParams, level: float | None) -> float:
    """``q = P(report 1 | bit 0)`` of a one-sided metric at ``level``.

    Raises:
        ParameterError: (``mode``) for the symmetric mode.
    """
    if params.local_mechanism.two_sided:
        raise ParameterError(
            "mode",
            "is 'symmetric': two-sided noise reports true ones as zeros, so no count bounds the "
            "holders; one-sided certificates need mode 'asymmetric' (or 'trusted')",
        )
    p_star, q_star = params.randomizer(level).probabilities()
    if q_star != 1.0:  # pragma: no cover - guaranteed by Randomizer for these modes
        raise ParameterError("mode", "needs P(report 1 | bit 1) = 1")
    return p_star


def _minimum_counts(counts: BitCounts, table: IntArray) -> tuple[IntArray, FloatArray]:
    """Per candidate: ``M = sum_j min_b c_jb`` and ``log K = sum_j log k_j`` over cohorts with reports."""
    kept = np.nonzero(counts.totals > 0)[0]
    sub = table[kept]  # (cohorts, S, h)
    per_bit = np.take_along_axis(
        counts.ones[kept][:, None, :], sub.reshape(kept.size, 1, -1), axis=2
    )
    per_bit = per_bit.reshape(sub.shape)
    minimum = per_bit.min(axis=2).sum(axis=0).astype(np.int64)
    ordered = np.sort(sub, axis=2)
    distinct = 1 + (np.diff(ordered, axis=2) != 0).sum(axis=2)
    return minimum, np.log(distinct).sum(axis=0)


def _binomial_bounds(
    minimum: IntArray, log_k: FloatArray, num_reports: int, q: float, alpha: float
) -> IntArray:
    """``U = max{h <= M : F_h(M - h) > alpha / K}`` by vectorized bisection (module docstring)."""
    if alpha == 0.0 or q == 0.0:
        return minimum.copy()
    level = np.exp(math.log(alpha) - log_k)

    def rejected(h: IntArray) -> npt.NDArray[np.bool_]:
        # g(h) <= alpha / K ; g(h) = 0 once h > M.
        room = minimum - h
        cdf = special.bdtr(np.maximum(room, 0), num_reports - h, q)
        return (room < 0) | (cdf <= level)

    low = np.zeros_like(minimum)  # smallest rejected h lies in [low, high]
    high = minimum + 1
    active = low < high
    while np.any(active):
        mid = (low + high) // 2
        rej = rejected(mid)
        high = np.where(active & rej, mid, high)
        low = np.where(active & ~rej, mid + 1, low)
        active = low < high
    return np.maximum(low - 1, 0)


def upper_bounds_from_table(
    counts: BitCounts, q: float, bit_table: npt.ArrayLike, *, alpha: float
) -> IntArray:
    """``U`` per candidate for explicit ``q = P(report 1 | bit 0)`` and bit indices.

    Args:
        counts: the aggregates.
        q: the one-sided noise probability, in ``[0, 1)``.
        bit_table: ``(num_cohorts, num_candidates, num_hashes)`` bit indices.
        alpha: ``0`` for the deterministic bound, else the error level.
    """
    alpha = _check_alpha(alpha)
    check_probability("q", q, open_high=True)
    table = np.asarray(bit_table)
    if table.ndim != 3:
        raise ParameterError(
            "bit_table",
            f"must be (num_cohorts, num_candidates, num_hashes), got shape {table.shape}",
        )
    table = check_bit_table(table, counts, table.shape[1])
    if counts.num_reports == 0:
        return np.zeros(table.shape[1], dtype=np.int64)
    minimum, log_k = _minimum_counts(counts, table)
    return _binomial_bounds(minimum, log_k, counts.num_reports, q, alpha)


def one_sided_upper_bounds(
    counts: BitCounts,
    params: MetricParams,
    level: float | None,
    candidates: Sequence[str],
    *,
    alpha: float,
) -> IntArray:
    """``U`` per candidate: ``P(count > U) <= alpha`` (module docstring).

    Raises:
        ParameterError: symmetric metric (``mode``), counts of the wrong
            shape (``counts``), bad ``alpha`` or candidates.
    """
    q = one_sided_q(params, level)
    counts.check_shape(params.num_cohorts, params.num_bits)
    cands = check_candidates(candidates)
    return upper_bounds_from_table(
        counts, q, candidate_bit_table(params.encoding, cands), alpha=alpha
    )


def certify(
    counts: BitCounts,
    params: MetricParams,
    level: float | None,
    candidates: Sequence[str],
    *,
    threshold: int,
    alpha: float,
) -> list[Certificate]:
    """Certify candidates *safe* (at most ``threshold`` reports hold them).

    ``P(certified safe and true count > threshold) <= alpha`` for every
    candidate; ``alpha = 0`` certificates are never wrong.

    Args:
        counts: aggregates of one metric, window and round.
        params: the metric (asymmetric or trusted).
        level: the reports' noise level (a round's level); ``None``: ``params.level``.
        candidates: distinct values to certify.
        threshold: ``t``; safe means ``count <= t``.
        alpha: the error level in ``[0, 1)``.

    Raises:
        ParameterError: a symmetric metric (field ``mode``), or bad arguments (named).
    """
    t = _check_threshold(threshold)
    cands = check_candidates(candidates)
    bounds = one_sided_upper_bounds(counts, params, level, cands, alpha=alpha)
    return [
        Certificate(candidate=c, upper_bound=int(u), safe=bool(u <= t))
        for c, u in zip(cands, bounds, strict=True)
    ]
