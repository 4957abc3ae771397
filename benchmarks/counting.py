"""Benchmark: counting raw reports (``BitCounts.from_reports``) against plain NumPy, and a whole frequency oracle.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/counting.py [--repeat 5]

Rows, each the best of ``--repeat`` runs:

* counts of 100k reports x 1,000 bits in one cohort: NumPy's ``reports.sum(0)``,
  ``from_reports`` and the previous method (a float32 one-hot matrix product per
  16,384 reports, kept here as ``matmul_counts`` for the comparison);
* the same with 8 cohorts in random order (NumPy: one masked ``sum(0)`` per cohort),
  and 1M reports x 128 bits in 8 cohorts (the decoding benchmark's shape);
* the whole frequency-oracle run, 100k users x 1,000 items, SUE at epsilon 2 in
  chunks of 10k users: plain NumPy (``random(float32)``, ``where``, ``sum(0)``)
  against ``Randomizer.simulate`` then ``from_reports``, seeded.

Every onesided count is checked equal to NumPy's. The load average is printed before and
after (the timings mean little on a busy machine). Numbers go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable

import numpy as np

from aggregator.analysis.decoding import BitCounts
from protocol import Randomizer, SeededRandom

EPSILON = 2.0


def best_of(fn: Callable[[], object], repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_counts(reports: np.ndarray, cohorts: np.ndarray, num_cohorts: int) -> np.ndarray:
    """The previous ``from_reports``: cohort one-hot times reports, float32, 16,384 reports at a time."""
    ones = np.zeros((num_cohorts, reports.shape[1]))
    labels = np.arange(num_cohorts)[:, None]
    for start in range(0, reports.shape[0], 16384):
        one_hot = (cohorts[start : start + 16384][None, :] == labels).astype(np.float32)
        ones += one_hot @ reports[start : start + 16384].astype(np.float32)
    return ones.astype(np.int64)


def numpy_counts(reports: np.ndarray, cohorts: np.ndarray, num_cohorts: int) -> np.ndarray:
    if num_cohorts == 1:
        return reports.sum(0)
    return np.stack([reports[cohorts == j].sum(0) for j in range(num_cohorts)])


def counting_rows(n: int, m: int, h: int, repeat: int) -> list[tuple[str, float]]:
    rng = np.random.default_rng(1)
    reports = rng.random((n, m), dtype=np.float32) < 0.3
    cohorts = rng.integers(0, h, n)
    truth = numpy_counts(reports, cohorts, h).reshape(h, m)
    if not np.array_equal(BitCounts.from_reports(reports, cohorts, h).ones, truth):
        raise SystemExit("from_reports disagrees with numpy")
    label = f"{n:,} x {m:,} bits, {h} cohort{'s' if h > 1 else ''}"
    return [
        (f"{label}: numpy sum(0){' per cohort' if h > 1 else ''}", best_of(lambda: numpy_counts(reports, cohorts, h), repeat)),
        (f"{label}: from_reports", best_of(lambda: BitCounts.from_reports(reports, cohorts, h), repeat)),
        (f"{label}: previous (float32 matrix product)", best_of(lambda: matmul_counts(reports, cohorts, h), repeat)),
    ]


def oracle_rows(users: int, items: int, chunk: int, repeat: int) -> list[tuple[str, float]]:
    bits = np.zeros((chunk, items), dtype=bool)
    bits[np.arange(chunk), np.random.default_rng(0).integers(items, size=chunk)] = True
    flip = 1.0 / (math.exp(EPSILON / 2) + 1.0)
    sue = Randomizer(mode="symmetric", level=-2.0 * math.log(2.0 * flip))
    p0, p1 = sue.permanent_probabilities()
    numpy_rng = np.random.Generator(np.random.PCG64(1))
    seeded = SeededRandom(5)
    cohort = np.zeros(chunk, dtype=np.int64)

    def plain() -> None:
        total = np.zeros(items, dtype=np.int64)
        for _ in range(users // chunk):
            u = numpy_rng.random(bits.shape, dtype=np.float32)
            total += np.where(bits, u < p1, u < p0).sum(0)

    def onesided() -> None:
        total = BitCounts.zeros(1, items)
        for _ in range(users // chunk):
            total = total + BitCounts.from_reports(sue.simulate(bits, seeded), cohort, 1)

    label = f"frequency oracle {users:,} users x {items:,} items (randomize + count)"
    return [(f"{label}: plain numpy", best_of(plain, repeat)), (f"{label}: simulate + from_reports", best_of(onesided, repeat))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    load_before = os.getloadavg()
    groups = [
        counting_rows(100_000, 1_000, 1, args.repeat),
        counting_rows(100_000, 1_000, 8, args.repeat),
        counting_rows(1_000_000, 128, 8, args.repeat),
        oracle_rows(100_000, 1_000, 10_000, args.repeat),
    ]
    print(f"| {'what':82s} | {'seconds':>8s} | {'vs numpy':>8s} |")
    print(f"|{'-' * 84}|{'-' * 10}:|{'-' * 10}:|")
    for rows in groups:
        base = rows[0][1]
        for name, seconds in rows:
            print(f"| {name:82s} | {seconds:8.4f} | {base / seconds:7.2f}x |")
    before, after = (" ".join(f"{x:.2f}" for x in load) for load in (load_before, os.getloadavg()))
    print(f"load average (1, 5, 15 min): before {before}, after {after}")


if __name__ == "__main__":
    main()
