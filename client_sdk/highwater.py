"""The lifetime high-water mark: what each metric had spent, kept beside the state so a lost state's total is known.

A lost state (damaged, rolled back, its key gone) takes its ledger with it,
and the new state's noise is independent of the old one: the loss about
everything the device sent is the old total plus the new one (independent
releases compose additively). So after every write of the state, and
before any report that write charges reaches the queue file, the client
writes ``<state_path>.spent``: per metric the ledger's total (integer
micro-epsilons, the lost-state prior included) and, for a renewing
budget, what each recent period was charged (those the record keeps,
:class:`~client_sdk.ledger.PeriodTotals`, with the bound on the periods it
dropped; the latest one also in the fields an earlier version reads); the state's
generation; and, once a loss was not covered by a mark, the date since
which the total is unknown. The file is authenticated (HMAC-SHA256 under a
key derived from the state's key): a changed byte makes it not count.

On a reset (``on_corrupt="reset"``) a mark that verifies and is at least as
new as the recorded generation (``<key_path>.gen`` or the keyring) is
copied into the lost-state record, and the new ledger continues from its
totals: exact, neither more nor less than what was spent. Where no such
mark survives, the record says so: the ledger's ``spent`` is infinite and
``total_unknown_since`` gives the date of the loss, so no printed total is
ever below the truth; the period of the loss is charged its whole ceiling.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from protocol.accounting import from_micro, round_up, to_micro
from protocol.crypto import write_private_file

from .ledger import PERIODS_KEPT, Ceiling, MetricRecord, period_of

MARK_VERSION = 1
_MAC_LABEL = b"onesided/high-water/v1"


@dataclass(frozen=True, kw_only=True)
class MetricMark:
    """One metric's spend when the mark was written.

    Attributes:
        total: the lifetime total in micro-epsilons (``None``: infinite).
        period: the renewing budget's period the next fields are for (``None``: a lifetime ceiling).
        period_start: the latest period charged; ``period_micro`` its charge (``None``: infinite).
        periods: the charge of each recent period by its start (``None`` in a value: infinite; ``None``:
            a mark written by an earlier version, which kept the latest period's only).
        dropped_through, dropped_micro: a period at or before ``dropped_through`` not in ``periods``
            was charged at most ``dropped_micro`` (``None``: infinite).
    """

    total: int | None
    period: int | None = None
    period_start: int = 0
    period_micro: int | None = 0
    periods: Mapping[int, int | None] | None = None
    dropped_through: int | None = None
    dropped_micro: int | None = 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"total": self.total, "period": self.period, "period_start": self.period_start,
                               "period_micro": self.period_micro}
        if self.periods is not None:
            out.update(periods={str(k): v for k, v in sorted(self.periods.items())},
                       dropped_through=self.dropped_through, dropped_micro=self.dropped_micro)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetricMark:
        def count(value: Any) -> int | None:
            return None if value is None else int(value)

        periods = data.get("periods")
        return cls(total=count(data["total"]), period=count(data["period"]), period_start=int(data["period_start"]),
                   period_micro=count(data["period_micro"]),
                   periods=None if periods is None else {int(k): count(v) for k, v in periods.items()},
                   dropped_through=count(data.get("dropped_through")), dropped_micro=count(data.get("dropped_micro", 0)))

    def charged(self, start: int) -> float:
        """What the period starting at ``start`` was charged (this mark's period; never below the truth)."""
        if self.periods is None:  # an earlier version's mark: the latest period only
            if start > self.period_start:
                return 0.0
            if start == self.period_start:
                return _float(self.period_micro)
            return _float(self.total)  # an earlier period: at most the lifetime total
        if start in self.periods:
            return _float(self.periods[start])
        if self.dropped_through is not None and start <= self.dropped_through:
            return _float(self.dropped_micro)
        return 0.0

    def bound(self) -> tuple[int | None, float]:
        """``(through, charge)``: a period at or before ``through`` not listed was charged at most ``charge``."""
        if self.periods is None:
            return self.period_start - (self.period or 0), _float(self.total)
        return self.dropped_through, _float(self.dropped_micro)

    def listed(self) -> set[int]:
        """The starts of the periods whose charge this mark lists."""
        return {self.period_start} if self.periods is None else set(self.periods)


def _float(micro: int | None) -> float:
    return math.inf if micro is None else from_micro(micro)


@dataclass(frozen=True, kw_only=True)
class HighWaterMark:
    """The totals of every metric of one saved state (``unknown_since``: an ISO date, a loss no mark covered)."""

    generation: int
    metrics: Mapping[str, MetricMark]
    unknown_since: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"version": MARK_VERSION, "generation": self.generation, "unknown_since": self.unknown_since,
                "metrics": {name: mark.to_dict() for name, mark in sorted(self.metrics.items())}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HighWaterMark:
        if data.get("version") != MARK_VERSION:
            raise ValueError(f"high-water mark version {data.get('version')!r} is not {MARK_VERSION}")
        unknown = data["unknown_since"]
        return cls(generation=int(data["generation"]), unknown_since=None if unknown is None else str(unknown),
                   metrics={str(k): MetricMark.from_dict(v) for k, v in data["metrics"].items()})


def _mac(key: bytes, body: bytes) -> str:
    return hmac.new(hashlib.sha256(_MAC_LABEL + key).digest(), body, hashlib.sha256).hexdigest()


class HighWaterFile:
    """``<state_path>.spent``: the latest mark, authenticated with the state's key."""

    def __init__(self, state_path: Path) -> None:
        self.path = Path(f"{state_path}.spent")

    def write(self, key: bytes, mark: HighWaterMark) -> None:
        """Replace the mark atomically (raises ``OSError`` as the state's own write does)."""
        body = json.dumps(mark.to_dict(), separators=(",", ":"), sort_keys=True)
        text = json.dumps({"mark": body, "mac": _mac(key, body.encode("utf-8"))}, separators=(",", ":"))
        write_private_file(self.path, text.encode("utf-8"))

    def read(self, key: bytes | None, recorded: int | None) -> HighWaterMark | None:
        """The mark, if it verifies under ``key`` and is not older than the ``recorded`` generation."""
        if key is None:
            return None
        try:
            outer = json.loads(self.path.read_bytes())
            body = str(outer["mark"])
            if not hmac.compare_digest(str(outer["mac"]), _mac(key, body.encode("utf-8"))):
                return None
            mark = HighWaterMark.from_dict(json.loads(body))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return mark if recorded is None or mark.generation >= recorded else None


def iso_date(when: float) -> str:
    """A unix time as an ISO 8601 UTC instant (to the second)."""
    return datetime.fromtimestamp(when, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def lost_record(at: float, reason: str, ceiling: Ceiling, mark: HighWaterMark | None) -> dict[str, Any]:
    """The lost-state record a reset keeps: the mark that survived, or ``None`` (the total is unknown since ``at``)."""
    return {"at": at, "reason": reason, "ceiling": ceiling.to_dict(),
            "mark": None if mark is None else mark.to_dict()}


def _last_mark(lost: Sequence[Mapping[str, Any]]) -> HighWaterMark | None:
    """The mark of the latest loss (each mark already holds every earlier loss's total)."""
    data = lost[-1].get("mark")
    return None if data is None else HighWaterMark.from_dict(data)


def unknown_since(lost: Sequence[Mapping[str, Any]]) -> str | None:
    """Since when the lifetime total is unknown (``None``: it is known exactly)."""
    if not lost:
        return None
    mark = _last_mark(lost)
    return iso_date(float(lost[-1]["at"])) if mark is None else mark.unknown_since


def lifetime_prior(lost: Sequence[Mapping[str, Any]], metric: str) -> float:
    """What the lost states spent on ``metric`` over their lifetime (``inf``: unknown)."""
    if not lost:
        return 0.0
    mark = _last_mark(lost)
    if mark is None or mark.unknown_since is not None:
        return math.inf
    entry = mark.metrics.get(metric)
    if entry is None:
        return 0.0
    return math.inf if entry.total is None else from_micro(entry.total)


def period_prior(lost: Sequence[Mapping[str, Any]], metric: str, start: int, period: int) -> float:
    """What the lost states charged the period starting at ``start`` (a renewing budget of ``period`` seconds).

    From a surviving mark kept under the same period: exact for a period it lists, its bound for
    one before its dropped ones (an earlier version's mark: its lifetime total for a period before
    its latest, which it did not list), 0 for any other (never charged); otherwise the whole
    ceiling in force at the loss, charged to the period the loss was found in
    (the lost state never passed it), or the lost lifetime total when the mark
    was kept under another policy (a bound on any one period's charge).
    """
    return _period_priors(lost, metric, period)(start)


def _period_priors(lost: Sequence[Mapping[str, Any]], metric: str, period: int) -> Callable[[int], float]:
    """:func:`period_prior` for every period of ``metric``: the lost states' mark read once (a state's mark
    lists up to PERIODS_KEPT periods, each asked at every save)."""
    if not lost:
        return _nothing
    last = lost[-1]
    mark = _last_mark(lost)
    entry = None if mark is None else mark.metrics.get(metric)
    if mark is not None and entry is None:
        return _nothing
    if entry is not None and entry.period == period:
        return entry.charged
    at = period_of(float(last["at"]), period)
    if entry is not None and entry.period != period and entry.total is not None:
        total = from_micro(entry.total)
        return lambda start: total if start == at else 0.0
    ceiling = Ceiling.from_dict(last["ceiling"]).for_metric(metric)
    return lambda start: ceiling if start == at else 0.0


def _nothing(start: int) -> float:
    return 0.0


def _micro(value: float) -> int | None:
    return None if math.isinf(value) else to_micro(round_up(value))


def _prior_periods(lost: Sequence[Mapping[str, Any]], name: str, period: int) -> tuple[set[int], int | None, float]:
    """``(listed, through, bound)`` of the lost states' charges to ``period``'s periods: the periods
    :func:`period_prior` may answer more than 0 for are those ``listed`` and those at or before
    ``through`` (each at most ``bound``)."""
    if not lost:
        return set(), None, 0.0
    mark = _last_mark(lost)
    entry = None if mark is None else mark.metrics.get(name)
    if mark is not None and entry is None:
        return set(), None, 0.0
    if entry is not None and entry.period == period:
        return (entry.listed(), *entry.bound())
    return {period_of(float(lost[-1]["at"]), period)}, None, 0.0  # the loss's period only


def _metric_mark(record: MetricRecord, lost: Sequence[Mapping[str, Any]], name: str) -> MetricMark:
    """A metric's mark from its record (a renewing budget: each period it or a lost state charged that is
    kept, and a bound on the others), the lost states' charges included."""
    params = record.metric_params()
    spent, _ = record.spent(params)
    total = _micro(lifetime_prior(lost, name) + spent)
    if record.period is None:
        return MetricMark(total=total)
    period, kept = record.period, record.periods
    listed, through, bound = _prior_periods(lost, name, period)
    starts = listed | set(kept.totals)
    if record.current is not None:
        starts.add(period_of(record.current.window, period))
    periods: dict[int, int | None] = {}
    current = None if record.current is None else period_of(record.current.window, period)
    prior_of = _period_priors(lost, name, period)
    for start in starts:  # up to PERIODS_KEPT of them at every save: the closed ones are their kept totals
        micro = record.spent_in(params, start) if start == current else kept.charged(start)
        prior = prior_of(start)
        if micro < 0:
            periods[start] = None
        elif prior == 0.0:  # _micro(from_micro(micro)) is micro itself: no rounding to do
            periods[start] = micro
        else:
            periods[start] = _micro(prior + from_micro(micro))
    if kept.dropped_through is not None:
        through = kept.dropped_through if through is None else max(through, kept.dropped_through)
    dropped: float = bound + from_micro(kept.dropped_micro)
    for start in sorted(periods)[: max(0, len(periods) - PERIODS_KEPT)]:  # bounded as a record's are
        held = periods.pop(start)
        through = start if through is None else max(through, start)
        dropped = max(dropped, _float(held))
    latest = max(periods, default=0)
    return MetricMark(total=total, period=period, period_start=latest, period_micro=periods.get(latest, 0),
                      periods=periods, dropped_through=through, dropped_micro=_micro(dropped))


def mark_of(metrics: Mapping[str, MetricRecord], lost: Sequence[Mapping[str, Any]], generation: int) -> HighWaterMark:
    """The mark of a state: its records' totals, and the carried totals of metrics only a lost state used."""
    last = _last_mark(lost) if lost else None
    carried = {} if last is None else dict(last.metrics)
    marks = {**carried, **{name: _metric_mark(record, lost, name) for name, record in metrics.items()}}
    return HighWaterMark(generation=generation, metrics=marks, unknown_since=unknown_since(lost))


__all__ = [
    "HighWaterFile",
    "HighWaterMark",
    "MetricMark",
    "iso_date",
    "lifetime_prior",
    "lost_record",
    "mark_of",
    "period_prior",
    "unknown_since",
]
