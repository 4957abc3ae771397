"""The ``onesided`` command line.

Subcommands are the ``register(subparsers)`` functions listed in
:data:`COMMANDS`, imported by name here: each adds its subparser(s) and sets
``func`` (``args -> exit code``) with ``set_defaults``. A command module
imports only argparse and :mod:`aggregator.cli.options` at its top; what a
command needs (the server, numpy, scipy, the client SDK) is imported when
the command runs, so ``onesided --help`` stays fast and a command whose
extra is not installed fails with one line naming the extra.

Errors: a usage error prints one line (``onesided CMD: error: ...``, with "did
you mean" for a mistyped command and where the options are listed); a domain
error (bad parameter, error answer from the server) prints ``error: --flag:
<detail>`` naming the flag the user typed (or the field, when no flag sets it)
on stderr and exits 2, and so does a file or
folder the command cannot use (``error: PATH: <reason>``) or a package of a
missing extra (one message for every command, :func:`missing_extra_line`).
Output piped into a reader that stops early (``| head``) ends quietly with
exit code 141, as other Unix tools do. Anything else is a bug in onesided:
one line asking to re-run with ``-v``, which shows the traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

from aggregator.cli.commands import (
    association,
    audit,
    audit_log,
    backup,
    client,
    decode,
    decode_rappor,
    demo,
    discover,
    doctor,
    keys,
    metrics,
    purge,
    release,
    reproduce,
    rounds,
    serve,
    simulate,
    tokens,
)
from aggregator.cli.options import Subparsers, os_error_line
from aggregator.cli.parser import OnesidedParser, print_domain_error
from protocol.errors import OnesidedError

Registrar = Callable[[Subparsers], None]

# What to install when a command's import fails: the extra that brings the missing package.
EXTRA_OF: dict[str, str] = {
    "flask": "server", "werkzeug": "server", "sqlalchemy": "server", "psycopg": "server", "gunicorn": "server",
    "prometheus_client": "server",
    "scipy": "research", "matplotlib": "research", "tqdm": "research", "dask": "research", "distributed": "research",
}
EXIT_ERROR = 2  # a mistake in the command, its input, or the server's answer
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader went away
EXIT_BUG = 70  # EX_SOFTWARE: an internal error

COMMANDS: tuple[Registrar, ...] = (
    serve.register,
    keys.register,
    tokens.register,
    metrics.register,
    purge.register,
    release.register,
    decode.register,
    decode_rappor.register,
    association.register,
    discover.register,
    client.register,
    demo.register,
    doctor.register,
    rounds.register,
    simulate.register,
    reproduce.register,
    audit.register,
    backup.register,
    audit_log.register,
)


def build_parser(commands: Sequence[Registrar] = COMMANDS) -> argparse.ArgumentParser:
    """The parser with every command of ``commands``."""
    parser = OnesidedParser(
        prog="onesided", description="Locally private telemetry with one-sided error and relaxable privacy."
    )
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log at INFO level, and show the traceback of an internal error")
    parser.add_argument("--version", action=_VersionAction, help="print the installed version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for register in commands:
        register(subparsers)
    return parser


class _VersionAction(argparse.Action):
    """``--version``: looks the version up only when asked (``importlib.metadata`` costs start-up time)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("onesided")
        except PackageNotFoundError:
            installed = "unknown (not installed as a package)"
        print(f"onesided {installed}")
        parser.exit()


# Commands that need more than one extra: a missing package names every extra still missing, in one line.
COMMAND_EXTRAS: dict[str, tuple[str, ...]] = {"demo": ("server", "research")}


def _not_installed(package: str) -> bool:
    from importlib.util import find_spec

    try:
        return find_spec(package) is None
    except (ImportError, ValueError):
        return True


def missing_extra_line(command: str, module: str) -> str:
    """The one message every command prints when a package of an optional extra is missing.

    A command that needs several extras (``demo``: server and research) names each one still
    missing, so one install fixes them all.
    """
    top = module.split(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return f"error: {command} needs the Python package {top!r}, which is not installed: reinstall onesided"
    named = [(top, extra)]  # (a missing package, its extra) for each extra still missing
    for other in COMMAND_EXTRAS.get(command, ()):
        missing = [p for p, e in EXTRA_OF.items() if e == other and _not_installed(p)]
        if other != extra and missing:
            named.append((missing[0], other))
    if len(named) == 1:
        return (f"error: {command} needs the Python package {top!r} of the {extra!r} extra: "
                f"pip install 'onesided[{extra}]'")
    what = " and ".join(f"{package!r} ({name!r} extra)" for package, name in named)
    return f"error: {command} needs the Python packages {what}: pip install 'onesided[{','.join(e for _, e in named)}]'"


def _quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so that Python's exit flush writes nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout replaced by something without a descriptor (tests)
        pass


def _flushed() -> bool:
    """Flush stdout now, so that a reader gone early (``| head``) shows here rather than at interpreter exit."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        return False
    return True


# Options whose values are raw base64url, which may begin with "-" (one key in 64): argparse would read such a
# value as an option and stop with "expected one argument".
DASH_VALUE_OPTIONS = ("--server-key",)


def glue_dash_values(argv: Sequence[str]) -> list[str]:
    """``--server-key -AbC...`` as ``--server-key=-AbC...``, so that a key beginning with ``-`` is read as a value.

    >>> glue_dash_values(["client", "ledger", "--server-key", "-x1", "--json"])
    ['client', 'ledger', '--server-key=-x1', '--json']
    >>> glue_dash_values(["client", "ledger", "--server-key", "--json"])  # an option, not a value: argparse says so
    ['client', 'ledger', '--server-key', '--json']
    """
    out: list[str] = []
    items = list(argv)
    i = 0
    while i < len(items):
        item = items[i]
        following = items[i + 1] if i + 1 < len(items) else None
        if item in DASH_VALUE_OPTIONS and following is not None and following.startswith("-") \
                and not following.startswith("--") and following != "-h":
            out.append(f"{item}={following}")
            i += 2
            continue
        out.append(item)
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``onesided`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(glue_dash_values(sys.argv[1:] if argv is None else argv))
    except SystemExit as done:  # --help, --version or a usage error: argparse printed and exits
        if not _flushed():
            return EXIT_BROKEN_PIPE
        raise done from None
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        code = int(args.func(args) or 0)
        return code if _flushed() else EXIT_BROKEN_PIPE
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except OnesidedError as exc:
        print_domain_error(args, getattr(exc, "field", None), getattr(exc, "detail", None) or str(exc))
        return EXIT_ERROR
    except ModuleNotFoundError as exc:
        print(missing_extra_line(args.command, exc.name or str(exc)), file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        print(os_error_line(exc), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if args.verbose:
            raise
        print(f"error: internal error in {args.command}: {type(exc).__name__}: {exc} "
              "(a bug in onesided: run again with -v for the traceback and report it)", file=sys.stderr)
        return EXIT_BUG


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
