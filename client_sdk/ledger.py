"""The privacy ledger: what each metric has released and what it cost (DESIGN 6).

Per metric the client keeps the levels its memoized noise went through and,
for each distinct value it ever reported (a keyed fingerprint, never the
value), the step at which that value was first released. The cost is then
exact:

* one value first released at step ``s`` and relaxed up to step ``n`` costs
  ``bits_changed * sequence_bit_epsilon(mode, levels[s..n])``
  (:mod:`protocol.accounting`: exact for the asymmetric mode and for up to
  three symmetric levels, a proven bound beyond, rounded up);
* different values have independent memoized noise, so a metric costs the
  sum over its distinct values; repeating a value is free (its permanent
  bits do not change; RAPPOR's ``eps_inf`` covers every transmission).

Every report of a new value and every relaxation is checked against the
ceiling *before* anything is sent; relaxing never lowers a level.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from protocol.accounting import round_up, sequence_bit_epsilon
from protocol.errors import BudgetExceeded, ParameterError, TighteningRefused
from protocol.params import MetricParams

DEFAULT_KEY = "*"


def _check_epsilon(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value) or value < 0:
        raise ParameterError(name, f"must be a number >= 0, got {value!r}")
    return float(value)


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

    def __post_init__(self) -> None:
        if self.default is not None:
            _check_epsilon("max_epsilon", self.default)
        for name, value in self.per_metric.items():
            _check_epsilon(f"max_epsilon[{name!r}]", value)

    @classmethod
    def of(cls, max_epsilon: float | Mapping[str, float]) -> Ceiling:
        """A number (every metric) or a mapping (``"*"`` is the default)."""
        if isinstance(max_epsilon, Mapping):
            named = {k: _check_epsilon(f"max_epsilon[{k!r}]", v) for k, v in max_epsilon.items() if k != DEFAULT_KEY}
            default = max_epsilon.get(DEFAULT_KEY)
            return cls(default=None if default is None else _check_epsilon("max_epsilon", default), per_metric=named)
        return cls(default=_check_epsilon("max_epsilon", max_epsilon))

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
        return cls.of({k: _float_of_json(v) for k, v in data.items()})


def _json_float(value: float) -> float | None:
    """JSON has no infinity: ``inf`` is written ``null``."""
    return None if math.isinf(value) else value


def _float_of_json(value: float | None) -> float:
    return math.inf if value is None else float(value)


def value_cost(params: MetricParams, released_levels: Sequence[float]) -> tuple[float, bool]:
    """Cost of one value whose memoized bits were released at ``released_levels``.

    ``bits_changed * sequence_bit_epsilon(mode, levels)`` with ``bits_changed``
    from the metric's neighbour relation (``k`` for sets and for the
    asymmetric mode, ``2k`` for a replaced categorical value). Trusted: ``inf``.

    Returns:
        ``(epsilon rounded up, exact)``.
    """
    if params.mode == "trusted":
        return math.inf, True
    bits_changed = params.guarantee(released_levels[-1]).bits_changed
    eps, exact = sequence_bit_epsilon(params.mode, tuple(released_levels))
    return round_up(bits_changed * eps), exact


def metric_cost(params: MetricParams, levels: Sequence[float], first_steps: Mapping[int, int]) -> tuple[float, bool]:
    """Sum over distinct values: ``sum_s count_s * value_cost(levels[s:])``.

    Args:
        params: the metric.
        levels: the levels of the metric's noise chain, oldest first.
        first_steps: how many distinct values were first released at each step.
    """
    total, exact = 0.0, True
    for step, count in first_steps.items():
        if count:
            cost, ok = value_cost(params, levels[step:])
            total += count * cost
            exact = exact and ok
    return round_up(total), exact


@dataclass(kw_only=True)
class MetricRecord:
    """What the client remembers about one metric (kept in the encrypted state).

    Attributes:
        params: the metric's parameters (``MetricParams.to_dict``) when the record was made.
        digest: their digest, as the signed config gave it.
        cohort: chosen once, uniformly, and kept.
        levels: the levels of the noise chain, strictly increasing.
        rounds: the round id that set each level (0 for the first).
        value_steps: value fingerprint -> the step of its first release.
    """

    params: dict[str, Any]
    digest: str
    cohort: int
    levels: list[float]
    rounds: list[int]
    value_steps: dict[str, int] = field(default_factory=dict)

    def metric_params(self) -> MetricParams:
        return MetricParams.from_dict(self.params)

    @property
    def step(self) -> int:
        return len(self.levels) - 1

    @property
    def round(self) -> int:
        return self.rounds[-1]

    def first_steps(self) -> Counter[int]:
        return Counter(self.value_steps.values())

    def spent(self, params: MetricParams) -> tuple[float, bool]:
        return metric_cost(params, self.levels, self.first_steps())

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "digest": self.digest,
            "cohort": self.cohort,
            "levels": [_json_float(v) for v in self.levels],
            "rounds": list(self.rounds),
            "value_steps": dict(self.value_steps),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetricRecord:
        return cls(
            params=dict(data["params"]),
            digest=str(data["digest"]),
            cohort=int(data["cohort"]),
            levels=[_float_of_json(v) for v in data["levels"]],
            rounds=[int(r) for r in data["rounds"]],
            value_steps={str(k): int(v) for k, v in data["value_steps"].items()},
        )


def _remaining(ceiling: float, spent: float) -> float:
    if math.isinf(ceiling):
        return math.inf
    return max(0.0, ceiling - spent)


def check_new_value(record: MetricRecord, params: MetricParams, ceiling: float, prior: float) -> float:
    """Refuse a new distinct value whose cost would pass the ceiling.

    Returns:
        The metric's total spent after the new value (``prior`` included).

    Raises:
        BudgetExceeded: with ``requested`` the value's cost and ``remaining``
            what is left under the ceiling.
    """
    spent, _ = record.spent(params)
    cost, _ = value_cost(params, record.levels[-1:])
    before = prior + spent
    after = round_up(before + cost)
    if after > ceiling:
        raise BudgetExceeded(
            cost, _remaining(ceiling, before), f"metric {params.name!r}: a new value costs {cost:.6g}"
        )
    return after


def check_relaxation(
    record: MetricRecord, params: MetricParams, level_to: float, ceiling: float, prior: float
) -> float:
    """Refuse a relaxation that lowers the level or would pass the ceiling.

    Every value already released is charged as if re-released at ``level_to``.

    Returns:
        The metric's total spent after the relaxation (``prior`` included).

    Raises:
        TighteningRefused: ``level_to`` is below the current level.
        BudgetExceeded: ``requested`` is the extra cost.
    """
    current = record.levels[-1]
    if level_to < current:
        raise TighteningRefused(current=current, requested=level_to)
    spent, _ = record.spent(params)
    after_values, _ = metric_cost(params, [*record.levels, level_to], record.first_steps())
    extra = after_values - spent
    after = round_up(prior + after_values)
    if after > ceiling:
        raise BudgetExceeded(
            extra, _remaining(ceiling, prior + spent),
            f"metric {params.name!r}: relaxing to level {level_to:.6g}",
        )
    return after


@dataclass(frozen=True, kw_only=True)
class LedgerEntry:
    """The ledger of one metric, as shown to the app or the user.

    Attributes:
        metric: the metric name.
        mode: ``symmetric``, ``asymmetric`` or ``trusted``.
        levels: the levels released, oldest first; ``rounds`` the round of each.
        distinct_values: how many different values (or sets) were reported.
        spent: the exact cost so far (rounded up), including ``prior``.
        exact: False when a symmetric chain is longer than the exact accounting
            supports and ``spent`` is a proven upper bound.
        prior: charged for lost state (the whole ceiling in force when the
            state was lost; see ``docs/client.md``).
        ceiling, remaining: the ceiling and what is left under it.
        epsilon_per_report: one transmission at the current level (RAPPOR's eps_1).
        epsilon_per_value: one value released at every level so far.
        protects, reveals: the policy in words.
    """

    metric: str
    mode: str
    cohort: int
    levels: tuple[float, ...]
    rounds: tuple[int, ...]
    distinct_values: int
    spent: float
    exact: bool
    prior: float
    ceiling: float
    remaining: float
    epsilon_per_report: float
    epsilon_per_value: float
    protects: str
    reveals: str


def ledger_entry(record: MetricRecord, params: MetricParams, ceiling: float, prior: float) -> LedgerEntry:
    """The view of one metric's record."""
    spent, exact = record.spent(params)
    total = round_up(prior + spent)
    guarantee = params.guarantee(record.levels[-1])
    return LedgerEntry(
        metric=params.name,
        mode=params.mode,
        cohort=record.cohort,
        levels=tuple(record.levels),
        rounds=tuple(record.rounds),
        distinct_values=len(record.value_steps),
        spent=total,
        exact=exact,
        prior=prior,
        ceiling=ceiling,
        remaining=_remaining(ceiling, total),
        epsilon_per_report=guarantee.epsilon_per_report,
        epsilon_per_value=value_cost(params, record.levels)[0],
        protects=guarantee.protects,
        reveals=guarantee.reveals,
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
    """The whole ledger: one entry per metric ever used, the events, the reports dropped."""

    entries: tuple[LedgerEntry, ...]
    events: tuple[LedgerEvent, ...]
    dropped_reports: int
    queued_reports: int

    def __getitem__(self, metric: str) -> LedgerEntry:
        for entry in self.entries:
            if entry.metric == metric:
                return entry
        raise KeyError(metric)

    def __contains__(self, metric: object) -> bool:
        return any(entry.metric == metric for entry in self.entries)


__all__ = [
    "Ceiling",
    "Ledger",
    "LedgerEntry",
    "LedgerEvent",
    "MetricRecord",
    "check_new_value",
    "check_relaxation",
    "ledger_entry",
    "metric_cost",
    "value_cost",
]
