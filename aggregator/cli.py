"""The ``onesided`` command line.

Subcommands come from :data:`COMMANDS`: each entry names a
``register(subparsers)`` function that adds its subparser(s) and sets
``func`` (``args -> exit code``) with ``set_defaults``. A new feature adds
its command by appending ``"module:register"`` here; modules are imported
when the parser is built, so a broken one fails loudly.

Shared option groups for command modules: :func:`add_storage_options`
(direct database access: ``--db``, ``--data-dir``) with
:func:`settings_from_args`, and :func:`add_server_options` (HTTP API:
``--server``, ``--token``) with :func:`client_from_args`.

Errors: a domain error (bad parameter, error answer from the server) prints
``error: <field>: <detail>`` on stderr and exits 2; nothing is a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from protocol.errors import OnesidedError

from .api_client import ApiClient
from .settings import Settings

Subparsers = Any  # argparse._SubParsersAction, which is private
Registrar = Callable[[Subparsers], None]

COMMANDS: list[str] = [
    "aggregator.commands.serve:register",
    "aggregator.commands.keys:register",
    "aggregator.commands.tokens:register",
    "aggregator.commands.metrics:register",
    "aggregator.commands.purge:register",
    "aggregator.commands.release:register",
    "aggregator.commands.decode:register",
    "client_sdk.cli:register",
    "aggregator.commands.demo:register",
    "aggregator.commands.rounds:register",
    "aggregator.commands.simulate:register",
    "aggregator.commands.audit:register",
]


def load_registrar(spec: str) -> Registrar:
    """``"package.module:function"`` imported."""
    module_name, _, attribute = spec.partition(":")
    function = getattr(importlib.import_module(module_name), attribute or "register")
    if not callable(function):
        raise TypeError(f"{spec} is not callable")
    return function


def build_parser(commands: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser with every command of ``commands`` (default :data:`COMMANDS`)."""
    parser = argparse.ArgumentParser(
        prog="onesided", description="Locally private telemetry with one-sided error and relaxable privacy."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for spec in commands or COMMANDS:
        load_registrar(spec)(subparsers)
    return parser


def command_group(subparsers: Subparsers, name: str, help_text: str) -> Subparsers:
    """A command with actions (``onesided NAME ACTION ...``); returns the actions' subparsers."""
    parser = subparsers.add_parser(name, help=help_text)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    return actions


def add_storage_options(parser: argparse.ArgumentParser) -> None:
    """``--db URL``, ``--data-dir D``, ``--key-dir K`` (default from ``ONESIDED_*``)."""
    parser.add_argument("--db", dest="db_url", help="database URL (default: SQLite in the data directory; "
                        "PostgreSQL: postgresql+psycopg://user@host:5432/dbname); env ONESIDED_DB")
    parser.add_argument("--data-dir", help="data directory (default ./onesided-data); env ONESIDED_DATA_DIR")
    parser.add_argument("--key-dir", help="key directory (default DATA_DIR/keys); env ONESIDED_KEY_DIR")


def settings_from_args(args: argparse.Namespace, **extra: Any) -> Settings:
    """Settings from the environment, overridden by the storage options and ``extra``."""
    return Settings.from_env(
        data_dir=getattr(args, "data_dir", None),
        db_url=getattr(args, "db_url", None),
        key_dir=getattr(args, "key_dir", None),
        **extra,
    )


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """``--server URL`` and ``--token T`` (default ``ONESIDED_SERVER`` / ``ONESIDED_TOKEN``)."""
    parser.add_argument("--server", help="aggregator URL; env ONESIDED_SERVER (default http://127.0.0.1:8080)")
    parser.add_argument("--token", help="bearer token; env ONESIDED_TOKEN")


def client_from_args(args: argparse.Namespace) -> ApiClient:
    """An :class:`ApiClient` from ``--server`` and ``--token`` or the environment."""
    return ApiClient(getattr(args, "server", None), getattr(args, "token", None))


def print_json(data: Any) -> None:
    """Pretty JSON on stdout (what scripts parse)."""
    print(json.dumps(data, indent=2, sort_keys=True, allow_nan=False))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``onesided`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except OnesidedError as exc:
        field = getattr(exc, "field", None)
        detail = getattr(exc, "detail", None) or str(exc)
        print(f"error: {field}: {detail}" if field else f"error: {detail}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
