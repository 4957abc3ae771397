"""Rounds at the client: sync() applies a verified round or refuses it, sending nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from roundsupport import NOW, announce

from client_sdk import Client
from client_sdk.testing import FakeAggregator
from protocol.accounting import sequence_bit_epsilon
from protocol.crypto import AggregatorKeys
from protocol.encodings import BloomEncoding
from protocol.errors import SignatureError
from protocol.params import MetricParams

ASYM = MetricParams(name="places", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                    mode="asymmetric", level=1.0)
SYM = MetricParams(name="urls", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=1),
                   mode="symmetric", level=1.0)




def reporting_client(tmp_path: Path, fake: FakeAggregator, *, ceiling: float = 10.0,
                     metric: MetricParams = ASYM, **kwargs: Any) -> Client:
    client = Client("http://agg.test", tmp_path / "state", background=False, strict=True, server_public_keys=fake.sign_public,
                    max_epsilon=ceiling, session=fake, clock=lambda: NOW, sleep=lambda s: None, **kwargs)
    client.sync()
    client.report(metric.name, ["cafe", "park"])
    assert client.flush().delivered == 1
    return client


def posts(fake: FakeAggregator) -> int:
    return sum(1 for method, path in fake.requests if method == "POST")


def test_a_round_is_applied_and_costs_the_sequence_not_the_sum(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM])
    client = reporting_client(tmp_path, fake)
    fake.open_round(announce(ASYM, 2, 1.0, 3.0))
    client.sync()
    entry = client.ledger()["places"]
    assert list(entry.levels) == [1.0, 3.0]
    # asymmetric sequence (1 -> 3) costs k * 3/2 = 3.0 per set member, not k * (1/2 + 3/2) = 4.0
    assert entry.spent == pytest.approx(2 * sequence_bit_epsilon("asymmetric", (1.0, 3.0))[0]) == 3.0
    client.report("places", ["cafe", "park"])
    client.flush()
    payloads = fake.payloads("places")
    assert [p.level for p in payloads] == [1.0, 3.0]
    rounds = sorted(env.round for env, _ in fake.stored.values())
    assert rounds == [0, 2]


def test_symmetric_sequence_costs_the_exact_laplace_value(tmp_path: Path) -> None:
    fake = FakeAggregator([SYM])
    client = reporting_client(tmp_path, fake, metric=SYM)
    fake.open_round(announce(SYM, 1, 1.0, 2.0))
    client.sync()
    # one member of a set: k = 2 bits; the pair (1 -> 2) costs 1.5512 per bit (exact), not 2.0
    assert client.ledger()["urls"].spent == pytest.approx(2 * 1.5512, abs=1e-6)


def test_a_client_that_missed_rounds_jumps_to_the_latest(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM])
    client = reporting_client(tmp_path, fake)
    fake.open_round(announce(ASYM, 2, 1.0, 2.0))
    fake.open_round(announce(ASYM, 3, 2.0, 4.0))
    client.sync()
    assert list(client.ledger()["places"].levels) == [1.0, 4.0]


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("lowering", "does not raise the level"),
        ("ceiling", "budget"),
        ("expired", "expired"),
        ("cohort", "cohort"),
        ("declined", "declined by the app"),
    ],
)
def test_refused_rounds_send_nothing_and_say_why(tmp_path: Path, case: str, reason: str) -> None:
    fake = FakeAggregator([ASYM])
    ceiling = 2.5 if case == "ceiling" else 10.0
    kwargs: dict[str, Any] = {"accept_round": (lambda a: False)} if case == "declined" else {}
    client = reporting_client(tmp_path, fake, ceiling=ceiling, **kwargs)
    if case == "lowering":
        fake.open_round(announce(ASYM, 2, 1.0, 3.0))
        client.sync()
        fake.rounds.clear()
        fake.open_round(announce(ASYM, 3, 1.0, 2.0))  # a later round below the client's level 3.0
    elif case == "ceiling":
        fake.open_round(announce(ASYM, 2, 1.0, 6.0))  # costs 6.0 > 2.5
    elif case == "expired":
        fake.open_round(announce(ASYM, 2, 1.0, 3.0, expires_at=int(NOW) - 1))
    elif case == "cohort":
        own = client._state.metrics["places"].cohort
        fake.open_round(announce(ASYM, 2, 1.0, 3.0, cohorts=tuple(c for c in range(4) if c != own)))
    elif case == "declined":
        fake.open_round(announce(ASYM, 2, 1.0, 3.0))
    levels_before = list(client.ledger()["places"].levels)
    sent_before = posts(fake)
    client.sync()
    assert posts(fake) == sent_before  # nothing sent
    assert list(client.ledger()["places"].levels) == levels_before
    events = [e for e in client.ledger().events if e.kind == "round_refused"]
    assert events and reason in events[-1].detail.lower()
    client.report("places", ["cafe", "park"])
    client.flush()
    assert max(p.level for p in fake.payloads("places")) == levels_before[-1]


def test_a_mis_signed_announcement_refuses_the_whole_config(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM])
    client = reporting_client(tmp_path, fake)
    impostor = AggregatorKeys.generate()
    fake.rounds.append(impostor.sign(announce(ASYM, 2, 1.0, 9.0).to_payload()))
    sent_before = posts(fake)
    with pytest.raises(SignatureError):
        client.sync()
    assert posts(fake) == sent_before
    assert list(client.ledger()["places"].levels) == [1.0]


@pytest.mark.parametrize("why", ["declined", "ceiling"])
def test_refusal_is_recorded_once_per_round(tmp_path: Path, why: str) -> None:
    fake = FakeAggregator([ASYM])
    if why == "declined":
        client = reporting_client(tmp_path, fake, accept_round=lambda a: False)
    else:
        client = reporting_client(tmp_path, fake, ceiling=2.5)
    fake.open_round(announce(ASYM, 2, 1.0, 6.0 if why == "ceiling" else 3.0))
    before = len(client.ledger().events)
    for _ in range(3):
        client.sync()
    new_events = client.ledger().events[before:]
    assert [e.kind for e in new_events] == ["round_refused"]
