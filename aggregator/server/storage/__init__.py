"""The aggregator's storage: SQLAlchemy Core over SQLite (WAL, embedded) or PostgreSQL.

>>> import tempfile
>>> storage = Storage.open(f"sqlite:///{tempfile.mkdtemp()}/doc.db")
>>> storage.schema_version()
5
>>> storage.table_counts()["reports"]
0
>>> storage.close()

One :class:`Storage` object per process; it is thread-safe (a connection
pool underneath). Methods by table:

* metrics: :meth:`put_metric`, :meth:`get_metric`, :meth:`require_metric`, :meth:`list_metrics`
* rounds: :meth:`open_round`, :meth:`get_round`, :meth:`list_rounds`, :meth:`close_round`
* reports and aggregates: :meth:`store_reports`, :meth:`bit_counts`,
  :meth:`collections`, :meth:`purge_expired`, :meth:`table_counts`
* tokens: :meth:`create_token`, :meth:`authenticate`, :meth:`list_tokens`, :meth:`revoke_token`
* releases: :meth:`create_release`, :meth:`get_release`, :meth:`list_releases`, :meth:`update_release`
* audit log: :meth:`record_audit`, :meth:`audit_entries`
"""

from __future__ import annotations

import logging
import time

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from aggregator.server.errors import DatabaseUnavailable
from aggregator.server.faults import classify, first_line
from aggregator.server.storage import migrations
from aggregator.server.storage.audit import AuditEntry, AuditStore
from aggregator.server.storage.engine import (
    describe_database,
    make_engine,
    make_engine_or_explain,
    sqlite_file_identity,
    unreachable,
)
from aggregator.server.storage.metrics import MetricStore
from aggregator.server.storage.records import (
    ROLES,
    Collection,
    MetricRecord,
    ReleaseRecord,
    RoundRecord,
    TokenRecord,
)
from aggregator.server.storage.releases import ReleaseStore
from aggregator.server.storage.reports import MetricBinding, ReportRow, ReportStore
from aggregator.server.storage.rounds import RoundStore
from aggregator.server.storage.tokens import TokenStore, hash_token, new_token_secret

log = logging.getLogger(__name__)


class Storage(MetricStore, RoundStore, ReportStore, TokenStore, ReleaseStore, AuditStore):
    """All tables behind one engine.

    Args:
        engine: from :func:`make_engine`.
        attempts: tries of a racing transaction (see ``engine.run_transaction``).
    """

    def __init__(self, engine: Engine, *, attempts: int = 5) -> None:
        self.engine = engine
        self.attempts = attempts
        self._file_identity: tuple[int, int] | None = None  # SQLite: (device, inode) of the opened file

    @classmethod
    def open(cls, url: str, *, migrate: bool = True, attempts: int = 5, wait_seconds: float = 0.0) -> Storage:
        """Connect to ``url`` and (by default) bring the schema up to date.

        A PostgreSQL server that cannot be reached is tried again with
        backoff (0.5 s doubling to 5 s) for up to ``wait_seconds``.

        Raises:
            DatabaseUnavailable: the database cannot be reached or its file
                opened (field ``database``; one line naming the host or file
                and what to check, never the password).
            StorageFull: the disk is full while creating or migrating it.
        """
        engine = make_engine_or_explain(url)
        deadline = time.monotonic() + wait_seconds
        delay = 0.5
        while True:
            try:
                storage = cls(engine, attempts=attempts)
                if migrate:
                    storage.migrate()
                else:
                    storage.schema_version()
                storage.remember_file()
                return storage
            except (sa.exc.DBAPIError, OSError) as exc:
                kind = classify(exc)
                if kind is None:
                    raise
                waiting = kind == "database_unavailable" and engine.dialect.name == "postgresql"
                if not waiting or time.monotonic() + delay > deadline:
                    engine.dispose()
                    raise unreachable(url, exc, kind) from None
                log.warning("%s does not answer (%s); trying again in %.1f s",
                            describe_database(url), first_line(exc), delay)
                time.sleep(delay)
                delay = min(2 * delay, 5.0)

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    def migrate(self) -> int:
        """Apply pending migrations; return the schema version."""
        return migrations.migrate(self.engine)

    def schema_version(self) -> int:
        """The applied schema version (0 when empty)."""
        with self.engine.connect() as conn:
            return migrations.current_version(conn)

    def remember_file(self) -> None:
        """Note which SQLite file is open (its device and inode), for :meth:`check_file`; PostgreSQL: nothing."""
        path = self.sqlite_path
        if path is not None:
            self._file_identity = sqlite_file_identity(path)

    @property
    def sqlite_path(self) -> str | None:
        """The SQLite file's path (``None`` on PostgreSQL)."""
        return self.engine.url.database if self.dialect == "sqlite" else None

    def check_file(self) -> None:
        """Refuse to go on when the SQLite file at the path is not the one the server opened.

        A removed file stays open (its reports land in an unlinked inode and
        vanish with the process); a replaced one is another database. Both
        are 503 naming the file, never ``accepted``. One ``stat`` call.

        Raises:
            DatabaseUnavailable: the file was removed or replaced (field ``database``).
        """
        path = self.sqlite_path
        if self._file_identity is None or path is None:
            return
        found = sqlite_file_identity(path)
        if found != self._file_identity:
            what = "removed" if found is None else "replaced"
            raise DatabaseUnavailable(
                "database", f"the SQLite file {path} was {what} while the server had it open; nothing is stored "
                            "until it is restored and the server restarted")

    def close(self) -> None:
        """Release the connection pool."""
        self.engine.dispose()


__all__ = [
    "AuditEntry",
    "ROLES",
    "Collection",
    "MetricBinding",
    "MetricRecord",
    "ReleaseRecord",
    "ReportRow",
    "RoundRecord",
    "Storage",
    "TokenRecord",
    "hash_token",
    "make_engine",
    "new_token_secret",
]
