"""Central releases to analysts from a trusted metric's exact counts (docs/central.md, section 7).

A *trusted* metric (``mode == "trusted"``) has clients send their exact
presence sets, sealed to the aggregator; with the direct encoding (one bit
per place) the stored bit counts of a window are exact per-place counts:
``count(place) = #reports of the window with the place's bit set``. An
analyst asks for a release of those counts (:class:`ReleaseRequest`); the
aggregator runs a central mechanism (:func:`protocol.releases.make_release`),
stores the whole record (exact counts and noise included, for later
relaxation) and shows the analyst only :meth:`Release.public_dict`.

Budgets (ADP Thm VIII.6: privacy losses add up): per ``(analyst, metric,
window)`` the spent budget is ``sum_r levels_r[-1]`` over the analyst's
releases ``r`` of that window. A relaxed release counts at its *final*
level (gradual-release paper, Sec. 3: the lazy step makes the earlier
answers a post-processing of the new ones), not at the sum of its levels.
A request that would push the sum above the analyst budget
(:func:`analyst_budget`) raises :class:`BudgetExceeded` and stores nothing.
Checks and the writes they guard are serialised by :func:`budget_lock`.

Multi-analyst (correlated) releases (GR Sec. 4.2): one draw of the noise
process, each analyst at its own level, one stored release per analyst
sharing a ``group``. A member may later be relaxed only to at least the
group's highest level, stepping from that member's noise, so every
answer stays a post-processing of the most trusted one's (the coalition
bound ``max_j eps_j`` survives relaxation).

>>> ReleaseRequest.from_dict({"metric": "visits", "window": 0, "mechanism": "ageo",
...                           "epsilon": 1.0, "threshold": 3}).places is None
True
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import sqlalchemy as sa

from aggregator.server.errors import Conflict, Forbidden, NotFound
from aggregator.server.storage import MetricRecord, ReleaseRecord, Storage, TokenRecord
from protocol.accounting import central_neighbour, contribution_bound
from protocol.central import (
    SALapMechanism,
    certificate_cut,
    certificate_statement,
    mechanism_class,
)
from protocol.errors import BudgetExceeded, ParameterError, TighteningRefused
from protocol.exact import MAX_RATE
from protocol.multianalyst import correlated_releases
from protocol.params import MetricParams
from protocol.releases import Release, make_release, relax_release
from protocol.rng import RandomSource, as_rng
from protocol.validation import check_int, check_number

DEFAULT_ANALYST_BUDGET = 10.0
BUDGET_ENV = "ONESIDED_ANALYST_BUDGET"
STORED_SCHEMA = "onesided.stored-release/v1"
CORRELATED_MECHANISMS: tuple[str, ...] = ("laplace", "alap", "ageo")
RELAXABLE: tuple[str, ...] = ("alap", "ageo", "laplace")
REQUEST_FIELDS = ("metric", "window", "places", "mechanism", "epsilon", "threshold", "sensitivity", "analysts")
# PostgreSQL advisory lock key of the budget section ("ones" + 2; migrations hold "ones").
RELEASES_LOCK_ID = 0x6F6E6573_00000002
MAX_NUMBER = 2.0**62  # thresholds, levels and sensitivities beyond this are typos (and overflow SQL)
MAX_WINDOW = 2**62
MONOTONICITY = "decreasing"  # presence data: a protected change only removes a visit

_PROCESS_LOCK = threading.Lock()


def analyst_budget(environ: Mapping[str, str] | None = None) -> float:
    """The budget per (analyst, metric, window): ``$ONESIDED_ANALYST_BUDGET`` or 10.0.

    Raises:
        RuntimeError: the variable is set but not a finite number > 0 (an
            operator error, answered as 500 and logged).
    """
    env = os.environ if environ is None else environ
    text = env.get(BUDGET_ENV)
    if not text:
        return DEFAULT_ANALYST_BUDGET
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise RuntimeError(f"{BUDGET_ENV} must be a finite number > 0, got {text!r}")
    return value


# ==========================================================================
# The request
# ==========================================================================


def _number(field: str, value: Any) -> float:
    number = check_number(field, value, high=MAX_NUMBER)
    if number < -MAX_NUMBER:
        raise ParameterError(field, f"must be >= {-MAX_NUMBER:g}, got {number}")
    return number


def check_epsilon(field: str, value: Any) -> float:
    """A finite level in ``(0, 2**20]`` (the exact samplers' range)."""
    eps = _number(field, value)
    if not 0 < eps <= MAX_RATE:
        raise ParameterError(field, f"must be > 0 and <= {MAX_RATE:g}, got {value!r}")
    return eps


def _places(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise ParameterError("places", "must be a non-empty list of place names (omit it for the whole domain)")
    for i, place in enumerate(value):
        if not isinstance(place, str):
            raise ParameterError(f"places[{i}]", f"must be a string, got {place!r}")
        if place in value[:i]:
            raise ParameterError(f"places[{i}]", f"{place!r} is listed twice")
    return tuple(value)


def _analysts(value: Any) -> tuple[tuple[str, float], ...] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not value:
        raise ParameterError("analysts", "must be a non-empty object of analyst name -> epsilon")
    return tuple((str(name), check_epsilon(f"analysts.{name}", eps)) for name, eps in value.items())


@dataclass(frozen=True, kw_only=True)
class ReleaseRequest:
    """``POST /v1/releases``: what to release, how, at which level(s).

    Attributes:
        metric: a trusted metric with the direct encoding.
        window: the window start (a multiple of the metric's ``time_precision``).
        places: candidate places (domain items); ``None``: the whole domain, in order.
        mechanism: ``alap``, ``ageo``, ``salap``, ``laplace`` or ``geometric``.
        threshold: ``t`` of "is the place safe, count <= t?".
        epsilon: the level of a single release (exclusive with ``analysts``).
        analysts: ``(name, epsilon)`` pairs of a correlated multi-analyst release (admin).
        sensitivity: optional ``D_p`` above the metric's own (:func:`release_sensitivity`:
            ``max_items`` visits per person's report), to protect more; never below it.
    """

    metric: str
    window: int
    places: tuple[str, ...] | None
    mechanism: str
    threshold: float
    epsilon: float | None = None
    analysts: tuple[tuple[str, float], ...] | None = None
    sensitivity: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str) or not self.metric:
            raise ParameterError("metric", f"must be a metric name, got {self.metric!r}")
        check_int("window", self.window, low=0, high=MAX_WINDOW - 1)  # a window start
        mechanism_class(self.mechanism)  # a registered name (field "mechanism")
        _number("threshold", self.threshold)
        if (self.epsilon is None) == (self.analysts is None):
            raise ParameterError("epsilon", "give either epsilon (one release) or analysts (correlated releases)")
        if self.epsilon is not None:
            check_epsilon("epsilon", self.epsilon)
        if self.analysts is not None and self.mechanism not in CORRELATED_MECHANISMS:
            raise ParameterError(
                "mechanism", f"correlated releases need one of {CORRELATED_MECHANISMS}, got {self.mechanism!r}"
            )
        if self.sensitivity is not None and _number("sensitivity", self.sensitivity) < 1:
            raise ParameterError("sensitivity", f"must be >= 1 (visits per protected change), got {self.sensitivity}")
        if self.sensitivity is not None and mechanism_class(self.mechanism).integer and self.sensitivity % 1:
            raise ParameterError("sensitivity", f"must be an integer for {self.mechanism}, got {self.sensitivity}")

    @property
    def levels(self) -> dict[str, float] | None:
        """The analysts' levels by name (``None`` for a single release)."""
        return None if self.analysts is None else dict(self.analysts)

    @classmethod
    def from_dict(cls, data: Any) -> ReleaseRequest:
        """Validate a JSON body; every error names its field."""
        if not isinstance(data, dict):
            raise ParameterError("body", "must be a JSON object")
        unknown = sorted(set(data) - set(REQUEST_FIELDS))
        if unknown:
            raise ParameterError(unknown[0], "is not a known field")
        for required in ("metric", "window", "mechanism", "threshold"):
            if required not in data:
                raise ParameterError(required, "is required")
        return cls(
            metric=data["metric"],
            window=data["window"],
            places=_places(data.get("places")),
            mechanism=data["mechanism"],
            threshold=data["threshold"],
            epsilon=data.get("epsilon"),
            analysts=_analysts(data.get("analysts")),
            sensitivity=data.get("sensitivity"),
        )


# ==========================================================================
# The stored release and its public view
# ==========================================================================


def safe_cut(release: Release, threshold: float) -> float:
    """The largest answer called ``safe``: the certificate ``answer < floor(t) + 1`` (one-sided, integer counts).

    Place counts are integers, so for the one-sided mechanisms (noise ``>= 0``)
    ``answer < floor(t) + 1`` proves ``count <= t``
    (:func:`protocol.central.certificate_cut`); two-sided answers keep
    ``answer <= t``, an estimate.
    """
    if release.guarantee().one_sided is None:
        return threshold
    return certificate_cut(threshold, release.grid)


def place_answers(public: Mapping[str, Any], places: tuple[str, ...], cut: float) -> list[dict[str, Any]]:
    """Per place: the published answer and ``safe = answer <= cut`` (:func:`safe_cut`).

    Built from :meth:`Release.public_dict` only. SALap: ``answer`` null and
    ``safe`` true is "below threshold"; places after its stop are not
    answered (``answer`` and ``safe`` null).
    """
    answers = public["answers"]
    out: list[dict[str, Any]] = []
    for i, place in enumerate(places):
        if i >= len(answers):
            out.append({"place": place, "answer": None, "safe": None})
        elif answers[i] is None:
            out.append({"place": place, "answer": None, "safe": True})
        else:
            out.append({"place": place, "answer": answers[i], "safe": bool(answers[i] <= cut)})
    return out


@dataclass(frozen=True, kw_only=True)
class StoredRelease:
    """A release as stored for one analyst (``ReleaseRecord.body`` is :meth:`body`)."""

    id: int
    analyst: str
    metric: str
    window: int
    places: tuple[str, ...]
    threshold: float
    group: str | None
    release: Release
    created_at: int
    updated_at: int

    max_items: int = 1

    @staticmethod
    def make_body(
        *, window: int, places: tuple[str, ...], threshold: float, group: str | None, release: Release,
        max_items: int = 1,
    ) -> dict[str, Any]:
        """The JSON a store keeps: everything, exact counts and noise included."""
        return {
            "schema": STORED_SCHEMA,
            "window": window,
            "places": list(places),
            "threshold": threshold,
            "group": group,
            "max_items": max_items,
            "release": release.to_json_dict(),
        }

    def body(self, release: Release | None = None) -> dict[str, Any]:
        return self.make_body(
            window=self.window, places=self.places, threshold=self.threshold, group=self.group,
            release=self.release if release is None else release, max_items=self.max_items,
        )

    @classmethod
    def from_record(cls, record: ReleaseRecord) -> StoredRelease:
        body = record.body
        if not isinstance(body, dict) or body.get("schema") != STORED_SCHEMA:
            raise ParameterError("release", f"release {record.id} is not a {STORED_SCHEMA} record")
        return cls(
            id=record.id,
            analyst=record.analyst,
            metric=record.metric,
            window=int(body["window"]),
            places=tuple(body["places"]),
            threshold=float(body["threshold"]),
            group=body.get("group"),
            max_items=int(body.get("max_items", 1)),
            release=Release.from_json_dict(body["release"]),
            created_at=record.created_at,
            updated_at=record.updated_at,
        )

    def public_view(self) -> dict[str, Any]:
        """What the analyst sees: answers, levels, guarantee; never counts or noise."""
        public = self.release.public_dict()
        guarantee = {**public["guarantee"], "neighbour": person_neighbour(self.max_items, self.release)}
        return {
            "id": self.id,
            "analyst": self.analyst,
            "metric": self.metric,
            "window": self.window,
            "mechanism": public["mechanism"],
            "epsilon": public["epsilon"],
            "levels": public["levels"],
            "threshold": self.threshold,
            "sensitivity": self.release.sensitivity,
            "max_items": self.max_items,
            "grid": self.release.grid,
            "n_max": self.release.n_max,
            "group": self.group,
            "guarantee": guarantee,
            "certificate": certificate_statement(self.threshold, one_sided=guarantee["one_sided"] is not None),
            "answers": place_answers(public, self.places, safe_cut(self.release, self.threshold)),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


# ==========================================================================
# The service
# ==========================================================================


@contextlib.contextmanager
def budget_lock(storage: Storage) -> Iterator[None]:
    """Serialise budget checks with the writes they guard.

    One process: a lock (SQLite runs one worker process). PostgreSQL, where
    several processes share the database: also a transaction-scoped
    advisory lock, released when the block ends.
    """
    with _PROCESS_LOCK:
        if storage.dialect != "postgresql":
            yield
            return
        with storage.engine.begin() as conn:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": RELEASES_LOCK_ID})
            yield


def check_release_source(metric: MetricRecord) -> None:
    """Check that ``metric``'s stored bit counts are exact per-place counts.

    Raises:
        ParameterError: (field ``metric``) not the trusted mode, or not the direct encoding.
    """
    params = metric.params
    if params.local_mechanism.randomized:
        raise ParameterError(
            "metric", f"{metric.name!r} is {params.mode}: its counts are randomized on the devices; "
            "central releases need a trusted metric (exact counts)"
        )
    if params.encoding.kind != "direct":
        raise ParameterError(
            "metric", f"{metric.name!r} uses the {params.encoding.kind} encoding, whose bit counts are not place "
            "counts; releases of place counts need encoding.kind == 'direct' (one bit per place)"
        )


def release_sensitivity(params: MetricParams, mechanism: str) -> int:
    """The sensitivity of the released counts for "one person's report in the window added or removed".

    Ingestion keeps at most ``max_items`` ones of a trusted report, so with the
    direct encoding one person moves at most ``max_items`` place counts, each
    by 1: L1 sensitivity ``max_items`` (ALap, AGeo, Laplace, the geometric).
    SALap needs only the per-query bound, 1 (Algorithm 1; its bottoms cost
    nothing and it publishes one value). A Bloom report moves up to
    ``max_items * num_hashes`` bit counts of its cohort; such metrics are
    not released (:func:`check_release_source`), and that is the bound to use if they were.
    """
    bound = contribution_bound(params)  # the one ingestion enforces
    if mechanism_class(mechanism).sequential:
        return bound.per_count
    return bound.ones


def person_neighbour(max_items: int, release: Release) -> str:
    """The neighbour relation a release's epsilon is about, in one sentence."""
    return f"{central_neighbour(max_items)} (L1 change <= {release.sensitivity:g}; answers on the grid {release.grid:g})"


def place_indices(metric: MetricRecord, places: tuple[str, ...] | None) -> tuple[tuple[str, ...], list[int]]:
    """The places (default: the whole domain) and their bits."""
    domain = tuple(metric.params.encoding.domain)  # type: ignore[union-attr]
    if places is None:
        return domain, list(range(len(domain)))
    index = {d: i for i, d in enumerate(domain)}
    for i, place in enumerate(places):
        if place not in index:
            raise ParameterError(f"places[{i}]", f"{place!r} is not in the domain of {metric.name!r}")
    return places, [index[p] for p in places]


class ReleaseService:
    """Create, read and relax releases for authenticated callers.

    Args:
        storage: the aggregator's storage.
        budget: the budget per (analyst, metric, window).
        rng: the noise source (``None``: secure; tests pass a seed).
    """

    def __init__(self, storage: Storage, *, budget: float = DEFAULT_ANALYST_BUDGET,
                 rng: RandomSource | int | None = None) -> None:
        if not 0 < budget < math.inf:
            raise ParameterError("budget", f"must be a finite number > 0, got {budget!r}")
        self.storage = storage
        self.budget = budget
        self.rng = as_rng(rng)

    # --- reading -------------------------------------------------------------

    def exact_counts(self, metric: MetricRecord, window: int, bits: list[int]) -> tuple[np.ndarray, int]:
        """Exact counts of ``bits`` in ``window`` (base collection) and the window's report total."""
        ones, totals = self.storage.bit_counts(metric.name, window=window, round=0)
        return ones[0, bits], int(totals.sum())

    def releases_of(self, analyst: str | None, metric: str | None = None,
                    window: int | None = None) -> list[StoredRelease]:
        found = [StoredRelease.from_record(r) for r in self.storage.list_releases(analyst=analyst, metric=metric)]
        return [r for r in found if window is None or r.window == window]

    def spent(self, analyst: str, metric: str, window: int) -> float:
        """``sum`` of the final levels of ``analyst``'s releases of ``(metric, window)``."""
        return math.fsum(r.release.epsilon for r in self.releases_of(analyst, metric, window))

    def budget_status(self, analyst: str, metric: str, window: int) -> dict[str, Any]:
        spent = self.spent(analyst, metric, window)
        return {"analyst": analyst, "metric": metric, "window": window, "limit": self.budget,
                "spent": spent, "remaining": max(0.0, self.budget - spent)}

    def get(self, release_id: int, *, caller: TokenRecord) -> StoredRelease:
        """The release if ``caller`` may see it (its analyst, or an admin).

        Raises:
            NotFound: no such release, or another analyst's (not told apart).
        """
        record = self.storage.get_release(release_id)
        if record is None or (caller.role != "admin" and record.analyst != caller.name):
            raise NotFound("id", f"no release {release_id} of yours")
        return StoredRelease.from_record(record)

    # --- creating ------------------------------------------------------------

    def _recipients(self, request: ReleaseRequest, caller: TokenRecord) -> dict[str, float]:
        levels = request.levels
        if levels is None:
            return {caller.name: float(request.epsilon)}  # type: ignore[arg-type]
        if caller.role != "admin":
            raise Forbidden("analysts", "only an admin may make releases for several analysts")
        live = {t.name for t in self.storage.list_tokens() if t.revoked_at is None}
        for name in levels:
            if name not in live:
                raise ParameterError(f"analysts.{name}", f"no live token named {name!r}")
        return levels

    def _check_budget(self, analyst: str, metric: str, window: int, level: float, *,
                      replacing: float = 0.0, field: str = "epsilon") -> None:
        others = self.spent(analyst, metric, window) - replacing
        if math.fsum([others, level]) > self.budget:
            exc = BudgetExceeded(
                requested=level, remaining=max(0.0, self.budget - others),
                detail=f"analyst {analyst!r} on {metric!r} window {window} (limit {self.budget:g})",
            )
            exc.field = field
            raise exc

    def _draw(self, request: ReleaseRequest, counts: np.ndarray, n_max: int,
              levels: dict[str, float], sensitivity: float) -> dict[str, Release]:
        common: dict[str, Any] = {
            "sensitivity": sensitivity, "monotonicity": MONOTONICITY,
            "n_max": n_max if mechanism_class(request.mechanism).bounded else None, "rng": self.rng,
        }
        if request.analysts is None:
            (name, eps), = levels.items()
            thresholds = None
            if mechanism_class(request.mechanism).sequential:  # a bottom is the certificate answer < floor(t) + 1
                grid = SALapMechanism(epsilon=eps, sensitivity=sensitivity).step  # the grid make_release uses
                thresholds = [certificate_cut(request.threshold, grid)] * counts.size
            return {name: make_release(request.mechanism, counts, eps, thresholds=thresholds, **common)}
        made = correlated_releases(counts, list(levels.values()), mechanism=request.mechanism, **common)
        return dict(zip(levels, made, strict=True))

    def create(self, request: ReleaseRequest, *, caller: TokenRecord) -> list[StoredRelease]:
        """Run the mechanism on the exact counts and store one release per analyst.

        Raises:
            NotFound: unknown metric (``metric``), no reports in the window (``window``).
            ParameterError: not a trusted direct metric, a place outside the
                domain, a misaligned window, an unknown analyst.
            Forbidden: ``analysts`` from a non-admin.
            BudgetExceeded: an analyst's budget would be passed (nothing stored).
        """
        metric = self.storage.require_metric(request.metric)
        check_release_source(metric)
        if request.window % metric.params.time_precision:
            raise ParameterError(
                "window", f"must be a multiple of {metric.params.time_precision} (the metric's window length)"
            )
        places, bits = place_indices(metric, request.places)
        sensitivity = self._sensitivity(request, metric)
        levels = self._recipients(request, caller)
        with budget_lock(self.storage):
            counts, total = self.exact_counts(metric, request.window, bits)
            if total == 0:
                raise NotFound("window", f"no reports of {metric.name!r} in window {request.window}")
            for name, level in levels.items():
                field = "epsilon" if request.analysts is None else f"analysts.{name}"
                self._check_budget(name, metric.name, request.window, level, field=field)
            drawn = self._draw(request, counts, total, levels, sensitivity)
            group = None if request.analysts is None else _group_id(metric.name, request.window, self.rng)
            return [
                StoredRelease.from_record(self.storage.create_release(
                    analyst=name, metric=metric.name,
                    body=StoredRelease.make_body(window=request.window, places=places, threshold=request.threshold,
                                                 group=group, release=release, max_items=metric.params.max_items),
                ))
                for name, release in drawn.items()
            ]

    @staticmethod
    def _sensitivity(request: ReleaseRequest, metric: MetricRecord) -> float:
        """The metric's :func:`release_sensitivity`, or the request's if larger (never smaller)."""
        derived = release_sensitivity(metric.params, request.mechanism)
        if request.sensitivity is None:
            return float(derived)
        if request.sensitivity < derived:
            raise ParameterError(
                "sensitivity", f"must be >= {derived} for {metric.name!r} (max_items = {metric.params.max_items}: "
                f"one person's report moves up to that many counts), got {request.sensitivity:g}"
            )
        return float(request.sensitivity)

    # --- relaxing --------------------------------------------------------------

    def _relax_source(self, stored: StoredRelease, epsilon: float) -> Release:
        """The release to step from: its own, or its correlated group's most trusted one."""
        if stored.group is None:
            return stored.release
        members = [r for r in self.releases_of(None, stored.metric, stored.window) if r.group == stored.group]
        top = max(members, key=lambda r: (r.release.epsilon, -r.id))
        if epsilon < top.release.epsilon:
            raise Conflict(
                "epsilon", f"release {stored.id} is part of a correlated release whose highest level is "
                f"{top.release.epsilon:g}; relax it to at least that level (every member's answers must stay "
                "a post-processing of the most trusted one's)", code="correlated_release",
            )
        return top.release

    def relax(self, release_id: int, epsilon: Any, *, caller: TokenRecord) -> StoredRelease:
        """Refine a release to the looser level ``epsilon`` with the lazy step.

        The analyst's budget then counts this release at ``epsilon`` instead
        of its previous level. Relaxing to the current level changes nothing.

        Raises:
            NotFound: no such release of the caller's.
            TighteningRefused: ``epsilon`` below the current level.
            ParameterError: bad ``epsilon``; a mechanism without a lazy step.
            Conflict: below the highest level of the release's correlated group.
            BudgetExceeded: the analyst's budget would be passed (nothing changed).
        """
        e2 = check_epsilon("epsilon", epsilon)
        stored = self.get(release_id, caller=caller)
        if stored.release.mechanism not in RELAXABLE:
            raise ParameterError(
                "mechanism", f"{stored.release.mechanism} releases have no lazy step; relaxable: {RELAXABLE}"
            )
        with budget_lock(self.storage):
            stored = self.get(release_id, caller=caller)  # fresh, under the lock
            e1 = stored.release.epsilon
            if e2 < e1:
                raise TighteningRefused(current=e1, requested=e2)
            if e2 == e1:
                return stored
            self._check_budget(stored.analyst, stored.metric, stored.window, e2, replacing=e1)
            step = relax_release(self._relax_source(stored, e2), e2, rng=self.rng)
            refined = dataclasses.replace(step, levels=(*stored.release.levels, e2))
            return StoredRelease.from_record(self.storage.update_release(release_id, stored.body(refined)))


def _group_id(metric: str, window: int, rng: RandomSource) -> str:
    """An identifier shared by the releases of one correlated draw (not secret)."""
    tag = int(rng.integers(2**48, (1,))[0])
    return f"{metric}/{window}/{tag:012x}"
