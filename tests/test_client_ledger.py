"""The ledger: one value per window, exact window costs that add up, the ceiling, no tightening."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from clocks import Clock

from client_sdk import Ceiling, Client
from client_sdk.client import AlreadyReported
from client_sdk.ledger import MetricRecord, check_new_window, window_cost
from client_sdk.queue import item_id
from client_sdk.testing import FakeAggregator
from protocol.accounting import sequence_bit_epsilon
from protocol.encodings import BloomEncoding, DirectEncoding
from protocol.errors import BudgetExceeded, ParameterError, TighteningRefused
from protocol.irr_relaxation import enclosed_report_chain_charge
from protocol.params import MetricParams
from protocol.randomizers import MAX_LEVEL
from protocol.rng import SecureRandom, SeededRandom

BLOOM = BloomEncoding(num_bits=64, num_hashes=2, num_cohorts=4)
ASYM = MetricParams(name="places", encoding=BLOOM, mode="asymmetric", level=1.0)
SYM = MetricParams(name="urls", encoding=BLOOM, mode="symmetric", level=1.0)
CAT = MetricParams(
    name="os", encoding=DirectEncoding(domain=("linux", "mac", "win")), mode="symmetric", level=2.0,
    value_kind="categorical",
)
TRUSTED = MetricParams(name="exact", encoding=BLOOM, mode="trusted", level=math.inf)
SYM_IRR = MetricParams(name="urls-irr", encoding=BLOOM, mode="symmetric", level=1.0, irr_p=0.5, irr_q=0.75)


DAY = 86400.0
T0 = 1_700_000_000.0


def make_client(
    tmp_path: Path, max_epsilon: object, metrics: list[MetricParams] | None = None, clock: Clock | None = None
) -> Client:
    fake = FakeAggregator(metrics or [ASYM, SYM, CAT, TRUSTED, SYM_IRR])
    client = Client("http://agg.test", tmp_path / "state", background=False, strict=True, server_public_keys=fake.sign_public,
                    max_epsilon=max_epsilon, session=fake, rng=3, insecure_rng_for_testing=True,
                    clock=clock or Clock(T0))
    client.sync()
    return client


def test_window_cost_is_bits_changed_times_the_chain_epsilon() -> None:
    # asymmetric: k * L_last / 2, whatever the chain
    assert window_cost(ASYM, [1.0]) == (1.0, True)
    assert window_cost(ASYM, [1.0, 2.0, 4.0]) == (4.0, True)
    # symmetric set: k * e_bit; categorical: 2k * e_bit (k = 1 for direct)
    e_bit = sequence_bit_epsilon("symmetric", (1.0,))[0]
    assert window_cost(SYM, [1.0])[0] == 2 * e_bit
    assert window_cost(CAT, [2.0])[0] == 2 * sequence_bit_epsilon("symmetric", (2.0,))[0]
    # a relaxed symmetric pair costs its exact sequence epsilon, less than the sum of both
    pair, exact = window_cost(SYM, [1.0, 2.0])
    assert exact and pair == 2 * sequence_bit_epsilon("symmetric", (1.0, 2.0))[0]
    assert pair < window_cost(SYM, [1.0])[0] + window_cost(SYM, [2.0])[0]
    assert window_cost(TRUSTED, [math.inf]) == (math.inf, True)


def test_with_irr_one_report_costs_eps_1_and_a_chain_the_smaller_bound() -> None:
    one = SYM_IRR.guarantee(1.0)
    assert window_cost(SYM_IRR, [1.0]) == (one.epsilon_per_report, True)
    assert one.epsilon_per_report < one.epsilon_longitudinal
    two, exact = window_cost(SYM_IRR, [1.0, 2.0])
    chain = 2 * sequence_bit_epsilon("symmetric", (1.0, 2.0))[0]
    per_reports = one.epsilon_per_report + SYM_IRR.guarantee(2.0).epsilon_per_report
    # the two reports' own epsilon (fresh IRRs of correlated memoized bits), proven by an enclosure
    reports = enclosed_report_chain_charge([SYM_IRR.randomizer(1.0), SYM_IRR.randomizer(2.0)], relaxed=False,
                                           value_kind=SYM_IRR.value_kind, num_hashes=SYM_IRR.encoding.num_hashes)[0]
    assert two == pytest.approx(min(chain, reports), abs=1e-9) and exact
    assert two < min(chain, per_reports)  # tighter than the composition of one eps_1 per report


def test_one_value_per_window(tmp_path: Path) -> None:
    clock = Clock(T0)
    client = make_client(tmp_path, 10.0, clock=clock)
    first = client.report("places", {"a", "b"})
    assert client.report("places", ["b", "a", "a"]) == first  # the same value again: nothing new is sent
    with pytest.raises(AlreadyReported) as info:
        client.report("places", {"a"})
    assert info.value.field == "value"
    assert len(client._state.queue) == 1 and client.ledger()["places"].spent == 1.0
    clock.advance(DAY)
    second = client.report("places", {"a"})
    assert second != first
    assert client.ledger()["places"].windows == 2
    clock.now -= 2 * DAY  # the device clock jumps back: the client's clock stays continuous (monotonic)
    assert client.report("places", {"a"}) == second and client.ledger()["places"].windows == 2


def test_windows_add_up_and_the_ceiling_is_enforced(tmp_path: Path) -> None:
    clock = Clock(T0)
    client = make_client(tmp_path, 3.0, clock=clock)
    for value in ("a", "a", "b"):  # equal values in different windows cost each window: independent noise
        client.report("places", value)
        clock.advance(DAY)
    entry = client.ledger()["places"]
    assert (entry.spent, entry.remaining, entry.windows) == (3.0, 0.0, 3)
    with pytest.raises(BudgetExceeded) as info:
        client.report("places", "a")
    assert (info.value.requested, info.value.remaining) == (1.0, 0.0)
    assert len(client._state.queue) == 3  # nothing queued for the refused report
    assert client.ledger().events[-1].kind == "refused"


def test_ceiling_boundary_is_tight(tmp_path: Path) -> None:
    # exactly at the ceiling passes; a hair below refuses (remaining reported)
    assert make_client(tmp_path / "a", 1.0).report("places", "x")
    client = make_client(tmp_path / "b", 0.999999)
    with pytest.raises(BudgetExceeded) as info:
        client.report("places", "x")
    assert info.value.requested == 1.0 and info.value.remaining == pytest.approx(0.999999)


def test_relaxation_resends_the_window_checks_the_ceiling_and_refuses_tightening(tmp_path: Path) -> None:
    clock = Clock(T0)
    client = make_client(tmp_path, 5.0, clock=clock)
    client.report("places", "a")
    clock.advance(DAY)
    client.report("places", "b")  # spent 2: two windows at k * 1 / 2
    with pytest.raises(BudgetExceeded) as info:
        client.relax("places", 4.5, round_id=1)  # window 1 final (1) + window 2 chain 1 -> 4.5 (4.5) = 5.5
    assert (info.value.requested, info.value.remaining) == (3.5, 3.0)
    assert client.ledger()["places"].levels == (1.0,) and len(client._state.queue) == 2
    entry = client.relax("places", 4.0, round_id=1)
    assert (entry.levels, entry.rounds, entry.spent, entry.remaining) == ((1.0, 4.0), (0, 1), 5.0, 0.0)
    assert len(client._state.queue) == 3  # the window's value re-sent at the new level, for the round
    resent = client._state.queue[-1]
    assert client.report("places", "b") == item_id(resent)  # the app's own repeat is the round report
    with pytest.raises(TighteningRefused) as tight:
        client.relax("places", 2.0, round_id=2)
    assert (tight.value.current, tight.value.requested) == (4.0, 2.0)
    assert client.relax("places", 4.0, round_id=1).levels == (1.0, 4.0)  # the same round again: no-op
    assert len(client._state.queue) == 3
    clock.advance(DAY)
    with pytest.raises(BudgetExceeded):  # a new window now costs the current level
        client.report("places", "c")


def test_relax_after_the_window_passed_is_free_and_later_windows_pay_the_new_level(tmp_path: Path) -> None:
    clock = Clock(T0)
    client = make_client(tmp_path, 10.0, clock=clock)
    assert client.relax("places", 4.0, round_id=3).spent == 0.0
    client.report("places", "a")
    assert client.ledger()["places"].spent == 4.0  # k * 4 / 2
    clock.advance(DAY)
    entry = client.relax("places", 5.0, round_id=4)  # the window of "a" is over: nothing is re-sent
    assert entry.spent == 4.0 and len(client._state.queue) == 1


def test_ledger_view(tmp_path: Path) -> None:
    client = make_client(tmp_path, {"*": 10.0, "os": 20.0})
    client.report("os", "mac")
    entry = client.ledger()["os"]
    guarantee = CAT.guarantee(2.0)
    assert entry.mode == "symmetric" and entry.ceiling == 20.0
    assert entry.epsilon_per_report == guarantee.epsilon_per_report
    assert entry.epsilon_per_window == entry.spent == window_cost(CAT, [2.0])[0]
    assert entry.remaining == pytest.approx(20.0 - entry.spent)
    assert "absence" in entry.protects and entry.neighbour == guarantee.neighbour
    assert "os" in client.ledger() and [e.metric for e in client.ledger().entries] == ["os"]  # ever used
    with pytest.raises(ParameterError):
        client.report("os", {"mac", "linux"})  # one value per report for categorical data
    with pytest.raises(ParameterError):
        client.report("os", "beos")  # outside the declared domain
    assert client.ledger()["os"].windows == 1


def test_unlisted_metric_without_default_is_refused(tmp_path: Path) -> None:
    client = make_client(tmp_path, {"places": 2.0})
    client.report("places", "a")
    with pytest.raises(BudgetExceeded) as info:
        client.report("urls", "a")
    assert info.value.remaining == 0.0


def test_trusted_metric_needs_an_infinite_ceiling(tmp_path: Path) -> None:
    with pytest.raises(BudgetExceeded):
        make_client(tmp_path / "a", 100.0).report("exact", "a")
    client = make_client(tmp_path / "b", math.inf)
    client.report("exact", "a")
    assert client.ledger()["exact"].spent == math.inf
    with pytest.raises(ParameterError):
        client.relax("exact", 2.0, round_id=1)


def test_prior_spend_counts_against_the_ceiling() -> None:
    record = MetricRecord(params=ASYM.to_dict(), digest=ASYM.digest(), cohort=0, levels=[1.0], rounds=[0])
    assert check_new_window(record, ASYM, 4.0, prior=3.0) == 4.0
    with pytest.raises(BudgetExceeded) as info:
        check_new_window(record, ASYM, 4.0, prior=3.5)
    assert info.value.remaining == 0.5


def test_levels_above_the_cap_are_refused_without_a_crash(tmp_path: Path) -> None:
    client = make_client(tmp_path, math.inf)
    client.report("places", "a")
    with pytest.raises(ParameterError) as info:
        client.relax("places", MAX_LEVEL + 1, round_id=1)
    assert info.value.field == "level_to"
    assert client.relax("places", MAX_LEVEL, round_id=1).levels == (1.0, MAX_LEVEL)


def test_a_seeded_rng_needs_the_testing_switch(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM])
    for rng in (7, SeededRandom(7)):
        with pytest.raises(ParameterError) as info:
            Client("http://agg.test", tmp_path / "s", background=False, strict=True, server_public_keys=fake.sign_public, max_epsilon=1.0,
                   session=fake, rng=rng)
        assert info.value.field == "rng"
    Client("http://agg.test", tmp_path / "s", background=False, strict=True, server_public_keys=fake.sign_public, max_epsilon=1.0,
           session=fake, rng=SecureRandom())


def test_ledger_of_a_metric_before_its_first_report_has_spent_nothing(tmp_path: Path) -> None:
    client = make_client(tmp_path, {"places": 3.0, "*": 1.0})
    ledger = client.ledger()
    assert "places" in ledger and not ledger.entries  # nothing reported: no record made
    entry = ledger["places"]
    assert (entry.spent, entry.windows, entry.prior, entry.cohort) == (0.0, 0, 0.0, None)
    assert (entry.ceiling, entry.remaining) == (3.0, 3.0)
    assert entry.epsilon_per_window == window_cost(ASYM, [1.0])[0]
    assert ledger["urls"].ceiling == 1.0
    with pytest.raises(KeyError):
        ledger["not-a-metric"]
    client.report("places", {"a"})
    assert client.ledger()["places"].spent == window_cost(ASYM, [1.0])[0]
    assert client.ledger()["places"].cohort is not None


@pytest.mark.parametrize("bad", [0, 0.0, -0.0])
def test_a_ceiling_of_zero_is_refused_naming_the_field(bad: float) -> None:
    with pytest.raises(ParameterError, match="> 0") as info:
        Ceiling.of(bad)
    assert info.value.field == "max_epsilon"
    with pytest.raises(ParameterError) as info:
        Ceiling.of({"places": bad})
    assert info.value.field == "max_epsilon['places']"
    assert Ceiling.from_dict({"places": 0.0}).for_metric("places") == 0.0  # kept in an older state: read


@pytest.mark.parametrize("bad", [-1.0, math.nan, "4", True])
def test_ceiling_validation(bad: object) -> None:
    with pytest.raises(ParameterError):
        Ceiling.of(bad)  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        Ceiling.of({"*": bad})  # type: ignore[dict-item]
    with pytest.raises(ParameterError):
        Ceiling.of({"places": bad})  # type: ignore[dict-item]


def test_ceiling_round_trip() -> None:
    ceiling = Ceiling.of({"*": math.inf, "places": 2.0})
    assert Ceiling.from_dict(ceiling.to_dict()) == ceiling
    assert ceiling.for_metric("x") == math.inf
