"""The packed aggregates (schema version 3): exact against a recount of the stored reports after
mixed batches, under racing writers, after a SIGKILL inside a batch's transaction, and after
converting a version-2 database (one row per bit). SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from aggsupport import BACKENDS, REPO, database_url, make_params, make_reports

from aggregator.server.storage import MetricBinding, ReportRow, Storage, migrations, schema
from protocol.crypto import AggregatorKeys
from protocol.params import MetricParams
from protocol.rng import SeededRandom
from protocol.wire import unpack_payload

T0 = 1_700_000_000 // 3600 * 3600


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with database_url(request.param, tmp_path) as db_url:
        yield db_url


@pytest.fixture
def storage(url: str) -> Iterator[Storage]:
    store = Storage.open(url)
    yield store
    store.close()


def register(storage: Storage, params: MetricParams) -> tuple[int, dict[int, MetricBinding]]:
    """The metric's id and the binding ``store_reports`` takes."""
    record, _ = storage.put_metric(params)
    return record.id, {record.id: MetricBinding(metric_id=record.id, digest=record.digest, num_bits=params.num_bits)}


def report_rows(params: MetricParams, metric_id: int, n: int, *, seed: int, window: int = T0, round: int = 0,
                level: float | None = None) -> list[ReportRow]:
    reports = make_reports(params, None, n, seed=seed, window=window, round=round, level=level)
    rows = []
    for env in reports.envelopes:
        payload = unpack_payload(env.body, num_bits=params.num_bits, num_cohorts=params.num_cohorts)
        rows.append(ReportRow(
            metric_id=metric_id, report_id=env.report_id, round=round, window=window, cohort=payload.cohort,
            bits=np.packbits(payload.bits, bitorder="little").tobytes(),
            body_hash=hashlib.sha256(env.body).digest()[:16],
        ))
    return rows


def tampered(row: ReportRow) -> ReportRow:
    """Same id, another body: a replay."""
    return ReportRow(metric_id=row.metric_id, report_id=row.report_id, round=row.round, window=row.window,
                     cohort=row.cohort, bits=bytes(len(row.bits)), body_hash=hashlib.sha256(row.body_hash).digest()[:16])


def recount(storage: Storage, params: MetricParams, window: int | None = None,
            round: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``bit_counts`` computed the slow way: every stored raw report, one at a time."""
    ones = np.zeros((params.num_cohorts, params.num_bits), dtype=np.int64)
    totals = np.zeros(params.num_cohorts, dtype=np.int64)
    t = schema.reports
    with storage.engine.connect() as conn:
        for row in conn.execute(sa.select(t.c.window_start, t.c.round_id, t.c.cohort, t.c.bits)):
            if (window is None or row.window_start == window) and (round is None or row.round_id == round):
                bits = np.unpackbits(np.frombuffer(row.bits, dtype=np.uint8), bitorder="little")[: params.num_bits]
                ones[row.cohort] += bits
                totals[row.cohort] += 1
    return ones, totals


def assert_exact(storage: Storage, params: MetricParams, windows: list[int], rounds: list[int]) -> None:
    for window in [None, *windows]:
        for round_id in [None, *rounds]:
            got = storage.bit_counts(params.name, window=window, round=round_id)
            want = recount(storage, params, window, round_id)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])


def test_mixed_batches_match_a_recount_of_the_stored_reports(storage: Storage) -> None:
    """Random batches over two windows and two rounds, with retries, replays, a stale digest and
    late reports of a round closed meanwhile: the aggregates equal a report-by-report recount."""
    params = make_params(num_bits=20, num_cohorts=5)
    metric_id, good = register(storage, params)
    keys = AggregatorKeys.generate()
    open_round = storage.open_round(metric="places", level_from=2.0, level_to=3.0, cohorts=None,
                                    expires_at=T0 + 86400, sign=keys.sign, now=T0)
    pool = (report_rows(params, metric_id, 120, seed=1)
            + report_rows(params, metric_id, 80, seed=2, window=T0 + 3600)
            + report_rows(params, metric_id, 60, seed=3, round=open_round.id, level=3.0))
    stale = {metric_id: MetricBinding(metric_id=metric_id, digest="0" * 64, num_bits=params.num_bits)}
    rng = np.random.default_rng(7)
    stored: set[bytes] = set()
    for step in range(40):
        picks = rng.choice(len(pool), size=int(rng.integers(1, 30)), replace=False)
        batch = [pool[i] for i in picks]
        replays: set[bytes] = set()
        if step % 7 == 3:  # a replay: a stored id, not otherwise in this batch, with another body
            ids = {r.report_id for r in batch}
            victim = next(r for r in pool if r.report_id in stored and r.report_id not in ids)
            batch.append(tampered(victim))
            replays.add(victim.report_id)
        outdated = step % 11 == 5
        statuses = storage.store_reports(batch, stale if outdated else good, now=T0)
        for row, status in zip(batch, statuses, strict=True):
            if outdated:
                assert status == "outdated_config"
            elif row.report_id in replays:
                assert status == "replayed"
            else:  # new, or an identical retry of a stored report
                assert status == "accepted"
                stored.add(row.report_id)
        assert storage.table_counts()["reports"] == len(stored)
    storage.close_round(open_round.id, now=T0 + 1)
    late = [r for r in pool if r.round == open_round.id][:5]
    assert storage.store_reports(late, good, now=T0 + 2) == ["accepted"] * 5  # closing a round refuses nothing
    stored.update(r.report_id for r in late)
    no_round = report_rows(params, metric_id, 3, seed=4, round=open_round.id + 1, level=3.0)
    assert storage.store_reports(no_round, good, now=T0 + 2) == ["expired"] * 3  # a round that does not exist
    assert storage.table_counts()["reports"] == len(stored)
    assert_exact(storage, params, [T0, T0 + 3600], [0, open_round.id])
    assert storage.bit_counts("places")[1].sum() == len(stored)


def test_racing_writers_on_overlapping_batches_match_a_recount(storage: Storage) -> None:
    """Four threads (four connections; on PostgreSQL four concurrent transactions) store
    overlapping batches that create and update the same collections."""
    params = make_params(num_bits=20, num_cohorts=3)
    metric_id, bound = register(storage, params)
    pool = report_rows(params, metric_id, 200, seed=4) + report_rows(params, metric_id, 100, seed=5, window=T0 + 3600)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        rng = np.random.default_rng(seed)
        barrier.wait()
        try:
            for _ in range(15):
                batch = [pool[i] for i in rng.choice(len(pool), size=25, replace=False)]
                assert storage.store_reports(batch, bound, now=T0) == ["accepted"] * 25
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert_exact(storage, params, [T0, T0 + 3600], [0])


KILLER = """
import os, signal, sys, pickle
import aggregator.server.storage.reports as reports
from aggregator.server.storage import Storage
url, rows, bound = pickle.loads(sys.stdin.buffer.read())
real = reports.add_batch
def add_then_die(*args, **kwargs):
    real(*args, **kwargs)  # the counts are written, the transaction not committed
    os.kill(os.getpid(), signal.SIGKILL)
reports.add_batch = add_then_die
Storage.open(url, migrate=False).store_reports(rows, bound, now={now})
"""


def test_sigkill_after_the_aggregate_update_leaves_nothing_and_the_resend_counts_once(
    url: str, storage: Storage
) -> None:
    params = make_params()
    metric_id, bound = register(storage, params)
    first = report_rows(params, metric_id, 30, seed=6)
    storage.store_reports(first, bound, now=T0)
    before = storage.bit_counts("places")
    batch = first[:10] + report_rows(params, metric_id, 40, seed=7)  # 10 retries, 40 new
    process = subprocess.run([sys.executable, "-c", KILLER.format(now=T0)], input=pickle.dumps((url, batch, bound)),
                             cwd=REPO, capture_output=True, timeout=120, check=False)
    assert process.returncode == -signal.SIGKILL, process.stderr.decode()
    after = storage.bit_counts("places")
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_array_equal(after[1], before[1])
    assert storage.table_counts()["reports"] == 30
    assert storage.store_reports(batch, bound, now=T0) == ["accepted"] * 50
    assert storage.table_counts()["reports"] == 70
    assert_exact(storage, params, [T0], [0])


def legacy_rows(rng: SeededRandom, metric_id: int, num_bits: int, window: int, cohorts: int) -> list[dict[str, int]]:
    """Version-2 rows (one per bit with ones) of one window, with random sparse counts."""
    counts = rng.integers(5, (cohorts, num_bits)) * rng.bernoulli(0.5, (cohorts, num_bits))
    return [
        {"metric_id": metric_id, "window_start": window, "round_id": 0, "cohort": c, "bit": b, "ones": int(counts[c, b])}
        for c in range(cohorts) for b in range(num_bits) if counts[c, b]
    ]


def version_2_database(url: str) -> tuple[Storage, dict[str, np.ndarray]]:
    """A database as version 2 left it: two metrics of 20 and 9 bits, aggregates one row per bit."""
    storage = Storage.open(url, migrate=False)
    assert migrations.migrate(storage.engine, target=2) == 2
    expected: dict[str, np.ndarray] = {}
    rng = SeededRandom(8)
    for name, bits in (("places", 20), ("tiny", 9)):
        record, _ = storage.put_metric(make_params(name, num_bits=bits, num_cohorts=3))
        rows = legacy_rows(rng, record.id, bits, T0, 3) + legacy_rows(rng, record.id, bits, T0 + 3600, 3)
        with storage.engine.begin() as conn:
            conn.execute(sa.insert(schema.aggregates_v1), rows)
        ones = np.zeros((3, bits), dtype=np.int64)
        for row in rows:
            ones[row["cohort"], row["bit"]] += row["ones"]
        expected[name] = ones
    return storage, expected


def test_migration_3_converts_per_bit_rows_to_packed_counts(url: str) -> None:
    storage, expected = version_2_database(url)
    try:
        assert storage.migrate() == migrations.LATEST_VERSION >= 3
        for name, ones in expected.items():
            np.testing.assert_array_equal(storage.bit_counts(name)[0], ones)
        inspector = sa.inspect(storage.engine)
        assert "aggregates_v1" not in inspector.get_table_names()
        assert [c["name"] for c in inspector.get_columns("aggregates")] == [
            "metric_id", "window_start", "round_id", "cohort", "ones"]
        assert storage.table_counts()["aggregates"] == 2 * 2 * 3  # metrics x windows x cohorts
    finally:
        storage.close()


def test_migration_3_refuses_a_bit_outside_the_metric_and_changes_nothing(url: str) -> None:
    storage, expected = version_2_database(url)
    try:
        with storage.engine.begin() as conn:
            metric_id = conn.execute(sa.text("SELECT id FROM metrics WHERE name = 'tiny'")).scalar_one()
            conn.execute(sa.insert(schema.aggregates_v1), [
                {"metric_id": metric_id, "window_start": T0, "round_id": 5, "cohort": 0, "bit": 9, "ones": 1}])
        with pytest.raises(RuntimeError, match="bit 9, outside its 9 bits"):
            storage.migrate()
        assert storage.schema_version() == 2
        with storage.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.sum(schema.aggregates_v1.c.ones))).scalar_one() == sum(
                int(v.sum()) for v in expected.values()) + 1
    finally:
        storage.close()


MIGRATION_KILLER = """
import os, signal, sys
import aggregator.server.storage.migrations as m
from aggregator.server.storage import Storage
real, calls = m.pack_counts, []
def pack_then_die(counts):
    calls.append(1)
    if len(calls) == 5:  # four collections already inserted into the new table
        os.kill(os.getpid(), signal.SIGKILL)
    return real(counts)
m.pack_counts, m.CONVERT_CHUNK = pack_then_die, 1
Storage.open(sys.argv[1])
"""


def test_sigkill_during_migration_3_leaves_version_2_intact(url: str) -> None:
    storage, expected = version_2_database(url)
    try:
        process = subprocess.run([sys.executable, "-c", MIGRATION_KILLER, url], cwd=REPO, capture_output=True,
                                 timeout=120, check=False)
        assert process.returncode == -signal.SIGKILL, process.stderr.decode()
        assert storage.schema_version() == 2
        assert storage.migrate() == migrations.LATEST_VERSION
        for name, ones in expected.items():
            np.testing.assert_array_equal(storage.bit_counts(name)[0], ones)
    finally:
        storage.close()


def test_a_damaged_aggregates_row_is_an_error_not_a_guess(storage: Storage) -> None:
    params = make_params()
    metric_id, bound = register(storage, params)
    storage.store_reports(report_rows(params, metric_id, 5, seed=9), bound, now=T0)
    with storage.engine.begin() as conn:
        conn.execute(sa.update(schema.aggregates).values(ones=b"\x01" * 8))
    with pytest.raises(ValueError, match="holds 8 bytes, not 160"):
        storage.bit_counts("places")
    with pytest.raises(ValueError, match="holds 8 bytes, not 160"):
        storage.store_reports(report_rows(params, metric_id, 5, seed=10), bound, now=T0)
    assert storage.table_counts()["reports"] == 5  # the failed batch left nothing
