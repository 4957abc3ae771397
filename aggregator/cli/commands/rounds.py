"""``onesided round open|list|status|close``: relaxation rounds over the HTTP API.

A round raises a metric's noise level for the clients whose ceiling allows
it, and may relax its instantaneous randomized response (``--irr-q``,
``--irr-p``); ``status`` shows its participation per cohort. Tables for
people, ``--json`` for scripts (the server's answer unchanged).
"""

from __future__ import annotations

import argparse
from typing import Any

from aggregator.cli.options import (
    Subparsers,
    add_json_option,
    add_server_options,
    client_from_args,
    command_group,
    emit,
    int_list,
)

ROUND_KEYS = ("id", "metric", "level_from", "level_to", "irr_p", "irr_q", "cohorts", "open", "opened_at", "expires_at",
              "closed_at", "reports")


def register(subparsers: Subparsers) -> None:
    actions = command_group(subparsers, "round", "open, list, inspect and close relaxation rounds (HTTP API)")
    opening = actions.add_parser("open", help="open a round to a higher level (admin token)")
    add_server_options(opening)
    opening.add_argument("metric", help="the metric")
    opening.add_argument("--level-to", type=float, required=True, metavar="LEVEL",
                         help="the new level: above the metric's current level (or equal to it with --irr-q) and at most 32 (the cap every "
                              "client enforces); a higher level means less noise and a higher epsilon")
    opening.add_argument("--irr-q", type=float, default=None, metavar="Q",
                         help="also relax the instantaneous randomized response: its irr_q after the round "
                              "(default: keep the IRR); the new IRR must be at least as informative as the "
                              "current one, and a round that relaxes it may keep the level (--level-to equal "
                              "to the current level)")
    opening.add_argument("--irr-p", type=float, default=None, metavar="P",
                         help="the symmetric IRR's irr_p after the round, with --irr-q (default: none; the "
                              "asymmetric mode has irr_q only)")
    opening.add_argument("--cohorts", type=int_list, help="comma-separated cohorts (default: all)")
    opening.add_argument("--expires-in", type=int, default=None, help="seconds until the round expires (default 7 days)")
    add_json_option(opening)
    opening.set_defaults(func=run_open)
    listing = actions.add_parser("list", help="a metric's rounds, oldest first (analyst token)")
    add_server_options(listing)
    listing.add_argument("metric", help="the metric")
    add_json_option(listing)
    listing.set_defaults(func=run_list)
    status = actions.add_parser("status", help="participation and decoding of a round (analyst token)")
    add_server_options(status)
    status.add_argument("round_id", type=int, help="the round's id (see round list)")
    add_json_option(status)
    status.set_defaults(func=run_status)
    closing = actions.add_parser("close", help="close a round (admin token)")
    add_server_options(closing)
    closing.add_argument("round_id", type=int, help="the round's id (see round list)")
    add_json_option(closing)
    closing.set_defaults(func=run_close)


def round_text(body: dict[str, Any]) -> str:
    """A round for people: its fields, then its participation per cohort."""
    from aggregator.cli.render import iso_time, record, table

    text = record(body, ROUND_KEYS)
    if body.get("participation"):
        text += "participation:\n" + table(body["participation"], ["cohort", "reports", "base_reports",
                                                                    "participation"])
    if body.get("decoding"):
        decoding = dict(body["decoding"])
        top = decoding.pop("top", None)
        if isinstance(decoding.get("windows"), list):  # the pooled windows' starts (a ledger's windows is a count)
            decoding["windows"] = [iso_time(w) for w in decoding["windows"]]
        text += record({"decoding": decoding})
        if top:
            text += "decoding.top:\n" + table(top, list(top[0]))
    return text


def run_open(args: argparse.Namespace) -> int:
    body: dict[str, object] = {"level_to": args.level_to}
    if args.cohorts:
        body["cohorts"] = args.cohorts
    if args.expires_in is not None:
        body["expires_in"] = args.expires_in
    for name in ("irr_p", "irr_q"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    emit(args, client_from_args(args).post(f"/v1/metrics/{args.metric}/rounds", body), round_text)
    return 0


def run_list(args: argparse.Namespace) -> int:
    from aggregator.cli.render import table

    def human(body: dict[str, Any]) -> str:
        if not body["rounds"]:
            return f"no rounds of {args.metric!r} yet (onesided round open)\n"
        return table(body["rounds"], ["id", "level_from", "level_to", "open", "reports", "opened_at", "expires_at",
                                      "closed_at", "irr_p", "irr_q"])

    emit(args, client_from_args(args).get(f"/v1/metrics/{args.metric}/rounds"), human)
    return 0


def run_status(args: argparse.Namespace) -> int:
    emit(args, client_from_args(args).get(f"/v1/rounds/{args.round_id}"), round_text)
    return 0


def run_close(args: argparse.Namespace) -> int:
    emit(args, client_from_args(args).post(f"/v1/rounds/{args.round_id}/close"), round_text)
    return 0
