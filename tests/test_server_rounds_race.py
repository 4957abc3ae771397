"""Racing round openings keep the round invariants on SQLite and PostgreSQL.

Four admins open rounds to levels 5, 4, 3 and 2 on the same metric at the
same instant (a barrier), 100 times, each time on a fresh metric at base
level 1. Whatever order the server serializes them in, the stored rounds
must climb: each round's ``level_from`` is the previous round's
``level_to`` (the base level for the first), levels strictly increase, at
most one round per metric is unclosed, and every refusal is 409
``level_not_increasing``. Before the fix the level check ran outside the
insert's transaction and these trials left falling levels and several open
rounds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
import sqlalchemy as sa
from aggsupport import BACKENDS, LiveServer, bearer, database_url, live_server, make_params

from aggregator.server.storage import schema

TRIALS = 100
LEVELS = (5.0, 4.0, 3.0, 2.0)


@pytest.fixture(params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LiveServer]:
    with database_url(request.param, tmp_path) as url, live_server(url, tmp_path) as srv:
        yield srv


def _race(srv: LiveServer, pool: ThreadPoolExecutor, token: str, name: str) -> list[int]:
    barrier = threading.Barrier(len(LEVELS))

    def open_one(level: float) -> requests.Response:
        barrier.wait(timeout=10)
        return requests.post(f"{srv.url}/v1/metrics/{name}/rounds", json={"level_to": level},
                             headers=bearer(token), timeout=30)

    answers = list(pool.map(open_one, LEVELS))
    for answer in answers:
        assert answer.status_code in (201, 409), answer.text
        if answer.status_code == 409:
            assert answer.json()["error"] == "level_not_increasing"
            assert answer.json()["field"] == "level_to"
    return [a.status_code for a in answers]


def _check_invariants(srv: LiveServer, base_level: float) -> None:
    by_metric: dict[str, list[sa.Row[tuple[object, ...]]]] = {}
    query = sa.select(schema.rounds, schema.metrics.c.name).join(schema.metrics).order_by(schema.rounds.c.id)
    with srv.storage.engine.connect() as conn:
        for row in conn.execute(query):
            by_metric.setdefault(row.name, []).append(row)
    assert len(by_metric) == TRIALS
    for name, rows in by_metric.items():
        level = base_level
        for row in rows:
            assert row.level_from == level, (name, [(r.level_from, r.level_to) for r in rows])
            assert row.level_to > row.level_from
            level = row.level_to
        assert sum(row.closed_at is None for row in rows) <= 1, name
        assert rows[-1].closed_at is None  # the latest round is the open one


@pytest.mark.slow
def test_racing_round_openings_only_climb_and_leave_one_open(server: LiveServer) -> None:
    token = server.admin_token()
    base = make_params(level=1.0)
    opened = 0
    with ThreadPoolExecutor(len(LEVELS)) as pool:
        for trial in range(TRIALS):
            name = f"race-{trial}"
            params = make_params(name, level=base.level)
            assert server.register(params, token).status_code == 201
            statuses = _race(server, pool, token, name)
            assert statuses.count(201) >= 1  # the first to commit always climbs
            opened += statuses.count(201)
    _check_invariants(server, base.level)
    assert opened >= TRIALS
