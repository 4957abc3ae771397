"""Rounds that relax the instantaneous randomized response (IRR): wire, storage, accounting, client.

The accounting tests are exact computations on small cases (no sampling): a
window's charge is the proven ``enclosed_report_chain_charge`` of the IRR
levels its reports used (equal, on these chains, to the float
``report_chain_epsilon``), and never below the loss of what was sent,
computed here from ``report_chain_law`` for a one-bit metric.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from aggsupport import BACKENDS, database_url
from roundsupport import NOW, announce

from aggregator.server.storage import Storage, migrations
from client_sdk import Client
from client_sdk.ledger import WindowRelease, window_cost, with_irr
from client_sdk.testing import FakeAggregator
from protocol.accounting import round_up, sequence_bit_epsilon, to_micro
from protocol.crypto import AggregatorKeys
from protocol.encodings import DirectEncoding
from protocol.errors import ParameterError, ReportRejected
from protocol.irr_relaxation import (
    check_irr_step,
    enclosed_report_chain_charge,
    report_chain_epsilon,
    report_chain_law,
)
from protocol.params import MetricParams
from protocol.wire import validate_config_payload, validate_round_announcement

# One bit: a direct metric of one value (k = 1), so a window's cost is the cost of one bit's chain.
BIT_SYM = MetricParams(name="flag", encoding=DirectEncoding(domain=("on",)), mode="symmetric",
                       level=2 * math.log(3), irr_p=0.5, irr_q=0.75)  # RAPPOR's f = 0.5... level 2 ln 3: f = 1/3
BIT_ASYM = MetricParams(name="seen", encoding=DirectEncoding(domain=("yes",)), mode="asymmetric", level=2.0,
                        irr_q=0.5)




# --------------------------------------------------------------------------
# The announcement
# --------------------------------------------------------------------------


def test_an_announcement_without_irr_is_the_same_payload_as_before() -> None:
    plain = announce(BIT_SYM, 1, 1.0, 2.0)
    assert sorted(plain.to_payload()) == sorted(("version", "round_id", "metric", "params_digest", "level_from",
                                                 "level_to", "cohorts", "opened_at", "expires_at"))
    assert plain.irr is None
    relaxing = announce(BIT_SYM, 1, 1.0, 2.0, irr_p=0.25, irr_q=0.75)
    payload = relaxing.to_payload()
    assert (payload["irr_p"], payload["irr_q"]) == (0.25, 0.75)
    assert validate_round_announcement(payload) == relaxing
    one_sided = announce(BIT_ASYM, 1, 2.0, 2.0, irr_q=0.2).to_payload()
    assert "irr_p" not in one_sided and validate_round_announcement(one_sided).irr == (None, 0.2)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"level_to": 1.0}, "level_to"),  # keeps the level and the IRR
        ({"irr_p": 0.25}, "irr_q"),  # irr_p alone
        ({"irr_q": 1.5}, "irr_q"),
        ({"irr_p": -0.1, "irr_q": 0.5}, "irr_p"),
    ],
)
def test_bad_irr_fields_are_refused_naming_the_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(ReportRejected) as info:
        announce(BIT_SYM, 1, 1.0, fields.pop("level_to", 2.0), **fields)
    assert info.value.field == field


def test_an_irr_only_round_keeps_the_level_and_a_null_irr_is_refused() -> None:
    assert announce(BIT_SYM, 1, 1.0, 1.0, irr_p=0.25, irr_q=0.75).level_to == 1.0
    payload = announce(BIT_SYM, 1, 1.0, 2.0).to_payload() | {"irr_q": None}
    with pytest.raises(ReportRejected) as info:
        validate_round_announcement(payload)
    assert info.value.field == "irr_q"


@pytest.mark.parametrize(
    ("params", "irr", "field"),
    [
        (BIT_SYM, {"irr_p": 0.6, "irr_q": 0.75}, "irr"),  # tighter: (0.5, 0.75) is not a garbling of it
        (BIT_SYM, {"irr_q": 0.9}, "irr_q"),  # the symmetric IRR is the pair
        (BIT_ASYM, {"irr_p": 0.1, "irr_q": 0.2}, "irr_p"),  # the asymmetric IRR has irr_q only
        (BIT_ASYM, {"irr_q": 0.6}, "irr"),
        (dataclasses.replace(BIT_SYM, irr_p=None, irr_q=None), {"irr_p": 0.1, "irr_q": 0.9}, "irr"),  # none to relax
    ],
)
def test_a_signed_config_refuses_a_round_irr_that_does_not_relax_the_metrics(
    params: MetricParams, irr: dict[str, float], field: str
) -> None:
    keys = AggregatorKeys.generate()
    fake = FakeAggregator([params], keys=keys)
    fake.open_round(announce(params, 1, params.level, params.level + 1.0, **irr))
    document = fake.config_document()
    with pytest.raises(ReportRejected) as info:
        validate_config_payload(document["payload"], sign_public=keys.sign_public_raw)
    assert info.value.field == f"rounds[0].payload.{field}"


def test_check_irr_step_accepts_relaxations_and_the_identity() -> None:
    check_irr_step("symmetric", (0.5, 0.75), (0.25, 0.75))
    check_irr_step("symmetric", (0.5, 0.75), (0.5, 0.75))
    check_irr_step("asymmetric", (None, 0.5), (None, 0.05))
    with pytest.raises(ParameterError) as info:
        check_irr_step("trusted", (None, None), (None, 0.5))
    assert info.value.field == "mode"


# --------------------------------------------------------------------------
# Storage: the migration and the stored IRR
# --------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_migration_5_adds_nullable_irr_columns_to_existing_rounds(backend: str, tmp_path: Path) -> None:
    with database_url(backend, tmp_path) as url:
        storage = Storage.open(url, migrate=False)
        try:
            assert migrations.migrate(storage.engine, target=4) == 4
            record, _ = storage.put_metric(BIT_ASYM, now=int(NOW))
            with storage.engine.begin() as conn:  # a round as version 4 stored it
                conn.execute(sa.text(
                    "INSERT INTO rounds (metric_id, level_from, level_to, cohorts, opened_at, expires_at, announcement)"
                    " VALUES (:m, 2.0, 3.0, NULL, :t, :e, '{}')"), {"m": record.id, "t": int(NOW), "e": int(NOW) + 60})
            assert storage.migrate() == 5
            (old,) = storage.list_rounds("seen")
            assert (old.irr_p, old.irr_q, old.irr) == (None, None, None)
            opened = storage.open_round(metric="seen", level_from=(3.0, None, 0.25), level_to=3.0, cohorts=None,
                                        expires_at=int(NOW) + 60, sign=lambda p: {"payload": p}, now=int(NOW))
            assert opened.irr == (None, 0.25) and opened.announcement["payload"]["irr_q"] == 0.25
            assert storage.get_round(opened.id) == opened
        finally:
            storage.close()


# --------------------------------------------------------------------------
# Exact accounting
# --------------------------------------------------------------------------


def exact_loss(params: MetricParams, levels: list[float], irrs: list[tuple[float | None, float | None] | None],
               relaxed: list[bool]) -> float:
    """The exact epsilon of a one-bit metric's window reports, from their joint law (not rounded)."""
    randomizers = [with_irr(params, irr).randomizer(level) for level, irr in zip(levels, irrs, strict=True)]
    zero, one = report_chain_law(randomizers, relaxed=relaxed)
    assert set(one) <= set(zero)  # what a true 1 may send, a true 0 may send too
    up = max(math.log(one[y] / zero[y]) for y in one)
    if params.mode == "asymmetric":
        return up  # the protected direction; a sequence only a true 0 sends is the declared leak
    assert set(zero) == set(one)
    return max(up, max(math.log(zero[y] / one[y]) for y in one))


CHAINS = [
    # (params, levels, irrs, relaxed): an IRR-only round, then one that also raises the level, then mixed
    (BIT_SYM, [BIT_SYM.level] * 2, [None, (0.25, 0.75)], [True]),
    (BIT_SYM, [BIT_SYM.level] * 3, [None, (0.25, 0.75), (0.1, 0.9)], [True, True]),
    (BIT_SYM, [BIT_SYM.level, 2 * BIT_SYM.level], [None, (0.25, 0.75)], [True]),
    (BIT_SYM, [BIT_SYM.level, BIT_SYM.level, 1.5 * BIT_SYM.level], [None, None, (0.25, 0.75)], [False, True]),
    (BIT_ASYM, [2.0, 2.0], [None, (None, 0.2)], [True]),
    (BIT_ASYM, [2.0, 4.0], [None, (None, 0.05)], [True]),
    (BIT_ASYM, [2.0, 3.0, 4.0], [None, (None, 0.3), (None, 0.1)], [True, False]),
]


@pytest.mark.parametrize(("params", "levels", "irrs", "relaxed"), CHAINS)
def test_the_window_charge_is_the_exact_report_chain(
    params: MetricParams, levels: list[float], irrs: list[Any], relaxed: list[bool]
) -> None:
    spent, exact = window_cost(params, levels, irrs, relaxed)
    randomizers = [with_irr(params, irr).randomizer(level) for level, irr in zip(levels, irrs, strict=True)]
    chain = report_chain_epsilon(randomizers, value_kind=params.value_kind, relaxed=relaxed)
    longitudinal = sequence_bit_epsilon(params.mode, tuple(dict.fromkeys(levels)))[0]
    proven, proven_exact = enclosed_report_chain_charge(randomizers, value_kind=params.value_kind, relaxed=relaxed)
    assert exact and proven_exact
    assert to_micro(spent) == min(to_micro(proven), to_micro(longitudinal))  # the smaller valid bound, proven
    assert to_micro(spent) == min(to_micro(chain), to_micro(longitudinal))  # = the float law's, on these chains
    assert spent >= exact_loss(params, levels, irrs, relaxed)  # never below what was sent
    assert spent <= round_up(exact_loss(params, levels, irrs, relaxed)) + 1e-6 or spent == longitudinal


@pytest.mark.parametrize(("params", "levels", "irrs"), [
    (BIT_SYM, [BIT_SYM.level] * 3, [None, (0.25, 0.75), (0.1, 0.9)]),
    (BIT_ASYM, [2.0, 2.0], [None, (None, 0.2)]),
])
def test_a_relaxed_chain_at_one_level_costs_one_report_at_the_last_irr(
    params: MetricParams, levels: list[float], irrs: list[Any]
) -> None:
    spent, _ = window_cost(params, levels, irrs, [True] * (len(levels) - 1))
    last = with_irr(params, irrs[-1]).guarantee(levels[-1]).epsilon_per_report
    assert spent == pytest.approx(last, abs=1e-6)
    fresh, _ = window_cost(params, levels, irrs, [False] * (len(levels) - 1))
    assert fresh > spent  # drawing a fresh IRR every round composes


def test_the_default_chain_is_charged_its_reports_exact_epsilon() -> None:
    """No IRR relaxed: the reports' own epsilon (fresh IRRs), proven, never above the older composition bound."""
    levels = (BIT_SYM.level, 2 * BIT_SYM.level)
    composed = sum(to_micro(BIT_SYM.guarantee(v).epsilon_per_report) for v in levels)
    longitudinal = to_micro(sequence_bit_epsilon("symmetric", levels)[0])
    fresh = to_micro(enclosed_report_chain_charge([BIT_SYM.randomizer(v) for v in levels], relaxed=False,
                                                  value_kind=BIT_SYM.value_kind)[0])
    spent, exact = window_cost(BIT_SYM, levels)
    assert (to_micro(spent), exact) == (min(fresh, longitudinal), True)
    assert to_micro(spent) <= min(composed, longitudinal)


# --------------------------------------------------------------------------
# The client follows a round's IRR
# --------------------------------------------------------------------------


def client_of(tmp_path: Path, fake: FakeAggregator, **kwargs: Any) -> Client:
    return Client("http://agg.test", tmp_path / "state", background=False, server_public_keys=fake.sign_public,
                  max_epsilon=10.0, session=fake, clock=lambda: NOW, sleep=lambda s: None, rng=7,
                  insecure_rng_for_testing=True, **kwargs)


def posts(fake: FakeAggregator) -> int:
    return sum(1 for method, _ in fake.requests if method == "POST")


@pytest.mark.parametrize("params", [BIT_SYM, BIT_ASYM])
def test_an_irr_only_round_resends_relaxed_and_charges_one_report_at_the_last_irr(
    tmp_path: Path, params: MetricParams
) -> None:
    fake = FakeAggregator([params])
    client = client_of(tmp_path, fake)
    client.sync()
    value = params.encoding.domain[0]
    client.report(params.name, value)
    assert client.flush().delivered == 1
    record = client._state.metrics[params.name]
    assert record.current is not None and record.current.sent is not None  # the bits sent are kept
    irr = (0.25, 0.75) if params.mode == "symmetric" else (None, 0.2)
    fake.open_round(announce(params, 1, params.level, params.level, irr_p=irr[0], irr_q=irr[1]))
    client.sync()
    assert client.flush().delivered == 1
    entry = client.ledger()[params.name]
    assert entry.levels == (params.level, params.level) and entry.irrs == (None, irr) and entry.rounds == (0, 1)
    assert record.current.relaxed == [1]
    randomizers = [params.randomizer(), with_irr(params, irr).randomizer()]
    assert entry.spent == report_chain_epsilon(randomizers, value_kind=params.value_kind)
    assert entry.spent == pytest.approx(with_irr(params, irr).guarantee().epsilon_per_report, abs=1e-6)
    assert entry.epsilon_per_report == with_irr(params, irr).guarantee().epsilon_per_report
    # the round's re-send and the next windows carry the round; the IRR is kept
    assert sorted(env.round for env, _ in fake.stored.values()) == [0, 1]
    # the state keeps all of it across a restart
    client.close()
    again = client_of(tmp_path, fake)
    assert again.ledger()[params.name] == entry
    assert again._state.metrics[params.name].current.relaxed == [1]


def test_a_round_that_also_relaxes_the_level_charges_the_chain(tmp_path: Path) -> None:
    fake = FakeAggregator([BIT_SYM])
    client = client_of(tmp_path, fake)
    client.sync()
    client.report("flag", "on")
    level_to = 2 * BIT_SYM.level
    fake.open_round(announce(BIT_SYM, 1, BIT_SYM.level, level_to, irr_p=0.25, irr_q=0.75))
    client.sync()
    spent = client.ledger()["flag"].spent
    levels = [BIT_SYM.level, level_to]
    irrs: list[tuple[float | None, float | None] | None] = [None, (0.25, 0.75)]
    relaxed, fresh = (window_cost(BIT_SYM, levels, irrs, [flag])[0] for flag in (True, False))
    assert spent == min(relaxed, fresh)  # the relaxed step only where it is charged no more than a fresh IRR
    current = client._state.metrics["flag"].current
    assert current is not None and current.relaxed == ([1] if relaxed <= fresh else [])
    assert spent >= exact_loss(BIT_SYM, levels, irrs, [relaxed <= fresh])
    assert client.flush().delivered == 2
    assert [p.level for p in fake.payloads("flag")] == [BIT_SYM.level, level_to]


def test_a_client_without_the_last_report_sends_a_fresh_irr_and_is_charged_for_it(tmp_path: Path) -> None:
    """A state from before the field (no ``sent``): the round's re-send draws a fresh IRR, charged as such."""
    fake = FakeAggregator([BIT_SYM])
    client = client_of(tmp_path, fake)
    client.sync()
    client.report("flag", "on")
    record = client._state.metrics["flag"]
    old = record.current.to_dict()
    del old["sent"]
    record.current = WindowRelease.from_dict(old)
    fake.open_round(announce(BIT_SYM, 1, BIT_SYM.level, BIT_SYM.level, irr_p=0.25, irr_q=0.75))
    client.sync()
    assert record.current.relaxed == [] and record.current.sent is not None  # kept from now on
    levels, irrs = [BIT_SYM.level] * 2, [None, (0.25, 0.75)]
    assert client.ledger()["flag"].spent == window_cost(BIT_SYM, levels, irrs, [False])[0]
    assert client.ledger()["flag"].spent > window_cost(BIT_SYM, levels, irrs, [True])[0]


def test_a_round_with_no_irr_after_one_keeps_the_relaxed_irr(tmp_path: Path) -> None:
    fake = FakeAggregator([BIT_ASYM])
    client = client_of(tmp_path, fake)
    client.sync()
    client.report("seen", "yes")
    fake.open_round(announce(BIT_ASYM, 1, 2.0, 2.0, irr_q=0.2))
    client.sync()
    fake.rounds.clear()
    fake.open_round(announce(BIT_ASYM, 2, 2.0, 3.0))
    client.sync()
    entry = client.ledger()["seen"]
    assert entry.irrs == (None, (None, 0.2), (None, 0.2)) and entry.levels == (2.0, 2.0, 3.0)
    assert entry.spent == window_cost(BIT_ASYM, [2.0, 2.0, 3.0], [None, (None, 0.2), (None, 0.2)], [True, False])[0]


def test_a_signed_round_whose_irr_does_not_relax_the_clients_is_refused_and_sends_nothing(tmp_path: Path) -> None:
    """The server signed it and it relaxes the metric's own IRR, but not the one this client reports with now."""
    fake = FakeAggregator([BIT_ASYM])
    client = client_of(tmp_path, fake)
    client.sync()
    client.report("seen", "yes")
    fake.open_round(announce(BIT_ASYM, 1, 2.0, 2.0, irr_q=0.1))
    client.sync()
    client.flush()
    fake.rounds.clear()
    fake.open_round(announce(BIT_ASYM, 2, 2.0, 3.0, irr_q=0.3))  # (0.1) -> (0.3) would tighten it back
    before, spent = posts(fake), client.ledger()["seen"].spent
    client.sync()
    assert client.flush().delivered == 0 and posts(fake) == before
    entry = client.ledger()["seen"]
    assert entry.levels == (2.0, 2.0) and entry.spent == spent
    refused = [e for e in entry_events(client) if e.kind == "round_refused"]
    assert len(refused) == 1 and "round 2" in refused[0].detail and "irr" in refused[0].detail.lower()
    with pytest.raises(ParameterError) as info:  # and relax() itself refuses it
        client.relax("seen", 3.0, 2, irr=(None, 0.3))
    assert info.value.field == "irr"


def entry_events(client: Client) -> tuple[Any, ...]:
    return client.ledger().events


def test_later_windows_report_with_the_rounds_irr_and_are_charged_for_it(tmp_path: Path) -> None:
    fake = FakeAggregator([BIT_ASYM])
    clock = [NOW]
    client = Client("http://agg.test", tmp_path / "state", background=False, server_public_keys=fake.sign_public,
                    max_epsilon=10.0, session=fake, clock=lambda: clock[0], sleep=lambda s: None, rng=3,
                    insecure_rng_for_testing=True)
    client.sync()
    client.report("seen", "yes")
    fake.open_round(announce(BIT_ASYM, 1, 2.0, 2.0, irr_q=0.2))
    client.sync()
    before = client.ledger()["seen"].spent
    one_report = with_irr(BIT_ASYM, (None, 0.2)).guarantee(2.0).epsilon_per_report
    assert client.ledger()["seen"].epsilon_per_window == one_report
    clock[0] += BIT_ASYM.time_precision  # the next window
    client.report("seen", "yes")
    record = client._state.metrics["seen"]
    assert record.current.first_step == 1 and record.current.relaxed == []
    assert client._reporter.plans["seen"].plan.randomizer.irr_q == 0.2  # the report's IRR is the round's
    assert client.ledger()["seen"].spent == pytest.approx(before + one_report, abs=2e-6)
    assert client.flush().delivered == 3
    assert sorted(env.round for env, _ in fake.stored.values()) == [0, 1, 1]
