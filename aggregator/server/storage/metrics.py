"""Metric registration: parameters are immutable once data exist.

``put_metric`` is idempotent: the same parameters again change nothing;
different parameters replace the old ones only while the metric has no
reports, aggregates or rounds (its digest is bound into every sealed
report and signed announcement); otherwise :class:`Conflict`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from aggregator.server.errors import Conflict, NotFound
from aggregator.server.storage import schema
from aggregator.server.storage.engine import run_transaction
from aggregator.server.storage.records import MetricRecord, loads
from protocol.params import MetricParams, canonical_json

PutOutcome = Literal["created", "unchanged", "updated"]


@functools.lru_cache(maxsize=1024)
def parse_params(text: str) -> MetricParams:
    """The parameters stored as ``text`` (remembered: parsing and validating them cost 24 us a metric, every batch)."""
    return MetricParams.from_dict(loads(text))


def metric_from_row(row: Any) -> MetricRecord:
    return MetricRecord(
        id=row.id,
        params=parse_params(row.params),
        digest=row.digest,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def with_metric_name(table: sa.Table) -> sa.Select[Any]:
    """``SELECT table.*, metrics.name AS metric_name`` joined on ``metric_id``."""
    m = schema.metrics
    return sa.select(table, m.c.name.label("metric_name")).join(m, m.c.id == table.c.metric_id)


def load_metric(conn: Connection, name: str, *, lock: bool = False) -> MetricRecord:
    """The metric called ``name`` read on ``conn``; ``lock``: hold its row until the transaction ends.

    The lock is ``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite has no row
    locks, but its transactions start with ``BEGIN IMMEDIATE`` and so already
    exclude every other writer.

    Raises:
        NotFound: no such metric (field ``metric``, code ``unknown_metric``).
    """
    query = sa.select(schema.metrics).where(schema.metrics.c.name == name)
    row = conn.execute(query.with_for_update() if lock else query).first()
    if row is None:
        raise NotFound("metric", f"no metric named {name!r}", code="unknown_metric")
    return metric_from_row(row)


def _has_data(conn: Connection, metric_id: int) -> bool:
    for table in (schema.cohort_totals, schema.reports, schema.rounds):
        found = conn.execute(sa.select(sa.literal(1)).where(table.c.metric_id == metric_id).limit(1)).first()
        if found is not None:
            return True
    return False


class MetricStore:
    """Mixin of :class:`aggregator.server.storage.Storage`: the ``metrics`` table."""

    engine: Engine
    attempts: int

    def put_metric(self, params: MetricParams, *, now: int | None = None) -> tuple[MetricRecord, PutOutcome]:
        """Register ``params`` or confirm them.

        Returns:
            The stored record and ``"created"``, ``"unchanged"`` or ``"updated"``.

        Raises:
            Conflict: the metric has reports, aggregates or rounds and the
                parameters differ (field ``params``).
        """
        stamp = int(time.time()) if now is None else now
        digest = params.digest()
        text = canonical_json(params.to_dict()).decode("utf-8")
        table = schema.metrics

        def work(conn: Connection) -> tuple[MetricRecord, PutOutcome]:
            query = sa.select(table).where(table.c.name == params.name).with_for_update()
            row = conn.execute(query).first()
            outcome: PutOutcome
            if row is None:
                values = {"name": params.name, "params": text, "digest": digest}
                conn.execute(sa.insert(table).values(**values, created_at=stamp, updated_at=stamp))
                outcome = "created"
            elif row.digest == digest:
                outcome = "unchanged"
            elif _has_data(conn, row.id):
                raise Conflict(
                    "params",
                    f"metric {params.name!r} already has data; its parameters are immutable "
                    "(register a new metric name instead)",
                    code="metric_immutable",
                )
            else:
                update = sa.update(table).where(table.c.id == row.id)
                conn.execute(update.values(params=text, digest=digest, updated_at=stamp))
                outcome = "updated"
            stored = conn.execute(sa.select(table).where(table.c.name == params.name)).one()
            return metric_from_row(stored), outcome

        # Two processes creating the same name race on the unique key: the loser retries and sees it.
        record, outcome = run_transaction(self.engine, work, attempts=self.attempts)
        return record, outcome

    def get_metric(self, name: str) -> MetricRecord | None:
        """The metric called ``name``, or ``None``."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(schema.metrics).where(schema.metrics.c.name == name)).first()
        return None if row is None else metric_from_row(row)

    def require_metric(self, name: str) -> MetricRecord:
        """Like :meth:`get_metric`, raising :class:`NotFound` (field ``metric``)."""
        with self.engine.connect() as conn:
            return load_metric(conn, name)

    def metrics_by_name(self, names: Iterable[str]) -> dict[str, MetricRecord]:
        """The metrics among ``names`` that exist, by name (one query)."""
        wanted = sorted(set(names))
        if not wanted:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(schema.metrics).where(schema.metrics.c.name.in_(wanted))).all()
        return {row.name: metric_from_row(row) for row in rows}

    def list_metrics(self) -> list[MetricRecord]:
        """All metrics, by name."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(schema.metrics).order_by(schema.metrics.c.name)).all()
        return [metric_from_row(r) for r in rows]
