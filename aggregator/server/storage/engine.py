"""Database engines and transactions that survive races between processes.

SQLite (the embedded default) is a file of mode 0600 (so are its ``-wal``
and ``-shm``, whatever the umask), in WAL mode with ``synchronous=NORMAL`` (checkpoints every 10,000 pages),
foreign keys on, a 30 s busy timeout, and every transaction started with
``BEGIN IMMEDIATE`` so that two writers queue on the lock instead of failing
when a reader upgrades. PostgreSQL uses READ COMMITTED; the few statements
that race (the replay set's unique key, the aggregate upserts) are retried
as a whole transaction by :func:`run_transaction`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from aggregator.server.errors import DatabaseUnavailable, DependencyFailed, StorageFull
from aggregator.server.faults import first_line
from aggregator.server.private_files import secure_sqlite_files
from protocol.errors import ParameterError
from protocol.rng import as_rng

log = logging.getLogger(__name__)
T = TypeVar("T")
# SQLite: one lock per engine that run_transaction's transactions take in turn (see there).
_sqlite_writers: weakref.WeakKeyDictionary[Engine, threading.RLock] = weakref.WeakKeyDictionary()
SQLITE_BUSY_MS = 30_000
# Checkpoint the WAL every 10,000 pages (40 MiB), not SQLite's 1,000: a batch's reports land on
# ~100 random pages of the replay set's index, and a page written by many batches is copied back
# once per checkpoint. Measured, batches of 100 into 200,000 reports: 24 -> 18 us of CPU and
# 52 -> 29 us of wall time per report. The WAL file is cut back to 64 MiB after a checkpoint.
SQLITE_CHECKPOINT_PAGES = 10_000
SQLITE_WAL_LIMIT_BYTES = 64 * 1024 * 1024
PG_CONNECT_TIMEOUT_SECONDS = 10
# PostgreSQL SQLSTATEs worth a retry: serialization failure, deadlock, unique violation.
RETRY_SQLSTATES = frozenset({"40001", "40P01", "23505"})


def make_engine(url: str) -> Engine:
    """An engine for ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``).

    Its errors never carry the statement's parameters (``hide_parameters``):
    they hold report bits, token hashes and analysts' names, and an error's
    text ends up in logs.

    Raises:
        ParameterError: ``db_url`` names another dialect or is malformed.
    """
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise ParameterError("db_url", f"is not a database URL: {exc}") from exc
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed)
    if parsed.get_backend_name() == "postgresql":
        # A database host that drops packets must not hold a request thread for the kernel's TCP timeout
        # (minutes): a worker waiting for it answers 503 and tries again (aggregator.server.dependencies).
        timeout = {} if "connect_timeout" in parsed.query else {"connect_timeout": PG_CONNECT_TIMEOUT_SECONDS}
        return sa.create_engine(parsed, pool_pre_ping=True, pool_size=4, max_overflow=4, hide_parameters=True,
                                connect_args=timeout)
    raise ParameterError("db_url", f"dialect must be sqlite or postgresql, got {parsed.get_backend_name()!r}")


def describe_database(url: str) -> str:
    """``PostgreSQL at HOST:PORT/NAME`` or ``the SQLite file PATH``, never a password."""
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        return "the database"
    if parsed.get_backend_name() == "sqlite":
        return f"the SQLite file {parsed.database}"
    return f"PostgreSQL at {parsed.host or 'localhost'}:{parsed.port or 5432}/{parsed.database or ''}"


def unreachable(url: str, exc: BaseException, kind: str) -> DependencyFailed:
    """The one-line error for a database that cannot be reached or written at start."""
    where = describe_database(url)
    if kind == "storage_full":
        return StorageFull("database", f"{where}: {first_line(exc)}; free disk space and start again")
    if url.startswith("sqlite"):
        hint = "check that its folder exists and this user may write both"
    else:
        hint = "check that the server runs, listens there and accepts this user (--db / ONESIDED_DB)"
    return DatabaseUnavailable("database", f"cannot use {where}: {first_line(exc)}; {hint}")


def make_engine_or_explain(url: str) -> Engine:
    """:func:`make_engine`, with a SQLite folder that cannot be created or secured as one line."""
    try:
        return make_engine(url)
    except OSError as exc:
        raise unreachable(url, exc, "storage_full" if exc.errno == errno.ENOSPC else "database_unavailable") \
            from None


def sqlite_file_identity(path: str) -> tuple[int, int] | None:
    """``(device, inode)`` of the file at ``path``, ``None`` when there is none."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


def _sqlite_engine(url: sa.engine.URL) -> Engine:
    if not url.database or url.database == ":memory:":
        raise ParameterError("db_url", "SQLite needs a file (several connections share it), not :memory:")
    folder = Path(url.database).parent
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.chmod(0o700)  # whatever the umask
    secure_sqlite_files(url.database)  # 0600 before SQLite creates it (its -wal and -shm follow)
    engine = sa.create_engine(
        url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_MS / 1000}, hide_parameters=True,
        pool_use_lifo=True,  # the connection that wrote last, whose page cache is still valid
    )
    _sqlite_writers[engine] = threading.RLock()

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
        cursor.execute(f"PRAGMA wal_autocheckpoint={SQLITE_CHECKPOINT_PAGES}")
        cursor.execute(f"PRAGMA journal_size_limit={SQLITE_WAL_LIMIT_BYTES}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


@contextlib.contextmanager
def scratch_schema(base_url: str, prefix: str = "onesided_scratch") -> Iterator[str]:
    """A new, uniquely named PostgreSQL schema, dropped afterwards; yields a URL that uses it.

    For tests, benchmarks and demos that need an empty database next to others.
    """
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    admin = sa.create_engine(base_url)
    try:
        with admin.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{name}"'))
        separator = "&" if "?" in base_url else "?"
        yield f"{base_url}{separator}options=-csearch_path%3D{name}"
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
        admin.dispose()


def is_retryable(exc: BaseException) -> bool:
    """A race another attempt can win: unique violation, deadlock, serialization, busy."""
    if isinstance(exc, sa.exc.IntegrityError):
        code = getattr(getattr(exc, "orig", None), "sqlstate", None)
        return code is None or code in RETRY_SQLSTATES
    if isinstance(exc, sa.exc.OperationalError):
        code = getattr(getattr(exc, "orig", None), "sqlstate", None)
        return code in RETRY_SQLSTATES or "database is locked" in str(exc)
    return False


def run_transaction(engine: Engine, work: Callable[[Connection], T], *, attempts: int = 5) -> T:
    """Run ``work(conn)`` in one transaction, again from scratch after a retryable race.

    Everything ``work`` does is rolled back before a retry, so it must read
    what it depends on inside the transaction (as the replay check does).

    SQLite: the threads of a process take turns on a lock before they take a
    connection. A writer waiting on SQLite's own lock sleeps in its busy
    handler (1, 2, 5 ... ms) however soon the lock frees, and a connection
    discards its whole page cache when another connection has written, so
    that every batch read its pages again (about 65 reads a batch of 100 into
    20,000 reports); in turn, the next writer starts at once on the
    connection that wrote last (the pool hands out the most recent one).
    Other processes still meet SQLite's lock; a turn not had within the busy
    timeout is taken without it (SQLite's busy handler then decides, as before).
    """
    writer = _sqlite_writers.get(engine)
    if writer is None or not writer.acquire(timeout=SQLITE_BUSY_MS / 1000):
        return _run_transaction(engine, work, attempts)
    try:
        return _run_transaction(engine, work, attempts)
    finally:
        writer.release()


def _run_transaction(engine: Engine, work: Callable[[Connection], T], attempts: int) -> T:
    for attempt in range(1, attempts + 1):
        try:
            with engine.begin() as conn:
                return work(conn)
        except sa.exc.DBAPIError as exc:
            if attempt == attempts or not is_retryable(exc):
                raise
            log.info("transaction race (attempt %d of %d): %s", attempt, attempts, type(exc.orig).__name__)
            time.sleep(float(as_rng(None).uniform(())) * 0.01 * 2**attempt)  # jittered backoff
    raise AssertionError("unreachable")  # pragma: no cover
