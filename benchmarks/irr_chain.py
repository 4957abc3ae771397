"""Benchmark: the ledger's proven charge for a window's reports when rounds relax the IRR.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/irr_chain.py [--repeat R]
For 2..8 reports (one per round) over as many levels, symmetric (the slowest: the Laplace chain's enclosure)
and asymmetric, relaxed and fresh IRR steps: best of ``R`` first-call seconds of
``enclosed_report_chain_epsilon`` (the cache cleared before each call), the enclosure's width, and a cached
call. The client asks once per window chain (then the cache serves every report of the window). Prints a
markdown table and the load average; numbers go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import time

from protocol.irr_relaxation import _enclosed_chain, enclosed_report_chain_epsilon
from protocol.laplace_chain_rigorous import _exp_enclosure
from protocol.randomizers import Randomizer


def chain_of(mode: str, n: int) -> list[Randomizer]:
    if mode == "symmetric":
        return [Randomizer(mode=mode, level=1.0 + 0.5 * i, irr_p=0.3 - 0.02 * i, irr_q=0.7 + 0.02 * i)
                for i in range(n)]
    return [Randomizer(mode=mode, level=1.0 + 0.5 * i, irr_q=0.5 - 0.05 * i) for i in range(n)]


def first_call(chain: list[Randomizer], relaxed: bool, repeat: int) -> tuple[float, float]:
    best, width = float("inf"), 0.0
    for _ in range(repeat):
        _enclosed_chain.cache_clear()
        _exp_enclosure.cache_clear()
        t0 = time.perf_counter()
        lo, hi = enclosed_report_chain_epsilon(chain, relaxed=relaxed)
        best = min(best, time.perf_counter() - t0)
        width = hi - lo
    return best, width


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print("| mode | reports (levels) | relaxed: first call ms | fresh: first call ms | width | cached us |")
    print("|---|--:|--:|--:|--:|--:|")
    for mode in ("symmetric", "asymmetric"):
        for n in range(2, 9):
            chain = chain_of(mode, n)
            relaxed, width = first_call(chain, True, args.repeat)
            fresh, _ = first_call(chain, False, args.repeat)
            t0 = time.perf_counter()
            for _ in range(1000):
                enclosed_report_chain_epsilon(chain, relaxed=False)
            cached = (time.perf_counter() - t0) / 1000
            print(f"| {mode} | {n} | {relaxed * 1e3:.1f} | {fresh * 1e3:.1f} | {width:.1e} | {cached * 1e6:.1f} |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
