"""Racing round openings keep the round invariants on SQLite and PostgreSQL; reports racing a close all count.

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
from aggsupport import (
    BACKENDS,
    LiveServer,
    bearer,
    database_url,
    live_server,
    make_params,
    make_reports,
    post_reports,
)

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


def test_reports_racing_a_round_close_are_each_counted_once(server: LiveServer) -> None:
    """Uploads tagged with a round race its close and the opening of the next round (one barrier): every
    report is accepted whatever the order (closing refuses none of a round's reports), and a retry of all of
    them changes nothing (exactly once)."""
    token = server.admin_token()
    params = make_params("closing", level=1.0)
    assert server.register(params, token).status_code == 201
    first = requests.post(f"{server.url}/v1/metrics/closing/rounds", json={"level_to": 2.0}, headers=bearer(token),
                          timeout=30).json()
    batches = [make_reports(params, server.keys.seal_public_raw, 5, seed=40 + i, round=first["id"], level=2.0)
               .envelopes for i in range(12)]
    barrier = threading.Barrier(4)

    def upload(part: int) -> list[str]:
        barrier.wait(timeout=10)
        return [r["status"] for b in batches[part::3] for r in post_reports(server.url, b).json()["results"]]

    def close_and_reopen() -> list[int]:
        barrier.wait(timeout=10)
        closed = requests.post(f"{server.url}/v1/rounds/{first['id']}/close", headers=bearer(token), timeout=30)
        reopened = requests.post(f"{server.url}/v1/metrics/closing/rounds", json={"level_to": 3.0},
                                 headers=bearer(token), timeout=30)
        return [closed.status_code, reopened.status_code]

    with ThreadPoolExecutor(4) as pool:
        uploads = [pool.submit(upload, part) for part in range(3)]
        admin = pool.submit(close_and_reopen)
        assert admin.result() == [200, 201]
        statuses = [s for u in uploads for s in u.result()]
    assert statuses == ["accepted"] * 60
    assert server.storage.bit_counts("closing", round=first["id"])[1].sum() == 60
    retried = [r["status"] for b in batches for r in post_reports(server.url, b).json()["results"]]
    assert retried == ["accepted"] * 60  # identical retries: counted once
    assert server.storage.bit_counts("closing", round=first["id"])[1].sum() == 60
    assert server.storage.table_counts()["reports"] == 60
