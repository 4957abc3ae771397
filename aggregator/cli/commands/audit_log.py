"""``onesided audit-log``: who did what, from the audit log (on the database).

An aligned table, one row per action, oldest first: when (UTC), the actor
(the token's name, or ``cli:USER``) and its role, the action (``METHOD
/route`` or the command), the target (the path, or what the command acted
on), the status answered (0 for a command), the client's address class and
network, and the request's scalar fields. ``--json`` prints the entries as a
JSON list (``at`` in Unix milliseconds, as stored). Works without a running
server (like ``onesided token``).

Example: who relaxed ``places`` last Tuesday::

    onesided audit-log --action rounds --target /places/ --since 2026-11-17 --until 2026-11-18
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from aggregator.cli.options import (
    Subparsers,
    add_storage_options,
    print_json,
    settings_from_args,
    unix_time,
)

COLUMNS = ("at", "actor", "role", "action", "target", "status", "address_class", "address", "detail")
HEADERS = ("when", "actor", "role", "action", "target", "status", "address_class", "network", "detail")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "audit-log", help="who did what: admin and analyst actions (on the database)",
        description="Who did what, oldest first: one row per request made with an admin or analyst token "
                    "(refused ones too) and per token create, token revoke and purge run on this machine. "
                    "Reads the database directly: no server or token needed. Example: onesided audit-log "
                    "--action rounds --since 2026-11-17 --until 2026-11-18")
    add_storage_options(parser)
    parser.add_argument("--actor", metavar="NAME", help="only this token name (or cli:USER), exactly")
    parser.add_argument("--action", metavar="TEXT", help="only actions containing this text, e.g. rounds, releases, token")
    parser.add_argument("--target", metavar="TEXT", help="only paths or targets containing this text, e.g. /places/")
    parser.add_argument("--since", type=unix_time, metavar="TIME",
                        help="from this time on: ISO-8601 UTC (2026-11-17, 2026-11-17T13:00) or Unix seconds")
    parser.add_argument("--until", type=unix_time, metavar="TIME", help="before this time (same forms)")
    parser.add_argument("--limit", type=int, default=1000, metavar="N",
                        help="the most recent N matching entries (default 1000)")
    parser.add_argument("--json", action="store_true",
                        help="print the entries as a JSON list for scripts (times in Unix milliseconds)")
    parser.set_defaults(func=run)


def entries_table(entries: list[dict[str, Any]]) -> str:
    """The entries (as :meth:`AuditEntry.to_dict` gives them) as an aligned table for people."""
    from aggregator.cli.render import table

    rows = [{**e, "at": e["at"] / 1000, "detail": json.dumps(e["detail"], sort_keys=True, separators=(",", ":"))
             if e.get("detail") else None} for e in entries]
    return table(rows, COLUMNS, HEADERS)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    from aggregator.server.storage import Storage

    storage = Storage.open(settings.database_url, attempts=settings.db_retries)
    try:
        entries = storage.audit_entries(
            actor=args.actor, action=args.action, target=args.target, limit=args.limit,
            since_ms=None if args.since is None else args.since * 1000,
            until_ms=None if args.until is None else args.until * 1000)
    finally:
        storage.close()
    listed = [e.to_dict() for e in entries]
    if args.json:
        print_json(listed)
    elif not listed:
        print("no audit log entries match", file=sys.stderr)
    else:
        sys.stdout.write(entries_table(listed))
    return 0
