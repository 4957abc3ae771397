"""Bursts of reports: exact accounting of what a full queue drops, nothing lost at a pace the sender keeps.

The one loss a burst may cause is the documented one: beyond ``max_queue``
the oldest queued reports are dropped. A report in an upload under way is
never among them (its answer settles it), so every report is delivered,
queued or dropped, exactly once, and ``ReportsDropped`` tells the app the
same count as the ledger.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clocks import Clock

from client_sdk import Client, ReportsDropped
from client_sdk.pools import CALLER_IRR_UNIFORMS, _empty_after_fork
from client_sdk.testing import FakeAggregator, FakeResponse
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams
from protocol.rng import SeededRandom, Shape

PLACES = MetricParams(name="places", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                      mode="asymmetric", level=1.0, irr_q=0.2)
DAY = 86400.0


START = 1_790_000_000.0  # the tests' clock starts here


def make_client(fake: FakeAggregator, path: Path, clock: Clock, **kwargs: Any) -> Client:
    kwargs.setdefault("background", False)
    kwargs.setdefault("rng", 5)
    return Client("http://agg.test", path, server_public_keys=fake.sign_public, session=fake, clock=clock,
                  max_epsilon=1e12, insecure_rng_for_testing=True, **kwargs)


def notified(errors: list[Exception]) -> int:
    return sum(e.count for e in errors if isinstance(e, ReportsDropped))


def report_days(client: Client, clock: Clock, count: int) -> None:
    for _ in range(count):
        clock.now += DAY  # each report a new window
        client.report("places", {"home"})


@pytest.mark.parametrize(("during", "dropped"), [(1, 0), (5, 2)])
def test_a_full_queue_never_drops_a_report_of_the_upload_under_way(tmp_path: Path, during: int, dropped: int) -> None:
    fake, clock, errors = FakeAggregator([PLACES]), Clock(START), list[Exception]()
    client = make_client(fake, tmp_path / "s", clock, max_queue=3, on_error=errors.append)
    client.sync()
    report_days(client, clock, 3)
    upload = fake._upload

    def meanwhile(data: bytes, content_type: str, wire2: bool = False) -> FakeResponse:
        if len(fake.stored) == 0:
            report_days(client, clock, during)  # the queue overflows while its 3 oldest are in flight
        return upload(data, content_type, wire2)

    fake._upload = meanwhile  # type: ignore[method-assign]
    result = client.flush()
    assert result.delivered == 3 and len(fake.stored) == 3
    ledger = client.ledger()
    # in flight: left to their answer; beyond the bound among the others: the oldest of them, told once
    assert (ledger.dropped_reports, ledger.queued_reports, notified(errors)) == (dropped, 3 if dropped else 1, dropped)
    assert sum(e.kind == "dropped" for e in ledger.events) == dropped  # one event a report beyond the bound
    assert client.flush().delivered == during - dropped
    assert len(fake.stored) + client.ledger().dropped_reports == 3 + during


def test_an_unpaced_burst_is_accounted_for_exactly(tmp_path: Path) -> None:
    # The background sender cannot keep pace with a loop that only reports (sealing costs more than a
    # report() call, and both share the interpreter): the queue overflows. Whatever the pace, every report is
    # delivered, queued or dropped exactly once, and the app is told the ledger's count.
    fake, clock, errors = FakeAggregator([PLACES]), Clock(START), list[Exception]()
    client = make_client(fake, tmp_path / "s", clock, background=True, max_queue=200, flush_at=50, batch_size=100,
                         on_error=errors.append)
    client.sync()
    report_days(client, clock, 3000)
    result = client.close(deadline=60.0)
    dropped = client.ledger().dropped_reports
    client.close(flush=False)
    assert len(fake.stored) + result.remaining + dropped == 3000
    assert notified(errors) == dropped


@pytest.mark.slow
def test_a_paced_burst_below_max_queue_loses_nothing(tmp_path: Path) -> None:
    # Scaled down from 100,000 reports at ~2,100 a second with max_queue 10,000: 2,500 at 500 a second with
    # max_queue 500 (a second of slack), the default sender otherwise, against the in-memory aggregator.
    # (Today's figures, full scale, are benchmarks/client_latency.py --burst 100000 --rate 2100.)
    fake, clock, errors = FakeAggregator([PLACES]), Clock(START), list[Exception]()
    client = make_client(fake, tmp_path / "s", clock, background=True, max_queue=500, on_error=errors.append)
    client.sync()
    start = time.perf_counter()
    for i in range(2500):
        report_days(client, clock, 1)
        ahead = start + (i + 1) / 500 - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
    result = client.close(deadline=60.0)
    assert (len(fake.stored), result.remaining, client.ledger().dropped_reports, notified(errors)) == (2500, 0, 0, 0)
    client.close(flush=False)


class ThreadRecording(SeededRandom):
    """A seeded source that notes which thread drew how many reports' uniforms."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.draws: list[tuple[str, tuple[int, ...]]] = []
        self._lock = threading.Lock()

    def uniform(self, shape: Shape) -> np.ndarray:
        with self._lock:
            self.draws.append((threading.current_thread().name, tuple(np.atleast_1d(shape))))
            return super().uniform(shape)


def test_the_callers_thread_never_draws_a_block_of_irr(tmp_path: Path) -> None:
    # A burst empties the IRR pool faster than it is refilled: report() then draws a small block of its own
    # (at most CALLER_IRR_UNIFORMS uniforms), never the pool's next block (up to 4,096 reports' uniforms).
    fake, clock = FakeAggregator([PLACES]), Clock(START)
    source = ThreadRecording(11)
    client = make_client(fake, tmp_path / "s", clock, background=True, rng=source)
    client.sync()
    report_days(client, clock, 600)
    client.close(deadline=30.0)
    caller = threading.current_thread().name
    on_caller = [shape for name, shape in source.draws if name == caller]
    assert on_caller and all(math.prod(shape) <= CALLER_IRR_UNIFORMS for shape in on_caller), on_caller[:5]


def test_a_forked_child_never_reuses_the_callers_small_irr_block(tmp_path: Path) -> None:
    fake, clock = FakeAggregator([PLACES]), Clock(START)
    client = make_client(fake, tmp_path / "s", clock, rng=ThreadRecording(3))
    client.sync()
    client.report("places", {"home"})  # the pool was empty: report() drew a small block, one row used
    (pool,) = client._reporter.irr.values()
    assert len(pool) > 0
    _empty_after_fork()  # what os.register_at_fork runs in a child
    assert len(pool) == 0
