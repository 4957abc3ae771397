"""``onesided association NAME --values-a a,b --values-b x,y``: the joint of a pair metric (HTTP API).

Prints the joint as a table (most frequent cells first), ``--json`` the
answer of ``GET /v1/metrics/NAME/association``, or ``--format csv`` one row per cell (``a,b,share,estimate,std_error``). A
pair metric's value is ``a + "\\x1f" + b`` (docs/decoding.md 9).
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

CSV_COLUMNS = ("a", "b", "share", "estimate", "std_error")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "association", help="joint distribution of a pair metric's two variables",
        description="The joint distribution of a pair metric's two variables in one window: the share and "
                    "count of each (a, b) cell, most frequent first. Needs an analyst token. A pair metric is "
                    "made with metric create --pair-a ... --pair-b .... Example: onesided association trips "
                    "--values-a car,bike --values-b work,school --window 2026-11-20")
    add_server_options(parser)
    parser.add_argument("name", metavar="NAME", help="the pair metric's name")
    parser.add_argument("--values-a", required=True, metavar="A,B,...",
                        help="comma-separated values of the first variable (those of --pair-a)")
    parser.add_argument("--values-b", required=True, metavar="X,Y,...",
                        help="comma-separated values of the second variable (those of --pair-b)")
    add_window_option(parser)
    add_round_option(parser)
    parser.add_argument("--method", choices=("projection", "em"),
                        help="how the shares are fitted: projection (default; closed form, milliseconds) or em "
                             "(maximum likelihood of the bit counts; slower)")
    add_format_option(parser)
    parser.set_defaults(func=run)


def joint_csv(body: dict[str, Any]) -> str:
    """The cells of an association answer as CSV (header only when no number was released)."""
    from aggregator.analysis.tables import rows_to_csv

    return rows_to_csv((body.get("joint") or {}).get("cells", []), CSV_COLUMNS)


def joint_table(body: dict[str, Any]) -> str:
    """The cells for people, most frequent first."""
    from aggregator.cli.render import table

    cells = sorted((body.get("joint") or {}).get("cells", []), key=lambda c: -(c.get("share") or 0))
    return table(cells, CSV_COLUMNS) if cells else ""


def run(args: argparse.Namespace) -> int:
    fields = {
        "values_a": [v for v in args.values_a.split(",") if v],
        "values_b": [v for v in args.values_b.split(",") if v],
        "window": args.window, "round": args.round, "method": args.method,
    }
    return print_answer(post_fields(args, f"/v1/metrics/{args.name}/association", fields), args.format, joint_csv, joint_table)
