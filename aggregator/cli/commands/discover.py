"""``onesided discover NAME``: frequent strings of a prefix metric, found without candidates (HTTP API).

Prints the discovered strings as a table, ``--json`` the answer of
``GET /v1/metrics/NAME/discovered``, or ``--format csv`` the discovered strings (``string,estimate,std_error,proportion``),
most frequent first (docs/decoding.md 8).
"""

from __future__ import annotations

import argparse
from typing import Any

from aggregator.cli.options import (
    Subparsers,
    add_format_option,
    add_round_option,
    add_server_options,
    add_window_option,
    post_fields,
    print_answer,
)

CSV_COLUMNS = ("string", "estimate", "std_error", "proportion")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "discover", help="frequent strings of a prefix metric (no candidates needed)",
        description="Finds the strings that clients of a prefix metric report often, without a list of "
                    "candidates: it grows prefixes one symbol at a time and keeps the frequent ones. Needs an "
                    "analyst token. Example: onesided discover words --min-share 0.02 --window 2026-11-20")
    add_server_options(parser)
    parser.add_argument("name", metavar="NAME", help="the prefix metric's name (metric create --encoding prefix)")
    add_window_option(parser)
    add_round_option(parser)
    parser.add_argument("--min-share", type=float, metavar="FRACTION",
                        help="report strings held by at least this fraction of the reports (default 0.01, "
                             "i.e. 1%%)")
    parser.add_argument("--alphabet", metavar="SYMBOLS",
                        help="the symbols tried at each position, as one string of ASCII characters (default "
                             "abcdefghijklmnopqrstuvwxyz0123456789); strings with other symbols are not found")
    parser.add_argument("--max-prefixes", type=int, metavar="N",
                        help="prefixes kept at each length, the most frequent first (default 64; more finds "
                             "rarer strings and takes longer)")
    parser.add_argument("--alpha", type=float, metavar="P",
                        help="error level of the tests, 0 < P < 1 (default 0.05): the chance of any false "
                             "detection among each length's prefixes, and among the final strings")
    add_format_option(parser)
    parser.set_defaults(func=run)


def discovered_csv(body: dict[str, Any]) -> str:
    """The discovered strings of an answer as CSV."""
    from aggregator.analysis.tables import rows_to_csv

    rows = (body.get("discovery") or {}).get("rows", [])
    return rows_to_csv(({**row, "string": row["candidate"]} for row in rows if row["discovered"]), CSV_COLUMNS)


def discovered_table(body: dict[str, Any]) -> str:
    """The discovered strings for people, most frequent first."""
    from aggregator.cli.render import table

    rows = [{**row, "string": row["candidate"]} for row in (body.get("discovery") or {}).get("rows", [])
            if row["discovered"]]
    if body.get("discovery") is None:
        return ""
    return table(rows, CSV_COLUMNS) if rows else "no string is frequent enough (try a lower --min-share)\n"


def run(args: argparse.Namespace) -> int:
    fields = {"window": args.window, "round": args.round, "min_share": args.min_share, "alphabet": args.alphabet,
              "max_prefixes": args.max_prefixes, "alpha": args.alpha}
    return print_answer(post_fields(args, f"/v1/metrics/{args.name}/discovered", fields), args.format, discovered_csv,
                        discovered_table)
