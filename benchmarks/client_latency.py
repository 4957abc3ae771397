"""Benchmark: ``Client.report()`` on the caller's thread with the default settings, under a parallel disk load.

Run: .venv/bin/python benchmarks/client_latency.py [--dir FOLDER] [--calls N] [--burst N [--rate R]] [--no-latency]

The client runs as an app embeds it: the default settings (the background
sender, ``autosave``, the durable encrypted queue on ``--dir``), an
in-memory fake aggregator as its session. A second process writes and
fsyncs 1 MiB blocks to a file in the same folder for the whole run (the
parallel disk load). Each of ``--calls`` reports is a new window of one
metric (the clock moves one day per call) and is timed alone, on the
caller's thread; the median, p99 and maximum are printed, and how many
calls took over 1 ms and over 100 ms, with the most CPU time the caller's
thread itself spent in one of those (``time.thread_time``, less the
interpreter's garbage collections that ran in the call, timed by a
``gc.callbacks`` hook, and counted when full): a slow call that spent
little CPU waited for the processor (a loaded machine, the interpreter
lock), not for a disk. ``--burst N`` then reports N values
as fast as the loop can call, or ``--rate R`` a second (default settings,
``max_queue`` 10,000), and prints how many reports were delivered, are
still queued, and were dropped (read after the last answers), and how
many of the N none of these accounts for (0 when the count is exact). The aggregator is in memory: ``--server fake`` (default) opens
every report as the real one does, on this process's CPU; ``--server
null`` answers ``accepted`` without opening (the server's work off the
client's processor, as in the field). It runs against whichever ``client_sdk`` is importable, so the
same command measures an older checkout (``PYTHONPATH=<its folder>``).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from client_sdk import Client
from client_sdk.testing import FakeAggregator
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams
from protocol.wire import STATUS_ACCEPTED, ReportEnvelope, ReportResult

DAY = 86400.0
LOAD = """
import os, sys
path, block = sys.argv[1], os.urandom(1 << 20)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
written = 0
while True:
    os.write(fd, block)
    os.fsync(fd)
    written += 1
    if written % 64 == 0:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, 0)
"""


class NullAggregator(FakeAggregator):
    """Answers ``accepted`` for every report without opening it (the server's CPU is not the client's)."""

    def _store(self, report: ReportEnvelope, wire2: bool = False) -> ReportResult:
        self.stored[(report.metric, report.report_id_text)] = (report, None)  # type: ignore[assignment]
        return ReportResult(report_id=report.report_id_text, status=STATUS_ACCEPTED)


class StepClock:
    def __init__(self) -> None:
        self.now = 1_790_000_000.0

    def __call__(self) -> float:
        return self.now


def make_client(folder: Path, clock: StepClock, server: str) -> tuple[Client, FakeAggregator]:
    metric = MetricParams(name="words", encoding=BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=8),
                          mode="asymmetric", level=1.0, irr_q=0.1)
    fake = (NullAggregator if server == "null" else FakeAggregator)([metric])
    client = Client("http://agg.test", folder / "app.state", server_public_keys=fake.sign_public, session=fake,
                    max_epsilon=1e12, clock=clock, rng=1, insecure_rng_for_testing=True)
    client.sync()
    return client, fake


class GcTimer:
    """The time the interpreter's garbage collections took on the caller's thread (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.total, self.full, self._start = 0.0, 0, 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if threading.get_ident() != self.thread:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.total += time.perf_counter() - self._start
            self.full += info["generation"] == 2


def latency(folder: Path, calls: int, server: str) -> None:
    clock = StepClock()
    client, _ = make_client(folder, clock, server)
    times, slow_cpu, gc_timer = [], [0.0], GcTimer()
    gc.callbacks.append(gc_timer)
    try:
        for i in range(calls):
            clock.now += DAY
            in_gc = gc_timer.total
            cpu, start = time.thread_time(), time.perf_counter()
            client.report("words", {f"w{i % 50}", "home"})
            took = time.perf_counter() - start
            times.append(took)
            if took > 1e-3:  # the CPU the call itself spent, its garbage collections left out
                slow_cpu.append(max(0.0, time.thread_time() - cpu - (gc_timer.total - in_gc)))
    finally:
        gc.callbacks.remove(gc_timer)
    client.close(deadline=30.0)
    times.sort()
    ms = [t * 1e3 for t in times]
    print(f"report() x{calls}: median {statistics.median(ms):.3f} ms, p99 {ms[int(0.99 * len(ms))]:.3f} ms, "
          f"max {ms[-1]:.1f} ms; over 1 ms: {sum(t > 1 for t in ms)} (most CPU of the caller's thread in one, "
          f"its garbage collections left out: {max(slow_cpu) * 1e3:.2f} ms), over 100 ms: {sum(t > 100 for t in ms)}; "
          f"{gc_timer.full} full garbage collection(s) on the caller's thread")


def burst(folder: Path, count: int, server: str, rate: float) -> None:
    clock = StepClock()
    client, fake = make_client(folder, clock, server)
    start = time.perf_counter()
    for i in range(count):
        clock.now += DAY
        client.report("words", {f"w{i % 50}"})
        if rate and i % 16 == 15:  # paced: sleep whenever the loop is ahead of ``rate`` reports a second
            ahead = start + (i + 1) / rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
    took = time.perf_counter() - start
    result = client.close(deadline=120.0)
    dropped = client.ledger().dropped_reports  # after the last answers: exact
    client.close(deadline=1.0, flush=False)
    delivered = len(fake.stored)
    print(f"burst of {count} {f'at {rate:,.0f}/s ' if rate else ''}in {took:.1f} s ({count / took:,.0f}/s): "
          f"{delivered} delivered, {result.remaining} queued, {dropped} dropped, "
          f"{count - delivered - result.remaining - dropped} unaccounted")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--burst", type=int, default=0)
    parser.add_argument("--rate", type=float, default=0.0,
                        help="reports a second in the burst (default 0: as fast as the loop calls)")
    parser.add_argument("--no-latency", action="store_true", help="run the burst only")
    parser.add_argument("--server", choices=("fake", "null"), default="fake")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        load = subprocess.Popen([sys.executable, "-c", LOAD, str(folder / "load.bin")])
        try:
            time.sleep(1.0)
            if not args.no_latency:
                (folder / "a").mkdir()
                latency(folder / "a", args.calls, args.server)
            if args.burst:
                (folder / "b").mkdir()
                burst(folder / "b", args.burst, args.server, args.rate)
        finally:
            load.kill()
            load.wait()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, folder {args.dir or tempfile.gettempdir()}, "
          f"server {args.server}, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
