"""The privacy ledger: what each metric has released and what it cost (docs/privacy.md).

Memoized noise is keyed per (metric, window, value) (:mod:`client_sdk.memo`),
and a metric takes at most one value per window: the first report of a
window fixes its value, a round re-sends that value relaxed, and a later
report of another value in the same window is refused. So a client's
history is a sequence of independent window releases, each a chain of
reports of one value at the levels ``levels[first..last]``, and the cost is:

* one window: ``window_cost(params, levels[first..last])``: without IRR the
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
anything is sent; relaxing never lowers a level.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from protocol.accounting import from_micro, round_up, sequence_bit_epsilon, to_micro
from protocol.errors import BudgetExceeded, ParameterError, TighteningRefused
from protocol.params import MetricParams
from protocol.validation import check_int, check_number

from .memo import distinct_levels
from .status import epsilon_text, iso_utc

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


Irr = tuple[float | None, float | None]
"""A metric's IRR ``(irr_p, irr_q)`` after a round that relaxed it."""

Chain = tuple[tuple[float, ...], tuple[Irr | None, ...], tuple[bool, ...]]
"""A window's ``(levels, irrs, relaxed)``: the arguments of :func:`window_cost`."""


def _json_float(value: float) -> float | None:
    """JSON has no infinity: ``inf`` is written ``null``."""
    return None if math.isinf(value) else value


def _float_of_json(value: float | None) -> float:
    return math.inf if value is None else float(value)


MAX_EXACT_REPORT_CHAIN = 8
"""The longest window chain whose reports' joint law is computed exactly (``2^n`` report sequences)."""


def with_irr(params: MetricParams, irr: Irr | None) -> MetricParams:
    """``params`` with the IRR ``irr`` (``None``: as they are): what a round that relaxed the IRR reports with."""
    return params.with_irr(irr)


def window_cost(
    params: MetricParams, levels: Sequence[float], irrs: Sequence[Irr | None] | None = None,
    relaxed: Sequence[bool] | None = None,
) -> tuple[float, bool]:
    """Cost of one window: a report of the window's value at each of ``levels`` (its noise chain).

    ``irrs``: the IRR of each report (``None``: the metric's own; default all
    ``None``); ``relaxed[i]``: report ``i + 1`` was drawn from report ``i``
    by the relaxed IRR step (default all fresh). A pure function of these,
    remembered (a report checks and closes a window on every call; the exact
    accounting behind it takes tens of microseconds). See
    :func:`_window_cost` for the derivation.
    """
    n = len(levels)
    irr_key = (None,) * n if irrs is None else tuple(None if i is None else (i[0], i[1]) for i in irrs)
    flags = (False,) * (n - 1) if relaxed is None else tuple(bool(f) for f in relaxed)
    if len(irr_key) != n or len(flags) != max(0, n - 1):
        raise ParameterError("irrs", f"need one IRR per level and one relaxed flag per level after the first ({n})")
    return _window_cost(params, tuple(levels), irr_key, flags)


@functools.lru_cache(maxsize=1024)
def _window_cost(
    params: MetricParams, levels: tuple[float, ...], irrs: tuple[Irr | None, ...], relaxed: tuple[bool, ...]
) -> tuple[float, bool]:
    """:func:`window_cost`, computed.

    Without IRR: ``bits_changed * sequence_bit_epsilon(mode, levels)`` (the
    released permanent bits; exact for the asymmetric mode, proven by an
    enclosure for symmetric chains; a level repeated by an IRR-only round
    releases the same bits again). With IRR the reports are a
    post-processing of those bits, so that bound holds, and the smaller of
    it and the epsilon of the window's reports themselves is charged; one
    report alone is exactly RAPPOR's ``eps_1``. The reports' epsilon is
    enclosed in outward-rounded double intervals and charged at the
    enclosure's upper end
    (:func:`~protocol.irr_relaxation.enclosed_report_chain_charge` of the
    IRR levels used, each report relaxed or fresh as sent; a chain of
    relaxed reports at one permanent level costs one report at the last IRR
    level). Where it is out of reach (more than
    :data:`MAX_EXACT_REPORT_CHAIN` reports, or no bound from doubles): with
    a relaxed report only the first bound is charged; with fresh IRRs only,
    the smaller of it and the composition of one ``eps_1`` per report where
    that composition is proven (:func:`_composition_proven`), marked not exact. ``bits_changed`` follows
    the metric's neighbour relation (``k``; ``2k`` for a symmetric
    categorical value replaced). Trusted: ``inf``.

    Returns:
        ``(epsilon rounded up, exact)``.
    """
    if not params.local_mechanism.randomized:
        return math.inf, True
    bits_changed = params.guarantee(levels[-1]).bits_changed
    eps, exact = sequence_bit_epsilon(params.mode, distinct_levels(levels))
    chain = bits_changed * to_micro(eps)
    steps = [with_irr(params, irr) for irr in irrs]
    if all(step.irr_q is None for step in steps):
        return from_micro(chain), exact
    if len(levels) == 1:
        return from_micro(min(chain, to_micro(steps[0].guarantee(levels[0]).epsilon_per_report))), True
    found = _relaxed_reports(params, steps, levels, relaxed)
    if found is not None:
        reports, reports_exact = found
        return (from_micro(chain), exact) if chain <= reports else (from_micro(reports), reports_exact)
    if any(relaxed) or not _composition_proven(params, levels):
        return from_micro(chain), False
    reports = sum(to_micro(step.guarantee(level).epsilon_per_report) for step, level in zip(steps, levels, strict=True))
    return (from_micro(chain), exact) if chain <= reports else (from_micro(reports), False)


def _composition_proven(params: MetricParams, levels: Sequence[float]) -> bool:
    """Whether ``sum_i eps_1(i)`` bounds a window of fresh-IRR reports (docs/privacy.md, section 8).

    Proven for one permanent level in both modes (every bit's loss is a concave function of the
    summed report log-ratios, hence subadditive) and for any asymmetric chain (the memoized bits
    along the exponential chain are associated); not for a symmetric chain of several levels,
    which is then charged the memoized bits' bound alone.
    """
    return params.mode == "asymmetric" or len(distinct_levels(levels)) == 1


def _relaxed_reports(
    params: MetricParams, steps: Sequence[MetricParams], levels: Sequence[float], relaxed: Sequence[bool]
) -> tuple[int, bool] | None:
    """``(micro-epsilons, exact)`` of the window's reports, or ``None`` where no proven bound is at hand.

    The charge is the upper end of the enclosure of the reports' epsilon
    (:func:`~protocol.irr_relaxation.enclosed_report_chain_charge`), exact
    when the enclosure is narrower than 1e-9. ``None`` (the caller then
    charges the longitudinal bound, not exact) past
    :data:`MAX_EXACT_REPORT_CHAIN` reports or
    :data:`~protocol.laplace_chain_rigorous.MAX_ENCLOSED_LAPLACE_LEVELS`
    distinct levels (the symmetric enclosure's limit), for a chain the
    report law refuses, and for an unbounded enclosure (the reports are a
    post-processing of the memoized bits, so that is a failure to bound
    them, never a real infinity) or any value that is not a finite
    nonnegative number: never a negative or NaN charge.
    """
    from protocol.irr_relaxation import enclosed_report_chain_charge
    from protocol.laplace_chain_rigorous import MAX_ENCLOSED_LAPLACE_LEVELS

    if len(levels) > MAX_EXACT_REPORT_CHAIN or len(distinct_levels(levels)) > MAX_ENCLOSED_LAPLACE_LEVELS:
        return None
    randomizers = [step.randomizer(level) for step, level in zip(steps, levels, strict=True)]
    try:
        eps, exact = enclosed_report_chain_charge(randomizers, value_kind=params.value_kind,
                                                  num_hashes=params.encoding.num_hashes, relaxed=list(relaxed))
    except ParameterError:  # a chain the law does not cover (e.g. a step kept from an older state)
        return None
    if not 0.0 <= eps < math.inf:
        return None
    return to_micro(eps), exact


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
        period_start, period_micro: the latest period holding a closed window, and what its closed
            windows cost (micro-epsilons).
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
    period_start: int = 0
    period_micro: int = 0
    first_window: int | None = None
    # window_cost by chain of levels, with the parameters object it was computed for (memory only): a report
    # asks for the same one or two costs every time, and the shared cache compares whole parameter objects.
    _costs: dict[Chain, tuple[MetricParams, tuple[float, bool], int]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.irrs) < len(self.levels):  # an older state: every level at the metric's own IRR
            self.irrs.extend([None] * (len(self.levels) - len(self.irrs)))

    def metric_params(self) -> MetricParams:
        return MetricParams.from_dict(self.params)

    @property
    def irr(self) -> Irr | None:
        """The IRR reports are made with now (``None``: the metric's own)."""
        return self.irrs[-1]

    def current_irr(self, params: MetricParams) -> Irr:
        """``(irr_p, irr_q)`` reports are made with now (``(None, None)``: no IRR)."""
        held = self.irrs[-1]
        return (params.irr_p, params.irr_q) if held is None else held

    def window_cost(self, params: MetricParams, chain: Chain) -> tuple[float, bool]:
        """:func:`window_cost` of a chain, remembered per chain for the last ``params`` object asked about."""
        return self._cost(params, chain)[1]

    def new_window_chain(self) -> Chain:
        """The chain of a report in a new window: one report at the current level and IRR."""
        return (self.levels[-1],), (self.irrs[-1],), ()

    def _cost(self, params: MetricParams, chain: Chain) -> tuple[MetricParams, tuple[float, bool], int]:
        """``(params, window_cost, its micro-epsilons)`` (``-1`` micro for an infinite cost), remembered."""
        held = self._costs.get(chain)
        if held is None or held[0] is not params:
            cost = window_cost(params, *chain)
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

    def window_chain(self, last_step: int | None = None) -> Chain:
        """The current window's ``(levels, irrs, relaxed)`` (through ``last_step``): what its cost depends on."""
        current = self.current
        if current is None:
            return (), (), ()
        first, last = current.first_step, current.last_step if last_step is None else last_step
        held = current.relaxed
        relaxed = tuple(step in held for step in range(first + 1, last + 1)) if held else (False,) * (last - first)
        return tuple(self.levels[first : last + 1]), tuple(self.irrs[first : last + 1]), relaxed

    def spent(self, params: MetricParams, last_step: int | None = None) -> tuple[float, bool]:
        """The metric's total (the current window charged through ``last_step``)."""
        if not params.local_mechanism.randomized and self.windows:
            return math.inf, True
        if self.current is None:
            return from_micro(self.closed_micro), self.closed_exact
        _, (_, exact), micro = self._cost(params, self.window_chain(last_step))
        return from_micro(self.closed_micro + micro), exact and self.closed_exact

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
            if self.period is not None:
                start = period_of(self.current.window, self.period)
                if start > self.period_start:
                    self.period_start, self.period_micro = start, micro
                else:  # the same period (or one before a change of period: kept, as an over-count)
                    self.period_micro += micro
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
        self.period_start = 0 if period is None else period_of(now, period)
        self.period_micro = self.closed_micro if period is not None else 0
        return True

    def spent_in(self, params: MetricParams, start: int, last_step: int | None = None) -> int:
        """Micro-epsilons charged to the period starting at ``start`` (a renewing budget), the current
        window through ``last_step``. ``-1``: infinite (trusted)."""
        closed = self.period_micro if start <= self.period_start else 0
        current = self.current
        if current is None or self.period is None or period_of(current.window, self.period) != start:
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
            "period_start": self.period_start,
            "period_micro": self.period_micro,
            "first_window": self.first_window,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetricRecord:
        current = data.get("current")
        return cls(
            params=dict(data["params"]),
            digest=str(data["digest"]),
            cohort=int(data["cohort"]),
            levels=[_float_of_json(v) for v in data["levels"]],
            rounds=[int(r) for r in data["rounds"]],
            irrs=[None if i is None else (None if i[0] is None else float(i[0]), float(i[1]))
                  for i in data.get("irrs", ())],
            current=None if current is None else WindowRelease.from_dict(current),
            closed_micro=int(data["closed_micro"]),
            closed_windows=int(data["closed_windows"]),
            closed_exact=bool(data["closed_exact"]),
            period=None if data.get("period") is None else int(data["period"]),
            period_start=int(data.get("period_start", 0)),
            period_micro=int(data.get("period_micro", 0)),
            first_window=None if data.get("first_window") is None else int(data["first_window"]),
        )


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
    period: what the period of ``window`` was charged (``prior`` being that
    period's lost-state charge) plus the new window's cost must stay within
    it. Otherwise the metric's lifetime total must.

    Returns:
        What the ceiling is compared with after the report: the metric's
        total (``prior`` included), or the period's total (renewing budget).

    Raises:
        BudgetExceeded: with ``requested`` the window's cost and ``remaining``
            what is left under the ceiling (in the period, for a renewing budget).
    """
    spent, _ = record.spent(params)
    cost, _ = record.window_cost(params, record.new_window_chain())
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


def check_relaxation(
    record: MetricRecord, params: MetricParams, level_to: float, ceiling: float, prior: float, *,
    irr: Irr | None = None, relaxed: bool = False,
) -> float:
    """Refuse a relaxation that lowers the level or would pass the ceiling.

    A round re-sends the current window's value at ``level_to`` (one more
    report of its chain; with the IRR ``irr`` when the round relaxes it,
    ``None``: kept; drawn from the window's last report when ``relaxed``);
    earlier windows are final and cost nothing more.
    With a renewing budget the extra cost is charged to the period of the
    current window (``prior`` being that period's lost-state charge).

    Returns:
        The metric's total spent after the relaxation (``prior`` included), or the
        period's total (renewing budget).

    Raises:
        TighteningRefused: ``level_to`` is below the current level.
        BudgetExceeded: ``requested`` is the extra cost.
    """
    current = record.levels[-1]
    if level_to < current:
        raise TighteningRefused(current=current, requested=level_to)
    spent, _ = record.spent(params)
    before = round_up(prior + spent)
    if record.current is None or math.isinf(spent):
        return before
    step = record.step + 1
    release = record.current
    extended = MetricRecord(
        params=record.params, digest=record.digest, cohort=record.cohort,
        levels=[*record.levels, level_to], rounds=[*record.rounds, 0],
        irrs=[*record.irrs, record.irrs[-1] if irr is None else irr],
        current=dataclasses.replace(release, relaxed=[*release.relaxed, step]) if relaxed else release,
        closed_micro=record.closed_micro, closed_windows=record.closed_windows,
        closed_exact=record.closed_exact, period=record.period, period_start=record.period_start,
        period_micro=record.period_micro,
    )
    after, _ = extended.spent(params, last_step=extended.step)
    what = lambda: f"metric {params.name!r}: relaxing to level {level_to:.6g}"  # noqa: E731
    if record.period is not None:
        start = period_of(record.current.window, record.period)
        extra = round_up(after - spent)
        in_period = _period_before(record, params, start, prior)
        return _checked(round_up(in_period + extra), in_period, extra, ceiling, what)
    total = round_up(prior + after)
    return _checked(total, before, round_up(after - spent), ceiling, what)


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
        epsilon_per_window=window_cost(params, *record.new_window_chain())[0],
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
    "Ledger",
    "LedgerEntry",
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
