"""``onesided purge``: delete raw reports older than the retention period (aggregates stay).

Prints one line for people, or ``{"deleted_reports", "retention_seconds"}``
with ``--json``; each run is recorded in the audit log.
"""

from __future__ import annotations

import argparse
from typing import Any

from aggregator.cli.options import (
    Subparsers,
    add_json_option,
    add_storage_options,
    emit,
    settings_from_args,
)


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("purge", help="delete raw reports whose window is past the retention period")
    add_storage_options(parser)
    parser.add_argument("--retention", type=int, help="seconds to keep raw reports (default: the setting "
                        "retention_seconds, env ONESIDED_RETENTION; 7776000, 90 days)")
    add_json_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, retention_seconds=args.retention)
    from aggregator.server.storage import Storage
    storage = Storage.open(settings.database_url, attempts=settings.db_retries)
    try:
        deleted = storage.purge_expired(settings.retention_seconds, clock_skew_seconds=settings.clock_skew_seconds)
        from aggregator.server.storage.audit import operator_entry
        storage.record_audit(operator_entry("purge", None, {"retention_seconds": settings.retention_seconds,
                                                            "deleted_reports": deleted}))
    finally:
        storage.close()
    emit(args, {"deleted_reports": deleted, "retention_seconds": settings.retention_seconds}, purged_text)
    return 0


def purged_text(data: dict[str, Any]) -> str:
    from aggregator.cli.render import duration

    return (f"deleted {data['deleted_reports']:,} raw reports whose window ended more than "
            f"{duration(data['retention_seconds'])} ago; aggregates are kept\n")
