"""Benchmark: the per-client relaxation scenario on Dask LocalClusters of 1, 2, 4, ... workers.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/dask_scaling.py [--clients 200000] [--workers 1 2]
     [--blocks-per-task N]

Each row: wall time of ``relaxation(--scale paper setup at --clients, engine)`` (cluster start-up
included, one run each), the speed-up over the first worker count, and a check that the figures equal the
local engine's. The issue's target, >= 12x on 16 workers, needs a 16-core machine; on this project's
2-core machine only 1 and 2 workers mean anything. Numbers go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from aggregator.research.engine import DaskEngine, Engine, LocalEngine
from aggregator.research.scenarios.relaxation import RELAXATION_SETUPS, relaxation, with_clients
from protocol.rng import SeededRandom


def timed(engine: Engine, clients: int, chunk: int) -> tuple[float, dict[str, object]]:
    setup = dataclasses.replace(with_clients(RELAXATION_SETUPS["paper"], clients, "per-client"), chunk=chunk)
    t0 = time.perf_counter()
    figures = relaxation(setup, SeededRandom(2026), engine=engine)
    return time.perf_counter() - t0, {k: v for k, v in figures.items() if k != "engine"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=200_000)
    ap.add_argument("--chunk", type=int, default=12_500, help="clients per block")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--blocks-per-task", type=int, default=None, help="default: about 4 tasks per worker")
    args = ap.parse_args()
    local_s, local = timed(LocalEngine(), args.clients, args.chunk)
    print(f"{args.clients:,} clients, blocks of {args.chunk:,}: local engine {local_s:.1f} s")
    base = None
    for workers in args.workers:
        grouping = {} if args.blocks_per_task is None else {"blocks_per_task": args.blocks_per_task}
        engine = DaskEngine(workers=workers, **grouping)
        seconds, figures = timed(engine, args.clients, args.chunk)
        base = base or seconds
        same = "identical figures" if figures == local else "FIGURES DIFFER"
        print(f"dask {workers:>2} workers: {seconds:7.1f} s  speed-up vs {args.workers[0]} worker(s) "
              f"{base / seconds:5.2f}x  ({same})")


if __name__ == "__main__":
    main()
