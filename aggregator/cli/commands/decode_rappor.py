"""``onesided decode-rappor``: google/rappor's files decoded offline, with RAPPOR's own options.

One variable: ``--params P --counts C --map M`` (RAPPOR's ``decode-dist``).
Two variables: the options of RAPPOR's ``decode-assoc`` (reports, schema,
params folder, maps). The readers and decoders are in
:mod:`aggregator.analysis.rappor_io`; this module is only the command line:
it parses the options (every argument, ``-h`` included, is its own), prints
CSV on stdout and notes on stderr, and answers an unusable input with one
line and exit code 2 (a file it cannot read: ``error: PATH: reason``).
``--write-sample DIR`` writes a small data
set to try it on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from aggregator.cli.options import Subparsers, os_error_line
from protocol.errors import ParameterError


def register(subparsers: Subparsers) -> None:
    rappor = subparsers.add_parser(
        "decode-rappor", help="decode RAPPOR files: --params P --counts C --map M, or decode-assoc's "
        "--reports R --schema S --params-dir D --metric-name M --var1 X --var2 Y [--map1 F]",
        add_help=False, prefix_chars="+",  # every argument, -h included, goes to main_decode_rappor
    )
    rappor.add_argument("arguments", nargs="*", help=argparse.SUPPRESS)
    rappor.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return main_decode_rappor(args.arguments)


SINGLE_OPTIONS = ("params", "counts", "map")
ASSOC_OPTIONS = ("reports", "schema", "params_dir", "metric_name", "var1", "var2")


def main_decode_rappor(argv: Sequence[str] | None = None) -> int:
    """``onesided decode-rappor``: one variable (``--params P --counts C --map M``) or two
    (RAPPOR's ``decode-assoc`` options: ``--reports R --schema S --params-dir D --metric-name M
    --var1 X --var2 Y [--map1 F] [--map2 G]``).

    Prints CSV on stdout (one variable: the detected strings; two: every pair); returns 0, or 2
    with a message on stderr when an input is unusable.
    """
    parser = argparse.ArgumentParser(
        prog="onesided decode-rappor",
        description="Decode RAPPOR files: params/counts/map (one variable), or decode-assoc's "
        "reports/schema/params-dir/maps (the joint of two variables).",
    )
    one = parser.add_argument_group("one variable")
    one.add_argument("--params", help="params CSV (k,h,m,p,q,f)")
    one.add_argument("--counts", help="counts CSV (m rows of k+1 integers)")
    one.add_argument("--map", help="map CSV (string, then h*m 1-based indices)")
    one.add_argument("--alpha", type=float, default=0.05, help="family level of the detections (default 0.05)")
    one.add_argument("--correction", choices=("bonferroni", "bh"), default="bonferroni",
                     help="multiple-testing control: bonferroni (default) or bh (Benjamini-Hochberg)")
    one.add_argument("--all", action="store_true",
                     help="every string of the map with its interval and a detected column, not only the detected")
    one.add_argument("--format", choices=("csv", "json"), default="csv",
                     help="csv: RAPPOR's result columns (default); json: a list of rows, for scripts")
    parser.add_argument("--write-sample", metavar="DIR",
                        help="write a sample data set (params.csv, counts.csv, map.csv, truth.csv) into DIR "
                             "(made if absent) and print the command that decodes it")
    two = parser.add_argument_group("two variables (RAPPOR's decode-assoc)")
    two.add_argument("--reports", help="reports CSV: header with cohort, <var1>, <var2>; bit strings")
    two.add_argument("--schema", help="schema CSV: metric, var, var_type (string|boolean), params")
    two.add_argument("--params-dir", help="folder of <params>.csv files named in the schema")
    two.add_argument("--metric-name", help="the schema's metric")
    two.add_argument("--var1", help="first variable (a column of the reports)")
    two.add_argument("--var2", help="second variable")
    two.add_argument("--map1", help="map CSV of var1 (string variables)")
    two.add_argument("--map2", help="map CSV of var2 (string variables)")
    two.add_argument("--remove-bad-rows", action="store_true", help="drop rows with an empty report")
    two.add_argument("--ignore-other", action="store_true",
                     help="no 'Other' category for strings outside a map (RAPPOR adds one)")
    two.add_argument("--max-em-iters", type=int, default=1000, help="EM steps at most (default 1000)")
    two.add_argument("--em-tolerance", type=float, default=1e-3,
                     help="stop when the log-likelihood is within this many nats of its maximum (default 1e-3)")
    two.add_argument("--output-dir", help="also write assoc-results.csv and assoc-metrics.json there")
    two.add_argument("--create-bool-map", action="store_true",
                     help="accepted for RAPPOR's command lines (booleans need no map here)")
    try:
        args = parser.parse_args(argv)
        if args.write_sample is not None:
            return _write_sample(Path(args.write_sample))
        single = [o for o in SINGLE_OPTIONS if getattr(args, o) is not None]
        assoc = [o for o in (*ASSOC_OPTIONS, "map1", "map2") if getattr(args, o) is not None]
        if single and assoc:
            parser.error(f"give either --{', --'.join(SINGLE_OPTIONS)} or the association options, not both "
                         f"(got --{single[0]} and --{assoc[0].replace('_', '-')})")
        needed = ASSOC_OPTIONS if assoc else SINGLE_OPTIONS
        missing = [o for o in needed if getattr(args, o) is None]
        if missing:
            parser.error(f"missing --{', --'.join(o.replace('_', '-') for o in missing)}")
    except SystemExit as exc:
        return int(exc.code or 0)
    from aggregator.analysis.rappor_io import RESULT_COLUMNS, decode_rappor, rows_to_csv

    try:
        if assoc:
            return _main_association(args)
        rows = decode_rappor(
            args.params, args.counts, args.map, alpha=args.alpha, correction=args.correction,
            every_candidate=args.all,
        )
    except (ParameterError, UnicodeDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(os_error_line(exc), file=sys.stderr)
        return 2
    if args.format == "json":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    elif args.all:
        sys.stdout.write(rows_to_csv(rows, (*RESULT_COLUMNS, "detected")))
    else:
        sys.stdout.write(rows_to_csv(rows))
    if args.all:
        detected = sum(row["detected"] for row in rows)
        print(f"note: {detected} of {len(rows)} strings of the map detected", file=sys.stderr)
    else:
        print(f"note: {len(rows)} strings of the map detected (--all lists every string with its interval)",
              file=sys.stderr)
    return 0


SAMPLE_CLIENTS = 100_000
SAMPLE_SEED = 2026


def _write_sample(folder: Path) -> int:
    """``--write-sample DIR``: the sample data set, and the command line that decodes it."""
    from aggregator.analysis.rappor_sample import sample_collection, write_sample

    paths = write_sample(folder, sample_collection(SAMPLE_CLIENTS, SAMPLE_SEED))
    print(f"wrote {', '.join(str(p) for p in paths.values())} ({SAMPLE_CLIENTS:,} simulated RAPPOR clients, "
          "k=16 h=2 m=64 p=0.1 q=0.9 f=0.2; truth.csv holds the true counts); decode them with:")
    print(f"onesided decode-rappor --params {paths['params']} --counts {paths['counts']} --map {paths['map']}")
    return 0


def _main_association(args: argparse.Namespace) -> int:
    from aggregator.analysis.rappor_io import decode_rappor_association

    folder = None if args.output_dir is None else Path(args.output_dir)
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)  # made now, before the EM runs
    result = decode_rappor_association(
        reports=args.reports, schema=args.schema, params_dir=args.params_dir, metric_name=args.metric_name,
        var1=args.var1, var2=args.var2, map1=args.map1, map2=args.map2, remove_bad_rows=args.remove_bad_rows,
        ignore_other=args.ignore_other, max_em_iters=args.max_em_iters, em_tolerance=args.em_tolerance,
    )
    text = result.to_csv()
    if folder is not None:  # both written aside, then renamed: no half-written pair on a failure
        files = {"assoc-results.csv": text, "assoc-metrics.json": json.dumps(result.metrics(), indent=2) + "\n"}
        for name, content in files.items():
            (folder / f".{name}.tmp").write_text(content, encoding="utf-8")
        for name in files:
            os.replace(folder / f".{name}.tmp", folder / name)
    if result.removed:
        print(f"note: removed {result.removed} rows with an empty report", file=sys.stderr)
    if not result.em.converged:
        print(f"note: the EM stopped after {result.em.iterations} steps (--max-em-iters) up to {result.em.gap:.3g} "
              f"nats below the maximum likelihood (--em-tolerance {args.em_tolerance:g})", file=sys.stderr)
    sys.stdout.write(text)
    return 0
