"""Benchmark: certified epsilon of symmetric relaxed chains, by chain length.

Run: .venv/bin/python benchmarks/laplace_chain.py [--max-levels N] [--repeat R]
Chains 1, 1.5, 2, ... (n levels). Prints a markdown table (best of ``R`` seconds for the mpmath
enclosure and for the double enclosure, the certified epsilon and both widths) and the load average;
numbers go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from protocol.laplace_chain_rigorous import (
    _exp_enclosure,
    certified_sequence_epsilon,
    enclosed_sequence_epsilon,
)


def best_of(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        _exp_enclosure.cache_clear()  # time a first call (the exponential enclosures are cached)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-levels", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    print("| levels | mpmath s | doubles s | epsilon (certified) | mpmath width | doubles width |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in range(2, args.max_levels + 1):
        levels = tuple(1.0 + 0.5 * i for i in range(n))
        certified = certified_sequence_epsilon(levels)
        lo, hi = enclosed_sequence_epsilon(levels)
        t_mp = best_of(lambda levels=levels: certified_sequence_epsilon(levels), args.repeat)
        t_dbl = best_of(lambda levels=levels: enclosed_sequence_epsilon(levels), args.repeat)
        print(f"| {n} | {t_mp:.3f} | {t_dbl:.3f} | {certified.lo:.9f} | {certified.width:.1e} | {hi - lo:.1e} |")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
