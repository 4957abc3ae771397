"""``onesided release create|show|relax|list|budget``: central releases over the HTTP API.

``create`` releases per-place counts of one window of a trusted direct
metric (analyst token); ``--analyst NAME=EPS`` (repeated, admin token)
makes correlated releases, one per analyst. ``relax`` refines a release to
a higher ``--epsilon``; the budget then counts it at that level. Output is
a table for people (each place's answer and whether it is safe, the budget
left), or the server's JSON with ``--json`` (public views only: never
counts or noise). ``--window`` takes Unix seconds or an ISO-8601 UTC time.
"""

from __future__ import annotations

import argparse
from typing import Any

from aggregator.cli.options import (
    Subparsers,
    add_json_option,
    add_server_options,
    client_from_args,
    emit,
    unix_time,
)
from protocol.errors import ParameterError


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("release", help="central releases of exact counts (HTTP API)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    create = actions.add_parser("create", help="release noisy per-place counts of one window")
    add_server_options(create)
    create.add_argument("--metric", required=True, help="a trusted metric with the direct encoding")
    create.add_argument("--window", type=unix_time, metavar="TIME", required=True,
                        help="window start (Unix seconds or ISO-8601 UTC, e.g. 2026-11-20)")
    create.add_argument("--places", help="comma-separated places (default: the whole domain)")
    create.add_argument("--mechanism", default="ageo",
                        help="the central mechanism (default ageo; a wrong name lists the others)")
    create.add_argument("--epsilon", type=float, help="the level of the release")
    create.add_argument("--threshold", type=float, required=True, help="t of 'is count <= t?': alap, ageo and salap call a place safe when answer < floor(t) + 1, "
                        "which proves count <= t (never wrong); laplace and geometric when answer <= t (an estimate); "
                        "the output's 'certificate' says which")
    create.add_argument("--sensitivity", type=float, help="visits per protected change, to protect more than the metric's max_items (the default)")
    create.add_argument("--analyst", action="append", metavar="NAME=EPS",
                        help="admin: correlated releases, one per analyst (repeat); replaces --epsilon")
    add_json_option(create)
    create.set_defaults(func=run_create)
    show = actions.add_parser("show", help="one release (public view)")
    add_server_options(show)
    show.add_argument("id", type=int, help="the release id (from create or list)")
    add_json_option(show)
    show.set_defaults(func=run_show)
    relax = actions.add_parser("relax", help="refine a release to a higher epsilon (lazy step)")
    add_server_options(relax)
    relax.add_argument("id", type=int, help="the release id (from create or list)")
    relax.add_argument("--epsilon", type=float, required=True, help="the new, higher level")
    add_json_option(relax)
    relax.set_defaults(func=run_relax)
    listing = actions.add_parser("list", help="your releases (admin: all)")
    add_server_options(listing)
    listing.add_argument("--metric", help="only releases of this metric")
    listing.add_argument("--window", type=unix_time, metavar="TIME",
                         help="only releases of this window start (Unix seconds or ISO-8601 UTC)")
    listing.add_argument("--analyst", help="admin: one analyst's")
    add_json_option(listing)
    listing.set_defaults(func=run_list)
    budget = actions.add_parser("budget", help="budget limit, spent and remaining on one metric and window")
    add_server_options(budget)
    budget.add_argument("--metric", required=True, help="the trusted metric")
    budget.add_argument("--window", type=unix_time, metavar="TIME", required=True,
                        help="window start (Unix seconds or ISO-8601 UTC, e.g. 2026-11-20)")
    budget.add_argument("--analyst", help="admin: another analyst's")
    add_json_option(budget)
    budget.set_defaults(func=run_budget)


def parse_analysts(pairs: list[str]) -> dict[str, float]:
    """``["alice=0.5", "bob=2"]`` as ``{"alice": 0.5, "bob": 2.0}``.

    Raises:
        ParameterError: (field ``analyst``) not ``NAME=NUMBER``, or a name twice.
    """
    out: dict[str, float] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            level = float(value)
        except ValueError:
            sep = ""
        if not sep or not name:
            raise ParameterError("analyst", f"must be NAME=EPSILON, got {pair!r}")
        if name in out:
            raise ParameterError("analyst", f"{name!r} is given twice")
        out[name] = level
    return out


def request_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``POST /v1/releases`` body from the flags (the server validates it).

    Raises:
        ParameterError: (field ``mechanism``) not a registered mechanism.
    """
    # Imported here, not at module top: protocol.central loads NumPy, and
    # ``onesided --help`` should not pay for it.
    from protocol.central import mechanism_names

    if args.mechanism not in mechanism_names():
        raise ParameterError("mechanism", f"must be one of {', '.join(mechanism_names())}, got {args.mechanism!r}")
    body: dict[str, Any] = {
        "metric": args.metric, "window": args.window, "mechanism": args.mechanism, "threshold": args.threshold,
    }
    if args.places:
        body["places"] = args.places.split(",")
    if args.epsilon is not None:
        body["epsilon"] = args.epsilon
    if args.analyst:
        body["analysts"] = parse_analysts(args.analyst)
    if args.sensitivity is not None:
        body["sensitivity"] = args.sensitivity
    return body


def run_create(args: argparse.Namespace) -> int:
    emit(args, client_from_args(args).post("/v1/releases", request_from_args(args)), releases_text)
    return 0


def run_show(args: argparse.Namespace) -> int:
    emit(args, client_from_args(args).get(f"/v1/releases/{args.id}"), release_text)
    return 0


def run_relax(args: argparse.Namespace) -> int:
    emit(args, client_from_args(args).post(f"/v1/releases/{args.id}/relax", {"epsilon": args.epsilon}), release_text)
    return 0


def _filters(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def run_list(args: argparse.Namespace) -> int:
    emit(args, client_from_args(args).get("/v1/releases", _filters(args, "metric", "window", "analyst")), list_text)
    return 0


def run_budget(args: argparse.Namespace) -> int:
    emit(args, client_from_args(args).get("/v1/releases/budget", _filters(args, "metric", "window", "analyst")),
         budget_line)
    return 0


def release_text(body: dict[str, Any]) -> str:
    """One release for people: what was released at which level, each place's answer, the budget left."""
    from aggregator.cli.render import cell, table

    levels = " -> ".join(f"{x:g}" for x in body.get("levels", []))
    head = (f"release {body['id']}: {body['metric']}, window {cell('window', body['window'])}, "
            f"{body['mechanism']} at epsilon {body['epsilon']:g} (levels {levels}), analyst {body['analyst']}\n")
    rows = [{**a, "answer": "below threshold" if a["answer"] is None and a["safe"] else a["answer"],
             "safe": "not answered" if a["safe"] is None else a["safe"]} for a in body.get("answers", [])]
    out = head + f"{body.get('certificate', '')}\n" + table(rows, ["place", "answer", "safe"])
    guarantee = body.get("guarantee") or {}
    if guarantee.get("neighbour"):
        out += f"protects: {guarantee['neighbour']}\n"
    if body.get("budget"):
        out += budget_line(body["budget"])
    return out


def releases_text(body: dict[str, Any]) -> str:
    """``create``'s answer: one release, or one per analyst (``--analyst``)."""
    if "releases" in body:
        return "\n".join(release_text(r) for r in body["releases"])
    return release_text(body)


def list_text(body: dict[str, Any]) -> str:
    """The releases, one row each (``show ID`` prints one with its answers)."""
    from aggregator.cli.render import table

    rows = [{**r, "places": len(r.get("answers", []))} for r in body["releases"]]
    if not rows:
        return "no releases match\n"
    return table(rows, ["id", "metric", "window", "analyst", "mechanism", "epsilon", "places", "updated_at"])


def budget_line(budget: dict[str, Any]) -> str:
    """``budget: 2.5 of 10 spent, 7.5 left (analyst alice, places, window ...)``."""
    from aggregator.cli.render import cell

    return (f"budget: {budget['spent']:g} of {budget['limit']:g} spent, {budget['remaining']:g} left "
            f"(analyst {budget['analyst']}, metric {budget['metric']}, window {cell('window', budget['window'])})\n")
