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
    parser = subparsers.add_parser("discover", help="frequent strings of a prefix metric (no candidates needed)")
    add_server_options(parser)
    parser.add_argument("name", help="the prefix metric")
    add_window_option(parser)
    add_round_option(parser)
    parser.add_argument("--min-share", type=float, help="report strings at least this frequent (default 0.01)")
    parser.add_argument("--alphabet", help="symbols tried at each position (default a-z0-9)")
    parser.add_argument("--max-prefixes", type=int, help="prefixes kept per level (default 64)")
    parser.add_argument("--alpha", type=float, help="family level of the tests (default 0.05)")
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
