"""Benchmark: counting raw reports (``BitCounts.from_reports``) against plain NumPy, and a whole frequency oracle.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/counting.py [--repeat 5]

Rows, each the best of ``--repeat`` runs:

* counts of 100k reports x 1,000 bits in one cohort: NumPy's ``reports.sum(0)``,
  ``from_reports`` (its NumPy path and its compiled kernel) and the previous method (a float32 one-hot matrix product per
  16,384 reports, kept here as ``matmul_counts`` for the comparison);
* the same with 8 cohorts in random order (NumPy: one masked ``sum(0)`` per cohort),
  and 1M reports x 128 bits in 8 cohorts (the decoding benchmark's shape);
* the whole frequency-oracle run, 100k users x 1,000 items, SUE at epsilon 2 in
  chunks of 10k users: plain NumPy (``random(float32)``, ``where``, ``sum(0)``), a
  tuned NumPy (16-bit integer draws from the raw generator against 16-bit cuts, a
  cut select by multiply-add, ``sum(0)``) and ``Randomizer.simulate`` then
  ``from_reports``, seeded (NumPy path, then the compiled kernels).

``--ratios R``: the kernels against the machine, R interleaved rounds (each round times
every item once more, best of ``--repeat``, thread CPU time, the load average beside it):
the generator (PCG64's raw words from NumPy's ``random_raw``, the bytes ``simulate``
consumes), ``simulate`` (10k users x 1,000 items, seeded) with the compiled kernel and with
the NumPy code (``protocol.kernels.numpy_only``; the same bits, checked), the secure default's
generator (the ChaCha20 keystream of ``os_random_bytes``, requested chunk by chunk as
``simulate`` requests its first bytes) and ``simulate`` on it (kernel), a streaming
read (NumPy summing the reports' bytes as 64-bit words) and ``from_reports`` on those reports
(1 cohort), kernel and NumPy. It prints per round each rate over its floor's: generator ns per
byte / ``simulate`` ns per bit (and the same for the PCG64 the kernel computes itself, in four
interleaved lanes: ``pcg_words``, the words ``random_raw`` gives), and streaming ns per byte /
counting ns per byte.

The compiled kernels need numba (``pip install 'onesided[fast]'``); without it the "kernel"
rows run the NumPy code too, and the script says so.

Every onesided count is checked equal to NumPy's. Times are this thread's CPU time by default
(``--clock wall`` for elapsed time; NumPy runs single-threaded here); the load average is printed
before and after (wall times mean little on a busy machine). Numbers go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable

import numpy as np

from aggregator.analysis.decoding import BitCounts
from protocol import Randomizer, SecureRandom, SeededRandom, kernels
from protocol.exact import BERNOULLI_CHUNK
from protocol.rng import os_random_bytes

EPSILON = 2.0
CPU = time.thread_time


def best_of(
    fn: Callable[[], object], repeat: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Best of ``repeat`` calls on ``clock`` (``time.thread_time``: CPU time, which a busy machine inflates less)."""
    best = math.inf
    for _ in range(repeat):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
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


def counting_rows(
    n: int, m: int, h: int, repeat: int, clock: Callable[[], float]
) -> list[tuple[str, float]]:
    rng = np.random.default_rng(1)
    reports = rng.random((n, m), dtype=np.float32) < 0.3
    cohorts = rng.integers(0, h, n)
    truth = numpy_counts(reports, cohorts, h).reshape(h, m)
    if not np.array_equal(BitCounts.from_reports(reports, cohorts, h).ones, truth):
        raise SystemExit("from_reports disagrees with numpy")
    count = numpy_path(lambda: BitCounts.from_reports(reports, cohorts, h))
    if not np.array_equal(count().ones, truth):
        raise SystemExit("from_reports (NumPy path) disagrees with numpy")
    label = f"{n:,} x {m:,} bits, {h} cohort{'s' if h > 1 else ''}"
    return [
        (
            f"{label}: numpy sum(0){' per cohort' if h > 1 else ''}",
            best_of(lambda: numpy_counts(reports, cohorts, h), repeat, clock),
        ),
        (f"{label}: from_reports, NumPy path", best_of(count, repeat, clock)),
        (
            f"{label}: from_reports, kernel",
            best_of(lambda: BitCounts.from_reports(reports, cohorts, h), repeat, clock),
        ),
        (
            f"{label}: previous (float32 matrix product)",
            best_of(lambda: matmul_counts(reports, cohorts, h), repeat, clock),
        ),
    ]


def sue_bits(chunk: int, items: int) -> np.ndarray:
    bits = np.zeros((chunk, items), dtype=bool)
    bits[np.arange(chunk), np.random.default_rng(0).integers(items, size=chunk)] = True
    return bits


def sue() -> Randomizer:
    flip = 1.0 / (math.exp(EPSILON / 2) + 1.0)
    return Randomizer(mode="symmetric", level=-2.0 * math.log(2.0 * flip))


def numpy_path(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` with the compiled kernels off (the NumPy code, same results)."""
    return kernels.numpy_only()(fn)


def ratio_rounds(rounds: int, repeat: int, chunk: int = 10_000, items: int = 1_000) -> None:
    """The kernels over their floors, interleaved: see the module docstring (``--ratios``)."""
    bits = sue_bits(chunk, items)
    randomizer = sue()
    generator = np.random.Generator(np.random.PCG64(1)).bit_generator
    reports = np.random.default_rng(1).random((100_000, items), dtype=np.float32) < 0.3
    words = reports.view(np.uint64).reshape(-1)
    cohort = np.zeros(reports.shape[0], dtype=np.int64)
    n = bits.size
    compiled = randomizer.simulate(
        bits, SeededRandom(5)
    )  # also compiles (or loads) the kernels, untimed
    if not np.array_equal(
        compiled, numpy_path(lambda: randomizer.simulate(bits, SeededRandom(5)))()
    ):
        raise SystemExit("the kernel's bits differ from the NumPy path's")
    counts = BitCounts.from_reports(reports, cohort, 1).ones
    if not np.array_equal(
        counts, numpy_path(lambda: BitCounts.from_reports(reports, cohort, 1))().ones
    ):
        raise SystemExit("the kernel's counts differ from the NumPy path's")
    print(
        f"compiled kernels: {'on (numba)' if kernels.loaded() is not None else 'OFF (no numba): both paths are NumPy'}"
    )
    print(
        "| round | load (1 min) | PCG64 ns/B: random_raw, kernel's | simulate ns/bit: kernel, ratio, "
        "ratio to the kernel's PCG64 | NumPy path, ratio "
        "| ChaCha20 ns/B | secure simulate ns/bit, ratio | streaming read GB/s | counting GB/s: kernel, ratio "
        "| NumPy path, ratio |"
    )
    print("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    seeded = SeededRandom(5)
    secure = SecureRandom()
    module, own_generator = kernels.loaded(), np.random.PCG64(2)
    words_out = np.empty(n // 8, dtype=np.uint64)

    def own_words(out: np.ndarray) -> None:
        with kernels.pcg64_state(own_generator) as pcg:
            module.pcg_words(*pcg, out)

    kernel_words = own_words if module is not None else None
    requests = [
        min(BERNOULLI_CHUNK, n - start) for start in range(0, n, BERNOULLI_CHUNK)
    ]  # simulate's first bytes
    for i in range(rounds):
        load = os.getloadavg()[0]
        gen = best_of(lambda: generator.random_raw(n // 8), repeat, CPU) / n
        own = (
            best_of(lambda: kernel_words(words_out), repeat, CPU) / n if kernel_words else math.nan
        )
        kernel = best_of(lambda: randomizer.simulate(bits, seeded), repeat, CPU) / n
        plain = best_of(numpy_path(lambda: randomizer.simulate(bits, seeded)), repeat, CPU) / n
        chacha = best_of(lambda: [os_random_bytes(size) for size in requests], repeat, CPU) / n
        kernel_secure = best_of(lambda: randomizer.simulate(bits, secure), repeat, CPU) / n
        stream = best_of(lambda: np.add.reduce(words), repeat, CPU)
        count = best_of(lambda: BitCounts.from_reports(reports, cohort, 1), repeat, CPU)
        count_plain = best_of(
            numpy_path(lambda: BitCounts.from_reports(reports, cohort, 1)), repeat, CPU
        )
        gb = reports.nbytes / 1e9
        print(
            f"| {i + 1} | {load:.2f} | {gen * 1e9:.3f}, {own * 1e9:.3f} "
            f"| {kernel * 1e9:.3f}, {gen / kernel:.2f}, {own / kernel:.2f} "
            f"| {plain * 1e9:.3f}, {gen / plain:.2f} | {chacha * 1e9:.3f} "
            f"| {kernel_secure * 1e9:.3f}, {chacha / kernel_secure:.2f} | {gb / stream:.1f} "
            f"| {gb / count:.1f}, {stream / count:.2f} | {gb / count_plain:.1f}, {stream / count_plain:.2f} |"
        )


def oracle_rows(
    users: int, items: int, chunk: int, repeat: int, clock: Callable[[], float]
) -> list[tuple[str, float]]:
    bits = sue_bits(chunk, items)
    randomizer = sue()
    p0, p1 = randomizer.permanent_probabilities()
    numpy_rng = np.random.Generator(np.random.PCG64(1))
    low, high = np.uint16(math.floor(p0 * 65536)), np.uint16(math.floor(p1 * 65536))
    seeded = SeededRandom(5)
    cohort = np.zeros(chunk, dtype=np.int64)

    def plain() -> None:
        total = np.zeros(items, dtype=np.int64)
        for _ in range(users // chunk):
            u = numpy_rng.random(bits.shape, dtype=np.float32)
            total += np.where(bits, u < p1, u < p0).sum(0)

    def tuned() -> None:
        # 16-bit draws (probabilities rounded down to 2^-16: not exact, as a tuned user would accept)
        total = np.zeros(items, dtype=np.int64)
        cut = np.empty(bits.shape, dtype=np.uint16)
        for _ in range(users // chunk):
            u = (
                numpy_rng.bit_generator.random_raw(bits.size // 4)
                .view(np.uint16)
                .reshape(bits.shape)
            )
            np.multiply(bits, high - low, out=cut)
            cut += low
            total += (u < cut).sum(0)

    def onesided() -> None:
        total = BitCounts.zeros(1, items)
        for _ in range(users // chunk):
            total = total + BitCounts.from_reports(randomizer.simulate(bits, seeded), cohort, 1)

    onesided()  # compiles (or loads) the kernels, untimed
    label = f"frequency oracle {users:,} users x {items:,} items (randomize + count)"
    return [
        (f"{label}: plain numpy", best_of(plain, repeat, clock)),
        (f"{label}: tuned numpy (uint16 draws)", best_of(tuned, repeat, clock)),
        (
            f"{label}: simulate + from_reports, NumPy path",
            best_of(numpy_path(onesided), repeat, clock),
        ),
        (f"{label}: simulate + from_reports, kernel", best_of(onesided, repeat, clock)),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--ratios",
        type=int,
        default=0,
        metavar="R",
        help="only the kernels against the generator and a streaming read, R interleaved rounds",
    )
    ap.add_argument(
        "--clock",
        choices=["cpu", "wall"],
        default="cpu",
        help="cpu: this thread's CPU time (default; a shared machine inflates it less), wall: elapsed time",
    )
    args = ap.parse_args()
    clock = CPU if args.clock == "cpu" else time.perf_counter
    if args.ratios:
        ratio_rounds(args.ratios, args.repeat)
        return
    load_before = os.getloadavg()
    print(
        f"compiled kernels: {'on (numba)' if kernels.loaded() is not None else 'OFF (no numba): both paths are NumPy'}"
    )
    groups = [
        counting_rows(100_000, 1_000, 1, args.repeat, clock),
        counting_rows(100_000, 1_000, 8, args.repeat, clock),
        counting_rows(1_000_000, 128, 8, args.repeat, clock),
        oracle_rows(100_000, 1_000, 10_000, args.repeat, clock),
    ]
    print(f"| {'what':82s} | {args.clock + ' s':>8s} | {'vs numpy':>8s} |")
    print(f"|{'-' * 84}|{'-' * 10}:|{'-' * 10}:|")
    for rows in groups:
        base = rows[0][1]
        for name, seconds in rows:
            print(f"| {name:82s} | {seconds:8.4f} | {base / seconds:7.2f}x |")
    before, after = (" ".join(f"{x:.2f}" for x in load) for load in (load_before, os.getloadavg()))
    print(f"load average (1, 5, 15 min): before {before}, after {after}")


if __name__ == "__main__":
    main()
