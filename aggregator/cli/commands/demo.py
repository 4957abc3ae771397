"""``onesided demo``: the end-to-end demo on the embedded default (see :mod:`aggregator.demo.run`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from aggregator.cli.options import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the whole system once: SQLite aggregator, simulated clients, a relaxation round, decoding",
    )
    parser.add_argument("--clients", type=int, default=20_000, help="simulated clients (default 20000)")
    parser.add_argument("--sdk-clients", type=int, default=200,
                        help="how many of them run the full client SDK with a state file (default 200)")
    parser.add_argument("--places", type=int, default=2_000, help="places in the synthetic city (default 2000)")
    parser.add_argument("--level-from", type=float, default=1.0, help="strict noise level (default 1.0)")
    parser.add_argument("--level-to", type=float, default=8.0, help="the round's looser level (default 8.0)")
    parser.add_argument("--seed", type=int, default=2026, help="seed of the simulated city (default 2026)")
    parser.add_argument("--out", type=Path, default=Path("onesided-demo"),
                        help="the demo's folder: summary.html and estimates.png, and while it runs the "
                             "aggregator's data in OUT/data (default ./onesided-demo)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="an empty folder for the aggregator's data instead of OUT/data")
    parser.add_argument("--keep", action="store_true",
                        help="keep the aggregator's database, private keys and client states after the run "
                             "(removed by default)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aggregator.demo.config import DemoConfig
    from aggregator.demo.run import run_demo

    cfg = DemoConfig(
        clients=args.clients, sdk_clients=min(args.sdk_clients, args.clients), places=args.places,
        level_from=args.level_from, level_to=args.level_to, seed=args.seed, data_dir=args.data_dir,
        out_dir=args.out, keep=args.keep,
    )
    run_demo(cfg, progress=not args.no_progress)
    return 0
