"""A lost state never lowers the lifetime total: its high-water mark carries the exact total across the loss.

The history of the issue: 30 daily reports, the state damaged and reset (``on_corrupt="reset"``), 29
more daily reports. The exact loss of all 59 reports is computed without the ledger: windows draw
independent noise (per-window keys, and the new state's secret is independent of the old one), so the
log-ratio of the joint law of all reports is the sum over windows of each window's exact loss
(:func:`test_privacy_history.exact_loss` of one window), and the neighbour that differs in every window
attains the sum. The printed total must be at least that, and within the 1e-6 rounding per window of it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from clocks import Clock
from test_client_budget import make_client
from test_privacy_history import MODES, exact_loss, history

from client_sdk import Client
from client_sdk.highwater import HighWaterFile
from client_sdk.state import StateCorrupted
from protocol.errors import BudgetExceeded
from protocol.params import MetricParams

DAY = 86_400
T0 = 1_700_000_000 // DAY * DAY
POLICIES: dict[str, dict[str, Any]] = {"lifetime": {"max_epsilon": 100.0}, "daily": {"max_epsilon": 2.0, "budget_period": "day"}}


def _damage(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # the state no longer opens (AES-GCM)
    path.write_bytes(bytes(data))


def _report_days(client: Client, clock: Clock, params: MetricParams, days: range) -> None:
    for day in days:
        clock.now = T0 + day * DAY + 3600.0
        client.report(params.name, sorted({"home", "clinic"} if day % 2 else {"clinic"}))
    client.close(flush=False)  # written: the state, then its mark


def _exact_loss_of(params: MetricParams, days: int) -> float:
    """The exact loss of ``days`` single-report windows, each neighbour without ``clinic``."""
    one = [exact_loss(params, history((v, [1.0])), history((v - {"clinic"}, [1.0])))
           for v in ({"clinic"}, {"home", "clinic"})]
    return sum(one[day % 2] for day in range(days))


def _thirty_reset_twenty_nine(params: MetricParams, tmp_path: Path, policy: dict[str, Any],
                              keep_mark: bool = True) -> tuple[Client, Clock]:
    clock, path = Clock(T0), tmp_path / "state"
    _report_days(make_client(path, clock, [params], **policy), clock, params, range(30))
    _damage(path)
    if not keep_mark:
        HighWaterFile(path).path.unlink()
    clock.now = T0 + 30 * DAY + 60.0
    errors: list[Exception] = []
    reset = make_client(path, clock, [params], on_corrupt="reset", on_error=errors.append, **policy)
    assert [type(e) for e in errors] == [StateCorrupted]
    return reset, clock


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("mode", sorted(MODES))
def test_thirty_reports_a_reset_and_twenty_nine_more_print_the_exact_total(
    mode: str, policy: str, tmp_path: Path
) -> None:
    # Today's code restarted the total at the loss: one ceiling for the lost 30 days (15.5 printed against
    # 29.5 in the issue's run); the mark carries the lost state's exact total instead.
    params = MODES[mode]
    client, clock = _thirty_reset_twenty_nine(params, tmp_path, POLICIES[policy])
    _report_days(client, clock, params, range(30, 59))
    reopened = make_client(tmp_path / "state", clock, [params], **POLICIES[policy])
    printed = reopened.ledger()[params.name].spent
    truth = _exact_loss_of(params, 59)
    assert math.isfinite(truth) and truth <= printed < truth + 59e-6
    assert reopened.budget(params.name).total_spent == printed
    assert reopened.ledger()[params.name].total_unknown_since is None


def test_the_issue_figures_asymmetric_direct_at_level_one(tmp_path: Path) -> None:
    params = MODES["asym"]  # 0.5 per window: 15.0 before the loss, 29.5 after 29 more
    client, clock = _thirty_reset_twenty_nine(params, tmp_path, POLICIES["daily"])
    entry = client.ledger()[params.name]
    assert (entry.spent, entry.prior, entry.spent_this_period, entry.remaining) == (15.0, 15.0, 0.0, 2.0)
    _report_days(client, clock, params, range(30, 59))
    again = make_client(tmp_path / "state", Clock(T0 + 58 * DAY + 7200.0), [params], **POLICIES["daily"])
    assert again.budget(params.name).total_spent == 29.5 == _exact_loss_of(params, 59)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_loss_that_leaves_no_mark_prints_the_total_as_unknown_never_lower(policy: str, tmp_path: Path) -> None:
    params = MODES["asym"]
    client, clock = _thirty_reset_twenty_nine(params, tmp_path, POLICIES[policy], keep_mark=False)
    entry = client.ledger()[params.name]
    assert entry.total_unknown_since == "2023-12-14T00:01:00Z" == client.budget(params.name).total_unknown_since
    assert entry.spent == math.inf == client.budget(params.name).total_spent
    if policy == "lifetime":  # nothing known: no room left under a lifetime ceiling
        with pytest.raises(BudgetExceeded):
            client.report(params.name, ["clinic"])
        return
    with pytest.raises(BudgetExceeded):  # the day of the loss is charged its whole ceiling
        client.report(params.name, ["clinic"])
    clock.advance(DAY)
    client.report(params.name, ["clinic"])  # the next day renews; the total stays unknown
    client.close(flush=False)
    _damage(tmp_path / "state")  # a second loss keeps the date of the first
    later = make_client(tmp_path / "state", clock, [params], on_corrupt="reset", on_error=lambda e: None,
                        **POLICIES[policy])
    assert later.ledger()[params.name].total_unknown_since == "2023-12-14T00:01:00Z"


@pytest.mark.parametrize("damage", ["flip", "rollback", "other key"])
def test_a_changed_or_older_mark_does_not_count(damage: str, tmp_path: Path) -> None:
    params = MODES["asym"]
    clock, path = Clock(T0), tmp_path / "state"
    _report_days(make_client(path, clock, [params], **POLICIES["daily"]), clock, params, range(2))
    mark = HighWaterFile(path).path
    older = mark.read_bytes()
    _report_days(make_client(path, clock, [params], **POLICIES["daily"]), clock, params, range(2, 4))
    if damage == "flip":
        mark.write_bytes(mark.read_bytes().replace(b'\\"total\\":2000000', b'\\"total\\":1000000'))
    elif damage == "rollback":
        mark.write_bytes(older)  # an older mark (1.0) put back: below the recorded generation
    else:
        Path(f"{path}.key").unlink()  # the key is gone: the mark cannot be verified
    _damage(path)
    clock.now = T0 + 4 * DAY + 60.0
    reset = make_client(path, clock, [params], on_corrupt="reset", on_error=lambda e: None, **POLICIES["daily"])
    entry = reset.ledger()[params.name]
    assert entry.spent == math.inf and entry.total_unknown_since is not None


def test_a_second_loss_carries_both_totals_and_metrics_not_reported_since(tmp_path: Path) -> None:
    params, other = MODES["asym"], MetricParams(name="os", encoding=MODES["asym"].encoding, mode="asymmetric",
                                                level=2.0)
    clock, path = Clock(T0 + 60.0), tmp_path / "state"
    first = make_client(path, clock, [params, other], max_epsilon=100.0)
    first.report("os", ["home"])  # 1.0, never reported again
    _report_days(first, clock, params, range(3))  # 1.5
    for loss in range(2):
        _damage(path)
        clock.now = T0 + (3 + 2 * loss) * DAY + 60.0
        client = make_client(path, clock, [params, other], on_corrupt="reset", on_error=lambda e: None,
                             max_epsilon=100.0)
        _report_days(client, clock, params, range(3 + 2 * loss, 5 + 2 * loss))
    final = make_client(path, clock, [params, other], max_epsilon=100.0).ledger()
    assert (final[params.name].spent, final["os"].spent) == (3.5, 1.0)


def test_a_mark_kept_under_a_lifetime_ceiling_charges_its_total_to_the_period_of_the_loss_only(
    tmp_path: Path,
) -> None:
    # the app moved from a lifetime ceiling to a daily one across the loss: the mark does not know what each
    # day was charged, so the day of the loss takes the lost lifetime total (a bound on any one day's
    # charge) and the days after it nothing
    params = MODES["asym"]
    clock, path = Clock(T0), tmp_path / "state"
    _report_days(make_client(path, clock, [params], max_epsilon=100.0), clock, params, range(3))  # 1.5
    _damage(path)
    clock.now = T0 + 3 * DAY + 60.0
    daily = {"max_epsilon": 2.0, "budget_period": "day"}
    client = make_client(path, clock, [params], on_corrupt="reset", on_error=lambda e: None, **daily)
    entry = client.ledger()[params.name]
    assert (entry.spent, entry.spent_this_period, entry.remaining) == (1.5, 1.5, 0.5)
    clock.advance(DAY)
    assert client.budget(params.name).remaining == 2.0
