"""``onesided backup``: a consistent copy of the SQLite database while the server runs.

Prints what was copied for people (size, schema version, integrity check),
or the summary as JSON with ``--json``. Each copy is recorded in the audit
log (actor ``cli:USER``, the destination file) once it is written; the entry
is therefore in the live database, not in the copy.
"""

from __future__ import annotations

import argparse
from typing import Any

from aggregator.cli.options import (
    Subparsers,
    add_json_option,
    add_storage_options,
    emit,
    open_audit_log,
    record_operator,
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

    copied = backup_sqlite(settings_from_args(args), args.destination)  # refuses PostgreSQL and a missing file
    storage = open_audit_log(args, migrate=False)  # the copy is made; the live schema stays as it is
    code = record_operator(storage, "backup", copied["destination"],
                           {"bytes": copied["bytes"], "schema_version": copied["schema_version"]},
                           done=f"the database was copied to {copied['destination']}")
    emit(args, copied, backup_text)
    return code


def backup_text(data: dict[str, Any]) -> str:
    from aggregator.cli.render import byte_size

    return (f"copied {data['source']} to {data['destination']} (mode 0600): {byte_size(data['bytes'])}, "
            f"schema version {data['schema_version']}, integrity check {data['integrity_check']}\n")
