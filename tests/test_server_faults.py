"""Crash tests: ``onesided serve`` killed with SIGKILL mid-ingestion and mid-round-opening.

The whole process group (gunicorn master and worker) is killed without
warning while uploads or round openings are in flight, then started again on
the same database. The devices' rule is to resend every batch that was not
acknowledged; after that the aggregates must be exact (every report counted
once: a resent batch that had been committed is an identical retry) and the
rounds must keep their invariants (levels climb from round to round, at most
one round unclosed, every round with its signed announcement). SQLite
always; PostgreSQL when a server answers on 127.0.0.1:5432.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import sqlalchemy as sa
from aggsupport import (
    BACKENDS,
    REPO,
    _wait_ready,
    bearer,
    database_url,
    free_port,
    make_params,
    make_reports,
    post_reports,
)

from aggregator.server.storage import Storage, schema
from protocol.crypto import AggregatorKeys

BATCH = 40
BATCHES = 30


@contextlib.contextmanager
def killable_server(args: list[str]) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``onesided serve`` in its own process group; the caller may SIGKILL the group."""
    port = free_port()
    code = "import sys; from aggregator.cli.main import main; sys.exit(main())"
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--init", "--host", "127.0.0.1", "--port", str(port), "--threads", "4", *args],
        stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(process, log, url, 60)
        yield url, process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        log.close()


def sigkill(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    time.sleep(0.2)  # the orphaned worker, if any, is in the same group: gone too


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, list[str], AggregatorKeys, str]]:
    """(database URL, serve arguments, keys, admin token) on a fresh database."""
    keys = AggregatorKeys.generate()
    keys.save(tmp_path / "keys")
    data = tmp_path / "data"
    with database_url(request.param, data) as url:
        storage = Storage.open(url)
        admin = storage.create_token(role="admin", name="ops")[1]
        storage.close()
        yield url, ["--db", url, "--key-dir", str(tmp_path / "keys"), "--data-dir", str(data)], keys, admin


@pytest.mark.slow
def test_killed_during_ingestion_then_resent_counts_every_report_once(
    backend: tuple[str, list[str], AggregatorKeys, str],
) -> None:
    url_db, args, keys, admin = backend
    params = make_params()
    reports = make_reports(params, keys.seal_public_raw, BATCH * BATCHES, seed=11)
    batches = [reports.envelopes[i : i + BATCH] for i in range(0, len(reports.envelopes), BATCH)]
    acknowledged: set[int] = set()
    with killable_server(args) as (url, process):
        assert requests.post(f"{url}/v1/metrics", json=params.to_dict(), headers=bearer(admin),
                             timeout=10).status_code == 201

        def device() -> None:
            for i, batch in enumerate(batches):
                try:
                    answer = post_reports(url, batch)
                except requests.RequestException:
                    return  # the server is gone
                if answer.status_code == 200 and answer.json()["accepted"] == len(batch):
                    acknowledged.add(i)

        sender = threading.Thread(target=device)
        sender.start()
        while len(acknowledged) < BATCHES // 3:
            time.sleep(0.005)
        sigkill(process)
        sender.join(timeout=30)
    assert BATCHES // 3 <= len(acknowledged) < BATCHES  # killed mid-stream
    with killable_server(args) as (url, _):
        for i, batch in enumerate(batches):
            if i not in acknowledged:
                answer = post_reports(url, batch)
                assert answer.status_code == 200 and answer.json()["accepted"] == len(batch), answer.text
    storage = Storage.open(url_db, migrate=False)
    try:
        ones, totals = storage.bit_counts(params.name)
        want_ones, want_totals = reports.expected(params.num_cohorts)
        np.testing.assert_array_equal(ones, want_ones)
        np.testing.assert_array_equal(totals, want_totals)
        assert storage.table_counts()["reports"] == BATCH * BATCHES
    finally:
        storage.close()


@pytest.mark.slow
def test_killed_during_round_openings_keeps_the_round_invariants(
    backend: tuple[str, list[str], AggregatorKeys, str],
) -> None:
    url_db, args, _, admin = backend
    params = make_params(level=1.0)
    opened: list[float] = []
    with killable_server(args) as (url, process):
        assert requests.post(f"{url}/v1/metrics", json=params.to_dict(), headers=bearer(admin),
                             timeout=10).status_code == 201

        def admin_loop(start: float) -> None:
            level = start
            while level < 30:
                try:
                    answer = requests.post(f"{url}/v1/metrics/places/rounds", json={"level_to": level},
                                           headers=bearer(admin), timeout=10)
                except requests.RequestException:
                    return
                if answer.status_code == 201:
                    opened.append(level)
                level += 0.5

        admins = [threading.Thread(target=admin_loop, args=(1.25 + 0.25 * k,)) for k in range(2)]
        for thread in admins:
            thread.start()
        while len(opened) < 5:
            time.sleep(0.002)
        sigkill(process)
        for thread in admins:
            thread.join(timeout=30)
    with killable_server(args) as (url, _):
        answer = requests.post(f"{url}/v1/metrics/places/rounds", json={"level_to": 31.0},
                               headers=bearer(admin), timeout=10)
        assert answer.status_code == 201, answer.text
    engine = sa.create_engine(url_db)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(schema.rounds).order_by(schema.rounds.c.id)).all()
    engine.dispose()
    level = params.level
    for row in rows:
        assert row.level_from == level and row.level_to > row.level_from
        assert row.announcement  # signed in the same transaction as the insert
        level = row.level_to
    assert sum(row.closed_at is None for row in rows) == 1 and rows[-1].level_to == 31.0
