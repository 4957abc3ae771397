"""Storing report batches and reading the aggregates.

``store_reports`` is one transaction per batch:

1. lock the batch's metrics (and rounds) against change (``FOR SHARE``) and
   re-check what validation assumed: a metric whose digest changed makes its
   reports ``outdated_config``; a round closed meanwhile makes them ``expired``;
2. find the batch's report ids already stored, with one query per metric;
   an identical body (same SHA-256) is this request's retry and counts as
   ``accepted`` again, a different body is ``replayed``; neither is stored;
3. insert the new reports (the replay set, primary key ``(metric, report_id)``);
4. sum their bits per collection (window, round, cohort) with :func:`sum_bits`
   and add the sums to the collections' rows of ``aggregates`` and to
   ``cohort_totals`` (:func:`aggregates.add_batch`: one row per collection,
   read, added to in numpy and written back).

A concurrent process inserting the same report id makes step 3 fail on the
unique key; the whole transaction is then rolled back and run again (it now
sees the id in step 2), so nothing is lost or counted twice. Rows are
written in key order, so two batches lock shared rows in the same order.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from aggregator.server.storage import schema
from aggregator.server.storage.aggregates import add_batch, read_counts
from aggregator.server.storage.aggregation import sum_bits
from aggregator.server.storage.bulk import array_parameter, insert_rows
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


@dataclass(frozen=True, kw_only=True)
class MetricBinding:
    """What a batch's reports of one metric were validated against."""

    metric_id: int
    digest: str
    num_bits: int


def _lock_state(conn: Connection, rows: Sequence[ReportRow]) -> tuple[dict[int, str], dict[int, int | None]]:
    """Current digests of the batch's metrics and ``closed_at`` of the batch's rounds (locked)."""
    metric_ids = sorted({r.metric_id for r in rows})
    m = schema.metrics
    query = sa.select(m.c.id, m.c.digest).where(m.c.id.in_(metric_ids)).order_by(m.c.id)
    digests = {row.id: row.digest for row in conn.execute(query.with_for_update(read=True))}
    round_ids = sorted({r.round for r in rows if r.round > 0})
    closed: dict[int, int | None] = {}
    if round_ids:
        t = schema.rounds
        query = sa.select(t.c.id, t.c.closed_at).where(t.c.id.in_(round_ids)).order_by(t.c.id)
        closed = {row.id: row.closed_at for row in conn.execute(query.with_for_update(read=True))}
    return digests, closed


def _round_accepts(closed: dict[int, int | None], row: ReportRow) -> bool:
    """Round 0, an open round, or a closed round's later window (its level continues; see ingest)."""
    if row.round == 0:
        return True
    if row.round not in closed:
        return False
    closed_at = closed[row.round]
    return closed_at is None or row.window > closed_at


def _stored_hashes(conn: Connection, metric_id: int, report_ids: list[bytes]) -> dict[bytes, bytes]:
    """Body hashes of the reports among ``report_ids`` already stored (one query).

    PostgreSQL joins the primary key with ``unnest`` of one array parameter:
    a nested loop of index lookups, or a hash join, whatever the statistics
    say (``= ANY(array)`` as a filter can degrade to ids x rows comparisons
    on a table whose statistics are stale).
    """
    t = schema.reports
    if conn.dialect.name == "postgresql":
        wanted = sa.func.unnest(array_parameter(report_ids, t.c.report_id.type)).table_valued("id").render_derived()
        join = wanted.join(t, sa.and_(t.c.metric_id == metric_id, t.c.report_id == wanted.c.id))
        query = sa.select(t.c.report_id, t.c.body_hash).select_from(join)
    else:
        query = sa.select(t.c.report_id, t.c.body_hash).where(t.c.metric_id == metric_id, t.c.report_id.in_(report_ids))
    return {bytes(row.report_id): bytes(row.body_hash) for row in conn.execute(query)}


REPORT_COLUMNS = ("metric_id", "report_id", "round_id", "window_start", "cohort", "bits", "body_hash", "received_at")


def _insert_and_aggregate(conn: Connection, rows: list[ReportRow], num_bits: int, now: int) -> None:
    rows = sorted(rows, key=lambda r: r.report_id)
    report_rows = [(r.metric_id, r.report_id, r.round, r.window, r.cohort, r.bits, r.body_hash, now) for r in rows]
    insert_rows(conn, schema.reports, REPORT_COLUMNS, report_rows)
    width = (num_bits + 7) // 8
    sums = sum_bits(
        windows=[r.window for r in rows],
        rounds=[r.round for r in rows],
        cohorts=[r.cohort for r in rows],
        packed=np.frombuffer(b"".join(r.bits for r in rows), dtype=np.uint8).reshape(len(rows), width),
        num_bits=num_bits,
    )
    add_batch(conn, rows[0].metric_id, sums, num_bits)


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
        stored = _stored_hashes(conn, metric_id, [rows[i].report_id for i in indices])
        fresh = []
        for i in indices:
            previous = stored.get(rows[i].report_id)
            if previous is None:
                fresh.append(rows[i])
            elif previous != rows[i].body_hash:
                statuses[i] = STATUS_REPLAYED
        if fresh:
            _insert_and_aggregate(conn, fresh, bindings[metric_id].num_bits, now)
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
            ``expired`` (the round was closed meanwhile).
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

    def purge_expired(self, retention_seconds: int, *, now: int | None = None) -> int:
        """Delete raw reports whose window ended more than ``retention_seconds`` ago.

        Such windows are ``expired`` at ingestion, so their report ids need no
        replay protection any more; aggregates are kept. Returns the number of
        reports deleted.
        """
        stamp = int(time.time()) if now is None else now
        deleted = 0
        with self.engine.begin() as conn:
            for row in conn.execute(sa.select(schema.metrics.c.id, schema.metrics.c.params)).all():
                precision = int(loads(row.params)["time_precision"])
                cutoff = stamp - retention_seconds - precision
                t = schema.reports
                result = conn.execute(sa.delete(t).where(t.c.metric_id == row.id, t.c.window_start <= cutoff))
                deleted += result.rowcount
        return deleted

