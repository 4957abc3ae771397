"""The aggregator's tables (SQLAlchemy Core), portable across SQLite and PostgreSQL.

Times are integer Unix seconds. JSON documents are stored as canonical JSON
text (``protocol.params.canonical_json``), so a signed announcement reads
back byte for byte. ``window`` and ``round`` are SQL keywords in some
dialects, hence ``window_start`` and ``round_id``.

Tables:

* ``schema_version``: one row per applied migration.
* ``metrics``: name, parameters (JSON), their digest.
* ``rounds``: relaxation rounds with their signed announcement; ``irr_p`` and
  ``irr_q`` (schema version 5, nullable): the metric's IRR after the round, null
  when the round keeps the metric's own IRR.
* ``reports``: the raw reports, which are also the replay set
  (primary key ``(metric_id, report_id)``).
* ``aggregates``: ``(metric, window, round, cohort) -> ones``, the counts of
  ones of every bit packed in one value (``num_bits`` little-endian int64,
  :mod:`aggregator.server.storage.aggregation`); schema version 3. Versions 1
  and 2 kept one row per bit (:data:`aggregates_v1`).
* ``cohort_totals``: ``(metric, window, round, cohort) -> reports``.
* ``tokens``: bearer tokens, stored as SHA-256 hex.
* ``releases``: central releases to analysts (body is JSON).
* ``audit_log``: who did what with a token, append-only (schema version 4).
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

schema_version = sa.Table(
    "schema_version",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("applied_at", sa.BigInteger, nullable=False),
)

metrics = sa.Table(
    "metrics",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(64), nullable=False, unique=True),
    sa.Column("params", sa.Text, nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)


def _round_columns() -> list[sa.Column[object]]:
    """The ``rounds`` columns of schema version 1 (the foreign key by column: the legacy metadata has no metrics)."""
    return [
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("metric_id", sa.Integer, sa.ForeignKey(metrics.c.id), nullable=False, index=True),
        sa.Column("level_from", sa.Float, nullable=False),
        sa.Column("level_to", sa.Float, nullable=False),
        sa.Column("cohorts", sa.Text, nullable=True),
        sa.Column("opened_at", sa.BigInteger, nullable=False),
        sa.Column("expires_at", sa.BigInteger, nullable=False),
        sa.Column("closed_at", sa.BigInteger, nullable=True),
        sa.Column("announcement", sa.Text, nullable=True),
    ]


rounds = sa.Table(
    "rounds",
    metadata,
    *_round_columns(),
    # Schema version 5: the IRR after the round (null: the metric's own); added by ALTER TABLE.
    sa.Column("irr_p", sa.Float, nullable=True),
    sa.Column("irr_q", sa.Float, nullable=True),
)

reports = sa.Table(
    "reports",
    metadata,
    # No foreign key on this, the hottest insert: PostgreSQL checks one per row (measured
    # 5 us of a 12 us insert); ingestion resolves the metric first and metrics are never deleted.
    sa.Column("metric_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("report_id", sa.LargeBinary(16), primary_key=True),
    sa.Column("round_id", sa.Integer, nullable=False),
    sa.Column("window_start", sa.BigInteger, nullable=False),
    sa.Column("cohort", sa.Integer, nullable=False),
    sa.Column("bits", sa.LargeBinary, nullable=False),
    sa.Column("body_hash", sa.LargeBinary(16), nullable=False),
    sa.Column("received_at", sa.BigInteger, nullable=False),
    sa.Index("reports_metric_window", "metric_id", "window_start"),
)

def _collection_columns() -> list[sa.Column[int]]:
    """``(metric_id, window_start, round_id, cohort)``: the key of a collection."""
    return [
        sa.Column("metric_id", sa.Integer, sa.ForeignKey("metrics.id"), nullable=False),
        sa.Column("window_start", sa.BigInteger, nullable=False),
        sa.Column("round_id", sa.Integer, nullable=False),
        sa.Column("cohort", sa.Integer, nullable=False),
    ]


_COLLECTION_KEY = ("metric_id", "window_start", "round_id", "cohort")

aggregates = sa.Table(
    "aggregates",
    metadata,
    *_collection_columns(),
    # num_bits little-endian int64 counts, cell b = reports of the collection with bit b set.
    sa.Column("ones", sa.LargeBinary, nullable=False),
    # Named: version 3 creates it while version 1's table (and its aggregates_pkey) still exists.
    sa.PrimaryKeyConstraint(*_COLLECTION_KEY, name="aggregates_collection_pkey"),
    # Every batch rewrites its collections' rows: free space per page lets PostgreSQL
    # update without touching the index (HOT).
    postgresql_with={"fillfactor": 50},
)

legacy_metadata = sa.MetaData()
"""Tables as earlier schema versions created them, for the migrations that create or convert them."""

aggregates_v1 = sa.Table(
    "aggregates",
    legacy_metadata,
    sa.Column("metric_id", sa.Integer, sa.ForeignKey(metrics.c.id), nullable=False),
    sa.Column("window_start", sa.BigInteger, nullable=False),
    sa.Column("round_id", sa.Integer, nullable=False),
    sa.Column("cohort", sa.Integer, nullable=False),
    sa.Column("bit", sa.Integer, nullable=False),
    sa.Column("ones", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint(*_COLLECTION_KEY, "bit"),
    postgresql_with={"fillfactor": 50},
)

cohort_totals = sa.Table(
    "cohort_totals",
    metadata,
    *_collection_columns(),
    sa.Column("reports", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint(*_COLLECTION_KEY),
    postgresql_with={"fillfactor": 50},
)

tokens = sa.Table(
    "tokens",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(64), nullable=False, unique=True),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("revoked_at", sa.BigInteger, nullable=True),
)

releases = sa.Table(
    "releases",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("analyst", sa.String(64), nullable=False, index=True),
    sa.Column("metric_id", sa.Integer, sa.ForeignKey("metrics.id"), nullable=False, index=True),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)

rounds_v1 = sa.Table("rounds", legacy_metadata, *_round_columns())

VERSION_1_TABLES = (metrics, rounds_v1, reports, aggregates_v1, cohort_totals, tokens, releases)
"""What version 1 created, in an order that satisfies the foreign keys."""

audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("at", sa.BigInteger, nullable=False, index=True),  # Unix milliseconds
    sa.Column("actor", sa.String(64), nullable=False, index=True),  # the token's name, or "cli:USER"
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("action", sa.String(120), nullable=False),  # "POST /v1/metrics/<name>/rounds", "token create"
    sa.Column("target", sa.String(300), nullable=True),  # the path, or what a command acted on
    sa.Column("status", sa.Integer, nullable=False),  # the HTTP status answered (0: a command that succeeded)
    sa.Column("address_class", sa.String(16), nullable=False),  # loopback, private, link_local, public, local
    sa.Column("address", sa.String(64), nullable=True),  # the client's network (/24, /48), never the address
    sa.Column("detail", sa.Text, nullable=True),  # the request's scalar JSON fields, canonical JSON
)
