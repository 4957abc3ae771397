"""The ledger: exact costs, the ceiling is never exceeded, no tightening."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from client_sdk import Ceiling, Client
from client_sdk.ledger import MetricRecord, check_new_value, metric_cost, value_cost
from client_sdk.testing import FakeAggregator
from protocol.accounting import sequence_bit_epsilon
from protocol.encodings import BloomEncoding, DirectEncoding
from protocol.errors import BudgetExceeded, ParameterError, TighteningRefused
from protocol.params import MetricParams

BLOOM = BloomEncoding(num_bits=64, num_hashes=2, num_cohorts=4)
ASYM = MetricParams(name="places", encoding=BLOOM, mode="asymmetric", level=1.0)
SYM = MetricParams(name="urls", encoding=BLOOM, mode="symmetric", level=1.0)
CAT = MetricParams(
    name="os", encoding=DirectEncoding(domain=("linux", "mac", "win")), mode="symmetric", level=2.0,
    value_kind="categorical",
)
TRUSTED = MetricParams(name="exact", encoding=BLOOM, mode="trusted", level=math.inf)


def make_client(tmp_path: Path, max_epsilon: object, metrics: list[MetricParams] | None = None) -> Client:
    fake = FakeAggregator(metrics or [ASYM, SYM, CAT, TRUSTED])
    client = Client("http://agg.test", tmp_path / "state", server_public_keys=fake.sign_public,
                    max_epsilon=max_epsilon, session=fake, rng=3)  # type: ignore[arg-type]
    client.sync()
    return client


def test_value_cost_is_bits_changed_times_sequence_epsilon() -> None:
    # asymmetric: k * L_last / 2, whatever the path
    assert value_cost(ASYM, [1.0]) == (1.0, True)
    assert value_cost(ASYM, [1.0, 2.0, 4.0]) == (4.0, True)
    # symmetric set: k * e_bit; categorical: 2k * e_bit (k = 1 for direct)
    e_bit = sequence_bit_epsilon("symmetric", (1.0,))[0]
    assert value_cost(SYM, [1.0])[0] == pytest.approx(2 * e_bit, abs=2e-6)
    assert value_cost(CAT, [2.0])[0] == pytest.approx(2 * sequence_bit_epsilon("symmetric", (2.0,))[0], abs=2e-6)
    # a relaxed symmetric pair costs its exact sequence epsilon, less than the sum of both
    pair, exact = value_cost(SYM, [1.0, 2.0])
    assert exact and pair == pytest.approx(2 * sequence_bit_epsilon("symmetric", (1.0, 2.0))[0], abs=2e-6)
    assert pair < value_cost(SYM, [1.0])[0] + value_cost(SYM, [2.0])[0]
    assert value_cost(TRUSTED, [math.inf]) == (math.inf, True)


def test_metric_cost_sums_distinct_values_from_their_first_step() -> None:
    # two values first released at step 0, one at step 1, chain 1 -> 3: asym costs 3 * (2 * 3 / 2)
    assert metric_cost(ASYM, [1.0, 3.0], {0: 2, 1: 1}) == (9.0, True)
    # symmetric: the late value only pays its single level, the early ones the pair
    cost, _ = metric_cost(SYM, [1.0, 2.0], {0: 1, 1: 1})
    assert cost == pytest.approx(value_cost(SYM, [1.0, 2.0])[0] + value_cost(SYM, [2.0])[0], abs=3e-6)


def test_new_values_cost_once_and_the_ceiling_is_enforced(tmp_path: Path) -> None:
    client = make_client(tmp_path, 3.0)
    for value in ("a", "b", "c"):
        client.report("places", value)
        client.report("places", value)  # repeating a value is free
    entry = client.ledger()["places"]
    assert (entry.spent, entry.remaining, entry.distinct_values) == (3.0, 0.0, 3)
    with pytest.raises(BudgetExceeded) as info:
        client.report("places", "d")
    assert (info.value.requested, info.value.remaining) == (1.0, 0.0)
    assert len(client._state.queue) == 6  # nothing queued for the refused value
    client.report("places", "a")  # a known value is still fine
    assert client.ledger()["places"].spent == 3.0
    assert client.ledger().events[-1].kind == "refused"


def test_ceiling_boundary_is_tight(tmp_path: Path) -> None:
    # exactly at the ceiling passes; a hair below refuses (remaining reported)
    assert make_client(tmp_path / "a", 1.0).report("places", "x")
    client = make_client(tmp_path / "b", 0.999999)
    with pytest.raises(BudgetExceeded) as info:
        client.report("places", "x")
    assert info.value.requested == 1.0 and info.value.remaining == pytest.approx(0.999999)


def test_relaxation_checks_the_ceiling_first_and_refuses_tightening(tmp_path: Path) -> None:
    client = make_client(tmp_path, 5.0)
    client.report("places", "a")
    client.report("places", "b")  # spent 2
    with pytest.raises(BudgetExceeded) as info:
        client.relax("places", 3.0, round_id=1)  # 2 values * 2 * 1.5 = 6 > 5
    assert (info.value.requested, info.value.remaining) == (4.0, 3.0)
    assert client.ledger()["places"].levels == (1.0,)
    entry = client.relax("places", 2.5, round_id=1)  # 2 * 2 * 1.25 = 5
    assert (entry.levels, entry.rounds, entry.spent, entry.remaining) == ((1.0, 2.5), (0, 1), 5.0, 0.0)
    with pytest.raises(TighteningRefused) as tight:
        client.relax("places", 2.0, round_id=2)
    assert (tight.value.current, tight.value.requested) == (2.5, 2.0)
    assert client.relax("places", 2.5, round_id=1).levels == (1.0, 2.5)  # the same round again: no-op
    # a new value now costs the current level: refused
    with pytest.raises(BudgetExceeded):
        client.report("places", "c")


def test_relax_before_any_report_is_free_and_later_values_pay_the_new_level(tmp_path: Path) -> None:
    client = make_client(tmp_path, 10.0)
    assert client.relax("places", 4.0, round_id=3).spent == 0.0
    client.report("places", "a")
    assert client.ledger()["places"].spent == 4.0  # k * 4 / 2


def test_ledger_view(tmp_path: Path) -> None:
    client = make_client(tmp_path, {"*": 10.0, "os": 20.0})
    client.report("os", "mac")
    entry = client.ledger()["os"]
    guarantee = CAT.guarantee(2.0)
    assert entry.mode == "symmetric" and entry.ceiling == 20.0
    assert entry.epsilon_per_report == guarantee.epsilon_per_report
    assert entry.epsilon_per_value == entry.spent == value_cost(CAT, [2.0])[0]
    assert entry.remaining == pytest.approx(20.0 - entry.spent)
    assert "absence" in entry.protects
    assert "os" in client.ledger() and "places" not in client.ledger()
    with pytest.raises(ParameterError):
        client.report("os", {"mac", "linux"})  # one value per report for categorical data
    with pytest.raises(ParameterError):
        client.report("os", "beos")  # outside the declared domain
    assert client.ledger()["os"].distinct_values == 1


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
    assert check_new_value(record, ASYM, 4.0, prior=3.0) == 4.0
    with pytest.raises(BudgetExceeded) as info:
        check_new_value(record, ASYM, 4.0, prior=3.5)
    assert info.value.remaining == 0.5


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
