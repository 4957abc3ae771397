"""A renewing budget under wrong clocks: every window is charged to its own period, no period ever passes its
ceiling, the lifetime total is exact, and a clock corrected later never blocks a metric for the skew's length.

The metric reports hourly; the daily ceiling has room for exactly four windows, so a block shows at once.
Each report is checked against a tally kept by the test: a report is queued exactly when the period of the
client's (corrected) clock holds fewer than four windows, and the record's charge of every period is the
tally times one window's cost, in micro-epsilons.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from test_client_clocks import DAY, MINUTE, T0, YEAR, World, make_client

from client_sdk import Client, ClientEvent
from client_sdk.ledger import period_of
from client_sdk.testing import FakeAggregator
from protocol.accounting import to_micro
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams

HOURLY = MetricParams(name="hourly", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                      mode="asymmetric", level=1.0, time_precision=3600)
PER_DAY = 4
HOUR = 3600.0
DAY0 = int(T0 // DAY * DAY)


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def fake(world: World) -> FakeAggregator:
    fake = FakeAggregator([HOURLY])
    fake.clock = lambda: world.true
    return fake


class Tally:
    """Windows charged per period, as the test counts them; checks each report and the record."""

    def __init__(self, cost: float, ceiling: float) -> None:
        self.cost, self.ceiling = to_micro(cost), ceiling
        self.windows: Counter[int] = Counter()
        self.refused = 0

    def report(self, client: Client, world: World, value: str) -> None:
        now = client.server_clock.now()
        start = period_of(now, int(DAY))
        current = client._state.metrics["hourly"].current if "hourly" in client._state.metrics else None
        status = client.report("hourly", {value})
        if current is not None and current.window == now // HOUR * HOUR:  # a restart went on from the time
            assert "already reported" in (status.reason or ""), status  # of the last write: same window
        elif self.windows[start] < PER_DAY:
            assert status.queued, (status, start, self.windows)
            self.windows[start] += 1
        else:
            assert status.status == "refused" and "budget" in (status.reason or ""), status
            self.refused += 1
        world.advance(HOUR)

    def check(self, client: Client) -> None:
        record = client._state.metrics["hourly"]
        params = record.metric_params()
        for start, count in self.windows.items():  # each period's own charge, exact, within the ceiling
            assert record.spent_in(params, start) == count * self.cost, (start, count)
            assert record.spent_in(params, start) <= to_micro(self.ceiling)
        budget = client.budget("hourly")
        assert to_micro(budget.total_spent) == sum(self.windows.values()) * self.cost  # the lifetime, exact
        assert budget.spent_this_period <= self.ceiling


def first_run(fake: FakeAggregator, world: World, path: Path, reports: int) -> Tally:
    """A client that synced (the server's time agrees) reports ``reports`` hourly windows, then stops."""
    probe = make_client(fake, path.with_suffix(".probe"), world, budget_period="day")
    probe.sync()
    cost = probe.budget("hourly").epsilon_per_window
    probe.close()
    tally = Tally(cost, round(PER_DAY * cost, 6) + 1e-6)
    client = make_client(fake, path, world, budget_period="day", max_epsilon=tally.ceiling)
    client.sync()
    for hour in range(reports):
        tally.report(client, world, f"first{hour}")
    tally.check(client)
    client.close()
    return tally


def test_forty_days_ahead_offline_then_corrected_charges_each_period_its_own(
    fake: FakeAggregator, world: World, tmp_path: Path
) -> None:
    world.true = DAY0 + HOUR + 30 * MINUTE
    tally = first_run(fake, world, tmp_path / "s", reports=1)  # the server's day: one window
    world.jump(40 * DAY)  # the device clock is 40 days ahead, and the app starts offline: it cannot know
    events: list[ClientEvent] = []
    client = make_client(fake, tmp_path / "s", world, budget_period="day", max_epsilon=tally.ceiling,
                         on_event=events.append)
    for hour in range(PER_DAY + 1):  # 40 days out: four fit, the fifth is refused (that period is full)
        tally.report(client, world, f"ahead{hour}")
    assert tally.refused == 1 and tally.windows[DAY0 + 40 * int(DAY)] == PER_DAY
    result = client.flush()  # the network is back: the server refuses them for now, and tells its time
    assert (result.delivered, result.later, result.remaining) == (0, PER_DAY, PER_DAY)
    assert client.server_clock.offset == pytest.approx(-40 * DAY)
    for hour in range(30):  # the server's days, 07:30 to 12:30 the next day: each charged to its own period
        tally.report(client, world, f"corrected{hour}")
    assert tally.windows[DAY0] == tally.windows[DAY0 + int(DAY)] == PER_DAY  # both filled, neither passed
    tally.check(client)
    assert client.flush().delivered == 2 * PER_DAY - 1
    world.advance(40 * DAY)  # the far reports were kept, not dropped: delivered once the server reaches them
    assert client.flush().delivered == PER_DAY and client.ledger().dropped_reports == 0
    tally.check(client)  # that far day holds its four windows
    assert not [e for e in events if e.kind in ("dropped", "clock_behind")]
    client.close()


@pytest.mark.parametrize("jump", [5 * MINUTE, -5 * MINUTE, 3 * DAY, -3 * DAY, YEAR, -YEAR])
def test_a_clock_that_jumps_across_a_restart_never_blocks_and_stays_exact(
    fake: FakeAggregator, world: World, tmp_path: Path, jump: float
) -> None:
    world.true = DAY0 + 20 * HOUR + 30 * MINUTE
    tally = first_run(fake, world, tmp_path / "s", reports=3)
    world.jump(jump)  # the device clock moves while the app is not running
    client = make_client(fake, tmp_path / "s", world, budget_period="day", max_epsilon=tally.ceiling)
    for hour in range(6):  # offline: no answer corrects it yet
        tally.report(client, world, f"offline{hour}")
    if jump < 0:  # moved back: time went on from the last trusted time, not a period before it
        assert client.server_clock.now() >= DAY0 + 23 * HOUR
    client.flush()  # the server's time
    world.advance(HOUR)
    for hour in range(6):
        tally.report(client, world, f"online{hour}")
    tally.check(client)
    world.advance(max(jump, 0.0) + 2 * DAY)
    client.flush()
    assert len(fake.stored) == sum(tally.windows.values()) and client.ledger().dropped_reports == 0
    tally.check(client)
    client.close()


def test_a_lost_state_charges_an_earlier_period_its_mark_lists(
    fake: FakeAggregator, world: World, tmp_path: Path
) -> None:
    """The lost state charged the server's day, then (its clock ahead) a later one; the reset state,
    corrected by a server answer, is back in that first day: its lost-state prior is the day's charge."""
    world.true = DAY0 + 18 * HOUR + 30 * MINUTE
    tally = first_run(fake, world, tmp_path / "s", reports=PER_DAY)  # the server's day is full
    world.jump(2 * DAY)
    ahead = make_client(fake, tmp_path / "s", world, budget_period="day", max_epsilon=tally.ceiling)
    tally.report(ahead, world, "ahead")  # offline, two days out
    ahead.close(flush=False)
    path = tmp_path / "s"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # the state no longer opens
    path.write_bytes(bytes(data))
    client = make_client(fake, path, world, budget_period="day", max_epsilon=tally.ceiling, on_corrupt="reset")
    client.sync()  # reset, then corrected: the server's day again
    assert period_of(client.server_clock.now(), int(DAY)) == DAY0
    status = client.report("hourly", {"after"})
    assert status.status == "refused" and "budget" in (status.reason or ""), status
    budget = client.budget("hourly")
    assert budget.spent_this_period == pytest.approx(PER_DAY * tally.cost / 1e6, abs=1e-6)
    client.close()


def test_a_state_and_a_mark_written_before_period_totals_load_and_never_under_count() -> None:
    """The shape today's main writes: the latest period's total only (``period_start``, ``period_micro``)."""
    from client_sdk.highwater import MetricMark
    from client_sdk.ledger import MetricRecord

    latest = DAY0 + 10 * int(DAY)
    old = {"params": HOURLY.to_dict(), "digest": HOURLY.digest(), "cohort": 1, "levels": [1.0], "rounds": [0],
           "current": None, "closed_micro": 7_000_000, "closed_windows": 7, "closed_exact": True,
           "period": int(DAY), "period_start": latest, "period_micro": 3_000_000, "first_window": DAY0}
    record = MetricRecord.from_dict(old)
    params = record.metric_params()
    assert record.spent_in(params, latest) == 3_000_000  # the latest period, exact
    assert record.spent_in(params, latest - int(DAY)) == 4_000_000  # an earlier one: the rest, a bound
    assert record.spent_in(params, latest + int(DAY)) == 0
    again = MetricRecord.from_dict(record.to_dict())
    assert again.periods == record.periods and record.to_dict()["period_micro"] == 3_000_000  # read by old code too
    mark = MetricMark.from_dict({"total": 7_000_000, "period": int(DAY), "period_start": latest,
                                 "period_micro": 3_000_000})
    assert mark.charged(latest) == 3.0 and mark.charged(latest + int(DAY)) == 0.0
    assert mark.charged(latest - 2 * int(DAY)) == 7.0  # before its latest period: its lifetime total, never 0


def test_period_totals_are_bounded_and_a_dropped_period_keeps_a_bound() -> None:
    from client_sdk.ledger import PERIODS_KEPT, PeriodTotals

    totals, day = PeriodTotals(), int(DAY)
    for n in range(PERIODS_KEPT + 10):
        totals.add(DAY0 + n * day, 1_000_000 + n, day)
    assert len(totals.totals) == PERIODS_KEPT and totals.dropped_through == DAY0 + 9 * day
    assert totals.charged(DAY0 + 3 * day) == 1_000_009  # dropped: the largest dropped total, never less
    assert totals.charged(DAY0 + 20 * day) == 1_000_020 and totals.charged(DAY0 + 500 * day) == 0
    far = PeriodTotals()
    far.add(DAY0, 5, day)
    far.add(DAY0 + 400 * day, 7, day)  # a clock a year ahead: the present's period is dropped, with its bound
    far.add(DAY0 + day, 2, day)  # corrected back: the next day is its own, from zero
    assert far.charged(DAY0 + day) == 2 and far.charged(DAY0) == 5 and far.charged(DAY0 + 400 * day) == 7
