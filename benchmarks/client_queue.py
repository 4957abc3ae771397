"""Benchmark: ``Client.report()`` with autosave on, with a short and a long offline queue.

Run: .venv/bin/python benchmarks/client_queue.py [--dir FOLDER] [--calls N]

Each ``report()`` here is a new window of one metric (a settable clock moves
one day per call), so every call encodes, seals, saves the state (atomic
write, fsync of file and folder), records the generation (one fsync) and
appends one record to the queue file (one fsync). The queue is first
filled to the given length (autosave off, one save), then ``--calls``
reports are timed one by one; the median and 90th percentile are printed.
``--dir`` picks the disk (default: a temporary folder of the system, which
is the work disk here; ``/dev/shm`` is tmpfs, where fsync costs nothing).
Bloom m=128, k=2, asymmetric + IRR; in-memory fake aggregator.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from client_sdk import Client
from client_sdk.testing import FakeAggregator
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams

DAY = 86400.0


class StepClock:
    """A clock one window ahead at every read of :meth:`advance` (one report per window)."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self) -> None:
        self.now += DAY


def time_reports(folder: Path, queued: int, calls: int) -> tuple[float, float, int]:
    """Median and p90 of ``report()`` (ms) with ``queued`` reports waiting, and the queue file size."""
    params = MetricParams(name="places", encoding=BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=64),
                          mode="asymmetric", level=2.0, irr_q=0.1)
    fake = FakeAggregator([params])
    clock = StepClock()
    client = Client("http://agg.invalid", folder / "state", background=False, server_public_keys=fake.sign_public,
                    max_epsilon=float("inf"), session=fake, max_queue=10**7, clock=clock, autosave=False)
    client.sync()
    for i in range(queued):
        clock.advance()
        client.report("places", {f"cafe-{i % 50}", "home"})
    client.save()
    client.autosave = True
    times = []
    for i in range(calls):
        clock.advance()
        t0 = time.perf_counter_ns()
        client.report("places", {f"park-{i % 50}", "home"})
        times.append(time.perf_counter_ns() - t0)
    size = (folder / "state.queue").stat().st_size
    client.close()
    times.sort()
    return statistics.median(times) / 1e6, times[int(0.9 * (len(times) - 1))] / 1e6, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", type=Path, default=None, help="where the state goes (default: the system's temp folder)")
    ap.add_argument("--calls", type=int, default=200, help="timed report() calls per queue length")
    ap.add_argument("--queued", type=int, nargs="+", default=[10, 10_000])
    args = ap.parse_args()
    for queued in args.queued:
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            median, p90, size = time_reports(Path(tmp), queued, args.calls)
        print(f"report() with autosave, {queued:>6} queued ({args.dir or tempfile.gettempdir()}): "
              f"median {median:.2f} ms, p90 {p90:.2f} ms over {args.calls} calls; queue file {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
