"""Many-row INSERT and additive upsert, each the fastest way its dialect offers.

The statements are SQLAlchemy Core; only how the rows travel differs:

* PostgreSQL: one statement, the rows as one array per column,
  ``INSERT INTO t (cols) SELECT * FROM unnest(CAST(:c1 AS type[]), ...) AS u(cols)``,
  each array sent as the text of an array literal; one round trip whatever
  the number of rows (``executemany`` costs a round trip per row).
* SQLite: the statement compiled once and handed to the driver's
  ``executemany`` with plain tuples (the C loop of ``sqlite3``), skipping
  per-row parameter processing.

With ``add=column`` the insert becomes ``ON CONFLICT (primary key) DO UPDATE
SET column = column + excluded.column``. Rows are written in the order
given; callers sort them by key so that concurrent writers lock shared rows
in the same order (no deadlocks).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection


def _on_conflict_add(insert: Any, table: sa.Table, column: str) -> Any:
    key = [c.name for c in table.primary_key.columns]
    return insert.on_conflict_do_update(index_elements=key, set_={column: table.c[column] + insert.excluded[column]})


def _array_text(values: list[Any]) -> str:
    """A PostgreSQL array literal of integers or byte strings (``{1,2}``, ``{"\\\\x00ff"}``).

    Sent as one text parameter and cast server-side: psycopg adapts a Python
    list element by element, about ten times slower (measured 8 ms for 1,000
    byte strings against 0.9 ms as text).
    """
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "{" + ",".join(map(str, values)) + "}"
    if all(isinstance(v, bytes) for v in values):
        return "{" + ",".join(f'"\\\\x{v.hex()}"' for v in values) + "}"
    raise TypeError("bulk arrays hold integers or bytes")


def array_parameter(values: Sequence[Any], item_type: Any) -> sa.ColumnElement[Any]:
    """PostgreSQL only: ``CAST(:text AS item_type[])``, the values as one array parameter."""
    return sa.cast(sa.bindparam(None, _array_text(list(values)), type_=sa.Text), postgresql.ARRAY(item_type))


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
        arrays = [array_parameter([row[i] for row in rows], table.c[name].type) for i, name in enumerate(names)]
        source = sa.select(sa.func.unnest(*arrays).table_valued(*names).render_derived())
        pg_insert = postgresql.insert(table).from_select(names, source)
        conn.execute(pg_insert if add is None else _on_conflict_add(pg_insert, table, add))
        return
    lite_insert = sqlite.insert(table)
    statement = lite_insert if add is None else _on_conflict_add(lite_insert, table, add)
    compiled = statement.compile(dialect=conn.dialect, column_keys=names)
    order = [names.index(name) for name in compiled.positiontup or ()]
    if order == list(range(len(names))):
        conn.exec_driver_sql(str(compiled), list(rows))  # already in the statement's order
    else:
        pick = operator.itemgetter(*order)  # a C loop; a generator per row cost 4 ms per 2,048 rows
        conn.exec_driver_sql(str(compiled), [pick(row) if len(order) > 1 else (pick(row),) for row in rows])
