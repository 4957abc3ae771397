"""Relaxation rounds: open, list, get, close.

A round's id is assigned by the database; the announcement payload
(``protocol.wire.RoundAnnouncement``) names it, so ``open_round`` inserts
the row, builds and signs the payload with the caller's ``sign`` function
(the aggregator's Ed25519 key) and stores the signed document, all in one
transaction. The rules (levels only increase, one open round) are
:mod:`aggregator.server.services.rounds`; this module makes them atomic.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from aggregator.server.errors import Conflict, NotFound
from aggregator.server.storage import schema
from aggregator.server.storage.engine import run_transaction
from aggregator.server.storage.metrics import load_metric, with_metric_name
from aggregator.server.storage.records import MetricRecord, RoundRecord, loads
from protocol.params import canonical_json
from protocol.wire import RoundAnnouncement

MAX_ROUND_ID = 2**31 - 1  # the id column is a 32-bit signed integer; larger ids cannot exist
SignFunction = Callable[[dict[str, Any]], dict[str, Any]]
RoundStart = tuple[float, float | None, float | None]
"""``(level_from, irr_p, irr_q)`` of a new round (``irr_q`` ``None``: the round keeps the IRR)."""
LevelRule = Callable[[MetricRecord, list[RoundRecord]], "float | RoundStart"]


def round_from_row(row: Any) -> RoundRecord:
    return RoundRecord(
        id=row.id,
        metric=row.metric_name,
        level_from=row.level_from,
        level_to=row.level_to,
        cohorts=None if row.cohorts is None else tuple(json.loads(row.cohorts)),
        opened_at=row.opened_at,
        expires_at=row.expires_at,
        closed_at=row.closed_at,
        announcement=loads(row.announcement) if row.announcement else {},
        irr_p=row.irr_p,
        irr_q=row.irr_q,
    )


def _metric_rounds(conn: Connection, metric_id: int) -> list[RoundRecord]:
    query = with_metric_name(schema.rounds).where(schema.rounds.c.metric_id == metric_id)
    return [round_from_row(row) for row in conn.execute(query.order_by(schema.rounds.c.id)).all()]


def _close_unclosed(conn: Connection, metric_id: int, stamp: int) -> None:
    """Close the metric's rounds without ``closed_at``: at ``stamp``, or at their expiry if earlier."""
    table = schema.rounds
    ending = sa.case((table.c.expires_at < stamp, table.c.expires_at), else_=sa.literal(stamp))
    conn.execute(
        sa.update(table).where(table.c.metric_id == metric_id, table.c.closed_at.is_(None)).values(closed_at=ending)
    )


def _insert_round(
    conn: Connection,
    record: MetricRecord,
    start: RoundStart,
    level_to: float,
    cohorts: tuple[int, ...] | None,
    stamp: int,
    expires_at: int,
    sign: SignFunction,
) -> RoundRecord:
    """Insert the round, then sign its announcement (which names the id the insert assigned)."""
    table = schema.rounds
    level_from, irr_p, irr_q = start
    values = {
        "metric_id": record.id,
        "level_from": level_from,
        "irr_p": irr_p,
        "irr_q": irr_q,
        "level_to": level_to,
        "cohorts": None if cohorts is None else json.dumps(list(cohorts)),
        "opened_at": stamp,
        "expires_at": expires_at,
    }
    round_id = conn.execute(sa.insert(table).values(**values).returning(table.c.id)).scalar_one()
    announcement = RoundAnnouncement(
        round_id=round_id,
        metric=record.name,
        params_digest=record.digest,
        level_from=level_from,
        level_to=level_to,
        cohorts=cohorts,
        opened_at=stamp,
        expires_at=expires_at,
        irr_p=irr_p,
        irr_q=irr_q,
    )
    document = canonical_json(sign(announcement.to_payload())).decode("utf-8")
    conn.execute(sa.update(table).where(table.c.id == round_id).values(announcement=document))
    return round_from_row(conn.execute(with_metric_name(table).where(table.c.id == round_id)).one())


class RoundStore:
    """Mixin of :class:`aggregator.server.storage.Storage`: the ``rounds`` table."""

    engine: Engine
    attempts: int

    def open_round(
        self,
        *,
        metric: str,
        level_from: float | RoundStart | LevelRule,
        level_to: float,
        cohorts: Sequence[int] | None,
        expires_at: int,
        sign: SignFunction,
        now: int | None = None,
    ) -> RoundRecord:
        """Open a round, closing the metric's earlier ones, and store its signed announcement.

        One transaction holds the metric's row lock (``SELECT ... FOR UPDATE``
        on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` serializes every writer)
        while it reads the metric's rounds, asks ``level_from`` (a number, a
        :data:`RoundStart` ``(level_from, irr_p, irr_q)``, or a rule
        ``(metric, rounds) -> either`` that may refuse by raising:
        ``aggregator.server.services.rounds.round_start``), closes every
        earlier round still without ``closed_at`` (at ``min(now, expires_at)``,
        so an expired round keeps its end) and inserts the new one. The
        partial unique index ``rounds_one_open`` backs "one unclosed round
        per metric" against any other writer.

        Raises:
            NotFound: no such metric.
            ReportRejected: an announcement field is invalid (field named:
                ``level_to``, ``cohorts[2]``, ``expires_at``...); nothing is stored.
            Whatever ``level_from`` raises; nothing is stored.
        """
        stamp = int(time.time()) if now is None else now
        cohort_tuple = None if cohorts is None else tuple(int(c) for c in cohorts)

        def work(conn: Connection) -> RoundRecord:
            record = load_metric(conn, metric, lock=True)
            rounds = _metric_rounds(conn, record.id)
            start = level_from(record, rounds) if callable(level_from) else level_from
            if not isinstance(start, tuple):
                start = (float(start), None, None)
            _close_unclosed(conn, record.id, stamp)
            return _insert_round(conn, record, start, float(level_to), cohort_tuple, stamp, expires_at, sign)

        return run_transaction(self.engine, work, attempts=self.attempts)

    def get_round(self, round_id: int) -> RoundRecord | None:
        """The round with this id, or ``None``."""
        if not 0 < round_id <= MAX_ROUND_ID:
            return None
        with self.engine.connect() as conn:
            row = conn.execute(with_metric_name(schema.rounds).where(schema.rounds.c.id == round_id)).first()
        return None if row is None else round_from_row(row)

    def rounds_by_id(self, round_ids: Iterable[int]) -> dict[int, RoundRecord]:
        """The rounds among ``round_ids`` that exist, by id (one query)."""
        wanted = sorted({i for i in round_ids if 0 < i <= MAX_ROUND_ID})
        if not wanted:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(with_metric_name(schema.rounds).where(schema.rounds.c.id.in_(wanted))).all()
        return {row.id: round_from_row(row) for row in rows}

    def list_rounds(
        self, metric: str | None = None, *, open_only: bool = False, now: float | None = None
    ) -> list[RoundRecord]:
        """Rounds by id, of one metric or all; ``open_only``: not closed and not expired at ``now``."""
        query = with_metric_name(schema.rounds).order_by(schema.rounds.c.id)
        if metric is not None:
            query = query.where(schema.metrics.c.name == metric)
        if open_only:
            stamp = time.time() if now is None else now
            query = query.where(schema.rounds.c.closed_at.is_(None), schema.rounds.c.expires_at > stamp)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [round_from_row(r) for r in rows]

    def close_round(self, round_id: int, *, now: int | None = None) -> RoundRecord:
        """Close a round: its announcement is withdrawn (no client joins it any more).

        Its reports are still accepted (those built while it was open and
        delivered late, and its clients' reports at its level in later
        windows); see ``aggregator.server.ingest``, step 4.

        Raises:
            NotFound: no such round.
            Conflict: the round is already closed.
        """
        stamp = int(time.time()) if now is None else now
        table = schema.rounds
        with self.engine.begin() as conn:
            update = sa.update(table).where(table.c.id == round_id, table.c.closed_at.is_(None))
            if conn.execute(update.values(closed_at=stamp)).rowcount == 0:
                if conn.execute(sa.select(table.c.id).where(table.c.id == round_id)).first() is None:
                    raise NotFound("round", f"no round {round_id}")
                raise Conflict("round", f"round {round_id} is already closed", code="round_closed")
            row = conn.execute(with_metric_name(schema.rounds).where(table.c.id == round_id)).one()
        return round_from_row(row)
