"""An offline first launch and a client that follows the server: values wait for the first config in
the encrypted state, the background sender syncs (with backoff), re-syncs on the config's schedule and
when an upload answer says the config changed; operational conditions never raise into the host."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from clocks import Clock

from client_sdk import Client, RetryPolicy, TransportError
from client_sdk.testing import FakeAggregator
from protocol.crypto import b64e
from protocol.encodings import BloomEncoding, DirectEncoding
from protocol.errors import BudgetExceeded, ParameterError, ReportRejected
from protocol.params import MetricParams
from protocol.wire import (
    SYNC_INTERVAL_RANGE,
    RoundAnnouncement,
    build_config_payload,
    validate_config_payload,
)

DAY = 86_400
T0 = 1_700_000_000 // DAY * DAY
PLACES = MetricParams(name="places", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                      mode="asymmetric", level=1.0)
OS = MetricParams(name="os", encoding=DirectEncoding(domain=("linux", "mac", "win")), mode="symmetric", level=1.0,
                  value_kind="categorical")


class Offline:
    """A session whose every request fails to connect (no network)."""

    def __init__(self) -> None:
        self.calls = 0

    def request(self, *args: Any, **kwargs: Any) -> Any:
        import requests

        self.calls += 1
        raise requests.ConnectionError("offline")

    def close(self) -> None:
        pass


def make_client(session: Any, fake: FakeAggregator, path: Path, clock: Clock, **kwargs: Any) -> Client:
    kwargs.setdefault("max_epsilon", 10.0)
    return Client("http://agg.test", path, background=False, strict=True, server_public_keys=fake.sign_public, session=session, clock=clock,
                  retry=RetryPolicy(max_attempts=1), **kwargs)


def test_values_reported_offline_wait_encrypted_and_go_out_in_their_own_window(tmp_path: Path) -> None:
    fake, clock, path = FakeAggregator([PLACES, OS]), Clock(T0 + 3600.0), tmp_path / "s"
    client = make_client(Offline(), fake, path, clock)
    assert client.report("places", {"cafe-secret", "home"}).status == "waiting"  # first launch, offline: no exception
    assert client.report("os", "linux").status == "waiting"
    with pytest.raises(TransportError):
        client.sync()  # the app asked for it: sync() still raises
    assert client.ledger().queued_reports == 0 and not client.ledger().entries  # nothing encoded or charged
    client.close(flush=False)
    assert b"cafe-secret" not in path.read_bytes() and b64e(b"cafe-secret").encode() not in path.read_bytes()
    clock.advance(DAY)  # the config arrives the next day
    again = make_client(fake, fake, path, clock)
    again.sync()
    ledger = again.ledger()
    assert ledger["places"].windows == 1 and ledger["os"].windows == 1 and ledger.queued_reports == 2
    again.flush()
    windows = {env.metric: env.window for env, _ in fake.stored.values()}
    assert windows == {"places": T0, "os": T0}  # the window of the report() call, not of the sync
    assert again.report("places", {"cafe"}) is not None  # today's window: a new report


def test_what_the_config_refuses_of_a_waiting_value_goes_to_on_error(tmp_path: Path) -> None:
    fake, clock = FakeAggregator([PLACES, OS]), Clock(T0 + 60.0)
    errors: list[Exception] = []
    client = make_client(Offline(), fake, tmp_path / "s", clock, on_error=errors.append, max_epsilon=1.0)
    client.report("nope", "x")  # unknown once the config is known
    client.report("os", {"linux", "mac"})  # a set for a categorical metric
    client.report("places", {"a"})
    client.report("places", {"b"})  # a second value in the same window
    client.transport.session = fake
    client.sync()  # never raises for them
    kinds = [type(e).__name__ for e in errors if not isinstance(e, TransportError)]
    assert kinds == ["ParameterError", "ParameterError", "AlreadyReported"]
    assert client.ledger()["places"].windows == 1 and client.ledger().queued_reports == 1
    with pytest.raises(ParameterError):
        client.report("nope", "x")  # with a config, a programming error raises again
    with pytest.raises(ParameterError):
        client.report("places", 42)  # type: ignore[arg-type]  # a wrong type raises, config or not


def test_silent_budget_refusals_return_none_and_tell_on_error(tmp_path: Path) -> None:
    fake, clock = FakeAggregator([PLACES]), Clock(T0 + 60.0)
    errors: list[Exception] = []
    client = make_client(fake, fake, tmp_path / "s", clock, on_error=errors.append, max_epsilon=1.0,
                         budget_refusals="skip")
    client.sync()
    assert client.report("places", {"a"}) is not None
    clock.advance(DAY)
    assert client.report("places", {"b"}).status == "refused"
    assert isinstance(errors[-1], BudgetExceeded)
    strict = make_client(fake, fake, tmp_path / "t", clock, max_epsilon=1.0)
    strict.sync()
    strict.report("places", {"a"})
    clock.advance(DAY)
    with pytest.raises(BudgetExceeded):
        strict.report("places", {"b"})
    with pytest.raises(ParameterError) as info:
        make_client(fake, fake, tmp_path / "u", clock, budget_refusals="ignore")
    assert info.value.field == "budget_refusals"


def test_background_sender_syncs_with_backoff_then_sends_what_waited(tmp_path: Path) -> None:
    fake = FakeAggregator([PLACES])
    fake.fail_next(3, status=None)  # the first three syncs find no network
    errors: list[Exception] = []
    client = Client("http://agg.test", tmp_path / "s", server_public_keys=fake.sign_public, session=fake,
                    max_epsilon=10.0, retry=RetryPolicy(max_attempts=1), on_error=errors.append,
                    background=True, send_interval=0.01, sync_interval=0.02)
    assert client.report("places", {"home"}).status == "waiting"  # returns at once, offline
    for _ in range(1000):
        if fake.stored:
            break
        time.sleep(0.01)
    assert len(fake.stored) == 1 and client.config is not None  # synced and sent without the app's help
    assert sum(isinstance(e, TransportError) for e in errors) == 3
    result = client.close()
    assert result.remaining == 0


def test_the_client_follows_the_server_schedule_and_its_rounds(tmp_path: Path) -> None:
    fake, clock = FakeAggregator([PLACES]), Clock(T0 + 60.0)
    fake.sync_interval = 600
    client = make_client(fake, fake, tmp_path / "s", clock, monotonic=clock)  # the schedule is monotonic
    client._background.first()  # the sender's first turn: the first sync
    client.report("places", {"home"})
    configs = lambda: sum(1 for m, p in fake.requests if p == "/v1/config")  # noqa: E731
    assert configs() == 1
    clock.advance(599)
    client._background.tick()
    assert configs() == 1  # not due yet: the config said 600 s
    fake.open_round(RoundAnnouncement(
        round_id=1, metric="places", params_digest=fake.entries["places"].digest, level_from=1.0, level_to=2.0,
        cohorts=None, opened_at=int(clock.now), expires_at=int(clock.now) + DAY,
    ))
    clock.advance(1)
    client._background.tick()
    assert configs() == 2
    assert client.ledger()["places"].levels == (1.0, 2.0)  # joined without the app calling sync()
    assert [p.level for p in fake.payloads("places")] == [1.0, 2.0]


def test_an_outdated_config_answer_makes_the_sender_sync_at_its_next_turn(tmp_path: Path) -> None:
    fake, clock = FakeAggregator([PLACES]), Clock(T0 + 60.0)
    client = make_client(fake, fake, tmp_path / "s", clock, sync_interval=DAY)
    client._background.first()
    client.report("places", {"home"})
    fake.entries["places"] = type(fake.entries["places"]).of(
        MetricParams(name="places", encoding=PLACES.encoding, mode="asymmetric", level=2.0))
    errors: list[Exception] = []
    client._on_error = errors.append
    client.flush()
    assert isinstance(errors[0], ReportRejected) and errors[0].code == "outdated_config"
    before = len(fake.requests)
    client._background.tick()
    assert ("GET", "/v1/config") in fake.requests[before:]  # synced long before sync_interval


def test_the_config_sync_interval_is_optional_and_bounded() -> None:
    fake = FakeAggregator([PLACES])
    info = fake.keys.public_info()
    plain = build_config_payload(issued_at=1, aggregator=info, metrics=[], rounds=[])
    assert "sync_interval" not in plain  # left out: clients that predate the field accept the config
    assert validate_config_payload(plain, sign_public=fake.keys.sign_public_raw).sync_interval is None
    timed = build_config_payload(issued_at=1, aggregator=info, metrics=[], rounds=[], sync_interval=900)
    assert validate_config_payload(timed, sign_public=fake.keys.sign_public_raw).sync_interval == 900
    low, high = SYNC_INTERVAL_RANGE
    for bad in (low - 1, high + 1, 1.5, True):
        with pytest.raises(ReportRejected) as err:
            validate_config_payload(dict(plain, sync_interval=bad), sign_public=fake.keys.sign_public_raw)
        assert err.value.field == "sync_interval"
