"""What the command modules share: option groups, the API client and JSON output.

Nothing heavy at import time: ``onesided --help`` imports every command's
registrar, so the server's settings and the HTTP client load only when a
command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aggregator.api_client import ApiClient
    from aggregator.server.settings import Settings
    from aggregator.server.storage import Storage

Subparsers = Any  # argparse._SubParsersAction, which is private


def os_error_line(exc: OSError) -> str:
    """``error: PATH: reason`` for a file or folder a command cannot use (no traceback)."""
    where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
    reason = exc.strerror or str(exc)
    hint = {
        FileNotFoundError: " (check the path; create the folder first)",
        PermissionError: " (choose a path you may write, or fix its permissions)",
    }.get(type(exc), "")
    return f"error: {where}: {reason}{hint}" if where else f"error: {reason}{hint}"


def int_list(text: str) -> list[int]:
    """An argparse ``type``: comma-separated whole numbers (``"0,3,5"``), or a one-line usage error."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None


def unix_time(text: str) -> int:
    """An argparse ``type``: a time as Unix seconds (``1795305600``) or ISO-8601 UTC (``2026-11-20``,
    ``2026-11-20T13:00``), or a one-line usage error.

    >>> unix_time("1795305600"), unix_time("2026-11-20"), unix_time("2026-11-20T00:00:00Z")
    (1795305600, 1795132800, 1795132800)
    """
    from datetime import UTC, datetime

    try:
        return int(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected Unix seconds or an ISO-8601 UTC time (YYYY-MM-DD[THH:MM[:SS]]), got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp())


def add_window_option(parser: argparse.ArgumentParser) -> None:
    """``--window T`` of the analysis commands: a window's start, parsed by :func:`unix_time`."""
    parser.add_argument("--window", type=unix_time, metavar="TIME",
                        help="the window to decode, by its start: Unix seconds or ISO-8601 UTC (2026-11-20, "
                             "2026-11-20T13:00); default: the latest window with enough reports")


def add_round_option(parser: argparse.ArgumentParser) -> None:
    """``--round ID`` of the analysis commands: 0 (the metric's own level) or a relaxation round."""
    parser.add_argument("--round", type=int, metavar="ID",
                        help="0 (reports at the metric's own level) or a relaxation round's id (`onesided round "
                             "list NAME`); default: the latest finished round with enough reports, else 0")


def command_group(subparsers: Subparsers, name: str, help_text: str) -> Subparsers:
    """A command with actions (``onesided NAME ACTION ...``); returns the actions' subparsers."""
    parser = subparsers.add_parser(name, help=help_text)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    return actions


def add_storage_options(parser: argparse.ArgumentParser) -> None:
    """``--db URL``, ``--data-dir D``, ``--key-dir K`` (default from ``ONESIDED_*``)."""
    parser.add_argument("--db", dest="db_url", metavar="URL", help="database URL (default: SQLite in the data "
                        "directory; PostgreSQL: postgresql+psycopg://user@host:5432/dbname); env ONESIDED_DB")
    add_key_options(parser)


def add_key_options(parser: argparse.ArgumentParser) -> None:
    """``--data-dir D``, ``--key-dir K``: where the key files are (commands that never open the database)."""
    parser.add_argument("--data-dir", metavar="DIR",
                        help="data directory (default ./onesided-data); env ONESIDED_DATA_DIR")
    parser.add_argument("--key-dir", metavar="DIR",
                        help="key directory (default DATA_DIR/keys); env ONESIDED_KEY_DIR")


def settings_from_args(args: argparse.Namespace, **extra: Any) -> Settings:
    """Settings from the environment, overridden by the storage options and ``extra``."""
    from aggregator.server.settings import Settings

    return Settings.from_env(
        data_dir=getattr(args, "data_dir", None),
        db_url=getattr(args, "db_url", None),
        key_dir=getattr(args, "key_dir", None),
        **extra,
    )


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """``--server URL`` and ``--token T`` (default ``ONESIDED_SERVER`` / ``ONESIDED_TOKEN``)."""
    parser.add_argument("--server", metavar="URL",
                        help="aggregator URL; env ONESIDED_SERVER (default http://127.0.0.1:8080)")
    parser.add_argument("--token", help="bearer token; env ONESIDED_TOKEN")


def client_from_args(args: argparse.Namespace) -> ApiClient:
    """An :class:`ApiClient` from ``--server`` and ``--token`` or the environment."""
    from aggregator.api_client import ApiClient

    return ApiClient(getattr(args, "server", None), getattr(args, "token", None))


def print_json(data: Any) -> None:
    """Pretty JSON on stdout (what scripts parse)."""
    print(json.dumps(data, indent=2, sort_keys=True, allow_nan=False))


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """``--json``: the server's answer as JSON (for scripts) instead of the table for people."""
    parser.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")


def add_format_option(parser: argparse.ArgumentParser) -> None:
    """``--format table|json|csv`` (default table) and ``--json``, the same as ``--format json``."""
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table",
                        help="table for people (default), json for scripts, csv for spreadsheets")
    parser.add_argument("--json", dest="format", action="store_const", const="json", help="same as --format json")


def emit(args: argparse.Namespace, data: Any, human: Callable[[Any], str]) -> None:
    """``data`` as JSON with ``--json``, else ``human(data)`` (the table for people)."""
    if getattr(args, "json", False):
        print_json(data)
    else:
        sys.stdout.write(human(data))


def print_answer(body: dict[str, Any], output: str, to_csv: Callable[[dict[str, Any]], str],
                 to_table: Callable[[dict[str, Any]], str] | None = None) -> int:
    """An analysis answer: its ``reason`` (why no number was released) on stderr, then the table, JSON or CSV."""
    if body.get("reason"):
        print(f"note: {body['reason']}", file=sys.stderr)
    if output == "csv":
        sys.stdout.write(to_csv(body))
    elif output == "table" and to_table is not None:
        sys.stdout.write(answer_header(body) + to_table(body))
    else:
        print_json(body)
    return 0


def answer_header(body: dict[str, Any]) -> str:
    """The line above an analysis table: which collection was decoded, at which level."""
    from aggregator.cli.render import cell

    parts = [str(body.get("metric", "?"))]
    if body.get("window") is not None:
        parts.append(f"window {cell('window', body['window'])}")
    if body.get("round") is not None:
        parts.append(f"round {body['round']}")
    if body.get("reports") is not None:
        parts.append(f"{body['reports']:,} reports")
    if body.get("level") is not None:
        parts.append(f"level {body['level']:g} ({body.get('mode', '?')})")
    return ", ".join(parts) + "\n"


def post_fields(args: argparse.Namespace, path: str, fields: dict[str, Any]) -> Any:
    """POST the given fields (those not ``None``) as a JSON body with the client of ``--server``/``--token``."""
    return client_from_args(args).post(path, {k: v for k, v in fields.items() if v is not None})



def open_audit_log(args: argparse.Namespace, *, migrate: bool = True) -> Storage:
    """The database of the storage options, opened before an administrative command changes anything.

    A command that must be audited opens it first, so a database that cannot
    be opened stops it before it touches a key file. ``migrate=False`` leaves
    the schema as it is (``backup`` never changes the database it copies).

    A SQLite file that does not exist is refused rather than created: an
    entry in a stray new database (``./onesided-data`` when only
    ``--key-dir`` was given) would be an audit log nobody reads.

    Raises:
        ParameterError: no SQLite database at the path (field ``data_dir``,
            or ``db_url`` when ``--db`` named it).
        DatabaseUnavailable: it cannot be opened (one line naming it).
    """
    storage = open_audit_log_if_any(args, migrate=migrate)
    if storage is None:
        from protocol.errors import ParameterError

        settings = settings_from_args(args)
        raise ParameterError("db_url" if settings.db_url else "data_dir",
                             f"no database at {_sqlite_file(settings) or settings.database_url}: this command records "
                             "itself in the server's audit log; give the server's --data-dir or --db (nothing was "
                             "changed)")
    return storage


def open_audit_log_if_any(args: argparse.Namespace, *, migrate: bool = True) -> Storage | None:
    """Like :func:`open_audit_log`, but ``None`` where the SQLite file does not exist (yet)."""
    settings = settings_from_args(args)
    from pathlib import Path

    from aggregator.server.storage import Storage

    database = _sqlite_file(settings)
    if database is not None and not Path(database).is_file():
        return None
    return Storage.open(settings.database_url, migrate=migrate, attempts=settings.db_retries)


def _sqlite_file(settings: Settings) -> str | None:
    """The SQLite database's file name; ``None`` for another database."""
    if settings.dialect != "sqlite":
        return None
    from sqlalchemy.engine import make_url

    return make_url(settings.database_url).database or ""


def record_operator(storage: Storage, action: str, target: str | None, detail: dict[str, Any], *,
                    done: str) -> int:
    """Append the audit entry of a command that has just done ``done`` (actor ``cli:USER``); close ``storage``.

    Returns the exit status: 0, or 1 with a line on stderr when the row could
    not be written (what was done stays done, and the line says so, so that
    nobody runs the command a second time to "retry" it).
    """
    from sqlalchemy.exc import SQLAlchemyError

    from aggregator.server.storage.audit import operator_entry
    from protocol.errors import OnesidedError

    try:
        storage.record_audit(operator_entry(action, target, detail))
    except (OnesidedError, SQLAlchemyError, OSError) as exc:
        print(f"error: audit_log: {done}, but its audit entry could not be written ({type(exc).__name__}: "
              f"{(str(exc).splitlines() or ['no detail'])[0][:200]}); do not run the command again: "
              f"note it by hand ({action}: {json.dumps(detail, sort_keys=True)})", file=sys.stderr)
        return 1
    finally:
        storage.close()
    return 0
