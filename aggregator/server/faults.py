"""What failed outside the request: telling a dead database and a full disk from bugs.

A database that stops answering, or a disk that fills, is not the client's
fault and not a bug: the client gets ``503 database_unavailable`` or ``507
insufficient_storage`` with ``Retry-After`` (the transaction was rolled back:
nothing is half-stored), the log gets one line without a traceback, and
``/v1/health`` says which dependency is failing (:class:`Faults`).

>>> classify(OSError(28, "No space left on device"))
'storage_full'
>>> classify(ValueError("a bug")) is None
True
"""

from __future__ import annotations

import errno
import shutil
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

# SQLite's messages (sqlite3 has no error codes before Python 3.11's sqlite_errorcode on every build).
SQLITE_FULL = ("database or disk is full",)
SQLITE_UNAVAILABLE = (
    "unable to open database file", "attempt to write a readonly database", "disk i/o error",
    "database is locked", "no such table",
)
# psycopg's failures to connect carry no SQLSTATE.
PG_CONNECTION = ("connection failed", "connection refused", "server closed the connection", "connection timeout")
# The tables exist from the first start on: a missing one means the SQLite file was removed or replaced.
# PostgreSQL SQLSTATE classes: 08 connection exception, 57P admin shutdown / cannot connect now, 53 resources.
PG_FULL = frozenset({"53100"})
PG_UNAVAILABLE_PREFIXES = ("08", "57P", "53")
RECENT_SECONDS = 60.0  # a storage failure keeps health "degraded" this long
LOW_DISK_BYTES = 16 * 1024 * 1024


def classify(exc: BaseException) -> str | None:
    """``storage_full``, ``database_unavailable`` or ``None`` (anything else: a bug, 500)."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return "storage_full"
    if isinstance(exc, sa.exc.DBAPIError):  # SQLAlchemy's wrapper
        original: BaseException = exc.orig if exc.orig is not None else exc
        if exc.connection_invalidated or isinstance(exc, sa.exc.InterfaceError):
            return "database_unavailable"
    elif isinstance(exc, sqlite3.Error) or type(exc).__module__.startswith("psycopg"):
        original = exc  # the driver's own, from the hot paths that use its connection directly
    else:
        return None
    sqlstate = getattr(original, "sqlstate", None)
    text = str(original).lower()
    if sqlstate in PG_FULL or any(m in text for m in SQLITE_FULL):
        return "storage_full"
    if type(original).__name__ not in ("OperationalError", "InterfaceError"):
        return None
    if sqlstate is not None:
        return "database_unavailable" if str(sqlstate).startswith(PG_UNAVAILABLE_PREFIXES) else None
    if any(m in text for m in (*SQLITE_UNAVAILABLE, *PG_CONNECTION)):
        return "database_unavailable"
    return None


def first_line(exc: BaseException) -> str:
    """The driver's message of ``exc``, first line only (never SQL or its parameters)."""
    original = getattr(exc, "orig", None) or exc
    lines = str(original).strip().splitlines()
    return lines[0] if lines else type(original).__name__


@dataclass
class Faults:
    """Recent dependency failures of this process, for ``/v1/health``."""

    data_dir: Path | None = None  # SQLite's folder: its free space is checked too
    _last: dict[str, tuple[float, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, kind: str, detail: str) -> None:
        with self._lock:
            self._last[kind] = (time.monotonic(), detail)

    def recent(self) -> list[dict[str, str]]:
        """``[{"dependency", "error", "detail"}]`` of the failures of the last minute, and a nearly full disk."""
        now = time.monotonic()
        with self._lock:
            found = [
                {"dependency": "storage" if kind == "storage_full" else "database",
                 "error": "insufficient_storage" if kind == "storage_full" else kind, "detail": detail}
                for kind, (when, detail) in sorted(self._last.items()) if now - when < RECENT_SECONDS
            ]
        if self.data_dir is not None and not any(p["dependency"] == "storage" for p in found):
            try:
                free = shutil.disk_usage(self.data_dir).free
            except OSError:
                free = None
            if free is not None and free < LOW_DISK_BYTES:
                found.append({"dependency": "storage", "error": "low_disk_space",
                              "detail": f"{free} bytes free in {self.data_dir}"})
        return found
