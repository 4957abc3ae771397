"""Central releases to analysts: a generic store (the releases module owns the body).

Each row is ``(id, analyst, metric, body JSON, created_at, updated_at)``;
``update_release`` replaces the body (a relaxation step of a release).
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from aggregator.server.errors import NotFound
from aggregator.server.storage import schema
from aggregator.server.storage.metrics import load_metric, with_metric_name
from aggregator.server.storage.records import ReleaseRecord, loads
from protocol.errors import ParameterError
from protocol.params import canonical_json


def release_from_row(row: Any) -> ReleaseRecord:
    return ReleaseRecord(
        id=row.id,
        analyst=row.analyst,
        metric=row.metric_name,
        body=loads(row.body),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _body_text(body: dict[str, Any]) -> str:
    if not isinstance(body, dict):
        raise ParameterError("body", "must be a JSON object")
    try:
        return canonical_json(body).decode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ParameterError("body", f"is not JSON of finite values: {exc}") from exc


class ReleaseStore:
    """Mixin of :class:`aggregator.server.storage.Storage`: the ``releases`` table."""

    engine: Engine

    def create_release(
        self, *, analyst: str, metric: str, body: dict[str, Any], now: int | None = None
    ) -> ReleaseRecord:
        """Store a new release.

        Raises:
            NotFound: no such metric.
            ParameterError: ``body`` is not a JSON object of finite values.
        """
        text = _body_text(body)
        stamp = int(time.time()) if now is None else now
        table = schema.releases
        with self.engine.begin() as conn:
            record = load_metric(conn, metric)
            values = {"analyst": analyst, "metric_id": record.id, "body": text}
            insert = sa.insert(table).values(**values, created_at=stamp, updated_at=stamp)
            release_id = conn.execute(insert.returning(table.c.id)).scalar_one()
            row = conn.execute(with_metric_name(schema.releases).where(table.c.id == release_id)).one()
        return release_from_row(row)

    def get_release(self, release_id: int) -> ReleaseRecord | None:
        """The release with this id, or ``None``."""
        with self.engine.connect() as conn:
            row = conn.execute(with_metric_name(schema.releases).where(schema.releases.c.id == release_id)).first()
        return None if row is None else release_from_row(row)

    def list_releases(self, *, analyst: str | None = None, metric: str | None = None) -> list[ReleaseRecord]:
        """Releases by id, optionally of one analyst and/or one metric."""
        query = with_metric_name(schema.releases).order_by(schema.releases.c.id)
        if analyst is not None:
            query = query.where(schema.releases.c.analyst == analyst)
        if metric is not None:
            query = query.where(schema.metrics.c.name == metric)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [release_from_row(r) for r in rows]

    def update_release(self, release_id: int, body: dict[str, Any], *, now: int | None = None) -> ReleaseRecord:
        """Replace a release's body.

        Raises:
            NotFound: no such release.
        """
        text = _body_text(body)
        stamp = int(time.time()) if now is None else now
        table = schema.releases
        with self.engine.begin() as conn:
            update = sa.update(table).where(table.c.id == release_id).values(body=text, updated_at=stamp)
            if conn.execute(update).rowcount == 0:
                raise NotFound("release", f"no release {release_id}")
            row = conn.execute(with_metric_name(schema.releases).where(table.c.id == release_id)).one()
        return release_from_row(row)
