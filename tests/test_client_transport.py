"""Transport and sending: retries, backoff, Retry-After, idempotency, offline queue, never raising."""

from __future__ import annotations

import email.utils
import logging
import threading
from pathlib import Path

import numpy as np
import pytest
from clocks import Clock

from client_sdk import Client, ReportsDropped, RetryPolicy, TransportError
from client_sdk.queue import item_id
from client_sdk.testing import FakeAggregator, FakeResponse
from client_sdk.transport import Transport, parse_retry_after
from protocol.crypto import b64e
from protocol.encodings import BloomEncoding
from protocol.errors import ParameterError, ReportRejected
from protocol.params import MetricParams

ASYM = MetricParams(name="places", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                    mode="asymmetric", level=1.0, irr_q=0.2)
POLICY = RetryPolicy(max_attempts=5, base_delay=0.5, max_delay=4.0, max_retry_after=60.0)


DAY = 86400.0


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make_client(fake: FakeAggregator, path: Path, sleeps: Sleeps, **kwargs: object) -> Client:
    kwargs.setdefault("max_epsilon", 100.0)
    kwargs.setdefault("retry", POLICY)
    kwargs.setdefault("clock", Clock(1_000_000.0))
    return Client("http://agg.test/", path, background=False, strict=True, server_public_keys=fake.sign_public, session=fake, sleep=sleeps,
                  rng=11, insecure_rng_for_testing=True, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def fake() -> FakeAggregator:
    return FakeAggregator([ASYM])


def queue_reports(client: Client, n: int) -> list[str]:
    """``n`` reports, one window each."""
    client.sync()
    clock = client.options.clock
    assert isinstance(clock, Clock)
    ids: list[str] = []
    for i in range(n):
        clock.now += DAY
        ids.append(client.report("places", {f"p{i % 7}", "home"}))
    return ids


@pytest.mark.parametrize("failures", [0, 1, 4])
@pytest.mark.parametrize("status", [500, 503, 408, 429, None])
def test_fails_n_times_then_succeeds_exact_counts(
    fake: FakeAggregator, tmp_path: Path, failures: int, status: int | None
) -> None:
    sleeps = Sleeps()
    client = make_client(fake, tmp_path / "s", sleeps, batch_size=10)
    ids = queue_reports(client, 25)
    fake.fail_next(failures, status=status)
    posts_before = fake.requests.count(("POST", "/v1/reports"))
    result = client.flush()
    assert (result.delivered, result.rejected, result.remaining, result.error) == (25, 0, 0, None)
    assert fake.requests.count(("POST", "/v1/reports")) - posts_before == 3 + failures
    assert sorted(rid for _, rid in fake.stored) == sorted(ids)
    # backoff: one sleep per failure, each within its full-jitter cap min(4, 0.5 * 2^attempt)
    assert len(sleeps) == failures
    for attempt, delay in enumerate(sleeps):
        assert 0 <= delay <= min(4.0, 0.5 * 2**attempt)


def test_stored_but_answer_lost_is_never_double_counted(fake: FakeAggregator, tmp_path: Path) -> None:
    client = make_client(fake, tmp_path / "s", Sleeps())
    queue_reports(client, 12)
    queue_file = tmp_path / "s.queue"
    snapshot = queue_file.read_bytes()
    fake.fail_next(2, status=502, store_first=True)  # stored, then the answer is lost: twice
    result = client.flush()
    assert (result.delivered, result.remaining) == (12, 0)
    counts = fake.bit_counts("places").copy()
    assert len(fake.stored) == 12
    client.close()
    # a crash before the queue's tombstones were written: the same reports go out again after restart
    queue_file.write_bytes(snapshot)
    client = make_client(fake, tmp_path / "s", Sleeps())
    assert client.ledger().queued_reports == 12
    assert client.flush().delivered == 12  # answered 'replayed', counted as delivered
    assert len(fake.stored) == 12
    assert np.array_equal(fake.bit_counts("places"), counts)


def test_retries_spent_keeps_the_queue_and_reports_the_error(fake: FakeAggregator, tmp_path: Path) -> None:
    errors: list[Exception] = []
    sleeps = Sleeps()
    client = make_client(fake, tmp_path / "s", sleeps, on_error=errors.append)
    queue_reports(client, 5)
    fake.fail_next(5, status=None)  # connection errors on every attempt
    result = client.flush()
    assert (result.delivered, result.remaining) == (0, 5)
    assert isinstance(result.error, TransportError) and result.error.attempts == 5
    assert errors == [result.error] and len(sleeps) == 4
    assert not fake.stored
    assert client.flush().delivered == 5  # the next flush delivers


def test_retry_after_is_honoured(fake: FakeAggregator, tmp_path: Path) -> None:
    sleeps = Sleeps()
    clock = Clock(1_000_000.0)
    client = make_client(fake, tmp_path / "s", sleeps, clock=clock)
    queue_reports(client, 3)
    fake.fail_next(1, status=429, retry_after="7")
    fake.fail_next(1, status=503, retry_after=email.utils.formatdate(clock.now + 9, usegmt=True))  # 9 s after now
    assert client.flush().delivered == 3
    assert sleeps == [7.0, 9.0]


@pytest.mark.parametrize("retry_after", ["3600", "1000000000", "1e9"])
def test_long_retry_after_defers_at_most_the_cap(fake: FakeAggregator, tmp_path: Path, retry_after: str) -> None:
    sleeps = Sleeps()
    mono = Clock(0.0)
    errors: list[Exception] = []
    client = make_client(fake, tmp_path / "s", sleeps, monotonic=mono, on_error=errors.append)
    queue_reports(client, 2)
    fake.fail_next(1, status=503, retry_after=retry_after)
    result = client.flush()
    assert result.remaining == 2 and isinstance(result.error, TransportError)
    assert result.error.retry_after == float(retry_after) and sleeps == []
    posts = fake.requests.count(("POST", "/v1/reports"))
    mono.advance(POLICY.retry_after_cap - 1)
    assert client.flush().deferred and fake.requests.count(("POST", "/v1/reports")) == posts
    mono.advance(2)  # one answer stops the client for at most retry_after_cap (default 5 minutes)
    assert client.flush().delivered == 2
    assert len(errors) == 1


@pytest.mark.parametrize("status", [401, 403, 404, 409])
def test_other_client_errors_are_not_retried_and_keep_the_queue(
    fake: FakeAggregator, tmp_path: Path, status: int
) -> None:
    sleeps = Sleeps()
    client = make_client(fake, tmp_path / "s", sleeps)
    queue_reports(client, 4)
    fake.fail_next(1, status=status)
    result = client.flush()
    assert isinstance(result.error, TransportError) and not result.error.retryable
    assert (result.remaining, sleeps, fake.requests.count(("POST", "/v1/reports"))) == (4, [], 1)


def test_a_batch_answered_400_is_split_not_dropped(fake: FakeAggregator, tmp_path: Path) -> None:
    errors: list[Exception] = []
    client = make_client(fake, tmp_path / "s", Sleeps(), on_error=errors.append, batch_size=2)
    queue_reports(client, 3)
    fake.fail_next(1, status=400)  # a proxy refuses one batch as a whole: its halves go on their own
    result = client.flush()
    assert (result.dropped, result.delivered, result.remaining) == (0, 3, 0)
    assert errors == [] and client.ledger().dropped_reports == 0


@pytest.mark.parametrize("status", [400, 415, 422])
def test_a_400_batch_is_split_until_the_bad_report_is_alone(
    fake: FakeAggregator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    errors: list[Exception] = []
    client = make_client(fake, tmp_path / "s", Sleeps(), on_error=errors.append, batch_size=8)
    ids = queue_reports(client, 7)
    bad = ids[4]
    upload = fake._upload

    def refuse_the_bad_one(data: bytes, content_type: str, wire2: bool = False) -> FakeResponse:
        if bad.encode() in data:
            return FakeResponse(status, {"error": "bad_request", "field": None, "detail": "refused"})
        return upload(data, content_type, wire2)

    monkeypatch.setattr(fake, "_upload", refuse_the_bad_one)
    result = client.flush()
    assert (result.dropped, result.delivered, result.remaining) == (1, 6, 0)
    assert [type(e) for e in errors] == [ReportsDropped]
    assert client.ledger().dropped_reports == 1
    assert {rid for _, rid in fake.stored} == set(ids) - {bad}


def test_too_large_batches_are_split(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM], max_reports=3)
    client = make_client(fake, tmp_path / "s", Sleeps(), batch_size=10)
    queue_reports(client, 10)
    result = client.flush()
    assert (result.delivered, result.remaining, client.batch_size) == (10, 0, 2)


def test_final_statuses_leave_the_queue_and_go_to_on_error(fake: FakeAggregator, tmp_path: Path) -> None:
    errors: list[Exception] = []
    client = make_client(fake, tmp_path / "s", Sleeps(), on_error=errors.append)
    queue_reports(client, 2)
    fake.entries["places"] = type(fake.entries["places"]).of(ASYM, current_level=1.0)
    object.__setattr__(fake.entries["places"], "digest", "0" * 64)  # the operator changed the metric
    result = client.flush()
    assert (result.delivered, result.rejected, result.remaining) == (0, 2, 0)
    assert [getattr(e, "code", None) for e in errors] == ["outdated_config"] * 2
    assert all(isinstance(e, ReportRejected) for e in errors)


def test_offline_queue_survives_restart(fake: FakeAggregator, tmp_path: Path) -> None:
    path = tmp_path / "s"
    client = make_client(fake, path, Sleeps())
    ids = queue_reports(client, 6)
    fake.fail_next(10, status=None)  # the flush, then close()'s own flush, find the server down
    assert client.flush().remaining == 6
    assert client.close().remaining == 6
    again = make_client(fake, path, Sleeps())
    assert again.ledger().queued_reports == 6
    assert again.flush().delivered == 6
    assert sorted(rid for _, rid in fake.stored) == sorted(ids)
    again.close()
    assert make_client(fake, path, Sleeps()).ledger().queued_reports == 0


def test_queue_bound_drops_the_oldest(fake: FakeAggregator, tmp_path: Path) -> None:
    errors: list[Exception] = []
    client = make_client(fake, tmp_path / "s", Sleeps(), max_queue=4, on_error=errors.append)
    ids = queue_reports(client, 7)
    assert [item_id(r) for r in client._state.queue] == ids[3:]
    assert client.ledger().dropped_reports == 3 and len(errors) == 3
    assert all(isinstance(e, ReportsDropped) for e in errors)
    client.flush()
    assert sorted(rid for _, rid in fake.stored) == sorted(ids[3:])


def test_flush_never_raises_even_if_on_error_does(fake: FakeAggregator, tmp_path: Path) -> None:
    def broken(error: Exception) -> None:
        raise RuntimeError("app bug")

    client = make_client(fake, tmp_path / "s", Sleeps(), on_error=broken)
    queue_reports(client, 2)
    fake.fail_next(10, status=None)
    assert client.flush().remaining == 2

    def explode(*args: object, **kwargs: object) -> object:
        raise ValueError("unexpected")

    client.transport.upload = explode  # type: ignore[method-assign,assignment]
    result = client.flush()
    assert isinstance(result.error, ValueError) and result.remaining == 2


def test_background_sender(fake: FakeAggregator, tmp_path: Path) -> None:
    client = make_client(fake, tmp_path / "s", Sleeps())
    queue_reports(client, 3)
    client.start(interval=0.01)
    for _ in range(500):
        if len(fake.stored) == 3:
            break
        client._sender.stopping.wait(0.01)
    client.close()
    assert len(fake.stored) == 3


def test_logs_hold_no_secret_value_or_bits(fake: FakeAggregator, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    client = make_client(fake, tmp_path / "s", Sleeps())
    client.sync()
    client.report("places", "secret-place-42")
    fake.fail_next(2, status=503)
    client.flush()
    text = caplog.text
    assert "retrying" in text and "uploaded" in text
    secret = client._state.secret
    for needle in ("secret-place-42", b64e(secret), secret.hex()):
        assert needle not in text
    (_, payload), = fake.stored.values()
    assert np.packbits(payload.bits).tobytes().hex() not in text
    for record in caplog.records:
        assert record.name == "onesided.client"


def test_parse_retry_after() -> None:
    assert parse_retry_after("120", 0.0) == 120.0
    assert parse_retry_after(None, 0.0) is None
    assert parse_retry_after("soon", 0.0) is None
    assert parse_retry_after("Thu, 01 Jan 1970 00:01:40 GMT", 40.0) == 60.0
    assert parse_retry_after("Thu, 01 Jan 1970 00:01:40 GMT", 400.0) == 0.0


def test_transport_validation() -> None:
    with pytest.raises(ParameterError):
        Transport("ftp://x")
    with pytest.raises(ParameterError):
        Transport("http://x", batch_format="xml")
    with pytest.raises(ParameterError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ParameterError):
        RetryPolicy(base_delay=2.0, max_delay=1.0)
    assert RetryPolicy(base_delay=1.0, max_delay=8.0).backoff(10, 0.5) == 4.0


def test_binary_batches(fake: FakeAggregator, tmp_path: Path) -> None:
    client = make_client(fake, tmp_path / "s", Sleeps(), batch_format="binary")
    ids = queue_reports(client, 5)
    assert client.flush().delivered == 5
    assert sorted(rid for _, rid in fake.stored) == sorted(ids)


def test_reports_queued_during_a_flush_are_kept(fake: FakeAggregator, tmp_path: Path) -> None:
    client = make_client(fake, tmp_path / "s", Sleeps(), batch_size=3)
    reported: list[str] = []
    clock = client.options.clock
    assert isinstance(clock, Clock)

    def late() -> None:
        clock.now += DAY
        reported.append(client.report("places", "late"))

    def threads_report(*args: object, **kwargs: object) -> object:
        # another thread of the app reports while a batch is on the wire (the lock is not held)
        worker = threading.Thread(target=late)
        worker.start()
        worker.join(timeout=10)
        return fake.request(*args, **kwargs)  # type: ignore[arg-type]

    ids = queue_reports(client, 5)
    client.transport.session = type("Session", (), {"request": staticmethod(threads_report)})()
    result = client.flush()
    # two batches of the 5 early reports; the 2 late ones wait for the next flush (no endless flush)
    assert (len(reported), result.delivered, result.remaining) == (2, 5, 2)
    client.transport.session = fake
    assert client.flush().delivered == 2
    assert sorted(rid for _, rid in fake.stored) == sorted(ids + reported)
