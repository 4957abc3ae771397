"""``onesided audit-log``: who did what, from the audit log (on the database).

Each line is one action: time (UTC), actor (the token's name, or ``cli:USER``)
and role, what (``METHOD /route`` or the command), the path, the status
answered, the client's address class and network, and the request's scalar
fields. ``--json`` prints the entries as a JSON list. Works without a running
server (like ``onesided token``).

Example: who relaxed ``places`` last Tuesday::

    onesided audit-log --action rounds --target /places/ --since 2026-11-17 --until 2026-11-18
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime

from aggregator.cli.options import Subparsers, add_storage_options, print_json, settings_from_args
from protocol.errors import ParameterError


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("audit-log", help="who did what: admin and analyst actions (on the database)")
    add_storage_options(parser)
    parser.add_argument("--actor", help="only this token name (or cli:USER)")
    parser.add_argument("--action", help="only actions containing this text, e.g. rounds, releases, token")
    parser.add_argument("--target", help="only paths or targets containing this text, e.g. /places/")
    parser.add_argument("--since", help="from this UTC time on (YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS])")
    parser.add_argument("--until", help="before this UTC time (same forms)")
    parser.add_argument("--limit", type=int, default=1000, help="the most recent N entries (default 1000)")
    parser.add_argument("--json", action="store_true", help="print the entries as a JSON list for scripts")
    parser.set_defaults(func=run)


def parse_time(field: str, text: str | None) -> int | None:
    """Unix milliseconds of a UTC date or date-time; ``None`` stays ``None``.

    Raises:
        ParameterError: not such a time (field ``field``).
    """
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ParameterError(field, f"must be YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS] (UTC), got {text!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    from aggregator.server.storage import Storage

    since, until = parse_time("since", args.since), parse_time("until", args.until)
    storage = Storage.open(settings.database_url, attempts=settings.db_retries)
    try:
        entries = storage.audit_entries(actor=args.actor, action=args.action, target=args.target,
                                        since_ms=since, until_ms=until, limit=args.limit)
    finally:
        storage.close()
    if args.json:
        print_json([e.to_dict() for e in entries])
        return 0
    from aggregator.cli.render import iso_time

    if not entries:
        print("no audit log entries match", file=sys.stderr)
    for e in entries:
        when = iso_time(e.at / 1000)
        detail = json.dumps(e.detail, sort_keys=True, separators=(",", ":")) if e.detail else ""
        print(f"{when}  {e.actor}({e.role})  {e.action}  {e.target or '-'}  {e.status}  "
              f"{e.address_class} {e.address or '-'}  {detail}".rstrip())
    return 0
