"""A wrong server clock: purge keeps what is still accepted, the clock is suspected aloud, clients keep reports.

The server's clock is faked through ``create_app``'s ``clock`` (400 days
off, as in the field report); devices' windows come from the true clock.
No timing assumptions: the clock watch's horizon (10 minutes) is never
reached within a test.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aggsupport import batch_json, bearer, make_params, make_reports

from aggregator.server.app import create_app
from aggregator.server.clock_watch import MIN_REPORTS, SUSPECT_RETRY_AFTER
from protocol.crypto import AggregatorKeys
from protocol.wire import CLOCK_ANSWERS_VERSION, MAX_RETRY_AFTER, WIRE_HEADER

PARAMS = make_params()
DAYS_400 = 400 * 86400
V2 = {WIRE_HEADER: CLOCK_ANSWERS_VERSION}


def _app(folder: Path, offset: float) -> Iterator[tuple[Any, AggregatorKeys]]:
    keys = AggregatorKeys.generate()
    keys.save(folder / "keys")
    app = create_app({"data_dir": str(folder)}, clock=lambda: time.time() + offset)
    state = app.extensions["onesided"]
    admin = state.storage.create_token(role="admin", name="admin")[1]
    assert app.test_client().post("/v1/metrics", json=PARAMS.to_dict(), headers=bearer(admin)).status_code == 201
    try:
        yield app, keys
    finally:
        state.opener.close()
        state.offloader.close()
        state.storage.close()


@pytest.fixture
def honest(tmp_path: Path) -> Iterator[tuple[Any, AggregatorKeys]]:
    yield from _app(tmp_path, 0.0)


def test_purge_with_a_clock_400_days_ahead_keeps_the_replay_set(honest: tuple[Any, AggregatorKeys]) -> None:
    app, keys = honest
    storage = app.extensions["onesided"].storage
    client = app.test_client()
    batch = batch_json(make_reports(PARAMS, keys.seal_public_raw, 20, seed=1).envelopes)
    assert client.post("/v1/reports", json=batch).get_json()["accepted"] == 20
    settings = app.extensions["onesided"].settings
    deleted = storage.purge_expired(settings.retention_seconds, now=int(time.time()) + DAYS_400,
                                    clock_skew_seconds=settings.clock_skew_seconds)
    assert deleted == 0  # the window is still accepted by the true clock
    again = client.post("/v1/reports", json=batch).get_json()
    assert again["accepted"] == 20  # an identical resend (a lost answer) is acknowledged again...
    assert storage.bit_counts("places")[1].sum() == 20  # ...and counted once (it was 40 after such a purge)


def _upload(app: Any, keys: AggregatorKeys, n: int, seed: int, headers: dict[str, str] | None = None) -> Any:
    batch = batch_json(make_reports(PARAMS, keys.seal_public_raw, n, seed=seed).envelopes)
    return app.test_client().post("/v1/reports", json=batch, headers=headers or {})


@pytest.mark.parametrize("offset, status", [(DAYS_400, "expired"), (-DAYS_400, "too_early")])
def test_a_server_clock_400_days_off_is_suspected_in_health_metrics_and_one_log_line(
    tmp_path: Path, offset: float, status: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="aggregator.server.clock_watch")
    for app, keys in _app(tmp_path, offset):
        client = app.test_client()
        assert client.get("/v1/readyz").status_code == 200
        for seed in range(3):
            answer = _upload(app, keys, MIN_REPORTS, seed).get_json()
            assert {r["status"] for r in answer["results"]} == {status}
        health = client.get("/v1/health").get_json()
        assert health["status"] == "degraded"
        problem = health["problems"][-1]
        assert problem["dependency"] == "clock" and problem["error"] == "clock_suspect", health
        assert ("ahead" if offset > 0 else "behind") in problem["detail"]
        ready = client.get("/v1/readyz")
        assert ready.status_code == 503 and ready.get_json()["problems"][-1]["dependency"] == "clock"
        assert "onesided_clock_suspect 1.0" in client.get("/metrics").get_data(as_text=True)
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("clock_suspect")]
        assert len(lines) == 1, lines  # one line when the suspicion starts, not one per batch


def test_clock_answers_only_for_wire_version_2(tmp_path: Path) -> None:
    for app, keys in _app(tmp_path, -DAYS_400):  # the server's clock is behind: the devices' windows lie ahead
        old = _upload(app, keys, 5, seed=1).get_json()
        assert "server_time" not in old and all("retry_after" not in r for r in old["results"])

        early = _upload(app, keys, 5, seed=2, headers=V2).get_json()
        assert abs(early["server_time"] - (time.time() - DAYS_400)) < 60
        waits = {r["retry_after"] for r in early["results"]}
        assert waits == {MAX_RETRY_AFTER}  # 400 days until the window opens: the wire's cap (clients cap lower)

        _upload(app, keys, MIN_REPORTS, seed=3)  # now most reports are too early: the server suspects its clock
        suspected = _upload(app, keys, 5, seed=4, headers=V2).get_json()
        assert {r["retry_after"] for r in suspected["results"]} == {SUSPECT_RETRY_AFTER}


def test_expired_is_final_unless_the_server_suspects_its_clock(tmp_path: Path) -> None:
    for app, keys in _app(tmp_path, DAYS_400):  # ahead: the devices' windows look expired
        first = _upload(app, keys, 5, seed=1, headers=V2).get_json()
        assert all(r["status"] == "expired" and "retry_after" not in r for r in first["results"])
        _upload(app, keys, MIN_REPORTS, seed=2)
        later = _upload(app, keys, 5, seed=3, headers=V2).get_json()
        assert {r["retry_after"] for r in later["results"]} == {SUSPECT_RETRY_AFTER}


class _CountedDeque(deque[tuple[float, int, int, int]]):
    """A deque that counts full passes over it (a request's work must not grow with the batches held)."""

    passes = 0

    def __iter__(self) -> Iterator[tuple[float, int, int, int]]:
        type(self).passes += 1
        return super().__iter__()


def test_the_clock_watch_does_constant_work_a_batch_and_forgets_exactly_what_left_its_window() -> None:
    from aggregator.server import clock_watch
    from protocol.wire import STATUS_ACCEPTED, STATUS_EXPIRED, STATUS_TOO_EARLY

    now = [0.0]
    watch = clock_watch.ClockWatch(now=lambda: now[0])
    watch._batches = _CountedDeque()
    for _ in range(5_000):  # a busy server: thousands of batches inside the window, all agreeing
        now[0] += 0.01
        watch.observe([STATUS_ACCEPTED] * 9 + [STATUS_EXPIRED])
        assert watch.suspicion() is None
    assert _CountedDeque.passes == 0  # was three sums over every batch held, twice a request
    now[0] += clock_watch.WATCH_SECONDS + 1  # all of them leave the window: what is left is only what follows
    for _ in range(MIN_REPORTS // 10):
        watch.observe([STATUS_TOO_EARLY] * 6 + [STATUS_ACCEPTED] * 4)
    suspect = watch.suspicion()
    assert suspect is not None and suspect.startswith(f"{6 * MIN_REPORTS // 10} of the last {MIN_REPORTS} reports")
    assert "0 expired" in suspect and "behind" in suspect
    now[0] += clock_watch.WATCH_SECONDS + 1
    assert watch.suspicion() is None and watch._totals == [0, 0, 0]
