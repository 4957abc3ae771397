"""``onesided client report|flush|ledger``: the client SDK by hand.

Examples::

    onesided keys show                       # on the aggregator: its last line is ONESIDED_SERVER_KEY=...
    export ONESIDED_SERVER_KEY=<sign_public>
    onesided client report --server http://127.0.0.1:8080 --metric places home cafe
    onesided client ledger

Several values are reported as one set (e.g. the places visited today);
one value as the set of one. The state lives in ``--state`` (default
``~/.onesided/client.state``, env ``ONESIDED_CLIENT_STATE``) with its key
file next to it. Output is for people (the ledger as a table, times in
ISO-8601 UTC), or JSON with ``--json``; errors are the ``onesided``
command's ``error: <field>: <detail>`` lines (exit 2). A send that stops
early exits 1 after printing what was delivered.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from collections.abc import Callable
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
    parser.add_argument("--json", action="store_true", help="print JSON for scripts instead of text for people")


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
                  background=False, strict=True)  # one command: it syncs and sends itself, and says why not


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


def _print(args: argparse.Namespace, data: Any, human: Callable[[Any], str]) -> None:
    """``data`` as JSON with ``--json``, else ``human(data)`` (the same JSON-able form, for people)."""
    plain = _jsonable(data)
    if args.json:
        print(json.dumps(plain, indent=2, sort_keys=True, allow_nan=False))
    else:
        sys.stdout.write(human(plain))


def flush_text(flushed: dict[str, Any] | None) -> str:
    """One line: what a send delivered, refused and left queued (and why it stopped, if it did)."""
    if flushed is None:
        return "queued; not sent (send with `onesided client flush`)\n"
    if flushed["deferred"]:
        line = "nothing sent: the server asked to wait (Retry-After) or another send is running"
    else:
        line = (f"sent: {flushed['delivered']} delivered, {flushed['rejected']} rejected, "
                f"{flushed['dropped']} dropped")
    line += f"; {flushed['remaining']} still queued"
    if flushed["error"]:
        line += f"; stopped by {flushed['error']}"
    return line + "\n"


def ledger_text(ledger: dict[str, Any]) -> str:
    """The privacy ledger for people: a row per metric (spent, ceiling, left), then the events."""
    from aggregator.cli.render import table

    rows = [{**e, "spent": _bounded(e)} for e in [*ledger["entries"], *ledger.get("unused", [])]]
    columns = ["metric", "mode", "windows", "spent", "ceiling", "remaining", "epsilon_per_window", "renews_at"]
    out = table(rows, columns) if rows else "no metrics yet: sync with a server first\n"
    out += f"{ledger['queued_reports']} reports queued, {ledger['dropped_reports']} dropped\n"
    if ledger["events"]:
        out += "\nevents:\n" + table(ledger["events"], ["at", "kind", "metric", "detail"])
    return out


def _bounded(entry: dict[str, Any]) -> str:
    """``spent`` as text; ``<= x`` where it is a proven upper bound rather than the exact cost."""
    from aggregator.cli.render import number

    return number(entry["spent"]) if entry["exact"] else f"<= {number(entry['spent'])}"


def report_text(result: dict[str, Any]) -> str:
    """The report id, the send, and the metric's line of the ledger."""
    from aggregator.cli.render import record

    entry = result["ledger"]
    return (f"report {result['report_id']} for {entry['metric']!r}\n" + flush_text(result["flush"])
            + record(entry, ["cohort", "windows", "levels", "spent", "ceiling", "remaining",
                             "epsilon_per_report", "epsilon_per_window", "renews_at", "protects"]))


def run_report(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    try:
        client.sync()
        values = args.values[0] if len(args.values) == 1 else set(args.values)
        report_id = client.report(args.metric, values)
        flushed = None if args.no_send else client.flush()
        _print(args, {"report_id": report_id, "flush": flushed, "ledger": client.ledger()[args.metric]}, report_text)
        return 0 if flushed is None or flushed.error is None else 1
    finally:
        client.close(flush=False)  # sent above, or kept queued (--no-send) for `client flush`


def run_flush(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        flushed = client.flush()
        _print(args, flushed, flush_text)
        return 0 if flushed.error is None else 1


def run_ledger(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    try:
        _print(args, client.ledger(), ledger_text)
        return 0
    finally:
        client.close(flush=False)  # printing the ledger sends nothing


__all__ = ["client_from_args", "register"]
