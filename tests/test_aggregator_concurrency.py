"""Several uploader processes against ``onesided serve`` at once lose nothing and count nothing twice.

Each batch is sent by two processes (in opposite orders) and, by each, twice:
first with a 5 ms timeout (the answer is lost while the server may still be
storing), then again with retries. Runs on SQLite (one worker process, four
threads) and on PostgreSQL (two gunicorn workers, so two processes race on
the replay set's unique key and the aggregate rows). The aggregates must
equal the exact sums of the distinct reports' bits.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import requests
from aggsupport import (
    ReportSet,
    bearer,
    database_url,
    make_params,
    make_reports,
    serve_subprocess,
    upload_worker,
)

from aggregator.server.storage import Storage
from protocol.crypto import AggregatorKeys

PARAMS = make_params(num_bits=64, num_cohorts=8)
UPLOADERS = 4
BATCHES = 16
BATCH_SIZE = 100


def run_uploaders(url: str, reports: ReportSet) -> list[str]:
    envelopes = reports.envelopes
    batches = [envelopes[i : i + BATCH_SIZE] for i in range(0, len(envelopes), BATCH_SIZE)]
    jobs: list[tuple[str, list[list], int, str]] = [(url, [], seed, "json" if seed % 2 else "binary") for seed in range(UPLOADERS)]
    for b, batch in enumerate(batches):
        owner = b % UPLOADERS
        jobs[owner][1].append(batch)
        jobs[(owner + 1) % UPLOADERS][1].insert(0, batch)  # a second sender, in the other order
    with multiprocessing.get_context("spawn").Pool(UPLOADERS) as pool:
        outcomes = pool.starmap(upload_worker, jobs)
    return [status for statuses in outcomes for status in statuses]


def check_exact(db_url: str, reports: ReportSet) -> None:
    storage = Storage.open(db_url, migrate=False)
    try:
        ones, totals = storage.bit_counts(PARAMS.name)
        counts = storage.table_counts()
    finally:
        storage.close()
    want_ones, want_totals = reports.expected(PARAMS.num_cohorts)
    np.testing.assert_array_equal(totals, want_totals)
    np.testing.assert_array_equal(ones, want_ones)
    assert counts["reports"] == len(reports.envelopes)


def register(url: str, db_url: str) -> None:
    storage = Storage.open(db_url)
    try:
        token = storage.create_token(role="admin", name="ops")[1]
    finally:
        storage.close()
    answer = requests.post(f"{url}/v1/metrics", json=PARAMS.to_dict(), headers=bearer(token), timeout=30)
    assert answer.status_code == 201, answer.text


def exercise(url: str, db_url: str, keys: AggregatorKeys) -> None:
    register(url, db_url)
    reports = make_reports(PARAMS, keys.seal_public_raw, BATCHES * BATCH_SIZE, seed=99)
    statuses = run_uploaders(url, reports)
    assert len(statuses) == 2 * len(reports.envelopes)  # two senders; the patient attempts answer
    assert set(statuses) == {"accepted"}  # a repeat of an identical report is accepted again
    check_exact(db_url, reports)


def test_sqlite_single_process_with_concurrent_uploaders(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'onesided.db'}"
    with serve_subprocess("--data-dir", str(tmp_path), "--threads", "4") as url:
        exercise(url, db_url, AggregatorKeys.load(tmp_path / "keys"))


def test_postgresql_two_workers_with_concurrent_uploaders(tmp_path: Path) -> None:
    keys = AggregatorKeys.generate()
    keys.save(tmp_path / "keys")
    with database_url("postgresql", tmp_path) as db_url:
        with serve_subprocess("--db", db_url, "--key-dir", str(tmp_path / "keys"), "--workers", "2") as url:
            exercise(url, db_url, keys)
