"""``onesided metric create|list|show``: metrics over the HTTP API.

``create`` takes the parameters from ``--file params.json`` (the
``MetricParams.to_dict()`` form) or from flags; they are validated here
first (an error names the field) and then by the server (admin token).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from aggregator.cli.options import (
    Subparsers,
    add_server_options,
    client_from_args,
    command_group,
    print_json,
)
from protocol.errors import ParameterError
from protocol.params import MetricParams


def register(subparsers: Subparsers) -> None:
    actions = command_group(subparsers, "metric", "register and list metrics (HTTP API)")
    create = actions.add_parser("create", help="register a metric (admin token)")
    add_server_options(create)
    _add_param_flags(create)
    create.set_defaults(func=run_create)
    listing = actions.add_parser("list", help="list metrics with their report counts (analyst token)")
    add_server_options(listing)
    listing.set_defaults(func=run_list)
    show = actions.add_parser("show", help="one metric and its collections (analyst token)")
    add_server_options(show)
    show.add_argument("name")
    show.set_defaults(func=run_show)


def _add_param_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--file", type=Path, help="JSON file with the parameters (MetricParams.to_dict form)")
    parser.add_argument("--name")
    parser.add_argument("--encoding", choices=("bloom", "direct"), default="bloom")
    parser.add_argument("--num-bits", type=int, help="Bloom filter size m")
    parser.add_argument("--num-hashes", type=int, help="Bloom hash functions k")
    parser.add_argument("--num-cohorts", type=int, help="Bloom cohorts h")
    parser.add_argument("--hashing", choices=("mmh3", "rappor-md5"), default="mmh3")
    parser.add_argument("--domain", help="direct encoding: comma-separated items")
    parser.add_argument("--mode", choices=("symmetric", "asymmetric", "trusted"))
    parser.add_argument("--level", type=float, help="initial noise level (omit for trusted)")
    parser.add_argument("--irr-p", type=float)
    parser.add_argument("--irr-q", type=float)
    parser.add_argument("--value-kind", choices=("set", "categorical"), default="set")
    parser.add_argument("--none-value")
    parser.add_argument("--time-precision", type=int, default=86400, help="seconds per window (default 86400)")
    parser.add_argument("--min-batch-size", type=int, default=100)
    parser.add_argument("--max-items", type=int, default=1,
                        help="trusted set metrics: ones kept per report, the items a person contributes (default 1)")


def params_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The parameter object from ``--file`` or the flags, validated.

    Raises:
        ParameterError: a missing or invalid parameter (field named).
    """
    if args.file is not None:
        try:
            data = json.loads(args.file.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise ParameterError("file", f"cannot read {args.file}: {exc}") from exc
        return MetricParams.from_dict(data).to_dict()
    for flag in ("name", "mode"):
        if getattr(args, flag) is None:
            raise ParameterError(flag, f"is required (--{flag}) unless --file is given")
    if args.encoding == "bloom":
        encoding: dict[str, Any] = {
            "kind": "bloom", "num_bits": args.num_bits, "num_hashes": args.num_hashes,
            "num_cohorts": args.num_cohorts, "hashing": args.hashing,
        }
    else:
        encoding = {"kind": "direct", "domain": [] if not args.domain else args.domain.split(",")}
    data = {
        "name": args.name, "encoding": encoding, "mode": args.mode, "level": args.level,
        "irr_p": args.irr_p, "irr_q": args.irr_q, "value_kind": args.value_kind, "none_value": args.none_value,
        "time_precision": args.time_precision, "min_batch_size": args.min_batch_size,
        "max_items": args.max_items,
    }
    return MetricParams.from_dict(data).to_dict()


def run_create(args: argparse.Namespace) -> int:
    print_json(client_from_args(args).post("/v1/metrics", params_from_args(args)))
    return 0


def run_list(args: argparse.Namespace) -> int:
    print_json(client_from_args(args).get("/v1/metrics"))
    return 0


def run_show(args: argparse.Namespace) -> int:
    print_json(client_from_args(args).get(f"/v1/metrics/{args.name}"))
    return 0
