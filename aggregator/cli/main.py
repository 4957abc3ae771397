"""The ``onesided`` command line.

Subcommands are the ``register(subparsers)`` functions listed in
:data:`COMMANDS`, imported by name here: each adds its subparser(s) and sets
``func`` (``args -> exit code``) with ``set_defaults``. A command module
imports only argparse and :mod:`aggregator.cli.options` at its top; what a
command needs (the server, numpy, scipy, the client SDK) is imported when
the command runs, so ``onesided --help`` stays fast and a command whose
extra is not installed fails with one line naming the extra.

Errors: a domain error (bad parameter, error answer from the server) prints
``error: <field>: <detail>`` on stderr and exits 2; nothing is a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from aggregator.cli.commands import (
    association,
    audit,
    audit_log,
    backup,
    client,
    decode,
    demo,
    discover,
    keys,
    metrics,
    purge,
    release,
    rounds,
    serve,
    simulate,
    tokens,
)
from aggregator.cli.options import Subparsers
from protocol.errors import OnesidedError

Registrar = Callable[[Subparsers], None]

# What to install when a command's import fails: the extra that brings the missing package.
EXTRA_OF: dict[str, str] = {
    "flask": "server", "werkzeug": "server", "sqlalchemy": "server", "psycopg": "server", "gunicorn": "server",
    "scipy": "research", "matplotlib": "research", "tqdm": "research",
}

COMMANDS: tuple[Registrar, ...] = (
    serve.register,
    keys.register,
    tokens.register,
    metrics.register,
    purge.register,
    release.register,
    decode.register,
    association.register,
    discover.register,
    client.register,
    demo.register,
    rounds.register,
    simulate.register,
    audit.register,
    backup.register,
    audit_log.register,
)


def build_parser(commands: Sequence[Registrar] = COMMANDS) -> argparse.ArgumentParser:
    """The parser with every command of ``commands``."""
    parser = argparse.ArgumentParser(
        prog="onesided", description="Locally private telemetry with one-sided error and relaxable privacy."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for register in commands:
        register(subparsers)
    return parser


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
    except ModuleNotFoundError as exc:
        extra = EXTRA_OF.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"error: {args.command} needs {exc.name}, which comes with an extra: "
              f"pip install 'onesided[{extra}]'", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
