"""Benchmark: one relaxation round for 100,000 simulated clients (vectorized path), and its accuracy.

Run: .venv/bin/python benchmarks/rounds.py [--clients N] [--repetitions R]

Times the round's steps on the vectorized path (the same randomizer and
relaxation functions the client SDK calls): relax every client's memoized
noise (lazy Markov step), make the reports (IRR), aggregate per cohort, and
decode the bit counts. Then measures the accuracy ratio: MSE after the round
over MSE of a one-shot collection at the new level (1.0 = nothing lost), and
the composition baseline's ratio.
"""

from __future__ import annotations

import argparse
import time

from aggregator.analysis.decoding import BitCounts, bit_estimates
from aggregator.research.populations import (
    SyntheticCity,
    cohort_bit_counts,
    make_population,
    relaxation_experiment,
)
from protocol import BloomEncoding, Randomizer, SeededRandom


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--clients", type=int, default=100_000)
    ap.add_argument("--repetitions", type=int, default=4)
    args = ap.parse_args()
    encoding = BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=32)
    rng = SeededRandom(7)
    pop = make_population(SyntheticCity(num_places=2000), args.clients, encoding, rng)
    for base, level_to in (
        (Randomizer(mode="asymmetric", level=1.0, irr_q=0.05), 6.0),
        (Randomizer(mode="symmetric", level=1.0), 4.0),
    ):
        noise = base.draw_noise(pop.bits.shape, rng)
        relaxed_r = base.with_level(level_to)
        t0 = time.perf_counter()
        relaxed = base.relax_noise(noise, level_to, rng)
        t1 = time.perf_counter()
        reports = relaxed_r.report(pop.bits, relaxed, rng)
        t2 = time.perf_counter()
        ones, totals = cohort_bit_counts(reports, pop.cohorts, encoding.num_cohorts)
        t3 = time.perf_counter()
        bit_estimates(BitCounts(ones=ones, totals=totals), relaxed_r)
        t4 = time.perf_counter()
        print(f"{base.mode:10s} round {base.level:g} -> {level_to:g}, {args.clients:,} clients x 128 bits: "
              f"relax {t1 - t0:.3f} s, reports {t2 - t1:.3f} s, aggregate {t3 - t2:.3f} s, "
              f"decode bits {(t4 - t3) * 1e3:.1f} ms, total {t4 - t0:.3f} s")
        result = relaxation_experiment(pop, base, level_to, repetitions=args.repetitions, rng=rng)
        print(f"{'':10s} accuracy over {result.cells:,} (cohort, bit) cells: relaxed/one-shot MSE = "
              f"{result.ratio:.3f}, composition/one-shot = {result.composition_ratio:.3f}, "
              f"first collection/one-shot = {result.first / result.one_shot:.2f}")


if __name__ == "__main__":
    main()
