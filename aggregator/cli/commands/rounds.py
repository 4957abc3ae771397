"""``onesided round open|status|close``: relaxation rounds over the HTTP API (DESIGN 9)."""

from __future__ import annotations

import argparse

from aggregator.cli.options import (
    Subparsers,
    add_server_options,
    client_from_args,
    int_list,
    print_json,
)


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("round", help="open, inspect and close relaxation rounds (HTTP API)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    opening = actions.add_parser("open", help="open a round to a higher level (admin token)")
    add_server_options(opening)
    opening.add_argument("metric")
    opening.add_argument("--level-to", type=float, required=True, help="the new, higher noise level")
    opening.add_argument("--cohorts", type=int_list, help="comma-separated cohorts (default: all)")
    opening.add_argument("--expires-in", type=int, default=None, help="seconds until the round expires (default 7 days)")
    opening.set_defaults(func=run_open)
    status = actions.add_parser("status", help="participation and decoding of a round (analyst token)")
    add_server_options(status)
    status.add_argument("round_id", type=int)
    status.set_defaults(func=run_status)
    closing = actions.add_parser("close", help="close a round (admin token)")
    add_server_options(closing)
    closing.add_argument("round_id", type=int)
    closing.set_defaults(func=run_close)


def run_open(args: argparse.Namespace) -> int:
    body: dict[str, object] = {"level_to": args.level_to}
    if args.cohorts:
        body["cohorts"] = args.cohorts
    if args.expires_in is not None:
        body["expires_in"] = args.expires_in
    print_json(client_from_args(args).post(f"/v1/metrics/{args.metric}/rounds", body))
    return 0


def run_status(args: argparse.Namespace) -> int:
    print_json(client_from_args(args).get(f"/v1/rounds/{args.round_id}"))
    return 0


def run_close(args: argparse.Namespace) -> int:
    print_json(client_from_args(args).post(f"/v1/rounds/{args.round_id}/close"))
    return 0
