"""``onesided backup``: a consistent copy of the SQLite database while the server runs."""

from __future__ import annotations

import argparse

from aggregator.cli.options import Subparsers, add_storage_options, print_json, settings_from_args


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "backup", help="copy the SQLite database (online backup API; PostgreSQL: use pg_dump)"
    )
    add_storage_options(parser)
    parser.add_argument("destination", help="file to write (mode 0600; replaced atomically)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aggregator.server.backup import backup_sqlite

    print_json(backup_sqlite(settings_from_args(args), args.destination))
    return 0
