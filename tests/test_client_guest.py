"""The client as a guest in someone's app: a cheap queue, threads, background sending with deadlines,
bounded reads, only documented exceptions, and rollback detection."""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from client_sdk import Client, ReportsDropped, RetryPolicy, StateCorrupted, TransportError
from client_sdk.queue import COMPACT_MIN, item_id
from client_sdk.state import StateStore
from client_sdk.testing import FakeAggregator, FakeResponse, simulate_crash
from protocol.encodings import BloomEncoding
from protocol.errors import BudgetExceeded, ParameterError
from protocol.params import MetricParams

BLOOM = BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4)
ASYM = MetricParams(name="places", encoding=BLOOM, mode="asymmetric", level=1.0)
OTHERS = [MetricParams(name=f"m{i}", encoding=BLOOM, mode="asymmetric", level=1.0) for i in range(8)]
DAY = 86400.0


class Clock:
    """Wall time and monotonic time in one, moved by hand or by :meth:`sleep` (no real waiting)."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        self.mono = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.mono

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.mono += seconds
        self.now += seconds


def make_client(fake: FakeAggregator, path: Path, clock: Clock | None = None, **kwargs: Any) -> Client:
    clock = clock or Clock()
    kwargs.setdefault("max_epsilon", 100.0)
    kwargs.setdefault("session", fake)
    return Client("http://agg.test", path, background=False, strict=True, server_public_keys=fake.sign_public, clock=clock, sleep=clock.sleep,
                  monotonic=clock.monotonic, rng=5, insecure_rng_for_testing=True, **kwargs)


@pytest.fixture
def fake() -> FakeAggregator:
    return FakeAggregator([ASYM, *OTHERS])


def queue_reports(client: Client, n: int) -> list[str]:
    """``n`` reports of ``places``, one window each."""
    clock = client.options.clock
    assert isinstance(clock, Clock)
    if client.config is None:
        client.sync()
    ids: list[str] = []
    for i in range(n):
        clock.now += DAY
        ids.append(client.report("places", {f"p{i % 5}", "home"}))
    return ids


# --- 1. the queue in its own append-only file ------------------------------------------------


def test_report_appends_to_the_queue_file_and_the_state_does_not_grow(fake: FakeAggregator, tmp_path: Path) -> None:
    path = tmp_path / "s"
    client = make_client(fake, path)
    queue_reports(client, 3)
    state_size, queue_before = path.stat().st_size, Path(f"{path}.queue").read_bytes()
    queue_reports(client, 40)
    queue_after = Path(f"{path}.queue").read_bytes()
    assert queue_after.startswith(queue_before)  # appended, never rewritten
    assert abs(path.stat().st_size - state_size) < 64  # the state holds no report
    assert b"places" not in queue_after  # records are encrypted
    assert client.ledger().queued_reports == 43


def test_the_state_is_saved_before_the_report_reaches_the_queue(
    fake: FakeAggregator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client(fake, tmp_path / "s")
    client.sync()
    order: list[str] = []

    def logged(name: str, write: Any) -> Any:
        def wrapper(*args: Any) -> Any:
            order.append(name)
            return write(*args)
        return wrapper

    monkeypatch.setattr(client._store, "save", logged("state", client._store.save))
    monkeypatch.setattr(client._queue, "_append", logged("queue", client._queue._append))
    monkeypatch.setattr(client._queue, "compact", logged("queue", client._queue.compact))  # the first write
    queue_reports(client, 2)
    assert order == ["state", "queue", "state", "queue"]


def test_a_crash_between_state_and_queue_loses_the_report_not_the_charge(
    fake: FakeAggregator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s"
    client = make_client(fake, path)
    queue_reports(client, 1)

    def crash(data: bytes) -> None:
        raise OSError("power cut")

    monkeypatch.setattr(client._queue, "_append", crash)
    queue_reports(client, 1)  # the disk refuses the queue file: no exception, a disk_error event
    simulate_crash(client)  # the app dies: the OS releases the state lock
    again = make_client(fake, path)
    assert again.ledger()["places"].windows == 2  # charged
    assert again.ledger().queued_reports == 1  # the second report never reached the queue


def test_a_torn_last_record_is_ignored(fake: FakeAggregator, tmp_path: Path) -> None:
    path, clock = tmp_path / "s", Clock()
    client = make_client(fake, path, clock)
    ids = queue_reports(client, 4)
    client.close(flush=False)
    queue_file = Path(f"{path}.queue")
    whole = queue_file.read_bytes()
    queue_reports(make_client(fake, path, clock), 1)
    queue_file.write_bytes(queue_file.read_bytes()[: len(whole) + 30])  # the 5th record cut mid-way
    errors: list[Exception] = []
    again = make_client(fake, path, on_error=errors.append)
    assert [item_id(r) for r in again._state.queue] == ids
    assert errors == [] and again.ledger().dropped_reports == 0
    assert queue_file.read_bytes() == whole[:5] + queue_file.read_bytes()[5:]  # cut back to whole records
    assert again.flush().delivered == 4


def test_an_unreadable_record_is_dropped_with_an_event(fake: FakeAggregator, tmp_path: Path) -> None:
    path = tmp_path / "s"
    ids = queue_reports(make_client(fake, path), 3)
    queue_file = Path(f"{path}.queue")
    data = bytearray(queue_file.read_bytes())
    second = ReportQueueOffsets.of(bytes(data))[1]
    data[second + 40] ^= 0x01  # inside the second record's ciphertext
    queue_file.write_bytes(bytes(data))
    errors: list[Exception] = []
    client = make_client(fake, path, on_error=errors.append)
    assert [item_id(r) for r in client._state.queue] == [ids[0], ids[2]]
    assert [type(e) for e in errors] == [ReportsDropped]
    assert client.ledger().dropped_reports == 1 and client.ledger().events[-1].kind == "dropped"
    assert client.flush().delivered == 2  # later flushes are not blocked


def test_a_malformed_queued_report_is_dropped_not_blocking(fake: FakeAggregator, tmp_path: Path) -> None:
    client = make_client(fake, tmp_path / "s")
    ids = queue_reports(client, 2)
    client._queue.append(b"P" + bytes(20))  # e.g. written by a buggy version
    queue_reports(client, 1)
    errors: list[Exception] = []
    client._on_error = errors.append
    result = client.flush()
    assert (result.delivered, result.remaining, result.error) == (3, 0, None)
    assert [type(e) for e in errors] == [ReportsDropped] and client.ledger().dropped_reports == 1
    assert all(rid in {r for _, r in fake.stored} for rid in ids)


def test_tombstones_are_compacted(fake: FakeAggregator, tmp_path: Path) -> None:
    path = tmp_path / "s"
    client = make_client(fake, path, batch_size=10)
    queue_reports(client, COMPACT_MIN + 10)
    big = Path(f"{path}.queue").stat().st_size
    assert client.flush().delivered == COMPACT_MIN + 10
    assert Path(f"{path}.queue").stat().st_size < big / 4  # rewritten when the dead records dominated
    queue_reports(client, 2)
    simulate_crash(client)  # the app dies: the OS releases the state lock
    assert make_client(fake, path).ledger().queued_reports == 2


def test_queue_bound_survives_restart(fake: FakeAggregator, tmp_path: Path) -> None:
    path = tmp_path / "s"
    client = make_client(fake, path, max_queue=3)
    ids = queue_reports(client, 5)
    simulate_crash(client)  # the app dies: the OS releases the state lock
    again = make_client(fake, path, max_queue=3)
    assert [item_id(r) for r in again._state.queue] == ids[2:]
    assert again.ledger().dropped_reports == 2


def test_a_queue_without_its_state_is_never_sent(fake: FakeAggregator, tmp_path: Path) -> None:
    path = tmp_path / "s"
    queue_reports(make_client(fake, path, state_key=b"k" * 32), 3)
    path.unlink()  # the state is gone; with an app key this looks like a first run
    client = make_client(fake, path, state_key=b"k" * 32)
    assert client.ledger().queued_reports == 0 and not Path(f"{path}.queue").exists()


class ReportQueueOffsets:
    """Where each record of a queue file starts (for tests that damage one)."""

    @staticmethod
    def of(data: bytes) -> list[int]:
        from client_sdk.queue import HEADER_BYTES, RECORD_HEAD

        offsets, offset = [], HEADER_BYTES
        while offset < len(data):
            offsets.append(offset)
            offset += RECORD_HEAD.size + RECORD_HEAD.unpack_from(data, offset)[2]
        return offsets


# --- 2. threads ---------------------------------------------------------------------------------


def test_eight_threads_report_at_once_and_lose_nothing(fake: FakeAggregator, tmp_path: Path) -> None:
    client = make_client(fake, tmp_path / "s", max_epsilon=2.0)
    client.sync()
    start = threading.Barrier(8)
    results: dict[int, tuple[str, str]] = {}
    failures: list[BaseException] = []

    def work(i: int) -> None:
        try:
            start.wait()
            own = client.report(f"m{i}", {"home", f"p{i}"})
            shared = client.report("places", {"home", "cafe"})  # the same metric, window and value
            results[i] = (own, shared)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert failures == [] and len(results) == 8
    assert len({shared for _, shared in results.values()}) == 1  # one report for the shared value
    ledger = client.ledger()
    assert ledger.queued_reports == 9
    assert all(ledger[f"m{i}"].spent == 1.0 and ledger[f"m{i}"].windows == 1 for i in range(8))
    assert ledger["places"].spent == 1.0 and ledger["places"].windows == 1  # charged once, not eight times
    simulate_crash(client)  # the app dies: the OS releases the state lock
    again = make_client(fake, tmp_path / "s", max_epsilon=2.0)
    assert again.ledger() == ledger
    assert again.flush().delivered == 9


# --- 3. background sending and deadlines -------------------------------------------------------


class Hanging:
    """A server that answers 503 slowly: each request takes ``timeout`` (on the fake clock)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.timeouts: list[float] = []

    def request(self, method: str, url: str, *, timeout: float, **kwargs: Any) -> FakeResponse:
        self.timeouts.append(timeout)
        self.clock.mono += timeout
        return FakeResponse(503, {"error": "unavailable", "field": None, "detail": "slow"})

    def close(self) -> None:
        pass


def test_flush_deadline_bounds_requests_and_backoff(fake: FakeAggregator, tmp_path: Path) -> None:
    clock = Clock()
    client = make_client(fake, tmp_path / "s", clock, retry=RetryPolicy(max_attempts=10, timeout=10.0))
    queue_reports(client, 3)
    hanging = Hanging(clock)
    client.transport.session = hanging
    began = clock.mono
    result = client.flush(deadline=12.0)
    assert clock.mono - began <= 12.0  # no request or sleep ran past the deadline
    assert isinstance(result.error, TransportError) and result.error.field == "deadline"
    assert result.remaining == 3
    assert hanging.timeouts[0] == 10.0 and hanging.timeouts[1] < 2.0  # the second is capped by the time left
    without = make_client(fake, tmp_path / "t", Clock(), retry=RetryPolicy(max_attempts=10, timeout=10.0))
    queue_reports(without, 1)
    assert without.flush(deadline=0).error is not None  # nothing may start after the deadline
    assert without.flush(deadline=-1).error is not None  # a bad deadline is reported, not raised


def test_close_does_not_hang_on_a_hanging_server(fake: FakeAggregator, tmp_path: Path) -> None:
    entered, release = threading.Event(), threading.Event()

    class Stuck:
        def request(self, method: str, url: str, **kwargs: Any) -> FakeResponse:
            if method == "POST":
                entered.set()
                release.wait(20)  # a request that never answers in time
                raise requests.Timeout("stuck")
            return fake.request(method, url, **kwargs)

        def close(self) -> None:
            pass

    client = Client("http://agg.test", tmp_path / "s", server_public_keys=fake.sign_public, max_epsilon=100.0,
                    session=Stuck(), background=True, send_interval=0.01, exit_deadline=0.3)
    client.sync()
    client.report("places", "home")
    assert entered.wait(10)
    began = time.monotonic()
    client.close()
    assert time.monotonic() - began < 2.0
    release.set()
    if client._sender.thread is not None:  # the sender was left to end on its own: let it, before the test ends
        client._sender.thread.join(10)
    assert client.ledger().queued_reports == 1  # still queued for the next run


def test_background_flag_sends_and_registers_the_exit_flush(
    fake: FakeAggregator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hooks: list[object] = []
    monkeypatch.setattr("atexit.register", hooks.append)
    monkeypatch.setattr("atexit.unregister", hooks.remove)
    plain = make_client(fake, tmp_path / "plain")
    assert hooks == []  # no hook unless the app asks or the sender runs
    plain.close()
    client = Client("http://agg.test", tmp_path / "s", server_public_keys=fake.sign_public, max_epsilon=100.0,
                    session=fake, background=True, send_interval=0.01)
    assert len(hooks) == 1
    client.sync()
    client.report("places", "home")
    for _ in range(500):
        if fake.stored:
            break
        time.sleep(0.01)
    assert len(fake.stored) == 1
    client.start(0.01)  # already running: nothing new
    assert len(hooks) == 1
    client.close()
    assert hooks == [] and client._sender.thread is None
    client.start(0.01)  # a closed client can start again
    assert client._sender.thread is not None and client._sender.thread.is_alive()
    client.close()
    asked = make_client(fake, tmp_path / "asked", flush_at_exit=True)
    assert len(hooks) == 1
    asked.close()


def test_close_sends_the_queue_within_its_deadline_and_says_what_remains(
    fake: FakeAggregator, tmp_path: Path
) -> None:
    clock = Clock()
    client = make_client(fake, tmp_path / "s", clock, exit_deadline=4.0)
    queue_reports(client, 3)
    result = client.close()  # no flush() called: close() sends by default
    assert (result.delivered, result.remaining, len(fake.stored)) == (3, 0, 3)
    again = make_client(fake, tmp_path / "s", clock, exit_deadline=4.0)
    queue_reports(again, 2)
    again.transport.session = Hanging(clock)
    began = clock.mono
    result = again.close()
    assert clock.mono - began <= 4.0  # the exit_deadline bounds the final flush
    assert result.remaining == 2 and isinstance(result.error, TransportError)
    kept = make_client(fake, tmp_path / "s", clock)
    queue_reports(kept, 1)
    assert kept.close(flush=False).remaining == 3  # skipped: all kept for the next run
    assert make_client(fake, tmp_path / "s", clock).ledger().queued_reports == 3


def test_exit_flush_sends_within_its_deadline(fake: FakeAggregator, tmp_path: Path) -> None:
    clock = Clock()
    client = make_client(fake, tmp_path / "s", clock, flush_at_exit=True, exit_deadline=3.0)
    queue_reports(client, 2)
    client._background.flush_at_exit()
    assert len(fake.stored) == 2
    queue_reports(client, 1)
    client.transport.session = Hanging(clock)
    began = clock.mono
    client._background.flush_at_exit()  # never raises, never passes its deadline
    assert clock.mono - began <= 3.0
    client.close(deadline=0)  # unregisters the hook
    assert make_client(fake, tmp_path / "s").ledger().queued_reports == 1


def test_background_loop_survives_errors(fake: FakeAggregator, tmp_path: Path) -> None:
    errors: list[Exception] = []
    client = make_client(fake, tmp_path / "s", on_error=errors.append)
    queue_reports(client, 1)
    fake.fail_next(100, status=None)
    client.transport.retry = RetryPolicy(max_attempts=1)
    client.start(0.01)
    for _ in range(500):
        if len(errors) >= 3:
            break
        time.sleep(0.01)
    assert client._sender.thread is not None and client._sender.thread.is_alive()  # errors do not end the sender
    fake.fail_next(0)
    fake._failures.clear()
    for _ in range(500):
        if fake.stored:
            break
        time.sleep(0.01)
    client.close()
    assert len(fake.stored) == 1


# --- 4. bounded reads ------------------------------------------------------------------------------


class Huge:
    """Serves a config of ``size`` bytes, streamed (never built in memory)."""

    def __init__(self, size: int, declare: bool = False) -> None:
        self.size = size
        self.declare = declare
        self.responses: list[FakeResponse] = []

    def request(self, method: str, url: str, **kwargs: Any) -> FakeResponse:
        def pieces() -> Iterator[bytes]:
            yield b'{"payload": "'
            for _ in range(self.size // 65536):
                yield b"x" * 65536

        headers = {"Content-Length": str(self.size)} if self.declare else {}
        response = FakeResponse(200, headers=headers, chunks=pieces())
        self.responses.append(response)
        return response

    def close(self) -> None:
        pass


def test_a_huge_config_is_refused_at_the_limit(fake: FakeAggregator, tmp_path: Path) -> None:
    huge = Huge(200 * 1024 * 1024)
    client = make_client(fake, tmp_path / "s", session=huge)
    with pytest.raises(TransportError) as info:
        client.sync()
    assert not info.value.retryable and info.value.field == "max_config_bytes"
    assert "max_config_bytes" in str(info.value) and str(4 * 1024 * 1024) in str(info.value)
    (response,) = huge.responses  # not retried
    assert response.read_bytes <= 4 * 1024 * 1024 + 65536 and response.closed
    declared = Huge(200 * 1024 * 1024, declare=True)
    small = make_client(fake, tmp_path / "t", session=declared, max_config_bytes=1000)
    with pytest.raises(TransportError, match="max_config_bytes"):
        small.sync()
    assert declared.responses[0].read_bytes == 0  # refused on its Content-Length


def test_a_huge_upload_answer_is_refused_and_the_queue_kept(fake: FakeAggregator, tmp_path: Path) -> None:
    errors: list[Exception] = []
    client = make_client(fake, tmp_path / "s", max_response_bytes=100, on_error=errors.append)
    queue_reports(client, 2)
    result = client.flush()
    assert isinstance(result.error, TransportError) and result.error.field == "max_response_bytes"
    assert result.remaining == 2 and errors == [result.error]
    with pytest.raises(ParameterError):
        make_client(fake, tmp_path / "t", max_response_bytes=0)


# --- 5. only documented exceptions ----------------------------------------------------------------


def test_missing_key_file_is_state_corrupted(fake: FakeAggregator, tmp_path: Path) -> None:
    path = tmp_path / "s"
    queue_reports(make_client(fake, path), 1)
    Path(f"{path}.key").unlink()
    with pytest.raises(StateCorrupted, match="key file"):
        make_client(fake, path)
    client = make_client(fake, path, on_corrupt="reset", max_epsilon=4.0)  # treated as a lost state
    assert [e.kind for e in client.ledger().events] == ["state_lost"]
    client.sync()
    with pytest.raises(BudgetExceeded):  # the key went with it: its high-water mark cannot be verified
        client.report("places", "home")


def test_directories_in_the_way_raise_parameter_errors(fake: FakeAggregator, tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    with pytest.raises(ParameterError) as info:
        make_client(fake, tmp_path / "s")
    assert info.value.field == "state_path"
    path = tmp_path / "t"
    make_client(fake, path).sync()
    Path(f"{path}.key").unlink()
    Path(f"{path}.key").mkdir()
    with pytest.raises(ParameterError) as info:
        make_client(fake, path)
    assert info.value.field == "key_path"


def test_temporary_files_of_a_crash_are_removed(fake: FakeAggregator, tmp_path: Path) -> None:
    path = tmp_path / "s"
    make_client(fake, path).sync()
    leftovers = [tmp_path / ".s.abcd1234.tmp", tmp_path / ".s.key.x_y9zz00.tmp", tmp_path / ".s.queue.qqqqqqqq.tmp"]
    unrelated = [tmp_path / ".s.x.abcd1234.tmp", tmp_path / "notes.tmp"]
    for p in leftovers + unrelated:
        p.write_bytes(b"partial")
    make_client(fake, path)
    assert not any(p.exists() for p in leftovers)
    assert all(p.exists() for p in unrelated)  # another client's files are not ours


# --- 6. rollback -------------------------------------------------------------------------------------


def test_an_older_state_put_back_is_detected(fake: FakeAggregator, tmp_path: Path) -> None:
    path = tmp_path / "s"
    client = make_client(fake, path, max_epsilon=4.0)
    queue_reports(client, 2)  # spent 2.0
    old = path.read_bytes()
    queue_reports(client, 1)  # spent 3.0
    client.close()
    path.write_bytes(old)
    with pytest.raises(StateCorrupted, match="rolled back"):
        make_client(fake, path, max_epsilon=4.0)
    assert path.read_bytes() == old  # left alone under "raise"
    reset = make_client(fake, path, max_epsilon=4.0, on_corrupt="reset")
    reset.sync()
    assert reset.ledger()["places"].prior == 3.0  # charged what was spent, from the high-water mark
    queue_reports(reset, 1)  # 4.0: the ceiling
    reset.close()
    assert make_client(fake, path, max_epsilon=4.0).ledger()["places"].prior == 3.0  # no false alarm later


def test_generation_record_is_private_and_follows_saves(fake: FakeAggregator, tmp_path: Path) -> None:
    path = tmp_path / "s"
    client = make_client(fake, path)
    queue_reports(client, 2)
    record = Path(f"{path}.key.gen")
    assert (record.stat().st_mode & 0o777) == 0o600
    assert int(record.read_text()) == client._state.generation >= 3
    record.write_text("garbage")  # unreadable: no check, no crash
    simulate_crash(client)  # the app dies: the OS releases the state lock
    assert make_client(fake, path).ledger().queued_reports == 2


def test_app_key_without_keyring_cannot_detect_rollback_but_drops_uncovered_reports(
    fake: FakeAggregator, tmp_path: Path
) -> None:
    path = tmp_path / "s"
    client = make_client(fake, path, state_key=b"k" * 32)
    queue_reports(client, 1)
    old = path.read_bytes()
    queue_reports(client, 2)
    client.close(flush=False)
    path.write_bytes(old)
    errors: list[Exception] = []
    again = make_client(fake, path, state_key=b"k" * 32, on_error=errors.append)  # documented: not detected
    assert again.ledger()["places"].windows == 1
    assert again.ledger().queued_reports == 1  # the two reports the old ledger does not charge are dropped
    assert [type(e) for e in errors] == [ReportsDropped]


def test_keyring_records_the_generation(fake: FakeAggregator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vault: dict[tuple[str, str], str] = {}
    module = types.ModuleType("keyring")
    module.get_password = lambda service, user: vault.get((service, user))  # type: ignore[attr-defined]
    module.set_password = lambda service, user, pw: vault.__setitem__((service, user), pw)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "keyring", module)
    path = tmp_path / "s"
    client = make_client(fake, path, state_key=b"k" * 32, rollback_keyring=True)
    queue_reports(client, 1)
    old = path.read_bytes()
    queue_reports(client, 1)
    client.close()
    assert list(vault.values()) == [str(client._state.generation)]
    path.write_bytes(old)
    with pytest.raises(StateCorrupted, match="rolled back"):
        make_client(fake, path, state_key=b"k" * 32, rollback_keyring=True)
    monkeypatch.setitem(sys.modules, "keyring", None)  # not installed
    with pytest.raises(ParameterError) as info:
        make_client(fake, path, state_key=b"k" * 32, rollback_keyring=True)
    assert info.value.field == "rollback_keyring"


def test_store_alone_detects_rollback(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "s")
    from client_sdk.state import ClientState

    state = ClientState.fresh()
    store.save(state)
    old = (tmp_path / "s").read_bytes()
    store.save(state)
    (tmp_path / "s").write_bytes(old)
    with pytest.raises(StateCorrupted, match="rolled back"):
        StateStore(tmp_path / "s").load()
