"""``onesided simulate SCENARIO``: research simulations with a plot (see :mod:`aggregator.research.scenarios`).

Writes ``OUT/SCENARIO.png`` (matplotlib, Agg backend) and
``OUT/SCENARIO.json`` (every figure), and prints the key figures: a short
table, or with ``--json`` one JSON object
``{"scenario", "scale", "seed", "clients", "method", "engine", "seconds",
"peak_rss_mib", "peak_traced_mib", "plot", "data", "figures"}``.
Progress goes to stderr. What each scenario prints and draws is registered
by its module (:mod:`aggregator.research.scenarios.registry`); this module
is only the command.

``--clients N --method aggregate`` simulates any number of clients from
the cells' counts (docs/simulation.md); ``--engine gpu`` runs the relaxation
scenario's per-client blocks with CuPy (extra ``[gpu]``); ``--engine dask`` runs a
per-client path's seeded blocks (relaxation, asymmetric-advantage,
certificates, city) on a Dask cluster (``--scheduler ADDRESS``, or a
LocalCluster of ``--workers``), with the local engine's figures. Wall
time and peak memory are printed and recorded: ``peak_rss_mib`` is this process's peak resident set (its whole
life, interpreter included; Dask worker processes are not in it),
``peak_traced_mib`` the peak of the Python and numpy allocations during the
run (tracemalloc). The scenario's modules are imported before the clock starts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aggregator.cli.options import Subparsers

Figures = dict[str, Any]


def register(subparsers: Subparsers) -> None:
    from aggregator.research.scenarios import SCALES, SCENARIOS

    lines = "\n".join(f"  {name:22s} {s.title}" for name, s in SCENARIOS.items())
    parser = subparsers.add_parser(
        "simulate", help="research simulations reproducing the papers' claims, with a plot",
        description=f"Scenarios:\n{lines}", formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("scenario", choices=sorted(SCENARIOS), metavar="SCENARIO", help="one of: "
                        + ", ".join(SCENARIOS))
    parser.add_argument("--out", type=Path, default=Path("onesided-simulate"),
                        help="folder for SCENARIO.png and SCENARIO.json (default ./onesided-simulate)")
    parser.add_argument("--seed", type=int, default=2026, help="seed of the simulation (default 2026)")
    parser.add_argument("--scale", choices=SCALES, default="small",
                        help="small (seconds, default) or paper (up to 10^6 simulated clients, minutes)")
    parser.add_argument("--clients", type=_positive_int, default=None, metavar="N",
                        help="simulated clients (default: the scale's; thresholds scale with it)")
    parser.add_argument("--method", choices=("per-client", "aggregate"), default="per-client",
                        help="per-client: every client's set and bits (default); aggregate: the cells' counts "
                             "drawn exactly (10^9 clients in seconds)")
    parser.add_argument("--engine", choices=("local", "dask", "gpu"), default="local",
                        help="where a per-client path's blocks run: local (default) or dask (the same figures), "
                             "gpu (CuPy, extra [gpu]; the same laws, another stream; relaxation)")
    parser.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="Dask scheduler address (default: a LocalCluster for the run)")
    parser.add_argument("--workers", type=_positive_int, default=2, help="LocalCluster workers (default 2)")
    parser.add_argument("--noise", choices=("seeded", "keyed"), default=None,
                        help="city per-client noise: seeded block streams (default) or each client's secret (SDK)")
    parser.add_argument("--json", action="store_true", help="print one JSON object with the key figures")
    parser.set_defaults(func=run)


def _positive_int(text: str) -> int:
    value = int(float(text)) if "e" in text.lower() else int(text)  # 1e9 is accepted
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _engine(args: argparse.Namespace) -> Any:
    """The engine for a per-client path, ``None`` for the default (local)."""
    if args.engine == "local" and args.scheduler is None:
        return None
    if args.engine == "gpu":
        from aggregator.research.arrays import ArrayEngine, namespace

        namespace("cupy")  # CuPy and a device, or one line saying why, before anything runs
        return ArrayEngine("cupy", block_clients=2_000_000)
    from aggregator.research.engine import DaskEngine

    return DaskEngine(scheduler=args.scheduler, workers=args.workers)


def _measured(run: Callable[[], Figures]) -> tuple[Figures, dict[str, float]]:
    """``run()`` with its wall time, this process's peak RSS and the traced allocation peak."""
    import resource
    import tracemalloc

    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    started = time.perf_counter()
    figures = run()
    seconds = time.perf_counter() - started
    traced = tracemalloc.get_traced_memory()[1]
    if not tracing:
        tracemalloc.stop()
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return figures, {"seconds": round(seconds, 3), "peak_rss_mib": round(rss_kib / 1024, 1),
                     "peak_traced_mib": round(traced / 2**20, 1)}


def run(args: argparse.Namespace) -> int:
    import matplotlib  # noqa: F401  # the plot needs it: without the research extra, say so before the run

    from aggregator.research.scenarios import SCENARIOS, run_scenario

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    engine = _engine(args)
    parts = SCENARIOS[args.scenario].load()  # its imports happen before the clock and the tracer start
    figures, cost = _measured(lambda: run_scenario(
        args.scenario, scale=args.scale, seed=args.seed, progress=progress, clients=args.clients,
        method=args.method, engine=engine, noise=args.noise))
    args.out.mkdir(parents=True, exist_ok=True)
    plot_path = args.out / f"{args.scenario}.png"
    clients = figures.get("clients")
    label = f"{args.scale}, seed {args.seed}" + (f", {clients:,} clients, {args.method}" if clients else "")
    parts.plot(figures, plot_path, f"{SCENARIOS[args.scenario].title} [{label}]")
    document = {"scenario": args.scenario, "scale": args.scale, "seed": args.seed, "clients": clients,
                "method": args.method if parts.has_clients else None,
                "engine": engine.name if engine is not None else "local", **cost,
                "plot": str(plot_path), "data": str(args.out / f"{args.scenario}.json"), "figures": figures}
    text = json.dumps(document, indent=2, allow_nan=False)
    (args.out / f"{args.scenario}.json").write_text(text + "\n")
    if args.json:
        print(text)
    else:
        for line in parts.summary(figures):
            print(line)
        print(f"plot: {plot_path}  data: {document['data']}")
        print(f"wall time {cost['seconds']:.1f} s, peak memory {cost['peak_rss_mib']:,.0f} MiB RSS "
              f"({cost['peak_traced_mib']:,.0f} MiB traced allocations)")
    return 0
