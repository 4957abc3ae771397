"""Storing report batches and reading the aggregates.

``store_reports`` is one transaction per batch:

1. lock the batch's metrics (and rounds) against change (``FOR SHARE``) and
   re-check what validation assumed: a metric whose digest changed makes its
   reports ``outdated_config``; a round that no longer exists makes them ``expired``;
2. per metric, insert the reports whose id is new (the replay set, primary
   key ``(metric, report_id)``) and find those already stored: an identical
   body (same SHA-256) is this request's retry and counts as ``accepted``
   again, a different body is ``replayed``; neither is stored again.
   SQLite inserts with ``ON CONFLICT DO NOTHING`` and looks the ids up only
   when fewer rows were written than sent (its writer excludes all others);
   PostgreSQL inserts with ``ON CONFLICT DO NOTHING RETURNING report_id``
   and looks up only the ids that were not inserted;
3. sum the new reports' bits per collection (window, round, cohort) with :func:`sum_bits`
   and add the sums to the collections' rows of ``aggregates`` and to
   ``cohort_totals`` (:func:`aggregates.add_batch`: one row per collection,
   read, added to in numpy and written back).

A concurrent transaction inserting the same report id makes step 2 wait for
it and then skip the id (it is then found stored). Two transactions creating
the same collection race on its key in step 3: the loser is rolled back and
run again. Rows are written in key order, so two batches lock shared rows in
the same order.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection, Engine

from aggregator.server.storage import schema
from aggregator.server.storage.aggregates import add_batch, read_counts
from aggregator.server.storage.aggregation import sum_bits
from aggregator.server.storage.bulk import (
    array_slot,
    array_text,
    compiled_sql,
    insert_rows,
    sqlite_many,
    sqlite_rows,
)
from aggregator.server.storage.engine import run_transaction
from aggregator.server.storage.metrics import load_metric
from aggregator.server.storage.records import Collection, loads
from protocol.errors import ParameterError
from protocol.wire import STATUS_ACCEPTED, STATUS_EXPIRED, STATUS_OUTDATED_CONFIG, STATUS_REPLAYED

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, kw_only=True)
class ReportRow:
    """A validated, opened report ready to store.

    Attributes:
        metric_id: the metric's row id.
        report_id: 16 bytes.
        round: 0 (base collection) or the round id.
        window: the window start (Unix seconds).
        cohort: the report's cohort.
        bits: the packed bits (LSB first), ``ceil(num_bits / 8)`` bytes.
        body_hash: first 16 bytes of SHA-256 of the sealed (or plain) body.
    """

    metric_id: int
    report_id: bytes
    round: int
    window: int
    cohort: int
    bits: bytes
    body_hash: bytes

    def __post_init__(self) -> None:
        if len(self.report_id) != 16:
            raise ParameterError("report_id", "must be 16 bytes")
        if len(self.body_hash) != 16:
            raise ParameterError("body_hash", "must be 16 bytes")

    @classmethod
    def checked(cls, metric_id: int, report_id: bytes, round: int, window: int, cohort: int, bits: bytes,
                body_hash: bytes) -> ReportRow:
        """A row whose ``report_id`` and ``body_hash`` the caller made 16 bytes long (ingestion's parser
        and hash): the same row as the constructor's, without its frozen fields set one by one
        and checked again (0.3 against 1.4 us, for every report of a batch)."""
        row = object.__new__(cls)
        row.__dict__.update(metric_id=metric_id, report_id=report_id, round=round, window=window, cohort=cohort,
                            bits=bits, body_hash=body_hash)
        return row


@dataclass(frozen=True, kw_only=True)
class MetricBinding:
    """What a batch's reports of one metric were validated against."""

    metric_id: int
    digest: str
    num_bits: int


def _placeholders(n: int) -> str:
    return ",".join("?" * n)


def _lock_state(conn: Connection, rows: Sequence[ReportRow]) -> tuple[dict[int, str], dict[int, int | None]]:
    """Current digests of the batch's metrics and ``closed_at`` of the batch's rounds (locked).

    PostgreSQL: ``FOR SHARE`` in id order; SQLite's ``BEGIN IMMEDIATE`` already excludes writers.
    """
    metric_ids = sorted({r.metric_id for r in rows})
    round_ids = sorted({r.round for r in rows if r.round > 0})
    closed: dict[int, int | None] = {}
    digests: dict[int, str]
    if conn.dialect.name == "postgresql":
        sql = "SELECT id, {} FROM {} WHERE id = ANY(%(ids)s) ORDER BY id FOR SHARE"
        digests = dict(conn.exec_driver_sql(sql.format("digest", "metrics"), {"ids": metric_ids}).all())
        if round_ids:
            closed = dict(conn.exec_driver_sql(sql.format("closed_at", "rounds"), {"ids": round_ids}).all())
        return digests, closed
    sql = "SELECT id, {} FROM {} WHERE id IN ({})"
    metrics_sql = sql.format("digest", "metrics", _placeholders(len(metric_ids)))
    digests = dict(sqlite_rows(conn, metrics_sql, metric_ids))
    if round_ids:
        rounds_sql = sql.format("closed_at", "rounds", _placeholders(len(round_ids)))
        closed = dict(sqlite_rows(conn, rounds_sql, round_ids))
    return digests, closed


def _round_accepts(closed: dict[int, int | None], row: ReportRow) -> bool:
    """Round 0, or a round that exists: open or closed, a round's reports are accepted (see ingest, step 4)."""
    return row.round == 0 or row.round in closed


SQLITE_IDS_PER_STATEMENT = 10_000  # bound parameters, under SQLite's 32,766


def _stored_hashes(conn: Connection, metric_id: int, report_ids: list[bytes]) -> dict[bytes, bytes]:
    """Body hashes of the reports among ``report_ids`` already stored (one query).

    PostgreSQL joins the primary key with ``unnest`` of one array parameter:
    a nested loop of index lookups, or a hash join, whatever the statistics
    say (``= ANY(array)`` as a filter can degrade to ids x rows comparisons
    on a table whose statistics are stale). Plain SQL text: SQLAlchemy's
    construction, cache key and expansion of an ``IN`` list cost 0.3 ms a batch.
    """
    if conn.dialect.name == "postgresql":
        sql = ("SELECT r.report_id, r.body_hash FROM unnest(CAST(%(ids)s AS BYTEA[])) AS u(id)"
               " JOIN reports AS r ON r.metric_id = %(m)s AND r.report_id = u.id")
        result = conn.exec_driver_sql(sql, {"ids": array_text(report_ids), "m": metric_id}).all()
        return {bytes(rid): bytes(body) for rid, body in result}
    return {rid: body for rid, (body, _) in _stored_rows(conn, metric_id, report_ids).items()}


REPORT_COLUMNS = ("metric_id", "report_id", "round_id", "window_start", "cohort", "bits", "body_hash", "received_at")


def _report_tuples(rows: list[ReportRow], now: int) -> list[tuple[Any, ...]]:
    return [(r.metric_id, r.report_id, r.round, r.window, r.cohort, r.bits, r.body_hash, now) for r in rows]


def _insert_new_pg(conn: Connection, rows: list[ReportRow], now: int) -> set[bytes]:
    """PostgreSQL: insert the reports whose id is not stored; return the ids inserted.

    ``ON CONFLICT DO NOTHING``: a report id another transaction is inserting
    makes this one wait for it, then skip the row if it committed, so two
    batches racing on the same ids need no retry (``RETURNING`` says which rows
    are this batch's).
    """
    t = schema.reports

    def build() -> Any:
        arrays = [array_slot(f"a{i}", t.c[name].type) for i, name in enumerate(REPORT_COLUMNS)]
        source = sa.select(sa.func.unnest(*arrays).table_valued(*REPORT_COLUMNS).render_derived())
        insert = postgresql.insert(t).from_select(list(REPORT_COLUMNS), source)
        return insert.on_conflict_do_nothing(index_elements=["metric_id", "report_id"]).returning(t.c.report_id)

    sql, _ = compiled_sql(conn, "insert_new_reports", build)
    columns = list(zip(*_report_tuples(rows, now), strict=True))
    result = conn.exec_driver_sql(sql, {f"a{i}": array_text(column) for i, column in enumerate(columns)})
    return {bytes(rid) for (rid,) in result}


def _aggregate(conn: Connection, rows: list[ReportRow], num_bits: int) -> None:
    width = (num_bits + 7) // 8
    sums = sum_bits(
        windows=[r.window for r in rows],
        rounds=[r.round for r in rows],
        cohorts=[r.cohort for r in rows],
        packed=np.frombuffer(b"".join(r.bits for r in rows), dtype=np.uint8).reshape(len(rows), width),
        num_bits=num_bits,
    )
    add_batch(conn, rows[0].metric_id, sums, num_bits)


_SQLITE_INSERT_NEW = (
    f"INSERT INTO reports ({', '.join(REPORT_COLUMNS)}) VALUES ({_placeholders(len(REPORT_COLUMNS))})"
    " ON CONFLICT (metric_id, report_id) DO NOTHING"
)
_SQLITE_LAST_ROWID = "SELECT max(rowid) FROM reports"
# Above this, SQLite gives new rows random rowids instead of the next ones (its rowid rule).
_SQLITE_ROWID_ROOM = 2**63 - 1 - 1_000_000_000


def _insert_new_sqlite(conn: Connection, rows: list[ReportRow], now: int) -> tuple[list[ReportRow], dict[bytes, bytes]]:
    """SQLite: insert the reports whose id is not stored; the rows inserted and the stored hashes of the others.

    Insert first (``ON CONFLICT DO NOTHING``), look up only when some row was
    not inserted: the usual batch, all new, costs no lookup of its ids (which
    descended the replay set's index once more for every report). SQLite
    numbers a new row one past the largest rowid, so the rows with a rowid
    above the largest before the insert are exactly this batch's; a table
    whose rowids come near SQLite's limit, where it picks them at random,
    looks the ids up first instead. ``BEGIN IMMEDIATE`` excludes every other
    writer meanwhile.
    """
    metric_id = rows[0].metric_id
    ids = [r.report_id for r in rows]
    last = sqlite_rows(conn, _SQLITE_LAST_ROWID)[0][0] or 0
    if last > _SQLITE_ROWID_ROOM:
        stored = _stored_hashes(conn, metric_id, ids)
        fresh = [r for r in rows if r.report_id not in stored]
        insert_rows(conn, schema.reports, REPORT_COLUMNS, _report_tuples(fresh, now))
        return fresh, stored
    if sqlite_many(conn, _SQLITE_INSERT_NEW, _report_tuples(rows, now)) == len(rows):
        return rows, {}
    if len(set(ids)) != len(ids):  # one of two rows with the same id would be taken for this batch's
        raise ParameterError("rows", "report ids must be distinct per metric within a batch")
    found = _stored_rows(conn, metric_id, ids)
    stored = {rid: body for rid, (body, rowid) in found.items() if rowid <= last}
    return [r for r in rows if r.report_id not in stored], stored


def _stored_rows(conn: Connection, metric_id: int, report_ids: list[bytes]) -> dict[bytes, tuple[bytes, int]]:
    """SQLite: ``(body_hash, rowid)`` of the reports among ``report_ids`` that are stored."""
    found: dict[bytes, tuple[bytes, int]] = {}
    for start in range(0, len(report_ids), SQLITE_IDS_PER_STATEMENT):
        chunk = report_ids[start : start + SQLITE_IDS_PER_STATEMENT]
        sql = (f"SELECT report_id, body_hash, rowid FROM reports WHERE metric_id = ?"
               f" AND report_id IN ({_placeholders(len(chunk))})")
        found.update((rid, (body, rowid)) for rid, body, rowid in sqlite_rows(conn, sql, (metric_id, *chunk)))
    return found


def _store_metric_rows(conn: Connection, rows: list[ReportRow], num_bits: int, now: int) -> dict[bytes, str]:
    """Store one metric's reports (in id order); the status of those not stored now, by id.

    SQLite, whose writer excludes all others: :func:`_insert_new_sqlite`.
    PostgreSQL: insert what is new (:func:`_insert_new_pg`), then look
    up only the ids that were there.
    """
    rows = sorted(rows, key=lambda r: r.report_id)
    if conn.dialect.name == "postgresql":
        inserted = _insert_new_pg(conn, rows, now)
        others = [r for r in rows if r.report_id not in inserted]
        stored = _stored_hashes(conn, rows[0].metric_id, [r.report_id for r in others]) if others else {}
        fresh = [r for r in rows if r.report_id in inserted]
    else:
        fresh, stored = _insert_new_sqlite(conn, rows, now)
        others = [r for r in rows if r.report_id in stored]
    if fresh:
        _aggregate(conn, fresh, num_bits)
    statuses = {}
    for r in others:
        previous = stored.get(r.report_id)
        if previous is None:  # deleted since the conflict: only purge_expired deletes reports
            statuses[r.report_id] = STATUS_EXPIRED
        elif previous != r.body_hash:
            statuses[r.report_id] = STATUS_REPLAYED
    return statuses


def _store_batch(
    conn: Connection, rows: Sequence[ReportRow], bindings: Mapping[int, MetricBinding], now: int
) -> list[str]:
    digests, closed = _lock_state(conn, rows)
    statuses = [STATUS_ACCEPTED] * len(rows)
    by_metric: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        if digests.get(r.metric_id) != bindings[r.metric_id].digest:
            statuses[i] = STATUS_OUTDATED_CONFIG
        elif not _round_accepts(closed, r):
            statuses[i] = STATUS_EXPIRED
        else:
            by_metric[r.metric_id].append(i)
    for metric_id, indices in sorted(by_metric.items()):
        others = _store_metric_rows(conn, [rows[i] for i in indices], bindings[metric_id].num_bits, now)
        for i in indices:
            statuses[i] = others.get(rows[i].report_id, STATUS_ACCEPTED)
    return statuses


def _sum(column: sa.Column[int]) -> sa.ColumnElement[int]:
    """``SUM`` as a BIGINT (PostgreSQL's sum of bigints is NUMERIC)."""
    return sa.cast(sa.func.sum(column), sa.BigInteger)


class ReportStore:
    """Mixin of :class:`aggregator.server.storage.Storage`: reports, aggregates, cohort totals."""

    engine: Engine
    attempts: int

    def store_reports(
        self, rows: Sequence[ReportRow], bindings: Mapping[int, MetricBinding], *, now: int | None = None
    ) -> list[str]:
        """Store a batch atomically; one status per row, in order.

        Args:
            rows: validated, opened reports (distinct report ids per metric).
            bindings: for each ``metric_id`` of ``rows``, the digest and
                ``num_bits`` the rows were validated against.
            now: the receive time (Unix seconds).

        Returns:
            ``accepted`` (stored now, or identical to a stored report),
            ``replayed`` (another report with this id is stored),
            ``outdated_config`` (the metric's parameters changed meanwhile) or
            ``expired`` (the round no longer exists; closing it refuses nothing).
        """
        if not rows:
            return []
        stamp = int(time.time()) if now is None else now
        return run_transaction(self.engine, lambda conn: _store_batch(conn, rows, bindings, stamp), attempts=self.attempts)

    def bit_counts(self, metric: str, window: int | None = None, round: int | None = None) -> tuple[IntArray, IntArray]:
        """Per-cohort counts of ones and of reports, from the aggregates (no raw scan).

        Exact and read-your-writes: a batch's reports are in the aggregates
        when ``store_reports`` returns.

        Args:
            metric: the metric name.
            window: one window start, or ``None`` for all windows.
            round: one round (0 = base collection), or ``None`` for all.

        Returns:
            ``ones`` with shape ``(num_cohorts, num_bits)`` and ``totals`` with
            shape ``(num_cohorts,)``, both int64: ``ones[j, b]`` reports of
            cohort ``j`` with bit ``b`` set, ``totals[j]`` reports of cohort ``j``.

        Raises:
            NotFound: no such metric.
        """
        with self.engine.connect() as conn:
            record = load_metric(conn, metric)
            params = record.params
            return read_counts(conn, record.id, num_cohorts=params.num_cohorts, num_bits=params.num_bits,
                               window=window, round=round)

    def collections(self, metric: str) -> list[Collection]:
        """The (window, round) pairs of a metric with their report counts, in order.

        Raises:
            NotFound: no such metric.
        """
        t = schema.cohort_totals
        with self.engine.connect() as conn:
            record = load_metric(conn, metric)
            query = (
                sa.select(t.c.window_start, t.c.round_id, _sum(t.c.reports))
                .where(t.c.metric_id == record.id)
                .group_by(t.c.window_start, t.c.round_id)
                .order_by(t.c.window_start, t.c.round_id)
            )
            rows = conn.execute(query).all()
        return [Collection(window=w, round=r, reports=int(n)) for w, r, n in rows]

    def reports_per_metric(self) -> dict[str, int]:
        """Reports counted in the aggregates, by metric name (metrics without any are absent)."""
        t, m = schema.cohort_totals, schema.metrics
        query = sa.select(m.c.name, _sum(t.c.reports)).join(m, m.c.id == t.c.metric_id).group_by(m.c.name)
        with self.engine.connect() as conn:
            return {name: int(n) for name, n in conn.execute(query).all()}

    def table_counts(self) -> dict[str, int]:
        """Rows per table (tests and the operator's status view)."""
        with self.engine.connect() as conn:
            return {
                table.name: int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
                for table in schema.metadata.sorted_tables
            }

    def purge_expired(self, retention_seconds: int, *, now: int | None = None, clock_skew_seconds: int = 0) -> int:
        """Delete raw reports whose window ended more than ``retention_seconds`` ago.

        Such windows are ``expired`` at ingestion, so their report ids need no
        replay protection any more; aggregates are kept. Returns the number of
        reports deleted.

        "Now" is bounded by the stored data as well as by the clock: the
        newest stored window was accepted, so the true time is at least its
        start minus ``clock_skew_seconds``, and no window the server accepts
        at that time is purged, however far ahead this machine's clock is
        (a purged replay set would let re-sent reports count twice).
        """
        stamp = int(time.time()) if now is None else now
        deleted = 0
        with self.engine.begin() as conn:
            stamp = min(stamp, self._newest_accepted_time(conn, clock_skew_seconds) or stamp)
            for row in conn.execute(sa.select(schema.metrics.c.id, schema.metrics.c.params)).all():
                precision = int(loads(row.params)["time_precision"])
                cutoff = stamp - retention_seconds - precision
                t = schema.reports
                result = conn.execute(sa.delete(t).where(t.c.metric_id == row.id, t.c.window_start <= cutoff))
                deleted += result.rowcount
        return deleted

    @staticmethod
    def _newest_accepted_time(conn: Connection, clock_skew_seconds: int) -> int | None:
        """The earliest the true time can be, from the newest stored window (``None``: no reports)."""
        newest = conn.execute(sa.select(sa.func.max(schema.reports.c.window_start))).scalar()
        return None if newest is None else int(newest) - clock_skew_seconds

