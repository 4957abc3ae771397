"""Benchmark: one ``Client.report()`` call (encode + memoized noise + IRR + seal + queue), its parts and memory.

Run: .venv/bin/python benchmarks/client.py [--reports N] [--bits M]
Bloom m=128, k=2, asymmetric + IRR by default; the config comes from an
in-memory fake aggregator (no network). Prints one line per measurement;
numbers go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from client_sdk import Client
from client_sdk.memo import permanent_bits, value_fingerprint
from client_sdk.testing import FakeAggregator
from protocol.encodings import BloomEncoding, canonical_value
from protocol.params import MetricParams
from protocol.rng import SecureRandom
from protocol.wire import build_report


def per_call_us(fn: Callable[[int], object], n: int) -> tuple[float, float]:
    """Median and 99th percentile of one call, microseconds."""
    times = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        fn(i)
        times.append(time.perf_counter_ns() - t0)
    times.sort()
    return statistics.median(times) / 1e3, times[int(0.99 * (n - 1))] / 1e3


def make_client(folder: Path, params: MetricParams, fake: FakeAggregator, **kwargs: object) -> Client:
    client = Client("http://agg.invalid", folder / "state", server_public_keys=fake.sign_public,
                    max_epsilon=float("inf"), session=fake, max_queue=10**7, **kwargs)  # type: ignore[arg-type]
    client.sync()
    return client


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reports", type=int, default=5000)
    ap.add_argument("--bits", type=int, default=128)
    ap.add_argument("--values", type=int, default=50, help="distinct sets cycled through")
    args = ap.parse_args()
    params = MetricParams(name="places", encoding=BloomEncoding(num_bits=args.bits, num_hashes=2, num_cohorts=64),
                          mode="asymmetric", level=2.0, irr_q=0.1)
    fake = FakeAggregator([params])
    sets = [{f"cafe-{i}", f"park-{i % 7}"} for i in range(args.values)]
    n = args.reports
    label = f"Bloom m={args.bits}, k=2, asymmetric + IRR"

    with tempfile.TemporaryDirectory() as tmp:
        client = make_client(Path(tmp), params, fake, autosave=False)
        client.report("places", sets[0])  # warm-up
        med, p99 = per_call_us(lambda i: client.report("places", sets[i % len(sets)]), n)
        print(f"report() [{label}], no state write: median {med:.1f} us, p99 {p99:.1f} us")

        # the parts, same inputs
        secret, record = client._state.secret, client._state.metrics["places"]
        config = client.config
        assert config is not None  # noqa: S101 - synced above
        seal_public = config.aggregator.seal_public
        secure = SecureRandom()
        keys = [canonical_value(s) for s in sets]
        encoded = [params.encoding.encode(s, record.cohort) for s in sets]
        randomizer = params.randomizer(2.0)
        perm = permanent_bits(secret, params, encoded[0], keys[0], record.levels)
        parts: dict[str, Callable[[int], object]] = {
            "encode (Bloom, mmh3)": lambda i: params.encoding.encode(sets[i % len(sets)], record.cohort),
            "canonical value + fingerprint": lambda i: value_fingerprint(
                secret, "places", canonical_value(sets[i % len(sets)])),
            "memoized noise + permanent bits": lambda i: permanent_bits(
                secret, params, encoded[i % len(sets)], keys[i % len(sets)], record.levels),
            "IRR": lambda i: randomizer.instantaneous(perm, secure),
            "pack + seal (X25519, HKDF, AES-GCM)": lambda i: build_report(
                params_digest=params.digest(), metric="places", round=0, window=0, cohort=record.cohort,
                level=2.0, bits=perm, seal_public=seal_public),
        }
        for name, fn in parts.items():
            med, p99 = per_call_us(fn, n)
            print(f"  part: {name}: median {med:.1f} us, p99 {p99:.1f} us")

        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        client.report("places", sets[1])
        _, peak = tracemalloc.get_traced_memory()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        kept = sum(s.size_diff for s in after.compare_to(before, "filename"))
        print(f"report() memory: peak {(peak - base) / 1024:.1f} KiB during the call, "
              f"{kept / 1024:.2f} KiB kept (one queued sealed report)")

        durable = make_client(Path(tmp) / "durable", params, fake, autosave=True)
        med, p99 = per_call_us(lambda i: durable.report("places", sets[i % len(sets)]), min(n, 500))
        print(f"report() with autosave (encrypted atomic write + fsync, queue of <= 500): "
              f"median {med:.1f} us, p99 {p99:.1f} us")
        size = (Path(tmp) / "durable" / "state").stat().st_size
        print(f"state file with {len(durable._state.queue)} queued reports: {size / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
