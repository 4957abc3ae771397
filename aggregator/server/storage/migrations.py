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

import json
import time
from collections.abc import Callable

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from aggregator.server.storage import schema
from aggregator.server.storage.aggregation import AGGREGATE_COLUMNS, pack_counts
from protocol.params import MetricParams
from protocol.validation import check_int

Migration = Callable[[Connection], None]
ADVISORY_LOCK_ID = 0x6F6E6573  # "ones"


def _v1_initial(conn: Connection) -> None:
    """Metrics, rounds, reports (replay set), aggregates (one row per bit), cohort totals, tokens, releases."""
    for table in schema.VERSION_1_TABLES:
        table.create(conn)


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


CONVERT_CHUNK = 2000  # collections per INSERT while converting aggregates


def _v3_packed_aggregates(conn: Connection) -> None:
    """``aggregates`` with one row per collection, its counts packed (was one row per bit).

    The old table is renamed ``aggregates_v1``, the new one created, every
    collection's counts assembled from the old rows (bits without a row count
    0) at the metric's ``num_bits``, and the old table dropped, all in the
    migration's transaction.

    Raises:
        RuntimeError: an old row's bit is outside its metric's ``num_bits``.
    """
    conn.execute(sa.text("ALTER TABLE aggregates RENAME TO aggregates_v1"))
    schema.aggregates.create(conn)
    widths = {
        int(row.id): MetricParams.from_dict(json.loads(row.params)).num_bits
        for row in conn.execute(sa.text("SELECT id, params FROM metrics"))
    }
    old = conn.execute(sa.text(
        "SELECT metric_id, window_start, round_id, cohort, bit, ones FROM aggregates_v1"
        " ORDER BY metric_id, window_start, round_id, cohort"
    ))
    pending: list[tuple[int, int, int, int, bytes]] = []
    current: tuple[int, int, int, int] | None = None
    counts = np.zeros(0, dtype=np.int64)
    for metric_id, window, round_id, cohort, bit, ones in old:
        key = (int(metric_id), int(window), int(round_id), int(cohort))
        if key != current:
            if current is not None:
                pending.append((*current, pack_counts(counts)[0]))
            current, counts = key, np.zeros(widths[key[0]], dtype=np.int64)
        if not 0 <= bit < counts.size:
            raise RuntimeError(f"aggregates row of metric {metric_id} has bit {bit}, outside its {counts.size} bits")
        counts[bit] = ones
        if len(pending) >= CONVERT_CHUNK:
            conn.execute(sa.insert(schema.aggregates), [dict(zip(AGGREGATE_COLUMNS, p, strict=True)) for p in pending])
            pending = []
    if current is not None:
        pending.append((*current, pack_counts(counts)[0]))
    if pending:
        conn.execute(sa.insert(schema.aggregates), [dict(zip(AGGREGATE_COLUMNS, p, strict=True)) for p in pending])
    conn.execute(sa.text("DROP TABLE aggregates_v1"))


def _v4_audit_log(conn: Connection) -> None:
    """The ``audit_log`` table, append-only: the database refuses UPDATE and DELETE on it (triggers)."""
    schema.audit_log.create(conn)
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text(
            "CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'audit_log is append-only'; END $$"
        ))
        conn.execute(sa.text(
            "CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log "
            "FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()"
        ))
        return
    for event in ("UPDATE", "DELETE"):
        conn.execute(sa.text(
            f"CREATE TRIGGER audit_log_no_{event.lower()} BEFORE {event} ON audit_log "
            "BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END"
        ))


def _v5_round_irr(conn: Connection) -> None:
    """``rounds.irr_p`` and ``rounds.irr_q``, nullable: the IRR a round relaxes the metric's to (null: kept)."""
    for column in ("irr_p", "irr_q"):
        conn.execute(sa.text(f"ALTER TABLE rounds ADD COLUMN {column} DOUBLE PRECISION"))


MIGRATIONS: tuple[tuple[int, Migration], ...] = (
    (1, _v1_initial),
    (2, _v2_one_open_round),
    (3, _v3_packed_aggregates),
    (4, _v4_audit_log),
    (5, _v5_round_irr),
)
LATEST_VERSION = MIGRATIONS[-1][0]


def current_version(conn: Connection) -> int:
    """The highest applied migration, 0 for an empty database."""
    if not sa.inspect(conn).has_table(schema.schema_version.name):
        return 0
    value = conn.execute(sa.select(sa.func.max(schema.schema_version.c.version))).scalar()
    return int(value or 0)


def migrate(engine: Engine, *, target: int = LATEST_VERSION) -> int:
    """Bring the database to version ``target`` (default: the latest); return the version reached.

    An older ``target`` is for tests of the migrations themselves (a database
    as an earlier release left it).

    Raises:
        RuntimeError: the database is newer than this code (a downgrade).
        ParameterError: ``target`` is not a version of this code.
    """
    check_int("target", target, low=1, high=LATEST_VERSION)
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
            if version < number <= target:
                migration(conn)
                conn.execute(
                    sa.insert(schema.schema_version).values(version=number, applied_at=int(time.time()))
                )
                version = number
    return version
