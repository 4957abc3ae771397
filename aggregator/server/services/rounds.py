"""The rules of relaxation rounds (gradual-release paper, Sec. 3-4.1), in one place.

* **Current level**: a metric is at its latest round's ``level_to`` (open or
  closed: released data cannot be revoked), else at its base level.
* **Only increasing**: a new round must go strictly above the current level
  (409 ``level_not_increasing``, field ``level_to``) and at most to
  ``protocol.randomizers.MAX_LEVEL`` (400, field ``level_to``); a trusted
  metric has no noise to relax (400, field ``metric``).
* **IRR** (docs/irr-relaxation.md): a round may also relax the metric's
  instantaneous randomized response to ``(irr_p, irr_q)`` (asymmetric:
  ``irr_q`` only); it must be a relaxation of the current IRR (the latest
  round's, else the metric's own; 400, field ``irr``, when it is not). A round
  that relaxes the IRR may keep the level (``level_to`` equal to the current
  one); one that keeps both is refused as above. A round that sets no IRR
  after one that did announces the current IRR again, so every announcement
  names the IRR its reports are made with and a client that missed the
  earlier round still reports with it.
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
>>> round_start(metric, [], 3.0)
(2.0, None, None)
>>> with_irr = MetricRecord(id=2, params=MetricParams(name="n", encoding=DirectEncoding(domain=("a", "b")),
...     mode="asymmetric", level=2.0, irr_q=0.5), digest="0" * 64, created_at=0, updated_at=0)
>>> round_start(with_irr, [], 2.0, (None, 0.25))  # an IRR-only round: the level kept, the IRR relaxed
(2.0, None, 0.25)
>>> round_start(with_irr, [], 3.0, (None, 0.75))
Traceback (most recent call last):
...
protocol.errors.ParameterError: irr (0.5, 1) is not a post-processing of (0.75, 1): a relaxed IRR must be at least as informative
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aggregator.server.errors import Conflict
from aggregator.server.storage import MetricRecord, RoundRecord, Storage
from aggregator.server.storage.rounds import RoundStart, SignFunction
from protocol.chain import Irr, IrrPair, RoundRepeats, RoundStep
from protocol.errors import ParameterError, TighteningRefused
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


def current_irr(metric: MetricRecord, rounds: Sequence[RoundRecord]) -> Irr:
    """The metric's IRR ``(irr_p, irr_q)`` now: its latest round's, else its own (``(None, None)``: none)."""
    own = [r for r in rounds if r.metric == metric.name]
    latest = max(own, key=lambda r: r.id) if own else None
    return round_irr(metric, latest)


def round_irr(metric: MetricRecord, record: RoundRecord | None) -> Irr:
    """The IRR the reports of ``record`` (``None``: round 0) are made with."""
    return Irr.held(metric.params, None if record is None else record.irr)


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


def round_start(metric: MetricRecord, rounds: Sequence[RoundRecord], level_to: float,
                irr: IrrPair | None = None) -> RoundStart:
    """``(level_from, irr_p, irr_q)`` of a new round to ``level_to`` (and ``irr``, ``None``: kept); checked
    by the round rule (:meth:`protocol.chain.RoundStep.check`), the one the clients follow.

    Called inside the opening transaction with the metric's rounds as then stored.
    The stored IRR is ``irr``, or the current one when an earlier round set it.

    Raises:
        ParameterError: ``irr`` is not an IRR of the mode (field ``irr_p``, ``irr_q``, ``mode``)
            or not a relaxation of the current IRR (field ``irr``).
        Conflict: the round would lower the level, or keep both the level and the IRR
            (``level_not_increasing``).
    """
    _, level_from = current_level(metric, rounds)
    held = current_irr(metric, rounds)
    step = RoundStep.of(metric.params, level_from, held, level_to, irr)
    try:
        step.check()
    except (TighteningRefused, RoundRepeats):
        also = "" if step.relaxes_irr else " (a round that relaxes the IRR may keep the level)"
        raise Conflict(
            "level_to",
            f"levels only increase: the metric is at {level_from:.6g}, a round to {level_to:.6g} would "
            f"lower or repeat it (released data cannot be revoked){also}",
            code="level_not_increasing",
        ) from None
    own = Irr.held(metric.params, None)
    after = irr if irr is not None else (held if held != own else None)
    return (level_from, None, None) if after is None else (level_from, after[0], after[1])


@dataclass(frozen=True, kw_only=True)
class RoundRequest:
    """A validated request to open a round (the HTTP body or the CLI's flags); ``irr``: ``(irr_p, irr_q)``."""

    metric: str
    level_to: float
    cohorts: tuple[int, ...] | None
    expires_at: int
    irr: IrrPair | None = None


def open_round(storage: Storage, request: RoundRequest, *, sign: SignFunction, now: int) -> RoundRecord:
    """Open a round by the rules above, atomically with respect to every other opening.

    Raises:
        NotFound: no such metric.
        ParameterError: a trusted metric (field ``metric``), ``level_to`` over the cap, an IRR
            that is not one of the mode (``irr_p``, ``irr_q``) or not a relaxation (``irr``).
        Conflict: ``level_not_increasing``.
    """
    check_level_to(request.level_to)
    metric = storage.require_metric(request.metric)
    check_relaxable(metric)
    return storage.open_round(
        metric=request.metric,
        level_from=functools.partial(round_start, level_to=request.level_to, irr=request.irr),
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
