"""The privacy ledger: what each metric has released and what it cost (docs/privacy.md).

Memoized noise is keyed per (metric, window, value) (:mod:`client_sdk.memo`),
and a metric takes at most one value per window: the first report of a
window fixes its value, a round re-sends that value relaxed, and a later
report of another value in the same window is refused. So a client's
history is a sequence of independent window releases, each a chain of
reports of one value at the levels ``levels[first..last]``, and the cost is:

* one window: :meth:`protocol.chain.WindowChain.cost` of ``levels[first..last]``: without IRR the
  exact epsilon of the released bit chain (``bits_changed *
  sequence_bit_epsilon``); with IRR the smaller of that and the epsilon of
  the window's reports themselves (RAPPOR's ``eps_1`` for one report; for a
  round's re-sends proven by an enclosure,
  :func:`protocol.irr_relaxation.enclosed_report_chain_charge` of the IRR
  levels used, each report relaxed (docs/irr-relaxation.md) or fresh as it
  was sent);
* the whole history: the sum over windows (independent releases compose
  additively, and the sum is attained when every window differs).

Every cost depends only on the levels and on which windows reported, never
on the values, so every refusal the aggregator could notice (a report not
sent, a round not joined) is a function of non-sensitive state. Charges are
kept in integer micro-epsilons (:func:`protocol.accounting.to_micro`).
Every report and relaxation is checked against the ceiling *before*
anything is sent; relaxing never lowers a level (:meth:`protocol.chain.RoundStep.check`).
``window_cost``, ``with_irr`` and ``Irr`` stay importable from here for existing callers;
the charge is :mod:`protocol.chain`'s.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.accounting import from_micro, round_up, to_micro
from protocol.chain import Irr, IrrPair, WindowChain, window_cost
from protocol.errors import BudgetExceeded, ParameterError
from protocol.params import MetricParams
from protocol.rounding import epsilon_text
from protocol.validation import check_int, check_number
from protocol.wire import window_start

from .status import iso_utc

DEFAULT_KEY = "*"


def _check_epsilon(name: str, value: Any) -> float:
    """A ceiling the app sets: > 0 (a ceiling of 0 would refuse every report; leave the metric out instead)."""
    return check_number(name, value, positive=True, finite=False)


@dataclass(frozen=True, kw_only=True)
class Ceiling:
    """The app's or user's privacy ceiling per metric.

    Attributes:
        default: the ceiling of every metric not listed (``None``: unlisted
            metrics may not report at all).
        per_metric: ceilings of named metrics.
    """

    default: float | None
    per_metric: Mapping[str, float] = field(default_factory=dict)
    period: int | None = None

    def __post_init__(self) -> None:
        if self.period is not None:
            check_int("budget_period", self.period, low=1)
        # >= 0 here: a ceiling kept in an older state (lost-state records) may be 0; what an app sets
        # goes through of(), which wants > 0.
        if self.default is not None:
            check_number("max_epsilon", self.default, nonnegative=True, finite=False)
        for name, value in self.per_metric.items():
            check_number(f"max_epsilon[{name!r}]", value, nonnegative=True, finite=False)

    @classmethod
    def of(cls, max_epsilon: float | Mapping[str, float], period: str | int | None = None) -> Ceiling:
        """A number (every metric) or a mapping (``"*"`` is the default); per ``period`` when one is given."""
        seconds = period_seconds(period)
        if isinstance(max_epsilon, Mapping):
            named = {k: _check_epsilon(f"max_epsilon[{k!r}]", v) for k, v in max_epsilon.items() if k != DEFAULT_KEY}
            default = max_epsilon.get(DEFAULT_KEY)
            return cls(default=None if default is None else _check_epsilon("max_epsilon", default), per_metric=named,
                       period=seconds)
        return cls(default=_check_epsilon("max_epsilon", max_epsilon), period=seconds)

    def for_metric(self, name: str) -> float:
        if name in self.per_metric:
            return self.per_metric[name]
        return 0.0 if self.default is None else self.default

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: _json_float(v) for k, v in self.per_metric.items()}
        if self.default is not None:
            out[DEFAULT_KEY] = _json_float(self.default)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ceiling:
        """A ceiling as :meth:`to_dict` wrote it (kept in the state; checked ``>= 0`` only)."""
        values = {k: _float_of_json(v) for k, v in data.items()}
        default = values.pop(DEFAULT_KEY, None)
        return cls(default=default, per_metric=values)


# A renewing budget's periods, aligned to the Unix epoch (UTC midnight; weeks start on Thursdays, the
# epoch's weekday); a "month" is 30 days, not a calendar month (every period has the same length).
PERIODS = {"day": 86_400, "week": 7 * 86_400, "month": 30 * 86_400}


def period_seconds(period: str | int | None) -> int | None:
    """``"day"``, ``"week"``, ``"month"`` or a whole number of seconds (``None``: a lifetime ceiling)."""
    if period is None:
        return None
    if isinstance(period, str):
        if period not in PERIODS:
            raise ParameterError("budget_period", f"must be one of {sorted(PERIODS)} or seconds, got {period!r}")
        return PERIODS[period]
    return check_int("budget_period", period, low=1)


def period_of(when: float, period: int) -> int:
    """The start of the period holding the instant ``when`` (a window is charged to the period it starts in)."""
    return int(when // period) * period


def _json_float(value: float) -> float | None:
    """JSON has no infinity: ``inf`` is written ``null``."""
    return None if math.isinf(value) else value


def _float_of_json(value: float | None) -> float:
    return math.inf if value is None else float(value)


def with_irr(params: MetricParams, irr: IrrPair | None) -> MetricParams:
    """``params`` with the IRR ``irr`` (``None``: as they are): what a round that relaxed the IRR reports with."""
    return params.with_irr(irr)


# A record keeps the totals of at most PERIODS_KEPT periods, and none of a period that ended more than
# PERIODS_HORIZON before the period of a window it charges (the aggregator refuses windows older than its retention,
# 90 days by default, as expired); the totals it drops leave a bound (PeriodTotals.dropped_micro).
PERIODS_KEPT = 64
PERIODS_HORIZON = 92 * 86_400


@dataclass(kw_only=True, slots=True)
class PeriodTotals:
    """What the closed windows of a renewing budget charged each recent period (micro-epsilons).

    A window is charged to the period it starts in. The totals of the recent
    periods are kept, so a window whose period lies before the latest one
    charged (a clock set back, or a clock that was ahead and is corrected by a
    server answer) is checked against its own period's exact total.

    Attributes:
        totals: the exact charge of each period kept, by the period's start.
        dropped_through: the latest start of a period whose total was dropped (``None``: none was).
        dropped_micro: the largest total dropped: what a period at or before ``dropped_through`` that
            is not kept is taken to have been charged (it was dropped, or charged nothing).
    """

    totals: dict[int, int] = field(default_factory=dict)
    dropped_through: int | None = None
    dropped_micro: int = 0

    def charged(self, start: int) -> int:
        """What the period starting at ``start`` was charged (never less than the truth)."""
        held = self.totals.get(start)
        if held is not None:
            return held
        if self.dropped_through is not None and start <= self.dropped_through:
            return self.dropped_micro
        return 0

    def add(self, start: int, micro: int, period: int) -> None:
        """Charge ``micro`` to the period starting at ``start``, then drop what is past the bounds."""
        self.totals[start] = self.charged(start) + micro
        for old in sorted(self.totals):  # the horizon from this window's period: a far one (a clock
            # that was ahead) never drops those of the present it is corrected back to
            if len(self.totals) <= PERIODS_KEPT and old + period > start - PERIODS_HORIZON:
                break
            self.drop(old)

    def drop(self, start: int) -> None:
        """Forget the total of one period; it stays covered by ``dropped_micro``."""
        micro = self.totals.pop(start)
        self.dropped_through = start if self.dropped_through is None else max(self.dropped_through, start)
        self.dropped_micro = max(self.dropped_micro, micro)

    def latest(self) -> int | None:
        """The start of the latest period kept (``None``: none)."""
        return max(self.totals) if self.totals else None

    def to_dict(self) -> dict[str, Any]:
        return {"totals": {str(k): v for k, v in sorted(self.totals.items())},
                "dropped_through": self.dropped_through, "dropped_micro": self.dropped_micro}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PeriodTotals:
        through = data.get("dropped_through")
        return cls(totals={int(k): int(v) for k, v in data["totals"].items()},
                   dropped_through=None if through is None else int(through),
                   dropped_micro=int(data.get("dropped_micro", 0)))

    @classmethod
    def of_latest(cls, start: int, micro: int, closed_micro: int, period: int) -> PeriodTotals:
        """The totals a state written before they were kept holds: the latest period's ``micro`` only;
        any earlier period is taken to have been charged the rest of the closed windows' sum."""
        earlier = max(0, closed_micro - micro)
        return cls(totals={start: micro}, dropped_through=start - period if earlier else None,
                   dropped_micro=earlier)


@dataclass(kw_only=True, slots=True)
class WindowRelease:
    """The one value a metric released in one window (kept in the encrypted state only).

    Attributes:
        window: the window's start (seconds).
        value: the canonical value (base64url), re-sent relaxed by a round in the same window; a
            repeat in the window is the same value when its canonical value is this one.
        first_step, last_step: the steps of the metric's level chain released in the window.
        report_id: the latest report of the window (a repeat of the same value returns it).
        sent: the bits of the latest report of the window (hex, packed as in the payload),
            kept for a metric with an IRR: a round that relaxes the IRR draws its re-send from them
            (``None``: not kept, e.g. a state older than the field; the re-send is then a fresh IRR).
        relaxed: the steps of the window whose report was drawn from the one before it by the
            relaxed IRR step (the others drew a fresh IRR); what the window's cost depends on.
    """

    window: int
    value: str
    first_step: int
    last_step: int
    report_id: str
    sent: str | None = None
    relaxed: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "window": self.window, "value": self.value,
            "first_step": self.first_step, "last_step": self.last_step, "report_id": self.report_id,
        }
        if self.sent is not None:
            out["sent"] = self.sent
        if self.relaxed:
            out["relaxed"] = list(self.relaxed)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WindowRelease:
        sent = data.get("sent")
        return cls(
            window=int(data["window"]), value=str(data["value"]),  # a "fingerprint" of older states is not used
            first_step=int(data["first_step"]), last_step=int(data["last_step"]),
            report_id=str(data["report_id"]), sent=None if sent is None else str(sent),
            relaxed=[int(s) for s in data.get("relaxed", ())],
        )


# Parsed parameters by the config's digest (memory only): a record's parameters are read again at every
# ledger line, high-water mark and round, and a direct metric's domain makes each parse cost.
_PARAMS: dict[str, tuple[dict[str, Any], MetricParams]] = {}
_PARAMS_MAX = 64


def params_of(digest: str, params: dict[str, Any]) -> MetricParams:
    """``MetricParams.from_dict(params)``, remembered by ``digest``: a hit needs the same dict (equal
    values), so two records that claim one digest for different parameters never share a parse."""
    held = _PARAMS.get(digest)
    if held is not None and held[0] == params:
        return held[1]
    parsed = MetricParams.from_dict(params)
    if len(_PARAMS) >= _PARAMS_MAX:
        _PARAMS.clear()
    _PARAMS[digest] = (parsed.to_dict(), parsed)
    return parsed


@dataclass(kw_only=True)
class MetricRecord:
    """What the client remembers about one metric (kept in the encrypted state).

    Attributes:
        params: the metric's parameters (``MetricParams.to_dict``) when the record was made.
        digest: their digest, as the signed config gave it.
        cohort: chosen once, uniformly, and kept.
        levels: the levels of the metric, never decreasing (the first is the
            metric's; each round appends one; a round that relaxes only the IRR repeats the level).
        rounds: the round id that set each level (0 for the first).
        irrs: the IRR ``(irr_p, irr_q)`` reports are made with at each level (``None``: the metric's
            own); a round that relaxes the IRR sets it, later rounds keep it (older states: all ``None``).
        current: the latest window's release (``None`` before the first report).
        closed_micro: the summed cost of the earlier windows, in micro-epsilons.
        closed_windows: how many earlier windows released.
        closed_exact: False when one of them was charged a bound.
        period: the renewing budget's period (seconds) the record's period sums are kept for
            (``None``: a lifetime ceiling).
        periods: what the closed windows charged each recent period (:class:`PeriodTotals`; a
            state written before it was kept holds the latest period's only, and a bound for the others).
        first_window: the start of the first window released (``None``: none, or an older state).
    """

    params: dict[str, Any]
    digest: str
    cohort: int
    levels: list[float]
    rounds: list[int]
    irrs: list[Irr | None] = field(default_factory=list)
    current: WindowRelease | None = None
    closed_micro: int = 0
    closed_windows: int = 0
    closed_exact: bool = True
    period: int | None = None
    periods: PeriodTotals = field(default_factory=PeriodTotals)
    first_window: int | None = None
    # window_cost by chain of levels, with the parameters object it was computed for (memory only): a report
    # asks for the same one or two costs every time, and the shared cache compares whole parameter objects.
    _costs: dict[WindowChain, tuple[MetricParams, tuple[float, bool], int]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.irrs) < len(self.levels):  # an older state: every level at the metric's own IRR
            self.irrs.extend([None] * (len(self.levels) - len(self.irrs)))

    def metric_params(self) -> MetricParams:
        """The record's parameters, parsed once per config digest in this process (:func:`params_of`)."""
        return params_of(self.digest, self.params)

    @property
    def irr(self) -> Irr | None:
        """The IRR reports are made with now (``None``: the metric's own)."""
        return self.irrs[-1]

    def current_irr(self, params: MetricParams) -> Irr:
        """``(irr_p, irr_q)`` reports are made with now (``(None, None)``: no IRR)."""
        return Irr.held(params, self.irrs[-1])

    def window_cost(self, params: MetricParams, chain: WindowChain) -> tuple[float, bool]:
        """``chain.cost(params)``, remembered per chain for the last ``params`` object asked about."""
        return self._cost(params, chain)[1]

    def new_window_chain(self) -> WindowChain:
        """The chain of a report in a new window: one report at the current level and IRR."""
        return tuple.__new__(WindowChain, ((self.levels[-1],), (self.irrs[-1],), ()))  # report()'s path: no Python __new__

    def _cost(self, params: MetricParams, chain: WindowChain) -> tuple[MetricParams, tuple[float, bool], int]:
        """``(params, window_cost, its micro-epsilons)`` (``-1`` micro for an infinite cost), remembered."""
        held = self._costs.get(chain)
        if held is None or held[0] is not params:
            cost = chain.cost(params)
            held = self._costs[chain] = (params, cost, -1 if math.isinf(cost[0]) else to_micro(cost[0]))
        return held
    @property
    def step(self) -> int:
        return len(self.levels) - 1

    @property
    def round(self) -> int:
        return self.rounds[-1]

    @property
    def windows(self) -> int:
        """Windows released so far."""
        return self.closed_windows + (self.current is not None)

    def window_chain(self, last_step: int | None = None) -> WindowChain:
        """The current window's ``(levels, irrs, relaxed)`` (through ``last_step``): what its cost depends on."""
        current = self.current
        if current is None:
            return WindowChain((), (), ())
        first, last = current.first_step, current.last_step if last_step is None else last_step
        if first == last:  # one report in the window (no round since): report()'s path
            return tuple.__new__(WindowChain, ((self.levels[first],), (self.irrs[first],), ()))
        held = current.relaxed
        relaxed = tuple(step in held for step in range(first + 1, last + 1)) if held else (False,) * (last - first)
        return tuple.__new__(WindowChain, (tuple(self.levels[first : last + 1]), tuple(self.irrs[first : last + 1]), relaxed))

    def spent(self, params: MetricParams, last_step: int | None = None) -> tuple[float, bool]:
        """The metric's total (the current window charged through ``last_step``)."""
        if not params.local_mechanism.randomized and self.windows:
            return math.inf, True
        if self.current is None:
            return from_micro(self.closed_micro), self.closed_exact
        _, (_, exact), micro = self._cost(params, self.window_chain(last_step))
        return from_micro(self.closed_micro + micro), exact and self.closed_exact

    def settle(self, params: MetricParams, now: float) -> bool:
        """Close the latest window's release once its window has passed (it can never be re-sent);
        ``True`` when the record changed."""
        current = self.current
        if current is None or current.window >= window_start(now, params.time_precision):
            return False
        self.close_window(params)
        return True

    def close_window(self, params: MetricParams) -> None:
        """Fold the current window into the closed sum (a report in a later window starts)."""
        if self.current is None:
            return
        _, (_, exact), micro = self._cost(params, self.window_chain())
        if micro < 0:
            self.closed_micro, self.closed_exact = 0, True  # trusted: spent() is inf once anything left
        else:
            self.closed_micro += micro
            self.closed_exact = self.closed_exact and exact
            if self.period is not None:  # to its own period, whose total is kept (or bounded)
                self.periods.add(period_of(self.current.window, self.period), micro, self.period)
        self.closed_windows += 1
        self.current = None

    def follow_period(self, period: int | None, now: float) -> bool:
        """Keep the period sums for ``period``; ``True`` when the record changed.

        A record kept under another period (or a lifetime ceiling) does not
        know what its closed windows cost per new period, so all of them are
        charged to the current one: the next periods start clean, and no
        period is ever charged less than it released.
        """
        if period == self.period:
            return False
        self.period = period
        self.periods = PeriodTotals()
        if period is not None:  # every closed window to the current period; any earlier one bounded by their sum
            start = period_of(now, period)
            self.periods = PeriodTotals(totals={start: self.closed_micro}, dropped_micro=self.closed_micro,
                                        dropped_through=start - period if self.closed_micro else None)
        return True

    def spent_in(self, params: MetricParams, start: int, last_step: int | None = None) -> int:
        """Micro-epsilons charged to the period starting at ``start`` (a renewing budget), the current
        window through ``last_step``. ``-1``: infinite (trusted). A period whose total was dropped
        answers the bound :class:`PeriodTotals` keeps (never less than the truth)."""
        if self.period is None:
            return 0
        closed = self.periods.charged(start)
        current = self.current
        if current is None or period_of(current.window, self.period) != start:
            return closed
        _, _, micro = self._cost(params, self.window_chain(last_step))
        return -1 if micro < 0 else closed + micro

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "digest": self.digest,
            "cohort": self.cohort,
            "levels": [_json_float(v) for v in self.levels],
            "rounds": list(self.rounds),
            **({"irrs": [None if i is None else list(i) for i in self.irrs]} if any(self.irrs) else {}),
            "current": None if self.current is None else self.current.to_dict(),
            "closed_micro": self.closed_micro,
            "closed_windows": self.closed_windows,
            "closed_exact": self.closed_exact,
            "period": self.period,
            **self._period_fields(),
            "first_window": self.first_window,
        }

    def _period_fields(self) -> dict[str, Any]:
        """The period totals; with the latest one also as ``period_start``/``period_micro``, the only
        totals a state written by an earlier version held (that version reads them)."""
        latest = self.periods.latest()
        if latest is None:
            return {"period_start": 0, "period_micro": 0}
        return {"period_start": latest, "period_micro": self.periods.totals[latest],
                "periods": self.periods.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetricRecord:
        current = data.get("current")
        return cls(
            params=dict(data["params"]),
            digest=str(data["digest"]),
            cohort=int(data["cohort"]),
            levels=[_float_of_json(v) for v in data["levels"]],
            rounds=[int(r) for r in data["rounds"]],
            irrs=[None if i is None else Irr.of(i) for i in data.get("irrs", ())],
            current=None if current is None else WindowRelease.from_dict(current),
            closed_micro=int(data["closed_micro"]),
            closed_windows=int(data["closed_windows"]),
            closed_exact=bool(data["closed_exact"]),
            period=None if data.get("period") is None else int(data["period"]),
            periods=_periods_of(data),
            first_window=None if data.get("first_window") is None else int(data["first_window"]),
        )


def _periods_of(data: Mapping[str, Any]) -> PeriodTotals:
    """A record's period totals; an earlier version's state: its latest period's (:meth:`PeriodTotals.of_latest`)."""
    if "periods" in data:
        return PeriodTotals.from_dict(data["periods"])
    period, micro = data.get("period"), int(data.get("period_micro", 0))
    if period is None or (micro == 0 and int(data["closed_micro"]) == 0):
        return PeriodTotals()
    return PeriodTotals.of_latest(int(data.get("period_start", 0)), micro, int(data["closed_micro"]), int(period))


def _remaining(ceiling: float, spent: float) -> float:
    if math.isinf(ceiling):
        return math.inf
    return max(0.0, ceiling - spent)


def _checked(total: float, before: float, cost: float, ceiling: float, what: Callable[[], str]) -> float:
    """``total`` if within ``ceiling``; the refusal's text is made only when refusing."""
    if total > ceiling:
        raise BudgetExceeded(cost, _remaining(ceiling, before), what())
    return total


def _period_before(record: MetricRecord, params: MetricParams, start: int, prior: float) -> float:
    """What the period starting at ``start`` was charged so far, its lost-state ``prior`` included."""
    micro = record.spent_in(params, start)
    spent = math.inf if micro < 0 else from_micro(micro)
    return spent if prior == 0 else round_up(prior + spent)


def check_new_window(
    record: MetricRecord, params: MetricParams, ceiling: float, prior: float, *, window: int | None = None
) -> float:
    """Refuse a report in a new window whose cost would pass the ceiling.

    With a renewing budget (``record.period`` set) the ceiling is per
    period: what the period ``window`` starts in was charged so far (``prior``
    being that period's lost-state charge) plus the new window's cost must
    stay within it, also when that period lies before the latest one charged
    (:class:`PeriodTotals`). Otherwise the metric's lifetime total must.

    Returns:
        What the ceiling is compared with after the report: the metric's
        total (``prior`` included), or the period's total (renewing budget).

    Raises:
        BudgetExceeded: with ``requested`` the window's cost and ``remaining``
            what is left under the ceiling (in the period, for a renewing budget).
    """
    spent, _ = record.spent(params)
    _, (cost, _), _ = record._cost(params, record.new_window_chain())
    what = lambda: f"metric {params.name!r}: a report in a new window costs {epsilon_text(cost)}"  # noqa: E731
    if record.period is not None and window is not None:
        start = period_of(window, record.period)
        renews = start + record.period
        before = _period_before(record, params, start, prior)
        return _checked(round_up(before + cost), before, cost, ceiling,
                        lambda: f"{what()}; this period's budget is spent (it renews at {iso_utc(renews)})")
    # spent is a count of micro-epsilons as a double (from_micro) or inf, which round_up returns as they
    # are (it is idempotent on its own results): without a prior the first rounding changes nothing.
    before = spent if prior == 0 else round_up(prior + spent)
    return _checked(round_up(before + cost), before, cost, ceiling, what)


def check_relaxation(record: MetricRecord, params: MetricParams, after: WindowChain, ceiling: float,
                     prior: float) -> float:
    """Refuse a round's re-send that would pass the ceiling.

    A round re-sends the current window's value (one more report of its
    chain: ``after``, :meth:`~protocol.chain.WindowChain.after` of the
    window's chain and the round's step, checked by
    :meth:`~protocol.chain.RoundStep.check`); earlier windows are final and
    cost nothing more. With a renewing budget the extra cost is charged to
    the period the current window is charged to (``prior`` being that
    period's lost-state charge).

    Returns:
        The metric's total spent after the relaxation (``prior`` included), or the
        period's total (renewing budget).

    Raises:
        BudgetExceeded: ``requested`` is the extra cost.
    """
    spent, _ = record.spent(params)
    before = round_up(prior + spent)
    if record.current is None or math.isinf(spent):
        return before
    _, _, micro = record._cost(params, after)
    total = math.inf if micro < 0 else from_micro(record.closed_micro + micro)
    what = lambda: f"metric {params.name!r}: relaxing to level {after.levels[-1]:.6g}"  # noqa: E731
    if record.period is not None:
        start = period_of(record.current.window, record.period)
        extra = round_up(total - spent)
        in_period = _period_before(record, params, start, prior)
        return _checked(round_up(in_period + extra), in_period, extra, ceiling, what)
    return _checked(round_up(prior + total), before, round_up(total - spent), ceiling, what)


@dataclass(frozen=True, kw_only=True)
class LedgerEntry:
    """The ledger of one metric, as shown to the app or the user.

    Attributes:
        metric: the metric name.
        mode: ``symmetric``, ``asymmetric`` or ``trusted``.
        cohort: this client's cohort (``None`` before the metric's first use, when it is drawn).
        levels: the levels of the metric, oldest first; ``rounds`` the round of each.
        irrs: the IRR ``(irr_p, irr_q)`` of each level (``None``: the metric's own).
        windows: how many windows released a value.
        spent: the exact cost so far (rounded up), including ``prior``.
        exact: False when a symmetric chain is longer than the exact accounting
            supports and ``spent`` is a proven upper bound.
        prior: charged for lost state (the whole ceiling in force when the
            state was lost; see ``docs/client.md``).
        ceiling, remaining: the ceiling and what is left under it.
        epsilon_per_report: one transmission at the current level (RAPPOR's eps_1).
        epsilon_per_window: a new window at the current level (what the next window will cost).
        neighbour: the neighbour relation of one window, in words.
        protects, reveals: the policy in words.
        period: a renewing budget's period in seconds (``None``: ``ceiling`` is for the metric's
            lifetime). With one, ``ceiling`` and ``remaining`` are per period, and ``spent`` is still
            the total over every period so far.
        period_start, renews_at: the current period (the one holding the clock's instant).
        spent_this_period: what the current period was charged (its lost-state prior included).
        periods: the periods from the one of the first report through the current one.
        total_unknown_since: an ISO date: a lost state left no high-water mark then, and ``spent``
            (the lifetime total) is infinite, never below the truth (``None``: ``spent`` is known).
    """

    metric: str
    mode: str
    cohort: int | None
    levels: tuple[float, ...]
    rounds: tuple[int, ...]
    windows: int
    spent: float
    exact: bool
    prior: float
    ceiling: float
    remaining: float
    epsilon_per_report: float
    epsilon_per_window: float
    neighbour: str
    protects: str
    reveals: str
    period: int | None = None
    period_start: int | None = None
    renews_at: int | None = None
    spent_this_period: float | None = None
    periods: int | None = None
    irrs: tuple[Irr | None, ...] = ()
    total_unknown_since: str | None = None


def ledger_entry(
    record: MetricRecord, params: MetricParams, ceiling: float, prior: float, *,
    now: float | None = None, period_prior: float = 0.0,
) -> LedgerEntry:
    """The view of one metric's record (``now`` and ``period_prior``: the current period, for a renewing budget)."""
    spent, exact = record.spent(params)
    total = round_up(prior + spent)
    guarantee = with_irr(params, record.irr).guarantee(record.levels[-1])
    renewing: dict[str, Any] = {}
    if record.period is not None and now is not None:
        start = period_of(now, record.period)
        this_period = _period_before(record, params, start, period_prior)
        first = record.first_window
        renewing = {
            "period": record.period, "period_start": start, "renews_at": start + record.period,
            "spent_this_period": this_period, "remaining": _remaining(ceiling, this_period),
            # at least 1: a clock set before the first report's period counts that period only
            "periods": None if first is None else max(1, (start - period_of(first, record.period)) // record.period + 1),
        }
    return LedgerEntry(
        metric=params.name,
        mode=params.mode,
        cohort=record.cohort,
        levels=tuple(record.levels),
        rounds=tuple(record.rounds),
        irrs=tuple(record.irrs),
        windows=record.windows,
        spent=total,
        exact=exact,
        prior=prior,
        ceiling=ceiling,
        remaining=_remaining(ceiling, total),
        epsilon_per_report=guarantee.epsilon_per_report,
        epsilon_per_window=record.new_window_chain().cost(params)[0],
        neighbour=guarantee.neighbour,
        protects=guarantee.protects,
        reveals=guarantee.reveals,
    ) if not renewing else dataclasses.replace(
        ledger_entry(record, params, ceiling, prior), **renewing,
    )


def unused_entry(
    params: MetricParams, ceiling: float, prior: float, *, period: int | None = None, now: float | None = None,
    period_prior: float = 0.0,
) -> LedgerEntry:
    """The view of a metric of the config this client has not reported yet: nothing spent but ``prior``."""
    record = MetricRecord(params=params.to_dict(), digest=params.digest(), cohort=0, levels=[params.level],
                          rounds=[0], period=period)
    entry = ledger_entry(record, params, ceiling, prior, now=now, period_prior=period_prior)
    return dataclasses.replace(entry, cohort=None)


@dataclass(frozen=True, kw_only=True)
class Budget:
    """What is left of one metric's privacy budget (:meth:`client_sdk.Client.budget`).

    Attributes:
        metric: the metric.
        period: the renewing budget's period in seconds (``None``: a lifetime ceiling, never renewed).
        ceiling: the ceiling (per period, with a period).
        spent_this_period: charged to the current period (lifetime: the total).
        remaining: what is left now; ``renews_at`` (unix time) when it is whole again (``None``: never).
        total_spent: everything released so far, over all periods (never hidden: the loss about a
            user whose every window differs is up to this sum).
        periods: the periods from the first report's through the current one (``None``: unknown).
        epsilon_per_window: what the next window costs; ``windows_left`` how many fit in ``remaining``.
        total_unknown_since: as in :class:`LedgerEntry` (``total_spent`` is then infinite).
    """

    metric: str
    period: int | None
    ceiling: float
    spent_this_period: float
    remaining: float
    renews_at: int | None
    total_spent: float
    periods: int | None
    epsilon_per_window: float
    windows_left: float
    total_unknown_since: str | None = None

    @classmethod
    def of(cls, entry: LedgerEntry) -> Budget:
        per_window = entry.epsilon_per_window
        left = math.inf if math.isinf(entry.remaining) or per_window == 0 else float(
            to_micro(entry.remaining) // max(1, to_micro(per_window)))
        return cls(
            metric=entry.metric, period=entry.period, ceiling=entry.ceiling,
            spent_this_period=entry.spent if entry.spent_this_period is None else entry.spent_this_period,
            remaining=entry.remaining, renews_at=entry.renews_at, total_spent=entry.spent, periods=entry.periods,
            epsilon_per_window=per_window, windows_left=0.0 if math.isinf(per_window) else left,
            total_unknown_since=entry.total_unknown_since,
        )


@dataclass(frozen=True, kw_only=True)
class LedgerEvent:
    """Something the user may want to know about: a relaxation, a refusal, lost state, drops.

    Never holds a value, a bit or noise.
    """

    at: float
    kind: str
    metric: str | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "kind": self.kind, "metric": self.metric, "detail": self.detail}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LedgerEvent:
        return cls(at=float(data["at"]), kind=str(data["kind"]), metric=data.get("metric"), detail=str(data["detail"]))


@dataclass(frozen=True, kw_only=True)
class Ledger:
    """The whole ledger: one entry per metric ever used, the events, the reports dropped.

    ``ledger[metric]`` also answers for a metric of the verified config that
    this client has not reported yet (``unused``): ``spent`` is 0 (or the
    lost-state ``prior``), ``windows`` 0, ``cohort`` ``None``.
    """

    entries: tuple[LedgerEntry, ...]
    events: tuple[LedgerEvent, ...]
    dropped_reports: int
    queued_reports: int
    unused: tuple[LedgerEntry, ...] = ()

    def __getitem__(self, metric: str) -> LedgerEntry:
        for entry in itertools.chain(self.entries, self.unused):
            if entry.metric == metric:
                return entry
        raise KeyError(metric)

    def __contains__(self, metric: object) -> bool:
        return any(entry.metric == metric for entry in itertools.chain(self.entries, self.unused))


__all__ = [
    "PERIODS",
    "Budget",
    "Ceiling",
    "Irr",
    "Ledger",
    "LedgerEntry",
    "PeriodTotals",
    "LedgerEvent",
    "MetricRecord",
    "WindowRelease",
    "check_new_window",
    "check_relaxation",
    "ledger_entry",
    "period_of",
    "period_seconds",
    "unused_entry",
    "window_cost",
    "with_irr",
]
