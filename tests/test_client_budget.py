"""Budget policies: a lifetime ceiling and a renewing one (epsilon per period), exact on small cases."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest
from clocks import Clock
from test_privacy_history import MODES, exact_loss, history

from client_sdk import Client
from client_sdk.ledger import PERIODS, window_cost
from client_sdk.testing import FakeAggregator, simulate_crash
from protocol.encodings import BloomEncoding, DirectEncoding
from protocol.errors import BudgetExceeded, ParameterError
from protocol.params import MetricParams

DAY = 86_400
WEEK = 7 * DAY
# a Monday 00:00 UTC that is also the start of an epoch-aligned 2-day period and of an epoch week (Thursday)
# is not needed: the tests take whatever periods the epoch alignment gives and check against them.
T0 = 1_700_000_000 // WEEK * WEEK  # the start of an epoch week
DAILY = MetricParams(name="places", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                     mode="asymmetric", level=1.0)  # a window costs k * level / 2 = 1.0
OS = MetricParams(name="os", encoding=DirectEncoding(domain=("linux", "mac", "win")), mode="symmetric", level=2.0,
                  value_kind="categorical")


def make_client(path: Path, clock: Clock, metrics: list[MetricParams] | None = None, **kwargs: Any) -> Client:
    fake = FakeAggregator(metrics or [DAILY, OS])
    client = Client("http://agg.test", path, background=False, strict=True, server_public_keys=fake.sign_public, session=fake, clock=clock,
                    autosave=False, **kwargs)
    client.sync()
    return client


def test_a_daily_metric_reports_every_day_for_a_year_under_one_epsilon_a_day(tmp_path: Path) -> None:
    clock = Clock(T0 + 3600.0)
    client = make_client(tmp_path / "s", clock, max_epsilon=1.0, budget_period="day")
    assert window_cost(DAILY, [1.0])[0] == 1.0
    for day in range(365):
        clock.now = T0 + day * DAY + 3600.0
        client.report("places", {f"p{day % 7}", "home"})
    entry = client.ledger()["places"]
    assert (entry.spent, entry.spent_this_period, entry.remaining, entry.windows) == (365.0, 1.0, 0.0, 365)
    assert (entry.period, entry.periods) == (DAY, 365)
    budget = client.budget("places")
    assert (budget.total_spent, budget.spent_this_period, budget.remaining, budget.windows_left) == (365.0, 1.0, 0.0, 0)
    assert budget.renews_at == T0 + 365 * DAY == entry.renews_at
    clock.now += DAY  # the next day: renewed
    assert client.budget("places").remaining == 1.0 and client.budget("places").windows_left == 1
    assert client.budget("places").total_spent == 365.0  # the total never renews


def test_the_readme_policy_reports_a_daily_direct_metric_for_a_year(tmp_path: Path) -> None:
    # README: `places` is direct (cafe, park, museum), asymmetric, level 1.0; max_epsilon=1.0 a day
    places = MetricParams(name="places", encoding=DirectEncoding(domain=("cafe", "park", "museum")),
                          mode="asymmetric", level=1.0)
    clock = Clock(T0 + 3600.0)
    client = make_client(tmp_path / "s", clock, [places], max_epsilon=1.0, budget_period="day")
    for day in range(365):
        clock.now = T0 + day * DAY + 3600.0
        client.report("places", {"cafe", "park"} if day % 2 else {"museum"})
    budget = client.budget("places")
    assert (budget.spent_this_period, budget.remaining, budget.total_spent, budget.periods) == (0.5, 0.5, 182.5, 365)


def test_a_weekly_budget_allows_exactly_what_fits_in_each_week_and_renews(tmp_path: Path) -> None:
    clock = Clock(T0 + 60.0)
    client = make_client(tmp_path / "s", clock, max_epsilon=3.0, budget_period="week")
    outcomes = []
    for day in range(14):
        clock.now = T0 + day * DAY + 60.0
        try:
            client.report("places", {"home"})
            outcomes.append(True)
        except BudgetExceeded as exc:
            assert exc.remaining == 0.0 and exc.requested == 1.0 and "renews at" in str(exc)
            outcomes.append(False)
    assert outcomes == [True] * 3 + [False] * 4 + [True] * 3 + [False] * 4
    entry = client.ledger()["places"]
    assert (entry.spent, entry.spent_this_period, entry.periods, entry.renews_at) == (6.0, 3.0, 2, T0 + 2 * WEEK)
    refused = [e for e in client.ledger().events if e.kind == "refused"]
    assert len(refused) == 8


def test_the_budget_survives_a_restart_and_a_period_change_never_undercharges(tmp_path: Path) -> None:
    clock = Clock(T0 + 60.0)
    client = make_client(tmp_path / "s", clock, max_epsilon=10.0)  # lifetime first
    for day in range(3):
        clock.now = T0 + day * DAY + 60.0
        client.report("places", {"home"})
    client.close(flush=False)
    # the same state under a renewing budget: the 2.0 closed before the change count against this period
    again = make_client(tmp_path / "s", clock, max_epsilon=3.0, budget_period="week")
    entry = again.ledger()["places"]
    assert (entry.spent, entry.spent_this_period, entry.remaining) == (3.0, 3.0, 0.0)
    clock.now = T0 + WEEK + 60.0
    again.report("places", {"home"})  # the next week starts clean
    simulate_crash(again)
    third = make_client(tmp_path / "s", clock, max_epsilon=3.0, budget_period="week")  # autosave off: lost
    assert third.ledger()["places"].spent == 3.0
    third.report("places", {"home"})
    third.close(flush=False)
    fourth = make_client(tmp_path / "s", clock, max_epsilon=3.0, budget_period="week")
    assert (fourth.ledger()["places"].spent, fourth.ledger()["places"].spent_this_period) == (4.0, 1.0)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_one_periods_loss_computed_exactly_is_what_its_period_is_charged(mode: str, tmp_path: Path) -> None:
    # Neighbours that differ in every window of one period (the renewing policy's neighbour relation):
    # the exact loss of everything sent (all periods' reports) is that period's charge, and a ceiling of
    # exactly that charge lets the period through while one a hair below refuses its last window.
    params = MODES[mode]
    period = 2 * DAY
    start = (T0 // period + 1) * period
    hc, h, c = {"home", "clinic"}, {"home"}, {"clinic"}
    days = [(hc, [1.0]), (h, [1.0]), (c, [1.0]), (hc, [1.0])]
    changed = [(hc, [1.0]), (h, [1.0]), (set(), [1.0]), (h, [1.0])]  # clinic removed from period 2 only
    truth = exact_loss(params, history(*days), history(*changed))
    per_window = window_cost(params, [1.0])[0]
    charge = 2 * per_window
    assert math.isfinite(truth) and truth <= charge and charge - truth < 4e-6  # tight, rounded up per window

    def run(ceiling: float) -> list[bool]:
        clock = Clock(start + 60.0)
        client = make_client(tmp_path / f"{ceiling}", clock, [params], max_epsilon=ceiling, budget_period=period)
        sent = []
        for day, (value, _) in enumerate(days):
            clock.now = start + day * DAY + 60.0
            try:
                client.report(params.name, sorted(value))
                sent.append(True)
            except BudgetExceeded:
                sent.append(False)
        client.close(flush=False)
        return sent

    assert run(charge) == [True, True, True, True]
    assert run(math.nextafter(charge, 0.0)) == [True, False, True, False]


def test_low_budget_is_logged_once_per_period(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock(T0 + 60.0)
    client = make_client(tmp_path / "s", clock, max_epsilon=3.0, budget_period="week", budget_warning=0.5)
    with caplog.at_level(logging.WARNING, logger="onesided.client"):
        for day in range(10):
            clock.now = T0 + day * DAY + 60.0
            try:
                client.report("places", {"home"})
            except BudgetExceeded:
                pass
    warnings = [r.getMessage() for r in caplog.records if "privacy budget" in r.getMessage()]
    assert len(warnings) == 2  # week 1 (1.0 of 3.0 left after day 2), week 2 (day 9)
    assert "renews at" in warnings[0]


def test_budget_policy_validation(tmp_path: Path) -> None:
    assert PERIODS == {"day": DAY, "week": WEEK, "month": 30 * DAY}
    for bad in ("fortnight", 0, -5, 1.5, True):
        with pytest.raises(ParameterError) as info:
            make_client(tmp_path / "s", Clock(T0), max_epsilon=1.0, budget_period=bad)
        assert info.value.field == "budget_period"
    with pytest.raises(ParameterError) as info:
        make_client(tmp_path / "s", Clock(T0), max_epsilon=1.0, budget_warning=2.0)
    assert info.value.field == "budget_warning"


def test_budget_of_a_lifetime_ceiling_and_of_an_unused_metric(tmp_path: Path) -> None:
    clock = Clock(T0 + 60.0)
    client = make_client(tmp_path / "s", clock, max_epsilon=4.0)
    client.report("os", "linux")
    budget, cost = client.budget("os"), window_cost(OS, [2.0])[0]
    assert (budget.period, budget.renews_at, budget.total_spent, budget.epsilon_per_window) == (None, None, cost, cost)
    assert budget.remaining == pytest.approx(4.0 - cost) and budget.windows_left == (4.0 - cost) // cost
    unused = client.budget("places")
    assert (unused.total_spent, unused.remaining, unused.windows_left) == (0.0, 4.0, 4)
    renewing = make_client(tmp_path / "r", clock, max_epsilon=2.0, budget_period="day")
    fresh = renewing.budget("places")
    assert (fresh.period, fresh.spent_this_period, fresh.remaining, fresh.renews_at) == (DAY, 0.0, 2.0,
                                                                                         T0 + DAY)


@pytest.mark.parametrize("mark", [True, False])
def test_a_lost_state_charges_its_mark_or_else_its_ceiling_to_the_period_it_was_found_in(
    mark: bool, tmp_path: Path
) -> None:
    clock, path = Clock(T0 + 60.0), tmp_path / "s"
    client = make_client(path, clock, max_epsilon=3.0, budget_period="week")
    client.report("places", {"home"})
    client.close(flush=False)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # the state no longer opens
    path.write_bytes(bytes(data))
    if not mark:
        Path(f"{path}.spent").unlink()  # its high-water mark is gone too
    clock.advance(DAY)
    errors: list[Exception] = []
    reset = make_client(path, clock, max_epsilon=3.0, budget_period="week", on_corrupt="reset",
                        on_error=errors.append)
    entry = reset.ledger()["places"]
    if mark:  # the lost week's charge and the lifetime total are known exactly
        assert (entry.prior, entry.spent_this_period, entry.remaining) == (1.0, 1.0, 2.0)
        reset.report("places", {"home"})
    else:  # this week: spent (the ceiling); the total: unknown
        assert (entry.prior, entry.spent_this_period, entry.remaining) == (math.inf, 3.0, 0.0)
        with pytest.raises(BudgetExceeded):
            reset.report("places", {"home"})
    clock.advance(WEEK)  # the next week renews; the total keeps the lost week's charge
    reset.report("places", {"home"})
    budget = reset.budget("places")
    assert (budget.spent_this_period, budget.remaining) == (1.0, 2.0)
    assert budget.total_spent == (3.0 if mark else math.inf)
