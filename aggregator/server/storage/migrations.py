"""Schema migrations in code: a ``schema_version`` table and ordered functions.

``migrate(engine)`` applies, in one transaction, every migration newer than
the highest recorded version; it is safe to run from several processes at
once (PostgreSQL: a transaction-scoped advisory lock; SQLite: ``BEGIN
IMMEDIATE``). Each migration records its version in the same transaction,
so a crash leaves the schema at a recorded version.

Adding a migration: append ``(n, function)`` to :data:`MIGRATIONS`. A
migration must describe the change it makes (new tables via
``metadata.create_all(conn, tables=[...])``, new columns with
``ALTER TABLE``), never rely on the current form of a table it did not
create, and never be edited once released.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from aggregator.server.storage import schema

Migration = Callable[[Connection], None]
ADVISORY_LOCK_ID = 0x6F6E6573  # "ones"


def _v1_initial(conn: Connection) -> None:
    """Metrics, rounds, reports (replay set), aggregates, cohort totals, tokens, releases."""
    schema.metadata.create_all(conn, tables=list(schema.VERSION_1_TABLES))


def _v2_one_open_round(conn: Connection) -> None:
    """At most one unclosed round per metric: a partial unique index (SQLite and PostgreSQL).

    Rounds left unclosed beside a later one (racing openings before this
    version) are closed when the metric's latest round opened, or at their
    expiry if that came first.
    """
    conn.execute(sa.text(
        "UPDATE rounds SET closed_at = ("
        " SELECT CASE WHEN rounds.expires_at < MAX(r2.opened_at) THEN rounds.expires_at"
        " ELSE MAX(r2.opened_at) END FROM rounds AS r2 WHERE r2.metric_id = rounds.metric_id)"
        " WHERE closed_at IS NULL"
        " AND id < (SELECT MAX(r3.id) FROM rounds AS r3 WHERE r3.metric_id = rounds.metric_id)"
    ))
    conn.execute(sa.text("CREATE UNIQUE INDEX rounds_one_open ON rounds (metric_id) WHERE closed_at IS NULL"))


MIGRATIONS: tuple[tuple[int, Migration], ...] = ((1, _v1_initial), (2, _v2_one_open_round))
LATEST_VERSION = MIGRATIONS[-1][0]


def current_version(conn: Connection) -> int:
    """The highest applied migration, 0 for an empty database."""
    if not sa.inspect(conn).has_table(schema.schema_version.name):
        return 0
    value = conn.execute(sa.select(sa.func.max(schema.schema_version.c.version))).scalar()
    return int(value or 0)


def migrate(engine: Engine) -> int:
    """Bring the database to :data:`LATEST_VERSION`; return the version reached.

    Raises:
        RuntimeError: the database is newer than this code (a downgrade).
    """
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:id)"), {"id": ADVISORY_LOCK_ID})
        schema.schema_version.create(conn, checkfirst=True)
        version = current_version(conn)
        if version > LATEST_VERSION:
            raise RuntimeError(
                f"database schema version {version} is newer than this aggregator ({LATEST_VERSION}); upgrade it"
            )
        for number, migration in MIGRATIONS:
            if number > version:
                migration(conn)
                conn.execute(
                    sa.insert(schema.schema_version).values(version=number, applied_at=int(time.time()))
                )
                version = number
    return version
