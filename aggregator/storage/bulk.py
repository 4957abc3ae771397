"""Many-row INSERT and additive upsert, each the fastest way its dialect offers.

The statements are SQLAlchemy Core; only how the rows travel differs:

* PostgreSQL: one statement, the rows as one array per column,
  ``INSERT INTO t (cols) SELECT * FROM unnest(:c1::type[], ...) AS u(cols)``;
  one round trip whatever the number of rows (``executemany`` costs a
  round trip per row).
* SQLite: the statement compiled once and handed to the driver's
  ``executemany`` with plain tuples (the C loop of ``sqlite3``), skipping
  per-row parameter processing.

With ``add=column`` the insert becomes ``ON CONFLICT (primary key) DO UPDATE
SET column = column + excluded.column``. Rows are written in the order
given; callers sort them by key so that concurrent writers lock shared rows
in the same order (no deadlocks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection


def _on_conflict_add(insert: Any, table: sa.Table, column: str) -> Any:
    key = [c.name for c in table.primary_key.columns]
    return insert.on_conflict_do_update(index_elements=key, set_={column: table.c[column] + insert.excluded[column]})


def insert_rows(
    conn: Connection, table: sa.Table, columns: Sequence[str], rows: Sequence[tuple[Any, ...]], *, add: str | None = None
) -> None:
    """Insert ``rows`` (tuples in ``columns`` order); with ``add``, add into existing rows instead.

    Raises:
        sqlalchemy.exc.IntegrityError: a unique key is violated (without ``add``).
    """
    if not rows:
        return
    names = list(columns)
    if conn.dialect.name == "postgresql":
        arrays = [
            sa.cast(sa.bindparam(f"column_{i}", [row[i] for row in rows]), postgresql.ARRAY(table.c[name].type))
            for i, name in enumerate(names)
        ]
        source = sa.select(sa.func.unnest(*arrays).table_valued(*names).render_derived())
        pg_insert = postgresql.insert(table).from_select(names, source)
        conn.execute(pg_insert if add is None else _on_conflict_add(pg_insert, table, add))
        return
    lite_insert = sqlite.insert(table)
    statement = lite_insert if add is None else _on_conflict_add(lite_insert, table, add)
    compiled = statement.compile(dialect=conn.dialect, column_keys=names)
    order = [names.index(name) for name in compiled.positiontup or ()]
    conn.exec_driver_sql(str(compiled), [tuple(row[i] for i in order) for row in rows])
