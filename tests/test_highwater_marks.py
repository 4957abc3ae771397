"""A state's high-water mark is written at every save: its periods read once, the same mark as period by period."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from clocks import Clock

from client_sdk import Client, highwater
from client_sdk.highwater import HighWaterMark, MetricMark, _metric_mark, lost_record, mark_of
from client_sdk.ledger import PERIODS_KEPT, Ceiling, MetricRecord, PeriodTotals, period_of
from client_sdk.testing import FakeAggregator
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams
from protocol.rounding import from_micro

DAY = 86_400
T0 = 1_699_920_000
METRIC = MetricParams(name="places", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                      mode="asymmetric", level=1.0)


def _reference_prior(lost: Sequence[Mapping[str, Any]], metric: str, start: int, period: int) -> float:
    """The lost states' charge to one period, computed alone for that period (the mark parsed each time)."""
    if not lost:
        return 0.0
    last = lost[-1]
    mark = None if last.get("mark") is None else HighWaterMark.from_dict(last["mark"])
    entry = None if mark is None else mark.metrics.get(metric)
    if mark is not None and entry is None:
        return 0.0
    if entry is not None and entry.period == period:
        return entry.charged(start)
    if entry is not None and entry.period != period and entry.total is not None:
        return from_micro(entry.total) if start == period_of(float(last["at"]), period) else 0.0
    ceiling = Ceiling.from_dict(last["ceiling"]).for_metric(metric)
    return ceiling if period_of(float(last["at"]), period) == start else 0.0


def _reference_periods(record: MetricRecord, lost: Sequence[Mapping[str, Any]], name: str) -> dict[int, int | None]:
    """Every period's entry of the mark, each from ``spent_in`` and its prior, rounded up (no shortcut)."""
    params, period = record.metric_params(), record.period
    assert period is not None
    starts = set(record.periods.totals) | highwater._prior_periods(lost, name, period)[0]
    if record.current is not None:
        starts.add(period_of(record.current.window, period))
    out: dict[int, int | None] = {}
    for start in starts:
        micro = record.spent_in(params, start)
        out[start] = None if micro < 0 else highwater._micro(
            _reference_prior(lost, name, start, period) + from_micro(micro))
    return out


def _record(tmp_path: Path) -> tuple[MetricRecord, int]:
    """A real client's record of a daily budget (a current window), given PERIODS_KEPT closed periods."""
    fake = FakeAggregator([METRIC])
    clock = Clock(T0 + 3600.0)
    client = Client("http://agg.test", tmp_path / "s", background=False, strict=True, autosave=False, clock=clock,
                    max_epsilon=100.0, budget_period="day", server_public_keys=[fake.sign_public],
                    session=fake)  # type: ignore[arg-type]
    client.sync()
    for day in range(3):
        client.report("places", {f"v{day}"})
        clock.advance(DAY)
    record = client._state.metrics["places"]
    client.close(flush=False)
    assert record.period == DAY and record.current is not None
    current = period_of(record.current.window, DAY)
    rng = random.Random(5)
    record.periods = PeriodTotals(totals={current - k * DAY: rng.randrange(1, 5_000_000) for k in range(PERIODS_KEPT)},
                                  dropped_through=current - (PERIODS_KEPT + 3) * DAY, dropped_micro=4_999_999)
    return record, current


def _losses(record: MetricRecord, current: int) -> dict[str, list[dict[str, Any]]]:
    """Lost states of every kind a reset records: none, unknown, a mark of the same period (listing
    periods, some charged past what is kept), a mark kept under another period, a mark without the metric."""
    ceiling = Ceiling(default=3.0, per_metric={}, period=DAY)
    listed = {current - k * DAY: 1_000_000 + k for k in range(0, 2 * PERIODS_KEPT, 3)}
    same = MetricMark(total=90_000_000, period=DAY, period_start=current, period_micro=listed[current],
                      periods=listed, dropped_through=current - 3 * PERIODS_KEPT * DAY, dropped_micro=2_500_000)
    other = MetricMark(total=12_345_678, period=7 * DAY, period_start=current - 7 * DAY, period_micro=1)
    at = float(current - 5 * DAY + 100)
    return {
        "none": [],
        "unknown": [lost_record(at, "corrupt", ceiling, None)],
        "same period": [lost_record(at, "corrupt", ceiling, HighWaterMark(generation=4, metrics={"places": same}))],
        "another period": [lost_record(at, "corrupt", ceiling,
                                       HighWaterMark(generation=4, metrics={"places": other}))],
        "another metric": [lost_record(at, "corrupt", ceiling,
                                       HighWaterMark(generation=4, metrics={"apps": other}))],
    }


@pytest.mark.parametrize("kind", ["none", "unknown", "same period", "another period", "another metric"])
def test_the_mark_of_each_period_is_what_its_own_computation_gives(tmp_path: Path, kind: str) -> None:
    record, current = _record(tmp_path)
    lost = _losses(record, current)[kind]
    mark = _metric_mark(record, lost, "places")
    expected = _reference_periods(record, lost, "places")
    # the mark keeps the PERIODS_KEPT latest of them and bounds the rest, as a record does
    kept = dict(sorted(expected.items())[-PERIODS_KEPT:])
    assert mark.periods == kept
    assert mark.period_start == max(kept) and mark.period_micro == kept[max(kept)]
    assert mark_of({"places": record}, lost, 9).metrics["places"] == mark


def test_a_save_reads_the_lost_states_mark_once_and_rounds_only_what_a_prior_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record, current = _record(tmp_path)
    rounded: list[float] = []
    parsed: list[object] = []
    micro, from_dict = highwater._micro, HighWaterMark.from_dict.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(highwater, "_micro", lambda value: rounded.append(value) or micro(value))
    monkeypatch.setattr(HighWaterMark, "from_dict", classmethod(lambda cls, data: parsed.append(data) or from_dict(cls, data)))
    _metric_mark(record, [], "places")
    assert len(rounded) <= 2  # the lifetime total and the dropped bound, not one per period kept (64)
    rounded.clear()
    _metric_mark(record, _losses(record, current)["same period"], "places")
    assert len(parsed) <= 3  # the lifetime prior, the listed periods and the priors: not once per period
