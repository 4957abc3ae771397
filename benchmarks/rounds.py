"""Benchmark: one relaxation round for 100,000 simulated clients (vectorized path), and its accuracy.

Run: .venv/bin/python benchmarks/rounds.py [--clients N] [--repetitions R]

Times the round's steps on the vectorized path, two ways: the device's
(relax every client's memoized noise with the lazy Markov step, threshold,
IRR) and the simulations' (relax the permanent bits without their noise,
``Randomizer.relax_permanent``, then the IRR, every bit exact at its stated
probability); then aggregate per cohort and decode the bit counts. Then
measures the accuracy ratio of the simulations' path: MSE after the round
over MSE of a one-shot collection at the new level (1.0 = nothing lost),
and the composition baseline's ratio.
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
    sort_by_cohort,
)
from protocol import BloomEncoding, Randomizer, SeededRandom


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--clients", type=int, default=100_000)
    ap.add_argument("--repetitions", type=int, default=4)
    args = ap.parse_args()
    encoding = BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=32)
    rng = SeededRandom(7)
    pop = sort_by_cohort(make_population(SyntheticCity(num_places=2000), args.clients, encoding, rng))
    for base, level_to in (
        (Randomizer(mode="asymmetric", level=1.0, irr_q=0.05), 6.0),
        (Randomizer(mode="symmetric", level=1.0), 4.0),
    ):
        noise = base.draw_noise(pop.bits.shape, rng)
        permanent = base.sample_permanent(pop.bits, rng)
        relaxed_r = base.with_level(level_to)
        t0 = time.perf_counter()
        relaxed = base.relax_noise(noise, level_to, rng)
        t1 = time.perf_counter()
        reports = relaxed_r.report(pop.bits, relaxed, rng)
        t2 = time.perf_counter()
        relaxed_bits = base.relax_permanent(pop.bits, permanent, level_to, rng)
        t3 = time.perf_counter()
        reports = relaxed_r.sample_instantaneous(relaxed_bits, rng)
        t4 = time.perf_counter()
        ones, totals = cohort_bit_counts(reports, pop.cohorts, encoding.num_cohorts)
        t5 = time.perf_counter()
        bit_estimates(BitCounts(ones=ones, totals=totals), relaxed_r)
        t6 = time.perf_counter()
        print(f"{base.mode:10s} round {base.level:g} -> {level_to:g}, {args.clients:,} clients x 128 bits:\n"
              f"{'':10s} device path: relax noise {t1 - t0:.3f} s, reports {t2 - t1:.3f} s; "
              f"bit path: relax bits {t3 - t2:.3f} s, reports {t4 - t3:.3f} s; "
              f"aggregate {t5 - t4:.3f} s, decode bits {(t6 - t5) * 1e3:.1f} ms")
        result = relaxation_experiment(pop, base, level_to, repetitions=args.repetitions, rng=rng)
        print(f"{'':10s} accuracy over {result.cells:,} (cohort, bit) cells: relaxed/one-shot MSE = "
              f"{result.ratio:.3f}, composition/one-shot = {result.composition_ratio:.3f}, "
              f"first collection/one-shot = {result.first / result.one_shot:.2f}")


if __name__ == "__main__":
    main()
