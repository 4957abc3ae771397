"""``onesided purge``: delete raw reports older than the retention period (aggregates stay)."""

from __future__ import annotations

import argparse

from aggregator.cli.options import (
    Subparsers,
    add_storage_options,
    print_json,
    settings_from_args,
)


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("purge", help="delete raw reports whose window is past the retention period")
    add_storage_options(parser)
    parser.add_argument("--retention", type=int, help="seconds (default: setting retention_seconds, 90 days)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, retention_seconds=args.retention)
    from aggregator.server.storage import Storage
    storage = Storage.open(settings.database_url, attempts=settings.db_retries)
    try:
        deleted = storage.purge_expired(settings.retention_seconds)
        from aggregator.server.storage.audit import operator_entry
        storage.record_audit(operator_entry("purge", None, {"retention_seconds": settings.retention_seconds,
                                                            "deleted_reports": deleted}))
    finally:
        storage.close()
    print_json({"deleted_reports": deleted, "retention_seconds": settings.retention_seconds})
    return 0
