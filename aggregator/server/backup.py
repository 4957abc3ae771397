"""Online backup of the embedded SQLite database (``onesided backup``).

SQLite's online backup API (``sqlite3.Connection.backup``) copies the
database page by page while the server keeps running: readers and the
writer go on, and the copy is a consistent snapshot (the WAL's committed
transactions included). The copy is written to a temporary file of mode
0600 beside the destination and renamed into place, so a crash leaves
either the old file or the whole new copy; a failed copy (a full disk)
removes its temporary file and says why in one line.

PostgreSQL has its own tools: ``pg_dump`` (logical) or base backups with WAL
archiving; this command refuses it and says so.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from aggregator.server.errors import StorageFull
from aggregator.server.private_files import FILE_MODE
from aggregator.server.settings import Settings
from protocol.errors import OnesidedError, ParameterError

PAGES_PER_STEP = 1024  # the server's writers get the lock between steps


def backup_sqlite(settings: Settings, destination: str | os.PathLike[str]) -> dict[str, Any]:
    """Copy the SQLite database of ``settings`` to ``destination`` (mode 0600); return a summary.

    Raises:
        ParameterError: the database is PostgreSQL (field ``db_url``), the
            source does not exist (``data_dir``), or ``destination`` is the
            source (``destination``), or it could not be written (``destination``:
            the partial copy is removed).
        StorageFull: the destination's disk is full (field ``destination``;
            the partial copy is removed).
    """
    if settings.dialect != "sqlite":
        raise ParameterError(
            "db_url",
            "onesided backup copies the embedded SQLite database; for PostgreSQL use its own tools: "
            "pg_dump --format=custom (logical) or pg_basebackup with WAL archiving",
        )
    source = Path(sa.engine.make_url(settings.database_url).database or "")
    if not source.is_file():
        raise ParameterError("data_dir", f"no database at {source}")
    target = Path(destination)
    if target.exists() and target.resolve() == source.resolve():
        raise ParameterError("destination", "is the live database itself")
    partial = target.with_name(f".{target.name}.partial")
    try:
        check, version = _copy(source, partial)
        os.replace(partial, target)
    except (OSError, sqlite3.Error) as exc:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise _failed(target, exc) from None
    return {"source": str(source), "destination": str(target), "bytes": target.stat().st_size,
            "schema_version": version, "integrity_check": check}


def _copy(source: Path, partial: Path) -> tuple[str, int]:
    """Copy ``source`` into the new file ``partial`` (mode 0600); its integrity check and schema version."""
    os.close(os.open(partial, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, FILE_MODE))
    os.chmod(partial, FILE_MODE)
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(partial)
    try:
        src.backup(dst, pages=PAGES_PER_STEP)
        dst.execute("PRAGMA journal_mode=DELETE")  # a single self-contained file
        check = dst.execute("PRAGMA integrity_check").fetchone()[0]
        version = dst.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
    finally:
        dst.close()
        src.close()
    return str(check), int(version)


def _failed(target: Path, exc: BaseException) -> OnesidedError:
    """One line saying why the copy failed (the partial file is already gone)."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    full = (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "disk is full" in reason.lower()
    if full:
        return StorageFull("destination", f"the disk holding {target} is full ({reason}); nothing was written, "
                                          "free space or choose another folder")
    return ParameterError("destination", f"cannot write {target}: {reason}; nothing was written")
