"""Estimates and one-sided certificates of stored aggregates (docs/decoding.md, section 7).

The HTTP layer (``aggregator.server.api.estimates``) and the CLI call this module;
the decoding itself is :mod:`aggregator.analysis.decoding` and :mod:`aggregator.analysis.certify`.
What is added here is the choice of the reports to decode:

* **window** (given, or by default the latest window with a decodable
  collection, else the latest with any report);
* **round**: reports of a relaxation round are made at that round's level
  ``level_to`` (and with its IRR, when the round relaxed it: docs/irr-relaxation.md)
  and are decoded alone, with that level and IRR (round 0: the metric's
  base level and IRR). By default the latest *finished* round (closed, or expired)
  with at least ``min_batch_size`` reports in the window supersedes the
  earlier ones; a round still open does not, its collection
  is still growing. Otherwise round 0.
* **min_batch_size**: below it no number leaves the aggregator, only a
  ``reason`` (DAP's minimum batch size).

Decoding a collection ``(window, round)`` reads its ``(num_cohorts, num_bits)``
aggregate rows only (``Storage.bit_counts``), never the raw reports.

>>> DecodeRequest.from_mapping({"window": "3600", "candidates": ["a", "b"], "alpha": "0.01"}).alpha
0.01
>>> CertifyRequest.from_mapping({"threshold": 5})
Traceback (most recent call last):
...
protocol.errors.ParameterError: alpha is required (the error level in [0, 1); 0: never wrong)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aggregator.analysis.certify import certify, one_sided_q
from aggregator.analysis.decoding import (
    CORRECTIONS,
    BitCounts,
    bit_estimates,
    direct_estimates,
    fit_candidates,
)
from aggregator.analysis.decoding.fit import METHODS
from aggregator.analysis.discovery import fit_prefix_candidates, whole_prefixes
from aggregator.server.errors import NotFound, TooCostly
from aggregator.server.services.offload import Offloader
from aggregator.server.settings import DEFAULT_MAX_DECODE_CELLS
from aggregator.server.storage import Collection, MetricRecord, RoundRecord, Storage
from aggregator.server.storage.records import level_to_json
from protocol.encodings import DirectEncoding, PrefixEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams

MAX_CANDIDATES = 10_000
MAX_INTEGER = 2**62  # windows, rounds and thresholds beyond this are typos (and overflow SQL)
TOP_ITEMS = 20
COLLECTION_FIELDS = ("window", "round", "candidates")
ESTIMATE_FIELDS = (*COLLECTION_FIELDS, "alpha", "correction", "confidence", "method")
CERTIFICATE_FIELDS = (*COLLECTION_FIELDS, "threshold", "alpha")


# ==========================================================================
# Requests: query strings (text) and JSON bodies (typed) through one validator
# ==========================================================================


def _from_text(field: str, value: Any, parse: Callable[[str], Any], kind: str) -> Any:
    """A query-string value parsed with ``parse``; JSON values pass through unchanged."""
    if not isinstance(value, str):
        return value
    try:
        return parse(value)
    except ValueError:
        raise ParameterError(field, f"must be {kind}, got {value!r}") from None


def _integer(field: str, value: Any) -> int:
    value = _from_text(field, value, int, "an integer")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_INTEGER:
        raise ParameterError(field, f"must be an integer in [0, 2**62), got {value!r}")
    return value


def _real(field: str, value: Any) -> float:
    value = _from_text(field, value, float, "a number")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ParameterError(field, f"must be a finite number, got {value!r}")
    return float(value)


def _optional_integer(field: str, value: Any) -> int | None:
    return None if value is None else _integer(field, value)


def _candidates(value: Any) -> tuple[str, ...] | None:
    """``None`` (the default set) or a non-empty list of distinct strings."""
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not value:
        raise ParameterError("candidates", "must be a non-empty list of strings")
    if len(value) > MAX_CANDIDATES:
        raise ParameterError("candidates", f"at most {MAX_CANDIDATES} per request, got {len(value)}")
    seen: set[str] = set()
    for i, candidate in enumerate(value):
        if not isinstance(candidate, str) or not candidate:
            raise ParameterError("candidates", f"item {i} must be a non-empty string, got {candidate!r}")
        if candidate in seen:
            raise ParameterError("candidates", f"{candidate!r} is listed twice")
        seen.add(candidate)
    return tuple(value)


def _known_fields(data: Any, allowed: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ParameterError("body", "must be a JSON object")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ParameterError(unknown[0], f"is not a known field (known: {', '.join(allowed)})")
    return data


@dataclass(frozen=True, kw_only=True)
class DecodeRequest:
    """What ``GET /v1/metrics/<name>/estimates`` asks for.

    Attributes:
        window: a window start, or ``None`` for the default (module docstring).
        round: 0 (base collection), a round id of the metric, or ``None`` (default).
        candidates: values to estimate; ``None``: the whole domain of a
            direct metric (required for Bloom metrics).
        alpha, correction, confidence, method: see :func:`aggregator.analysis.decoding.fit_candidates`.
    """

    window: int | None = None
    round: int | None = None
    candidates: tuple[str, ...] | None = None
    alpha: float = 0.05
    correction: str = "bonferroni"
    confidence: float = 0.95
    method: str = "auto"

    def __post_init__(self) -> None:
        _optional_integer("window", self.window)
        _optional_integer("round", self.round)
        _candidates(self.candidates)
        if not 0.0 < _real("alpha", self.alpha) < 1.0:
            raise ParameterError("alpha", f"must be in (0, 1), got {self.alpha!r}")
        if self.correction not in CORRECTIONS:
            raise ParameterError("correction", f"must be one of {', '.join(CORRECTIONS)}, got {self.correction!r}")
        if not 0.0 < _real("confidence", self.confidence) < 1.0:
            raise ParameterError("confidence", f"must be in (0, 1), got {self.confidence!r}")
        if self.method not in METHODS:
            raise ParameterError("method", f"must be one of {', '.join(METHODS)}, got {self.method!r}")

    @classmethod
    def from_mapping(cls, data: Any) -> DecodeRequest:
        """From a JSON object or parsed query (numbers may be text); errors name the field."""
        fields = _known_fields(data, ESTIMATE_FIELDS)
        settings: dict[str, Any] = {k: fields[k] for k in ("correction", "method") if k in fields}
        settings.update({k: _real(k, fields[k]) for k in ("alpha", "confidence") if k in fields})
        return cls(
            window=_optional_integer("window", fields.get("window")),
            round=_optional_integer("round", fields.get("round")),
            candidates=_candidates(fields.get("candidates")),
            **settings,
        )


@dataclass(frozen=True, kw_only=True)
class CertifyRequest:
    """What ``GET /v1/metrics/<name>/certificates`` asks for.

    Attributes:
        window, round, candidates: as in :class:`DecodeRequest`.
        threshold: ``t``; a candidate is *safe* when ``count <= t`` is certified.
        alpha: error level in ``[0, 1)``: ``P(certified safe and count > t) <= alpha``
            per candidate; 0 gives certificates that are never wrong.
    """

    threshold: int
    alpha: float
    window: int | None = None
    round: int | None = None
    candidates: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        _optional_integer("window", self.window)
        _optional_integer("round", self.round)
        _candidates(self.candidates)
        _integer("threshold", self.threshold)
        if not 0.0 <= _real("alpha", self.alpha) < 1.0:
            raise ParameterError("alpha", f"must be in [0, 1), got {self.alpha!r}")

    @classmethod
    def from_mapping(cls, data: Any) -> CertifyRequest:
        """From a JSON object or parsed query; ``threshold`` and ``alpha`` are required."""
        fields = _known_fields(data, CERTIFICATE_FIELDS)
        if fields.get("threshold") is None:
            raise ParameterError("threshold", "is required (safe means count <= threshold)")
        if fields.get("alpha") is None:
            raise ParameterError("alpha", "is required (the error level in [0, 1); 0: never wrong)")
        return cls(
            threshold=_integer("threshold", fields["threshold"]),
            alpha=_real("alpha", fields["alpha"]),
            window=_optional_integer("window", fields.get("window")),
            round=_optional_integer("round", fields.get("round")),
            candidates=_candidates(fields.get("candidates")),
        )


# ==========================================================================
# Which reports: window, round, level
# ==========================================================================


@dataclass(frozen=True, kw_only=True)
class Chosen:
    """The collection to decode: ``window`` (``None``: the metric has no report), ``round``, its level.

    ``params``: the metric's parameters the collection's reports were made with: the metric's own,
    with the round's IRR when the round relaxed it (what every decoder of the collection is given).
    """

    window: int | None
    round: int
    level: float
    reports: int
    params: MetricParams


def round_params(params: MetricParams, record: RoundRecord | None) -> MetricParams:
    """``params`` with the IRR the reports of round ``record`` are made with (``None``: round 0, as they are)."""
    return params if record is None else params.with_irr(record.irr)


def choose_collection(
    metric: MetricRecord,
    collections: Sequence[Collection],
    rounds: Sequence[RoundRecord],
    *,
    window: int | None,
    round: int | None,
    now: float,
) -> Chosen:
    """Pick ``(window, round)`` as the module docstring says (pure; storage reads are the caller's).

    Raises:
        ParameterError: ``window`` is not a multiple of ``time_precision``.
        NotFound: ``round`` is not a round of this metric (field ``round``).
    """
    params = metric.params
    minimum = params.min_batch_size
    if window is not None and window % params.time_precision:
        raise ParameterError("window", f"must be a window start, a multiple of {params.time_precision}")
    own = {r.id: r for r in rounds if r.metric == metric.name}
    levels = {i: r.level_to for i, r in own.items()}
    if round is not None and round != 0 and round not in levels:
        raise NotFound("round", f"metric {metric.name!r} has no round {round}")
    if round is not None:
        eligible = {round}
    else:
        eligible = {0} | {r.id for r in rounds if r.id in levels and not r.is_open(now)}
    pool = [c for c in collections if c.round in eligible and (window is None or c.window == window)]
    if window is None:
        decodable = [c.window for c in pool if c.reports >= minimum]
        window = max(decodable or [c.window for c in pool], default=None)
    in_window = [c for c in pool if c.window == window]
    if round is None:
        round = max((c.round for c in in_window if c.round and c.reports >= minimum), default=0)
    reports = sum(c.reports for c in in_window if c.round == round)
    return Chosen(window=window, round=round, level=levels.get(round, params.level), reports=reports,
                  params=round_params(params, own.get(round)))


def refusal(metric: MetricRecord, chosen: Chosen, reports: int) -> str | None:
    """Why nothing can be released for ``chosen``, or ``None`` when it can."""
    minimum = metric.params.min_batch_size
    if chosen.window is None:
        where = "" if chosen.round == 0 else f" in round {chosen.round}"
        return f"metric {metric.name!r} has no reports{where} yet; no estimate is released"
    if reports < minimum:
        return (
            f"only {reports} reports in window {chosen.window}, round {chosen.round}: below "
            f"min_batch_size {minimum}; no estimate is released"
        )
    return None


def _check_candidates(metric: MetricRecord, candidates: tuple[str, ...] | None) -> tuple[str, ...]:
    """The candidates to decode: the given ones (in the domain for a direct metric), or the domain.

    A declared ``none_value`` owns no bits (it is reported as noise only), so
    it is never a candidate: the default domain leaves it out and asking for
    it is refused (its count is the reports minus the other values').
    """
    encoding = metric.params.encoding
    none = metric.params.none_value
    if candidates is not None and none is not None and none in candidates:
        raise ParameterError(
            "candidates", f"{none!r} is the metric's none_value: it owns no bits and cannot be estimated directly"
        )
    if not isinstance(encoding, DirectEncoding):
        if candidates is None:
            raise ParameterError(
                "candidates", "is required for Bloom metrics: list the values to estimate (comma-separated)"
            )
        return candidates
    if candidates is None:
        return tuple(item for item in encoding.domain if item != none)
    domain = set(encoding.domain)
    for candidate in candidates:
        if candidate not in domain:
            raise ParameterError("candidates", f"{candidate!r} is not in the metric's domain")
    return candidates


# ==========================================================================
# The cost of a request
# ==========================================================================


def decode_cells(metric: MetricRecord, num_candidates: int) -> int:
    """The work of decoding ``num_candidates`` of ``metric``: cells of its design matrix.

    A Bloom metric is a regression on a ``(num_cohorts * num_bits) x candidates``
    matrix; every solver (OLS, NNLS, LASSO) and the certificates' bounds
    touch each cell at least once per step, so the time grows with this count
    (measured: 1,000 candidates on 2,048 rows, 2.0M cells: 0.4 s of OLS on one
    core). A direct metric reads its own bits: one cell per (cohort, bit).
    """
    rows = metric.params.num_cohorts * metric.params.num_bits
    if isinstance(metric.params.encoding, DirectEncoding):
        return rows
    return rows * num_candidates


def check_cost(metric: MetricRecord, num_candidates: int, max_cells: int) -> None:
    """Refuse a decoding larger than ``max_cells`` (setting ``max_decode_cells``).

    Raises:
        TooCostly: 422 ``too_costly``, field ``candidates``, naming the limit.
    """
    cells = decode_cells(metric, num_candidates)
    if cells > max_cells:
        rows = metric.params.num_cohorts * metric.params.num_bits
        raise TooCostly(
            "candidates",
            f"{num_candidates} candidates x {rows} (cohort, bit) rows = {cells} design cells is over this "
            f"aggregator's limit of {max_cells} (setting max_decode_cells): ask for at most "
            f"{max(1, max_cells // rows)} candidates per request",
        )


# ==========================================================================
# The service
# ==========================================================================


class DecodingService:
    """Decodes a metric's stored aggregates for analysts.

    Args:
        storage: the aggregator's storage.
        now: the server's clock (Unix seconds): a round counts as finished
            once it is closed or expired at ``now``.
        max_cells: the most design-matrix cells one request may decode
            (:func:`check_cost`).
        offloader: where the fits run (default: in place); the server's runs
            them in helper processes (:mod:`aggregator.server.services.offload`).
    """

    def __init__(
        self, storage: Storage, *, now: float, max_cells: int = DEFAULT_MAX_DECODE_CELLS,
        offloader: Offloader | None = None,
    ) -> None:
        self.storage = storage
        self.now = now
        self.max_cells = max_cells
        self.offloader = Offloader(processes=0) if offloader is None else offloader

    def choose(self, metric: MetricRecord, window: int | None, round: int | None) -> Chosen:
        """The collection to decode (see :func:`choose_collection`)."""
        return choose_collection(
            metric, self.storage.collections(metric.name), self.storage.list_rounds(metric.name),
            window=window, round=round, now=self.now,
        )

    def counts(self, metric: MetricRecord, *, window: int | None, round: int) -> BitCounts:
        """The aggregate of one round in one window (``None``: all windows), from the aggregate rows."""
        ones, totals = self.storage.bit_counts(metric.name, window=window, round=round)
        return BitCounts(ones=ones, totals=totals)

    def _header(self, metric: MetricRecord, chosen: Chosen, counts: BitCounts | None) -> dict[str, Any]:
        reports = chosen.reports if counts is None else counts.num_reports
        return {
            "metric": metric.name,
            "mode": metric.params.mode,
            "encoding": metric.params.encoding.kind,
            "window": chosen.window,
            "round": chosen.round,
            "level": level_to_json(chosen.level),
            "reports": reports,
            "min_batch_size": metric.params.min_batch_size,
            "reason": refusal(metric, chosen, reports),
        }

    def _decodable(self, metric: MetricRecord, chosen: Chosen) -> tuple[dict[str, Any], BitCounts | None]:
        """The answer's header, and the counts when they may be decoded."""
        counts = None
        if refusal(metric, chosen, chosen.reports) is None:
            counts = self.counts(metric, window=chosen.window, round=chosen.round)
        header = self._header(metric, chosen, counts)
        return header, None if header["reason"] else counts

    def estimates(self, metric: MetricRecord, request: DecodeRequest) -> dict[str, Any]:
        """Per-candidate counts with standard errors, intervals and detections.

        Returns:
            The header (metric, window, round, level, reports, ``reason``)
            and, unless ``reason`` is set, ``method``, ``detected`` (how many)
            and ``rows`` (``CandidateFit.rows()``, largest first); otherwise
            ``rows`` is ``None``. A prefix metric's candidates are decoded on the
            cohorts that encode them whole (:func:`~aggregator.analysis.discovery.fit_prefix_candidates`;
            strings as long as the longest prefix are refused, field ``candidates``).

        Raises:
            ParameterError: bad candidates or settings (named); NotFound: no such round.
            TooCostly: too many candidates for ``max_cells``.
        """
        candidates = _check_candidates(metric, request.candidates)
        prefix = isinstance(metric.params.encoding, PrefixEncoding)
        if prefix:
            whole_prefixes(metric.params.encoding, candidates)  # refuses what no cohort holds whole (candidates)
        check_cost(metric, len(candidates), self.max_cells)
        chosen = self.choose(metric, request.window, request.round)
        body, counts = self._decodable(metric, chosen)
        body.update({"correction": request.correction, "alpha": request.alpha,
                     "confidence": request.confidence, "candidates": len(candidates),
                     "method": None, "detected": None, "rows": None})
        if counts is not None:
            fit = self.offloader.run(
                fit_prefix_candidates if prefix else fit_candidates, counts, chosen.params, chosen.level, candidates,
                alpha=request.alpha,
                correction=request.correction, confidence=request.confidence, method=request.method,
            )
            rows = fit.rows()
            body.update(method=fit.method, detected=int(fit.detected.sum()), rows=rows)
        return body

    def certificates(self, metric: MetricRecord, request: CertifyRequest) -> dict[str, Any]:
        """One-sided certificates: each candidate ``safe`` (``upper_bound <= threshold``) or ``obscure``.

        Raises:
            ParameterError: a symmetric metric (field ``mode``), bad candidates (named).
            TooCostly: too many candidates for ``max_cells``.
        """
        one_sided_q(metric.params, None)  # refuses two-sided noise (field "mode") before anything else
        candidates = _check_candidates(metric, request.candidates)
        check_cost(metric, len(candidates), self.max_cells)
        chosen = self.choose(metric, request.window, request.round)
        body, counts = self._decodable(metric, chosen)
        body.update({"threshold": request.threshold, "alpha": request.alpha, "candidates": len(candidates),
                     "safe": None, "rows": None})
        if counts is not None:
            found = self.offloader.run(certify, counts, chosen.params, chosen.level, candidates,
                            threshold=request.threshold, alpha=request.alpha)
            rows = [{**c.to_dict(), "verdict": "safe" if c.safe else "obscure"} for c in found]
            body.update(safe=sum(c.safe for c in found), rows=rows)
        return body

    def round_summary(self, metric: MetricRecord, record: RoundRecord) -> dict[str, Any] | None:
        """A cheap summary of one round's decoding, its windows pooled (``GET /v1/rounds/<id>``).

        Only windows where the round has at least ``min_batch_size`` reports
        count; ``None`` when there is none. Direct metrics: the top
        :data:`TOP_ITEMS` items by estimate. Bloom metrics (no candidates
        here): the mean standard error of the per-(cohort, bit) true-one
        estimates ``sqrt(Var t_hat)`` over cohorts with reports. Estimates
        count reports: a client reporting in two windows counts twice.
        """
        own = [c for c in self.storage.collections(metric.name) if c.round == record.id]
        ready = [c.window for c in own if c.reports >= metric.params.min_batch_size]
        if not ready:
            return None
        if len(ready) == len(own):
            counts = self.counts(metric, window=None, round=record.id)
        else:
            parts = [self.counts(metric, window=w, round=record.id) for w in ready]
            counts = sum(parts[1:], parts[0])
        summary: dict[str, Any] = {"windows": ready, "reports": counts.num_reports,
                                   "level": level_to_json(record.level_to)}
        params = round_params(metric.params, record)
        if isinstance(params.encoding, DirectEncoding):
            fit = direct_estimates(counts, params, record.level_to)
            keep = ("candidate", "estimate", "std_error", "detected")
            summary["top"] = [{k: row[k] for k in keep} for row in fit.rows()[:TOP_ITEMS]]
        else:
            _, variances = bit_estimates(counts, params.randomizer(record.level_to))
            summary["mean_bit_std_error"] = float(np.sqrt(variances[counts.totals > 0]).mean())
        return summary
