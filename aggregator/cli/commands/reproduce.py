"""``onesided reproduce``: every quantitative experiment of the three papers, regenerated into one folder.

Writes ``OUT/rows.csv`` (each figure of a paper beside ours: the mean over
seeded repetitions, its 95% interval, the single runs' range, a verdict),
one CSV and one PNG per figure, ``OUT/run.json`` (seed, scale,
repetitions, machine, start time, seconds) and ``OUT/index.html``. The
experiments are in :mod:`aggregator.research.reproduce`; docs/simulation.md
lists them with the papers' numbers.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from aggregator.cli.options import Subparsers

SWEEP_OPTIONS = {"--epsilons": "epsilon", "--thresholds": "threshold", "--alphas": "alpha", "--deltas": "delta"}


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "reproduce", help="regenerate the papers' tables and figures (CSV, PNG, HTML) with intervals",
        description="Runs every quantitative experiment of the three papers (asymmetric DP, gradual release, "
                    "multi-user Laplace) with seeded repetitions and writes rows.csv, one CSV and PNG per figure, "
                    "run.json and index.html into --out.")
    parser.add_argument("--scale", choices=("small", "paper"), default="small",
                        help="small (about a minute, default) or paper (more repetitions and sizes; minutes)")
    parser.add_argument("--out", type=Path, default=Path("onesided-reproduce"),
                        help="folder for the report (default ./onesided-reproduce)")
    parser.add_argument("--seed", type=int, default=2026, help="root seed (default 2026)")
    parser.add_argument("--only", action="append", metavar="EXPERIMENT",
                        help="run only this experiment (repeatable; --list names them)")
    parser.add_argument("--list", action="store_true", help="list the experiments and exit")
    for flag, name in SWEEP_OPTIONS.items():
        figures = "Figs. 4 and 6" if name in ("epsilon", "threshold") else "Fig. 4"
        parser.add_argument(flag, type=_float_list, default=None, metavar="LIST",
                            help=f"ADP {figures}: the {name} values to sweep, comma-separated")
    parser.set_defaults(func=run)


def _float_list(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected numbers > 0, got {text!r}")
    return values


def run(args: argparse.Namespace) -> int:
    import matplotlib  # noqa: F401  # the plots need it: without the research extra, say so before the run

    from aggregator.research.reproduce import (
        SIZES,
        experiments,
        machine,
        run_experiments,
        write_report,
    )
    from protocol.errors import ParameterError

    chosen = experiments()
    if args.list:
        for exp in chosen:
            print(f"{exp.name:26s} {exp.title}")
        return 0
    if args.only:
        unknown = sorted(set(args.only) - {e.name for e in chosen})
        if unknown:
            raise ParameterError("only", f"unknown experiment(s) {unknown}; --list names them")
        chosen = [e for e in chosen if e.name in args.only]
    options = {name: getattr(args, flag[2:]) for flag, name in SWEEP_OPTIONS.items()}
    if options["threshold"] is not None and any(v != int(v) for v in options["threshold"]):
        raise ParameterError("thresholds", "must be whole numbers")
    started = time.time()
    clock = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - clock:6.1f} s] {message}", file=sys.stderr, flush=True)

    outcomes, seconds = run_experiments(chosen, scale=args.scale, seed=args.seed, options=options,
                                        progress=progress)
    facts = {"command": "onesided reproduce " + " ".join(sys.argv[2:]), "scale": args.scale, "seed": args.seed,
             "sizes": SIZES[args.scale], "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
             "seconds": seconds, "total_seconds": round(time.perf_counter() - clock, 1), "machine": machine(),
             "sweeps": {k: v for k, v in options.items() if v is not None}}
    rows = write_report(args.out, outcomes, facts=facts)
    for row in rows:
        paper = "" if row["paper"] is None else f"{row['paper']:.4g}"
        print(f"{row['source'][:34]:34s} {row['quantity'][:52]:52s} paper {paper:>8s}  ours {row['ours_mean']:.4g} "
              f"[{row['ci95_low']:.4g}, {row['ci95_high']:.4g}] n={row['repetitions']}  {row['agree'] or '-'}")
    print(f"report: {args.out / 'index.html'}  ({len(rows)} rows, {facts['total_seconds']} s)")
    return 0
