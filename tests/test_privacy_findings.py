"""The audit's findings on the device side, one test each (they failed before the fix):
none_value validation, level cap, exact rounding up, round decisions that ignore the values."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aggregator.demo.local import local_aggregator
from aggregator.server.services.estimates import _check_candidates
from aggregator.server.storage import MetricRecord as StoredMetric
from client_sdk import Client
from client_sdk.testing import FakeAggregator
from protocol.accounting import round_up
from protocol.encodings import BloomEncoding, DirectEncoding
from protocol.errors import ParameterError, PolicyError
from protocol.params import MetricParams
from protocol.randomizers import MAX_LEVEL, Randomizer

DOMAIN = DirectEncoding(domain=("none", "flu", "covid"))
BLOOM = BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4)


def categorical(**kwargs: object) -> MetricParams:
    base: dict[str, object] = {"name": "dx", "encoding": DOMAIN, "mode": "asymmetric", "level": 2.0,
                               "value_kind": "categorical", "none_value": "none"}
    base.update(kwargs)
    return MetricParams(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "measles", 3])
def test_a_none_value_must_be_a_non_empty_item_of_the_direct_domain(bad: object) -> None:
    with pytest.raises(ParameterError) as info:
        categorical(none_value=bad)
    assert info.value.field == "none_value"
    with pytest.raises(PolicyError):
        categorical(none_value=None)
    with pytest.raises(ParameterError) as on_sets:
        categorical(value_kind="set")
    assert on_sets.value.field == "none_value"


def test_none_is_all_zeros_on_bloom_too_and_never_a_candidate() -> None:
    params = categorical(encoding=BLOOM, none_value="nothing")
    for cohort in range(4):
        assert not params.encode("nothing", cohort).any() and not params.encode(b"nothing", cohort).any()
        assert params.encode("flu", cohort).sum() in (1, 2)
    stored = cast(StoredMetric, SimpleNamespace(params=categorical()))
    assert _check_candidates(stored, None) == ("flu", "covid")
    with pytest.raises(ParameterError) as info:
        _check_candidates(stored, ("none", "flu"))
    assert info.value.field == "candidates"


def test_the_client_sends_noise_only_for_none(tmp_path: Path) -> None:
    params = categorical(level=MAX_LEVEL)  # noise ones nearly never: what is sent is the true bits
    fake = FakeAggregator([params])
    client = Client("http://agg.test", tmp_path / "s", background=False, server_public_keys=fake.sign_public, session=fake,
                    max_epsilon=math.inf)
    client.sync()
    client.report("dx", "none")
    client.flush()
    (payload,) = fake.payloads("dx")
    assert not payload.bits.any()


def test_levels_are_capped_where_every_probability_is_representable() -> None:
    assert Randomizer(mode="asymmetric", level=MAX_LEVEL).f > 2.0**-40
    for mode in ("symmetric", "asymmetric"):
        with pytest.raises(ParameterError) as info:
            Randomizer(mode=mode, level=MAX_LEVEL * 1.0001)
        assert info.value.field == "level"
    with pytest.raises(ParameterError) as info:
        MetricParams.from_dict({"name": "x", "encoding": DOMAIN.to_dict(), "mode": "symmetric", "level": 80})
    assert info.value.field == "level"


def test_the_server_refuses_levels_above_the_cap(tmp_path: Path) -> None:
    with local_aggregator(tmp_path / "agg") as agg:
        agg.admin.post("/v1/metrics", categorical().to_dict())
        import requests

        headers = {"Authorization": f"Bearer {agg.admin.token}"}
        r = requests.post(agg.url + "/v1/metrics/dx/rounds", json={"level_to": 80}, headers=headers, timeout=30)
        assert (r.status_code, r.json()["field"]) == (400, "level_to")
        bad = categorical(name="dx2").to_dict() | {"level": 40}
        r = requests.post(agg.url + "/v1/metrics", json=bad, headers=headers, timeout=30)
        assert (r.status_code, r.json()["field"]) == (400, "level")
        assert agg.storage.list_rounds() == []


def test_round_up_rounds_up_always() -> None:
    assert round_up(1.0000000009) == 1.000001  # was 1.0
    assert round_up(1.0) == 1.0 and round_up(0.5) == 0.5
    assert round_up(2.0, slack=1e-12) == 2.000001


@given(st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False))
def test_round_up_is_never_below_its_input_and_is_idempotent(x: float) -> None:
    up = round_up(x)
    assert Fraction(up) >= Fraction(x) and up - x <= 1e-6 + 1e-9 * x
    assert round_up(up) == up


def test_round_decisions_do_not_depend_on_the_values(tmp_path: Path) -> None:
    # the audit's case: a client with 1 distinct set joined a round, one with 3 stayed behind. Now the
    # cost, and so every refusal, depends on the windows and levels only.
    params = MetricParams(name="places", encoding=BLOOM, mode="asymmetric", level=1.0)
    spent = {}
    for name, values in {"same": ["a", "a", "a"], "changing": ["a", "b", "c"]}.items():
        fake = FakeAggregator([params])
        now = [1_699_920_000.0]
        client = Client("http://agg.test", tmp_path / name, background=False, server_public_keys=fake.sign_public, session=fake,
                        max_epsilon=6.0, clock=lambda now=now: now[0])  # type: ignore[misc]
        client.sync()
        for value in values:
            client.report("places", value)
            now[0] += 86400
        client.report("places", values[0])
        outcomes = []
        for level in (2.0, 3.5):  # 3 closed windows (3.0) + the open one relaxed: to 2 fits (5), 3.5 not (6.5)
            try:
                client.relax("places", level, round_id=int(level))
                outcomes.append("joined")
            except Exception as exc:  # noqa: BLE001 - recorded as the decision
                outcomes.append(type(exc).__name__)
        spent[name] = (client.ledger()["places"].spent, outcomes, len(client._state.queue))
    assert spent["same"] == spent["changing"] == (5.0, ["joined", "BudgetExceeded"], 5)


def test_the_guarantee_names_the_neighbour_docs_privacy_states() -> None:
    # MetricParams.guarantee() and docs/privacy.md say the same thing, mode by mode
    text = (Path(__file__).resolve().parents[1] / "docs" / "privacy.md").read_text()
    cases = [
        MetricParams(name="s", encoding=BLOOM, mode="symmetric", level=1.0),
        MetricParams(name="c", encoding=DOMAIN, mode="symmetric", level=1.0, value_kind="categorical"),
        MetricParams(name="a", encoding=BLOOM, mode="asymmetric", level=1.0),
        categorical(),
    ]
    for params in cases:
        guarantee = params.guarantee()
        assert guarantee.neighbour in text, guarantee.neighbour
        assert guarantee.epsilon_longitudinal > 0 and guarantee.protects and guarantee.reveals
