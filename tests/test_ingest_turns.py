"""Ingestion's per-process turns and SQLite's insert-first replay check.

* Batches uploaded at once to one process that opens envelopes in place are
  parsed and ingested one at a time (``ingest.ingest_turn``); with decrypt
  helpers they still overlap.
* SQLite stores a batch of new reports without looking their ids up first,
  and a batch with stored ids (retries, replays) is answered exactly as
  before: on a table whose rowids are near SQLite's limit too (the ids are
  then looked up first).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from aggsupport import app_in, bearer, make_params, make_reports

from aggregator.server import ingest
from aggregator.server.opener import EnvelopeOpener
from aggregator.server.storage import MetricBinding, ReportRow, Storage
from protocol.crypto import AggregatorKeys
from protocol.errors import ParameterError
from protocol.wire import CONTENT_TYPE_BINARY, encode_batch_binary, unpack_payload

T0 = 1_700_000_000 // 3600 * 3600


class Overlap:
    """Wraps ``storage.store_reports``: how many calls ran at once, at most (each waits a little)."""

    def __init__(self, storage: Storage) -> None:
        self.now = self.most = 0
        self.lock = threading.Lock()
        real = storage.store_reports

        def store(*args: Any, **kwargs: Any) -> Any:
            with self.lock:
                self.now += 1
                self.most = max(self.most, self.now)
            try:
                time.sleep(0.2)
                return real(*args, **kwargs)
            finally:
                with self.lock:
                    self.now -= 1

        storage.store_reports = store  # type: ignore[method-assign]


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Any]:
    with app_in(tmp_path) as app:
        state = app.extensions["onesided"]
        admin = state.storage.create_token(role="admin", name="admin")[1]
        params = make_params()
        assert (
            app.test_client()
            .post("/v1/metrics", json=params.to_dict(), headers=bearer(admin))
            .status_code
            == 201
        )
        yield app


def _upload_at_once(app: Any, batches: int) -> list[int]:
    params = make_params()
    public = app.extensions["onesided"].keys.seal_public_raw
    bodies = [
        encode_batch_binary(make_reports(params, public, 5, seed=i).envelopes)
        for i in range(batches)
    ]
    codes: list[int] = []

    def post(body: bytes) -> None:
        answer = app.test_client().post(
            "/v1/reports", data=body, headers={"Content-Type": CONTENT_TYPE_BINARY}
        )
        codes.append(answer.status_code)

    threads = [threading.Thread(target=post, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return codes


def test_batches_in_one_process_are_ingested_one_at_a_time(app: Any) -> None:
    overlap = Overlap(app.extensions["onesided"].storage)
    assert _upload_at_once(app, 3) == [200, 200, 200]
    assert overlap.most == 1  # without turns, the three batches were stored at once
    assert app.extensions["onesided"].storage.table_counts()["reports"] == 15


def _overlap(opener: EnvelopeOpener, storage: Any) -> bool:
    """Whether two threads are inside ``ingest_turn(opener, storage)`` at once."""
    inside = threading.Barrier(2, timeout=3)
    met: list[bool] = []

    def enter() -> None:
        with ingest.ingest_turn(opener, storage):
            try:
                inside.wait()
                met.append(True)
            except threading.BrokenBarrierError:
                met.append(False)

    threads = [threading.Thread(target=enter) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    return met == [True, True]


def test_turns_only_where_envelopes_open_in_place_on_sqlite(tmp_path: Path) -> None:
    keys = AggregatorKeys.generate()
    sqlite = Storage.open(f"sqlite:///{tmp_path}/db.sqlite")
    postgresql = SimpleNamespace(dialect="postgresql")  # all ingest_turn reads of a storage
    in_place, helpers = EnvelopeOpener(keys, processes=0), EnvelopeOpener(keys, processes=1)
    try:
        assert not _overlap(in_place, sqlite)  # without turns, both threads were inside at once
        assert _overlap(helpers, sqlite)  # a batch waits on the helpers without the GIL
        assert _overlap(in_place, postgresql)  # a batch's storing waits on the server
    finally:
        helpers.close()
        sqlite.close()


def _rows(storage: Storage, seed: int, n: int, *, tamper: bool = False) -> list[ReportRow]:
    params = make_params()
    reports = make_reports(params, None, n, seed=seed, window=T0)
    metric_id = storage.require_metric(params.name).id
    rows = []
    for env in reports.envelopes:
        payload = unpack_payload(env.body, num_bits=params.num_bits, num_cohorts=params.num_cohorts)
        rows.append(
            ReportRow(
                metric_id=metric_id,
                report_id=env.report_id,
                round=0,
                window=env.window,
                cohort=payload.cohort,
                bits=np.packbits(payload.bits, bitorder="little").tobytes(),
                body_hash=hashlib.sha256(env.body + (b"x" if tamper else b"")).digest()[:16],
            )
        )
    return rows


@pytest.fixture
def sqlite_storage(tmp_path: Path) -> Iterator[Storage]:
    storage = Storage.open(f"sqlite:///{tmp_path}/db.sqlite")
    storage.put_metric(make_params())
    yield storage
    storage.close()


def _binding(storage: Storage) -> dict[int, MetricBinding]:
    m = storage.require_metric(make_params().name)
    return {m.id: MetricBinding(metric_id=m.id, digest=m.digest, num_bits=m.params.num_bits)}


def _lookups(storage: Storage) -> list[str]:
    """The statements that look report ids up, as SQLite runs them from now on."""
    seen: list[str] = []

    @sa.event.listens_for(storage.engine, "connect")
    def _trace(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.set_trace_callback(seen.append)

    storage.engine.dispose()  # new connections, traced
    return seen


def test_sqlite_stores_new_reports_without_looking_their_ids_up(sqlite_storage: Storage) -> None:
    seen = _lookups(sqlite_storage)
    assert (
        sqlite_storage.store_reports(_rows(sqlite_storage, 1, 20), _binding(sqlite_storage), now=T0)
        == ["accepted"] * 20
    )
    assert seen and not [
        sql for sql in seen if "report_id IN" in sql
    ]  # the old code looked all 20 up


@pytest.mark.parametrize("near_limit", [False, True])
def test_sqlite_answers_retries_and_replays_as_before(
    sqlite_storage: Storage, near_limit: bool
) -> None:
    if near_limit:  # SQLite picks rowids at random past the largest: the ids are looked up first
        with sqlite_storage.engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO reports (rowid, metric_id, report_id, round_id, window_start, cohort, bits,"
                " body_hash, received_at) VALUES (?, 999, ?, 0, 0, 0, x'00', ?, 0)",
                (2**63 - 1, bytes(16), bytes(16)),
            )
    binding = _binding(sqlite_storage)
    rows = _rows(sqlite_storage, 2, 30)
    tampered = _rows(sqlite_storage, 2, 30, tamper=True)
    assert sqlite_storage.store_reports(rows[:10], binding, now=T0) == ["accepted"] * 10
    mixed = rows[5:10] + tampered[:3] + rows[10:30]  # 5 retries, 3 replays, 20 new
    assert (
        sqlite_storage.store_reports(mixed, binding, now=T0)
        == ["accepted"] * 5 + ["replayed"] * 3 + ["accepted"] * 20
    )
    ones, totals = sqlite_storage.bit_counts(make_params().name)
    assert int(totals.sum()) == 30  # every report counted once
    stored = sqlite_storage.table_counts()["reports"]
    assert stored == 30 + near_limit


def test_sqlite_refuses_a_batch_with_one_id_twice(sqlite_storage: Storage) -> None:
    binding = _binding(sqlite_storage)
    rows = _rows(sqlite_storage, 3, 4)
    sqlite_storage.store_reports(rows[:1], binding, now=T0)
    with pytest.raises(ParameterError):
        sqlite_storage.store_reports([rows[0], rows[1], rows[1]], binding, now=T0)
    assert sqlite_storage.table_counts()["reports"] == 1  # rolled back
    ones, totals = sqlite_storage.bit_counts(make_params().name)
    assert int(totals.sum()) == 1
