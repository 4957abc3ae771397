"""The client as a perfect guest: the environment never raises into the app, nothing on stderr, a disabled
switch, bounded waits, a quick return after an outage, and the report() path off the disk."""

from __future__ import annotations

import errno
import gc
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from client_sdk import Client, ClientEvent, ParameterError, ReportStatus, TransportError
from client_sdk import state as state_module
from client_sdk.client import FLUSH_DEADLINE
from client_sdk.lock import StateLock, StateLocked
from client_sdk.status import epsilon_text
from client_sdk.testing import FakeAggregator, FakeResponse
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams

PLACES = MetricParams(name="places", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                      mode="asymmetric", level=1.0)
T0 = 1_790_000_000.0
HOUR, DAY = 3600.0, 86400.0


class Clock:
    """Wall and monotonic time, moved together by :meth:`advance`; the wall clock alone by :meth:`jump`."""

    def __init__(self) -> None:
        self.now, self.mono = T0, 1000.0

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.mono += seconds

    def jump(self, seconds: float) -> None:
        self.now += seconds


def make_client(fake: FakeAggregator, path: Path, clock: Clock, **kwargs: Any) -> Client:
    kwargs.setdefault("max_epsilon", 1000.0)
    kwargs.setdefault("background", False)
    return Client("http://agg.test", path, server_public_keys=fake.sign_public, session=fake, clock=clock,
                  monotonic=clock.monotonic, sleep=lambda s: None, rng=7, insecure_rng_for_testing=True, **kwargs)


@pytest.fixture
def fake() -> FakeAggregator:
    return FakeAggregator([PLACES])


# --- never raise into the host ------------------------------------------------------------------


def test_a_full_disk_never_raises_and_the_report_is_written_and_sent_later(
    fake: FakeAggregator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock, events = Clock(), list[ClientEvent]()
    client = make_client(fake, tmp_path / "s", clock, on_event=events.append)
    client.sync()
    real = state_module.write_atomically

    def full(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(state_module, "write_atomically", full)
    status = client.report("places", {"home"})
    assert status.status == "queued" and status.report_id
    client.save()  # nor does save()
    result = client.flush()  # nothing leaves before it is on disk
    assert result.delivered == 0 and not fake.stored and isinstance(result.error, OSError)
    assert [e.kind for e in events].count("disk_error") == 1  # once per run of failures
    monkeypatch.setattr(state_module, "write_atomically", real)
    assert client.flush().delivered == 1  # the disk is back: written, then sent
    assert [e.kind for e in events][-1] == "disk_ok"
    monkeypatch.setattr(state_module, "write_atomically", full)
    clock.advance(DAY)
    assert client.report("places", {"park"}).queued
    assert client.close(flush=False).remaining == 1  # close() does not raise either


def test_an_unwritable_state_folder_gives_a_dropped_status(
    fake: FakeAggregator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(self: StateLock) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(StateLock, "acquire", refused)
    events: list[ClientEvent] = []
    client = make_client(fake, tmp_path / "s", Clock(), on_event=events.append)
    status = client.report("places", {"home"})
    assert status.status == "dropped" and not status and "Permission denied" in str(status.reason)
    assert client.flush().delivered == 0 and client.close().remaining == 0
    assert [e.kind for e in events] == ["state_unavailable"]
    with pytest.raises(PermissionError):
        make_client(fake, tmp_path / "t", Clock(), strict=True)


def test_an_unregistered_metric_and_bad_values_are_refused_not_raised(fake: FakeAggregator, tmp_path: Path) -> None:
    errors: list[Exception] = []
    client = make_client(fake, tmp_path / "s", Clock(), on_error=errors.append)
    client.sync()
    unknown = client.report("not-yet-registered", "x")
    assert unknown.status == "refused" and "not a metric" in str(unknown.reason)
    assert client.report("places", 42).status == "refused"  # type: ignore[arg-type]
    assert [type(e) for e in errors] == [ParameterError, ParameterError]
    strict = make_client(fake, tmp_path / "t", Clock(), debug=True)
    strict.sync()
    with pytest.raises(ParameterError):
        strict.report("not-yet-registered", "x")


def test_disabled_is_a_cheap_no_op(fake: FakeAggregator, tmp_path: Path) -> None:
    client = make_client(fake, tmp_path / "s", Clock(), disabled=True, background=True)
    status = client.report("places", {"home"})
    assert isinstance(status, ReportStatus) and status.status == "disabled"
    client.save()
    assert client.flush().delivered == 0 and client.close().remaining == 0
    assert client.config is None and client.ledger().queued_reports == 0
    for explicit in (client.sync, lambda: client.relax("places", 2.0, 1)):  # they ask for a result: none
        with pytest.raises(ParameterError) as info:
            explicit()
        assert info.value.field == "client"
    assert client.ledger().entries == () and list(tmp_path.iterdir()) == [] and fake.requests == []


def test_the_sdk_writes_nothing_to_stderr(tmp_path: Path) -> None:
    script = f"""
import logging
from client_sdk import Client
from client_sdk.testing import FakeAggregator
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams
m = MetricParams(name="places", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                 mode="asymmetric", level=1.0)
fake = FakeAggregator([m])
now = [{T0}]
c = Client("http://agg.test", {str(tmp_path / 's')!r}, server_public_keys=fake.sign_public, session=fake,
           max_epsilon=1.0, budget_period="day", background=False, clock=lambda: now[0])
c.sync()
c.report("places", {{"a"}})        # the budget runs low: a warning
c.report("nope", "x")            # an unknown metric
now[0] += 86400 * 400
fake.fail_next(5, status=503)
c.flush()
c.close()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and done.stdout == ""


# --- bounded ----------------------------------------------------------------------------------------


def test_flush_without_a_deadline_ends_against_a_server_that_drips(fake: FakeAggregator, tmp_path: Path) -> None:
    clock = Clock()
    client = make_client(fake, tmp_path / "s", clock)
    client.sync()
    client.report("places", {"home"})
    chunks = 0

    def drip() -> Any:
        nonlocal chunks
        while chunks < 10_000:  # about 3 hours of the fake clock: a flush still reading then is stuck
            chunks += 1
            clock.advance(1.0)
            yield b" "
        raise AssertionError("still reading")

    def request(method: str, url: str, **kwargs: Any) -> FakeResponse:
        if url.endswith("/v1/reports"):
            return FakeResponse(200, chunks=drip())
        return fake.request(method, url, **kwargs)

    client.transport.session = type("Dripping", (), {"request": staticmethod(request), "close": lambda: None})
    result = client.flush()
    assert isinstance(result.error, TransportError) and result.remaining == 1
    assert chunks <= FLUSH_DEADLINE + 1


def test_values_before_the_first_config_are_deduplicated_and_capped(tmp_path: Path) -> None:
    fake = FakeAggregator([PLACES])
    clock = Clock()
    client = make_client(fake, tmp_path / "s", clock, max_waiting=50)
    fake.fail_next(10_000, status=None)
    for _ in range(2000):  # every few seconds, the same value: kept once
        client.report("places", {"home"})
        clock.advance(1.0)
    assert len(client._state.waiting) == 1
    for i in range(200):
        client.report("places", {f"v{i}"})
    assert len(client._state.waiting) == 50


# --- quick to come back ---------------------------------------------------------------------------


def test_the_config_is_synced_as_soon_as_the_network_is_back(fake: FakeAggregator, tmp_path: Path) -> None:
    clock = Clock()
    client = make_client(fake, tmp_path / "s", clock, retry=None)
    client.sync()
    client.report("places", {"home"})
    fake.fail_next(5, status=None)  # the background sync finds no network
    client._background.schedule.now()
    client._background.first()
    assert client._background.schedule.failures == 1  # next sync in 15-30 s, unless
    assert len(fake.stored) == 1  # the upload of the same turn went through: the network is back
    configs = [p for _, p in fake.requests].count("/v1/config")
    clock.advance(5.0)
    client._background.tick()
    assert [p for _, p in fake.requests].count("/v1/config") == configs + 1


def test_what_an_earlier_run_queued_leaves_at_the_first_turn(fake: FakeAggregator, tmp_path: Path) -> None:
    clock = Clock()
    client = make_client(fake, tmp_path / "s", clock)
    client.sync()
    client.report("places", {"home"})
    client.close(flush=False)
    again = make_client(fake, tmp_path / "s", clock)
    again._background.first()
    assert len(fake.stored) == 1 and len(again._queue) == 0


def test_defaults_close_to_posthog_and_sentry(fake: FakeAggregator, tmp_path: Path) -> None:
    client = make_client(fake, tmp_path / "s", Clock())
    assert client.options.send_interval <= 5.0 and 1.0 <= client.options.exit_deadline <= 2.0
    assert client.options.flush_at == 100 and client.transport.retry.retry_after_cap == 300.0


def test_a_client_dropped_without_close_frees_its_state_lock(fake: FakeAggregator, tmp_path: Path) -> None:
    client = make_client(fake, tmp_path / "s", Clock(), background=True, send_interval=0.01)
    thread = client._sender.thread
    del client
    for _ in range(100):  # the background thread may be inside one of its turns: it ends soon
        gc.collect()
        try:
            again = make_client(fake, tmp_path / "s", Clock())
        except StateLocked:
            time.sleep(0.05)
            continue
        break
    again.close()
    assert thread is not None
    thread.join(timeout=10)
    assert not thread.is_alive()  # the background thread ends with its client


# --- report() off the disk ----------------------------------------------------------------------


def test_report_writes_nothing_on_the_callers_thread_and_the_write_comes_before_the_send(
    fake: FakeAggregator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    client = make_client(fake, tmp_path / "s", clock, send_interval=3600.0)
    client.sync()
    writes: list[tuple[str, float]] = []
    real = state_module.write_atomically

    def recorded(path: Path, data: bytes) -> None:
        writes.append((threading.current_thread().name, time.monotonic()))
        real(path, data)

    monkeypatch.setattr(state_module, "write_atomically", recorded)
    client.start(3600.0)
    caller = threading.current_thread().name
    statuses = []
    for _ in range(5):
        statuses.append(client.report("places", {"home"}))
        clock.advance(DAY)
    for _ in range(500):
        if writes and client._disk.dirty is False and not client._queue.dirty:
            break
        time.sleep(0.01)
    assert all(s.queued for s in statuses)
    assert writes and all(name != caller for name, _ in writes)  # written by the background sender
    result = client.close()
    assert result.delivered == 5 and len(fake.stored) == 5


def test_a_burst_loses_nothing_below_max_queue_and_is_sent_meanwhile(fake: FakeAggregator, tmp_path: Path) -> None:
    clock = Clock()
    dropped: list[Exception] = []
    client = make_client(fake, tmp_path / "s", clock, autosave=False, max_queue=2000, flush_at=50, max_epsilon=1e9,
                         send_interval=3600.0, on_error=dropped.append)
    client.sync()
    client.start(3600.0)
    burst = 1500  # as fast as the app can call; the sender sends whenever 50 are queued
    for i in range(burst):
        client.report("places", {f"v{i % 5}"})
        clock.advance(DAY)
    # whatever reaches the server before close() was sent by the size trigger (the interval is an hour); on
    # a loaded machine the sender's thread may first run after the burst, so wait for it (bounded)
    waited_until = time.monotonic() + 30.0
    while not fake.stored and time.monotonic() < waited_until:
        time.sleep(0.01)
    sent_meanwhile = len(fake.stored)
    result = client.close(deadline=60.0)
    assert dropped == [] and client.ledger().dropped_reports == 0
    assert len(fake.stored) == burst and result.remaining == 0
    assert sent_meanwhile > 0  # a flush triggered by the queue's size, not by the interval (an hour here)


def test_printed_epsilons_round_up() -> None:
    assert epsilon_text(0.8996671) == "0.899668"  # 0.899667 would print less than the ledger charges
    assert epsilon_text(0.899668) == "0.899668" and epsilon_text(1.0) == "1"
    assert epsilon_text(0.000123456789) == "0.000123457" and epsilon_text(float("inf")) == "inf"
    for value in (0.123456789, 3.14159265, 1e-7 * 3.3333333, 98765.4321):
        assert float(epsilon_text(value)) >= value


def test_a_report_dropped_while_its_batch_is_in_flight_but_delivered_is_not_counted_dropped(
    fake: FakeAggregator, tmp_path: Path
) -> None:
    clock = Clock()
    client = make_client(fake, tmp_path / "s", clock, max_queue=3)
    client.sync()
    for _ in range(3):
        client.report("places", {"home"})
        clock.advance(DAY)
    upload = fake._upload

    def meanwhile(data: bytes, content_type: str, wire2: bool = False) -> FakeResponse:
        client.report("places", {"park"})  # the queue is full: its oldest, in this batch, is dropped
        return upload(data, content_type, wire2)

    fake._upload = meanwhile  # type: ignore[method-assign]
    result = client.flush()
    assert result.delivered == 3 and len(fake.stored) == 3
    assert client.ledger().dropped_reports == 0 and client.ledger().queued_reports == 1
