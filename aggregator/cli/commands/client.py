"""``onesided client report|flush|ledger``: the client SDK by hand.

Examples::

    onesided keys show                       # on the aggregator: copy "sign_public"
    export ONESIDED_SERVER_KEY=<sign_public>
    onesided client report --server http://127.0.0.1:8080 --metric places home cafe
    onesided client ledger

Several values are reported as one set (e.g. the places visited today);
one value as the set of one. The state lives in ``--state`` (default
``~/.onesided/client.state``, env ``ONESIDED_CLIENT_STATE``) with its key
file next to it. Output is JSON on stdout; errors are the ``onesided``
command's ``error: <field>: <detail>`` lines (exit 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from protocol.errors import ParameterError

if TYPE_CHECKING:
    from client_sdk.client import Client

DEFAULT_SERVER = "http://127.0.0.1:8080"
DEFAULT_STATE = "~/.onesided/client.state"
DEFAULT_MAX_EPSILON = 8.0


def register(subparsers: Any) -> None:
    """Add ``client`` with its actions to the ``onesided`` parser."""
    parser = subparsers.add_parser("client", help="report from this machine with the client SDK")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    report = actions.add_parser("report", help="sync, report one value or a set, and send it")
    _common_options(report)
    report.add_argument("--metric", required=True, help="metric name (from the signed config)")
    report.add_argument("values", nargs="+", metavar="VALUE", help="the value, or the members of the set")
    report.add_argument("--no-send", action="store_true", help="queue only; send later with `client flush`")
    report.set_defaults(func=run_report)
    flush = actions.add_parser("flush", help="send the queued reports")
    _common_options(flush)
    flush.set_defaults(func=run_flush)
    ledger = actions.add_parser("ledger", help="print the privacy ledger")
    _common_options(ledger)
    ledger.set_defaults(func=run_ledger)


def _common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", help=f"aggregator URL; env ONESIDED_SERVER (default {DEFAULT_SERVER})")
    parser.add_argument("--server-key", help="the aggregator's Ed25519 public key (base64url, from "
                        "`onesided keys show`); env ONESIDED_SERVER_KEY")
    parser.add_argument("--state", help=f"state file; env ONESIDED_CLIENT_STATE (default {DEFAULT_STATE})")
    parser.add_argument("--max-epsilon", type=float, default=DEFAULT_MAX_EPSILON,
                        help=f"privacy ceiling per metric (default {DEFAULT_MAX_EPSILON})")


def client_from_args(args: argparse.Namespace) -> Client:
    """A :class:`Client` from the options and the environment.

    Raises:
        ParameterError: no pinned key (field ``server_key``).
    """
    key = args.server_key or os.environ.get("ONESIDED_SERVER_KEY")
    if not key:
        raise ParameterError("server_key", "is required: pass --server-key or set ONESIDED_SERVER_KEY "
                             "(the sign_public printed by `onesided keys show`)")
    server = args.server or os.environ.get("ONESIDED_SERVER") or DEFAULT_SERVER
    state = Path(args.state or os.environ.get("ONESIDED_CLIENT_STATE") or DEFAULT_STATE).expanduser()
    from client_sdk.client import Client

    return Client(server, state, server_public_keys=key, max_epsilon=args.max_epsilon,
                  background=False)  # one command: it syncs and sends itself


def _jsonable(value: Any) -> Any:
    """Dataclasses to dicts, infinities to ``null``, exceptions to text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and math.isinf(value):
        return None
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    return value


def _print(data: Any) -> None:
    print(json.dumps(_jsonable(data), indent=2, sort_keys=True, allow_nan=False))


def run_report(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    try:
        client.sync()
        values = args.values[0] if len(args.values) == 1 else set(args.values)
        report_id = client.report(args.metric, values)
        flushed = None if args.no_send else client.flush()
        _print({"report_id": report_id, "flush": flushed, "ledger": client.ledger()[args.metric]})
        return 0 if flushed is None or flushed.error is None else 1
    finally:
        client.close(flush=False)  # sent above, or kept queued (--no-send) for `client flush`


def run_flush(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        flushed = client.flush()
        _print(flushed)
        return 0 if flushed.error is None else 1


def run_ledger(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    try:
        _print(client.ledger())
        return 0
    finally:
        client.close(flush=False)  # printing the ledger sends nothing


__all__ = ["client_from_args", "register"]
