"""``onesided backup``: a consistent copy of the SQLite database while the server runs.

Prints what was copied for people (size, schema version, integrity check),
or the summary as JSON with ``--json``.
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
    parser = subparsers.add_parser(
        "backup", help="copy the SQLite database (online backup API; PostgreSQL: use pg_dump)"
    )
    add_storage_options(parser)
    parser.add_argument("destination", help="file to write (mode 0600; replaced atomically)")
    add_json_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aggregator.server.backup import backup_sqlite

    emit(args, backup_sqlite(settings_from_args(args), args.destination), backup_text)
    return 0


def backup_text(data: dict[str, Any]) -> str:
    from aggregator.cli.render import byte_size

    return (f"copied {data['source']} to {data['destination']} (mode 0600): {byte_size(data['bytes'])}, "
            f"schema version {data['schema_version']}, integrity check {data['integrity_check']}\n")
