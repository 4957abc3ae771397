"""Benchmark: the vectorized randomizer (1M clients x 128 bits) and one report's randomization.

Run: .venv/bin/python benchmarks/randomizer.py [--clients N] [--bits M]
Prints one line per measurement; numbers go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from protocol import BloomEncoding, KeyedRandom, Randomizer, SeededRandom, canonical_value
from protocol.rng import SecureRandom


def best_of(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--clients", type=int, default=1_000_000)
    ap.add_argument("--bits", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=250_000)
    args = ap.parse_args()
    n, m = args.clients, args.bits
    rng = SeededRandom(1)
    bits = np.zeros((args.chunk, m), dtype=bool)
    bits[:, :2] = True
    for r in (
        Randomizer(mode="asymmetric", level=2.0, irr_q=0.1),
        Randomizer(mode="symmetric", level=2.0, irr_p=0.25, irr_q=0.75),
    ):
        def run(r: Randomizer = r) -> None:
            for _ in range(n // args.chunk):
                r.simulate(bits, rng)

        t = best_of(run, 3)
        print(f"vectorized {r.mode:10s} PRR+IRR, {n:,} clients x {m} bits: {t:.3f} s "
              f"= {n / t / 1e6:.2f} M client-reports/s")

    enc = BloomEncoding(num_bits=m, num_hashes=2, num_cohorts=64)
    r = Randomizer(mode="asymmetric", level=2.0, irr_q=0.1)
    secret = bytes(32)
    secure = SecureRandom()

    def one_report() -> None:
        value = ["cafe-17", "park-3"]
        b = enc.encode(value, 5)
        noise = r.draw_noise(m, KeyedRandom.for_value(secret, "places", canonical_value(value), 0))
        r.report(b, noise, secure)

    reps = 20_000
    t = best_of(lambda: [one_report() for _ in range(reps)], 3)
    print(f"one report (Bloom m={m}, k=2, asymmetric + IRR, keyed noise, no sealing): "
          f"{t / reps * 1e6:.1f} us")


if __name__ == "__main__":
    main()
