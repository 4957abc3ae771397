"""``onesided metric create|list|show``: metrics over the HTTP API.

``create`` takes the parameters from ``--file params.json`` (the
``MetricParams.to_dict()`` form) or from flags (Bloom, direct, pair and
prefix metrics); they are validated here first (an error names the field)
and then by the server (admin token). It prints what the level gives each
client: epsilon per report, per window, and after a round to a looser level
(``--round-to``); ``--dry-run`` prints that without registering. Tables for
people, ``--json`` for scripts.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aggregator.cli.options import (
    Subparsers,
    add_json_option,
    add_server_options,
    client_from_args,
    command_group,
    emit,
    int_list,
)
from protocol.errors import ParameterError

if TYPE_CHECKING:  # imported when a command runs: 'onesided --help' loads no numpy
    from protocol.params import MetricParams


def register(subparsers: Subparsers) -> None:
    actions = command_group(subparsers, "metric", "register and list metrics (HTTP API)")
    create = actions.add_parser(
        "create", help="register a metric (admin token) and print the privacy it gives",
        description="Register a metric from flags or --file, and print its epsilon per report, per window "
                    "and after a round to a looser level. --dry-run prints the privacy without registering.",
    )
    add_server_options(create)
    _add_param_flags(create)
    create.add_argument("--round-to", type=float, action="append", metavar="LEVEL",
                        help="also print what a round to LEVEL would cost a client per window (repeatable; "
                             "default: twice the level)")
    create.add_argument("--dry-run", action="store_true", help="print the parameters and their privacy only")
    add_json_option(create)
    create.set_defaults(func=run_create)
    listing = actions.add_parser("list", help="list metrics with their report counts (analyst token)")
    add_server_options(listing)
    add_json_option(listing)
    listing.set_defaults(func=run_list)
    show = actions.add_parser("show", help="one metric, its privacy and its collections (analyst token)")
    add_server_options(show)
    show.add_argument("name", help="the metric")
    add_json_option(show)
    show.set_defaults(func=run_show)


# flags that take one number and have no default: (flag, type, help)
NUMBER_FLAGS: tuple[tuple[str, type, str], ...] = (
    ("--num-bits", int, "bloom/prefix: filter size m"),
    ("--num-hashes", int, "bloom/prefix: hash functions k"),
    ("--num-cohorts", int, "bloom: cohorts h (clients are split among them)"),
    ("--level", float, "initial noise level; higher is looser (omit for trusted)"),
    ("--irr-p", float, "instantaneous randomized response: P(report 1 | bit 0)"),
    ("--irr-q", float, "instantaneous randomized response: P(report 1 | bit 1)"),
)


def _add_param_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--file", type=Path, help="JSON file with the parameters (MetricParams.to_dict form); "
                        "the other parameter flags are then ignored")
    parser.add_argument("--name", help="the metric's name (required without --file)")
    parser.add_argument("--encoding", choices=("bloom", "direct", "prefix"), default="bloom",
                        help="bloom: hashed values, any strings (default); direct: one bit per value of --domain "
                             "(or per pair of --pair-a x --pair-b); prefix: Bloom filters of prefixes, for "
                             "'onesided discover'")
    parser.add_argument("--hashing", choices=("mmh3", "rappor-md5"), default="mmh3",
                        help="bloom: bit derivation (default mmh3; rappor-md5 matches google/rappor)")
    parser.add_argument("--domain", help="direct: comma-separated values")
    parser.add_argument("--pair-a", metavar="VALUES", help="direct pair metric: comma-separated values of the "
                        "first variable (with --pair-b; the domain is every pair, for 'onesided association')")
    parser.add_argument("--pair-b", metavar="VALUES", help="direct pair metric: values of the second variable")
    parser.add_argument("--prefix-lengths", type=int_list, metavar="L1,L2,...",
                        help="prefix: the prefix length of each cohort, e.g. 1,2,3,4,5,6,7,8")
    parser.add_argument("--mode", choices=("symmetric", "asymmetric", "trusted"),
                        help="symmetric: two-sided noise (RAPPOR); asymmetric: one-sided noise, certificates of "
                             "'safe' answers; trusted: no local noise (central releases only). Required without "
                             "--file")
    for flag, kind, text in NUMBER_FLAGS:
        parser.add_argument(flag, type=kind, help=text)
    parser.add_argument("--value-kind", choices=("set", "categorical"), default="set",
                        help="set: a client reports a set of items (default); categorical: exactly one value")
    parser.add_argument("--none-value", help="asymmetric categorical: the declared non-sensitive value")
    parser.add_argument("--time-precision", type=int, default=86400, help="seconds per window (default 86400)")
    parser.add_argument("--min-batch-size", type=int, default=100,
                        help="no estimate is released from fewer reports (default 100)")
    parser.add_argument("--max-items", type=int, default=1,
                        help="trusted set metrics: items kept per report, the items a person contributes; a "
                             "report holding more keeps this many chosen at random (default 1)")


def _encoding_from_args(args: argparse.Namespace) -> dict[str, Any]:
    if args.encoding == "bloom":
        return {"kind": "bloom", "num_bits": args.num_bits, "num_hashes": args.num_hashes,
                "num_cohorts": args.num_cohorts, "hashing": args.hashing}
    if args.encoding == "prefix":
        if args.prefix_lengths is None:
            raise ParameterError("prefix_lengths", "is required for --encoding prefix (e.g. 1,2,3,4,5,6,7,8)")
        return {"kind": "prefix", "num_bits": args.num_bits, "num_hashes": args.num_hashes,
                "lengths": args.prefix_lengths}
    if (args.pair_a is None) != (args.pair_b is None):
        raise ParameterError("pair_b" if args.pair_b is None else "pair_a", "--pair-a and --pair-b go together")
    if args.pair_a is not None:
        if args.domain:
            raise ParameterError("domain", "give --domain or --pair-a/--pair-b, not both")
        from aggregator.analysis.association import pair_domain

        return {"kind": "direct", "domain": list(pair_domain(_items(args.pair_a), _items(args.pair_b)))}
    return {"kind": "direct", "domain": _items(args.domain or "")}


def _items(text: str) -> list[str]:
    return [item for item in text.split(",") if item]


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The parameter object from ``--file`` or the flags, validated.

    Raises:
        ParameterError: a missing or invalid parameter (field named).
    """
    from protocol.params import MetricParams

    if args.file is not None:
        try:
            data = json.loads(args.file.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise ParameterError("file", f"cannot read {args.file}: {exc}") from exc
        return MetricParams.from_dict(data).to_dict()
    for flag in ("name", "mode"):
        if getattr(args, flag) is None:
            raise ParameterError(flag, f"is required (--{flag}) unless --file is given")
    data = {
        "name": args.name, "encoding": _encoding_from_args(args), "mode": args.mode, "level": args.level,
        "irr_p": args.irr_p, "irr_q": args.irr_q, "value_kind": args.value_kind, "none_value": args.none_value,
        "time_precision": args.time_precision, "min_batch_size": args.min_batch_size,
        "max_items": args.max_items,
    }
    return MetricParams.from_dict(data).to_dict()


def privacy_summary(params: MetricParams, round_to: Sequence[float] | None = None) -> dict[str, Any]:
    """What a metric's level gives each client: epsilon per report, per window, and after rounds.

    ``rounds`` holds, for each looser level, the epsilon a client's window
    costs in all after relaxing to it (its reports at the level and then at
    the looser one, as its ledger charges them) and, for comparison, a fresh
    collection at that level alone.
    """
    from protocol.chain import window_cost

    if not params.local_mechanism.randomized or params.level is None:
        summary: dict[str, Any] = {
            "mode": params.mode, "local_noise": False,
            "note": "reports are not randomized on the device; privacy comes from central releases"}
        if params.value_kind == "set":
            summary["max_items"] = params.max_items
        return summary
    g = params.guarantee()
    levels = list(round_to) if round_to else [2 * params.level]
    rounds = []
    for level in levels:
        if level <= params.level:
            raise ParameterError("round_to", f"must be above the metric's level {params.level:g}, got {level:g}")
        rounds.append({"level_to": level, "epsilon_window": window_cost(params, [params.level, level])[0],
                       "epsilon_window_fresh": window_cost(params, [level])[0]})
    return {"mode": params.mode, "local_noise": True, "level": params.level,
            "epsilon_per_report": g.epsilon_per_report,
            "epsilon_per_window": window_cost(params, [params.level])[0],  # the SDK ledger's epsilon_per_window
            "epsilon_per_window_any_reports": g.epsilon_longitudinal,
            "neighbour": g.neighbour, "protects": g.protects, "reveals": g.reveals, "rounds": rounds}


def privacy_text(name: str, privacy: dict[str, Any]) -> str:
    """The privacy summary as a person reads it."""
    if not privacy["local_noise"]:
        text = f"privacy of {name!r} ({privacy['mode']}): {privacy['note']}\n"
        if "max_items" in privacy:
            k = privacy["max_items"]
            text += (f"per-report clipping: each report keeps at most {k} item{'s' if k != 1 else ''} "
                     f"(--max-items, default 1); a report holding more keeps {k} chosen at random and the "
                     "others are dropped: its result says 'clipped', and the server counts such reports "
                     "(onesided_reports_clipped_total in /metrics)\n")
        return text
    from protocol.rounding import epsilon_text as up  # printed charges round up, as the ledger's do

    lines = [
        f"privacy of {name!r} ({privacy['mode']}, level {privacy['level']:g}), each client, per window:",
        f"  epsilon per report   {up(privacy['epsilon_per_report'])}  (one report, its instantaneous randomized "
        "response included)",
        f"  epsilon per window   {up(privacy['epsilon_per_window'])}  (what a client's ledger charges a window, "
        "its epsilon_per_window; windows add up)",
        f"  at most, per window  {up(privacy['epsilon_per_window_any_reports'])}  (however many reports of one "
        "window's value were sent: the memoized noise alone)",
        f"  neighbour            {privacy['neighbour']}",
        f"  protects             {privacy['protects']}",
        f"  reveals              {privacy['reveals']}",
    ]
    for r in privacy["rounds"]:
        lines.append(f"  a round to level {r['level_to']:g}: a window reported at level {privacy['level']:g} and "
                     f"again at {r['level_to']:g} costs {up(r['epsilon_window'])} in all (a report at "
                     f"{r['level_to']:g} alone: {up(r['epsilon_window_fresh'])})")
    return "\n".join(lines) + "\n"


def _metric_rows(metrics: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": m["name"], "encoding": m["params"]["encoding"]["kind"], "mode": m["params"]["mode"],
             "level": m["params"]["level"], "window_s": m["params"]["time_precision"], "reports": m["reports"],
             "created_at": m["created_at"]} for m in metrics]


def run_create(args: argparse.Namespace) -> int:
    from aggregator.cli.render import record
    from protocol.params import MetricParams

    data = params_from_args(args)
    params = MetricParams.from_dict(data)
    privacy = privacy_summary(params, args.round_to)
    if args.dry_run:
        emit(args, {"params": data, "privacy": privacy}, lambda _: privacy_text(params.name, privacy))
        return 0
    created = client_from_args(args).post("/v1/metrics", data)
    emit(args, {**created, "privacy": privacy}, lambda c: record(
        c, ["name", "outcome", "digest", "created_at"]) + privacy_text(params.name, privacy))
    return 0


def run_list(args: argparse.Namespace) -> int:
    from aggregator.cli.render import table

    def human(body: dict[str, Any]) -> str:
        if not body["metrics"]:
            return "no metrics yet (onesided metric create)\n"
        return table(_metric_rows(body["metrics"]),
                     ["name", "encoding", "mode", "level", "window_s", "reports", "created_at"])

    emit(args, client_from_args(args).get("/v1/metrics"), human)
    return 0


def run_show(args: argparse.Namespace) -> int:
    from aggregator.cli.render import record, table
    from protocol.params import MetricParams

    def human(body: dict[str, Any]) -> str:
        params = MetricParams.from_dict(body["params"])
        text = record(body, ["name", "digest", "created_at", "updated_at", "reports", "params"])
        text += privacy_text(params.name, privacy_summary(params))
        if body.get("collections"):
            text += "collections:\n" + table(body["collections"], ["window", "round", "reports"])
        return text

    emit(args, client_from_args(args).get(f"/v1/metrics/{args.name}"), human)
    return 0
