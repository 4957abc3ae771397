"""The rules of relaxation rounds (gradual-release paper, Sec. 3-4.1), in one place.

* **Current level**: a metric is at its latest round's ``level_to`` (open or
  closed: released data cannot be revoked), else at its base level.
* **Only increasing**: a new round must go strictly above the current level
  (409 ``level_not_increasing``, field ``level_to``) and at most to
  ``protocol.randomizers.MAX_LEVEL`` (400, field ``level_to``); a trusted
  metric has no noise to relax (400, field ``metric``).
* **One open round**: opening a round closes the metric's earlier ones
  (clients jump straight to the latest level: one lazy step is valid by the
  Markov property).
* **Closing** (or expiry) withdraws the announcement, so no client joins any
  more, and refuses nothing: the clients that joined were charged for their
  reports, delivered late or made at the round's level in later windows
  (``aggregator.server.ingest``, step 4), and all of them are counted.
* **Participation**: per cohort, a round's reports against the base collection's.

The level check, the closing of earlier rounds and the insert run in one
transaction holding the metric's row lock (:meth:`RoundStore.open_round
<aggregator.server.storage.rounds.RoundStore.open_round>`), and a partial
unique index keeps one round with ``closed_at IS NULL`` per metric, so
concurrent openings cannot lower a level or leave two rounds open.

>>> from aggregator.server.storage.records import MetricRecord
>>> from protocol.params import MetricParams
>>> from protocol.encodings import DirectEncoding
>>> params = MetricParams(name="m", encoding=DirectEncoding(domain=("a", "b")), mode="asymmetric", level=2.0)
>>> metric = MetricRecord(id=1, params=params, digest="0" * 64, created_at=0, updated_at=0)
>>> current_level(metric, [])
(0, 2.0)
>>> level_before(metric, [], 3.0)
2.0
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aggregator.server.errors import Conflict
from aggregator.server.storage import MetricRecord, RoundRecord, Storage
from aggregator.server.storage.rounds import SignFunction
from protocol.errors import ParameterError
from protocol.randomizers import MAX_LEVEL, MIN_LEVEL

DEFAULT_ROUND_SECONDS = 7 * 86400
MAX_ROUND_SECONDS = 366 * 86400


def current_level(metric: MetricRecord, rounds: Sequence[RoundRecord]) -> tuple[int, float]:
    """``(round id, level)`` the metric is at: its latest round's ``level_to``, else ``(0, base level)``."""
    own = [r for r in rounds if r.metric == metric.name]
    if not own:
        return 0, metric.params.level
    latest = max(own, key=lambda r: r.id)
    return latest.id, latest.level_to


def check_relaxable(metric: MetricRecord) -> None:
    """A trusted metric's exact bits have no noise to relax.

    Raises:
        ParameterError: field ``metric``.
    """
    if not metric.params.local_mechanism.relaxable:
        raise ParameterError("metric", f"{metric.name!r} is trusted: exact bits have no noise to relax")


def check_level_to(level_to: float) -> None:
    """A round's target level is a finite number in ``[MIN_LEVEL, MAX_LEVEL]``.

    Raises:
        ParameterError: field ``level_to``.
    """
    if not MIN_LEVEL <= level_to <= MAX_LEVEL:
        raise ParameterError(
            "level_to", f"must be in [{MIN_LEVEL:g}, {MAX_LEVEL:g}] (the representable levels), got {level_to!r}"
        )


def level_before(metric: MetricRecord, rounds: Sequence[RoundRecord], level_to: float) -> float:
    """The level a new round to ``level_to`` starts from; checked to go up.

    Called inside the opening transaction with the metric's rounds as then stored.

    Raises:
        Conflict: ``level_to`` would lower or repeat the current level (``level_not_increasing``).
    """
    _, level_from = current_level(metric, rounds)
    if not level_to > level_from:
        raise Conflict(
            "level_to",
            f"levels only increase: the metric is at {level_from:.6g}, a round to {level_to:.6g} would "
            "lower or repeat it (released data cannot be revoked)",
            code="level_not_increasing",
        )
    return level_from


@dataclass(frozen=True, kw_only=True)
class RoundRequest:
    """A validated request to open a round (the HTTP body or the CLI's flags)."""

    metric: str
    level_to: float
    cohorts: tuple[int, ...] | None
    expires_at: int


def open_round(storage: Storage, request: RoundRequest, *, sign: SignFunction, now: int) -> RoundRecord:
    """Open a round by the rules above, atomically with respect to every other opening.

    Raises:
        NotFound: no such metric.
        ParameterError: a trusted metric (field ``metric``) or ``level_to`` over the cap.
        Conflict: ``level_not_increasing``.
    """
    check_level_to(request.level_to)
    check_relaxable(storage.require_metric(request.metric))
    return storage.open_round(
        metric=request.metric,
        level_from=functools.partial(level_before, level_to=request.level_to),
        level_to=request.level_to,
        cohorts=request.cohorts,
        expires_at=request.expires_at,
        sign=sign,
        now=now,
    )


def participation(storage: Storage, record: RoundRecord) -> list[dict[str, Any]]:
    """Per cohort: reports in this round, reports in the base collection, and their ratio.

    A client that refused the round (consent, ceiling) sends nothing for it:
    refusals show here as non-participation, never as data.
    """
    _, round_totals = storage.bit_counts(record.metric, round=record.id)
    _, base_totals = storage.bit_counts(record.metric, round=0)
    cohorts = range(len(round_totals)) if record.cohorts is None else record.cohorts
    rows = []
    for c in cohorts:
        base, got = int(base_totals[c]), int(round_totals[c])
        rows.append({"cohort": c, "reports": got, "base_reports": base,
                     "participation": None if base == 0 else round(got / base, 6)})
    return rows
