"""Storage on SQLite and PostgreSQL: migrations, metrics, the replay set, exact aggregates,
rounds, tokens, releases, purge, and racing writers."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from aggsupport import BACKENDS, ReportSet, database_url, make_params, make_reports
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.server.errors import Conflict, NotFound
from aggregator.server.storage import MetricBinding, ReportRow, Storage, hash_token
from aggregator.server.storage.aggregation import sum_bits
from aggregator.server.storage.migrations import LATEST_VERSION
from protocol.crypto import AggregatorKeys, verify_document
from protocol.errors import ParameterError, ReportRejected
from protocol.wire import unpack_payload, validate_round_announcement

T0 = 1_700_000_000 // 3600 * 3600


@pytest.fixture(params=BACKENDS)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    with database_url(request.param, tmp_path) as url:
        store = Storage.open(url)
        yield store
        store.close()


def rows_of(reports: ReportSet, metric_id: int, num_bits: int, *, tamper: bool = False) -> list[ReportRow]:
    """ReportRows from plain reports (``tamper``: a different body, same ids)."""
    rows = []
    for env in reports.envelopes:
        payload = unpack_payload(env.body, num_bits=num_bits, num_cohorts=2**16)
        body = env.body + (b"x" if tamper else b"")
        rows.append(
            ReportRow(
                metric_id=metric_id, report_id=env.report_id, round=env.round, window=env.window,
                cohort=payload.cohort, bits=np.packbits(payload.bits, bitorder="little").tobytes(),
                body_hash=hashlib.sha256(body).digest()[:16],
            )
        )
    return rows


def binding(storage: Storage, name: str = "places") -> dict[int, MetricBinding]:
    m = storage.require_metric(name)
    return {m.id: MetricBinding(metric_id=m.id, digest=m.digest, num_bits=m.params.num_bits)}


def test_migrations_are_recorded_and_idempotent(storage: Storage) -> None:
    assert storage.migrate() == LATEST_VERSION
    assert storage.migrate() == LATEST_VERSION
    counts = storage.table_counts()
    assert counts["schema_version"] == LATEST_VERSION
    expected = {"metrics", "rounds", "reports", "aggregates", "cohort_totals", "tokens", "releases"}
    assert expected <= set(counts)


def test_metric_parameters_are_immutable_once_reports_exist(storage: Storage) -> None:
    params = make_params()
    assert storage.put_metric(params)[1] == "created"
    assert storage.put_metric(params)[1] == "unchanged"
    changed = make_params(level=3.0)
    assert storage.put_metric(changed)[1] == "updated"  # no data yet: allowed
    assert storage.require_metric("places").digest == changed.digest()
    reports = make_reports(changed, None, 3, seed=1, window=T0)
    storage.store_reports(rows_of(reports, storage.require_metric("places").id, 20), binding(storage), now=T0)
    with pytest.raises(Conflict) as err:
        storage.put_metric(params)
    assert err.value.field == "params" and err.value.status == 409
    assert storage.put_metric(changed)[1] == "unchanged"
    with pytest.raises(NotFound):
        storage.require_metric("nothing")


def test_aggregates_are_exact_and_replays_are_not_counted(storage: Storage) -> None:
    params = make_params()
    record, _ = storage.put_metric(params)
    reports = make_reports(params, None, 60, seed=2, window=T0)
    rows = rows_of(reports, record.id, params.num_bits)
    assert storage.store_reports(rows[:40], binding(storage), now=T0) == ["accepted"] * 40
    assert storage.store_reports(rows[30:], binding(storage), now=T0) == ["accepted"] * 30  # 10 are retries
    tampered = rows_of(reports, record.id, params.num_bits, tamper=True)
    assert storage.store_reports(tampered[:5], binding(storage), now=T0) == ["replayed"] * 5
    ones, totals = storage.bit_counts("places")
    want_ones, want_totals = reports.expected(params.num_cohorts)
    np.testing.assert_array_equal(ones, want_ones)
    np.testing.assert_array_equal(totals, want_totals)
    assert ones.dtype == np.int64 and ones.shape == (params.num_cohorts, params.num_bits)
    assert storage.table_counts()["reports"] == 60


def test_bit_counts_filter_by_window_and_round(storage: Storage) -> None:
    params = make_params()
    record, _ = storage.put_metric(params)
    first = make_reports(params, None, 20, seed=3, window=T0)
    second = make_reports(params, None, 15, seed=4, window=T0 + 3600)
    keys = AggregatorKeys.generate()
    round_ = storage.open_round(
        metric="places", level_from=2.0, level_to=3.0, cohorts=None, expires_at=T0 + 86400, sign=keys.sign, now=T0
    )
    third = make_reports(params, None, 10, seed=5, window=T0, round=round_.id, level=3.0)
    for batch in (first, second, third):
        storage.store_reports(rows_of(batch, record.id, params.num_bits), binding(storage), now=T0)
    for window, round_id, batch in ((T0, 0, first), (T0 + 3600, 0, second), (T0, round_.id, third)):
        ones, totals = storage.bit_counts("places", window=window, round=round_id)
        np.testing.assert_array_equal(ones, batch.expected(params.num_cohorts)[0])
        np.testing.assert_array_equal(totals, batch.expected(params.num_cohorts)[1])
    _, base_totals = storage.bit_counts("places", round=0)
    assert base_totals.sum() == 35
    assert storage.bit_counts("places")[1].sum() == 45
    assert [c.to_dict() for c in storage.collections("places")] == [
        {"window": T0, "round": 0, "reports": 20},
        {"window": T0, "round": round_.id, "reports": 10},
        {"window": T0 + 3600, "round": 0, "reports": 15},
    ]


def test_changes_during_a_batch_are_caught_in_its_transaction(storage: Storage) -> None:
    params = make_params()
    record, _ = storage.put_metric(params)
    keys = AggregatorKeys.generate()
    round_ = storage.open_round(
        metric="places", level_from=2.0, level_to=3.0, cohorts=None, expires_at=T0 + 86400, sign=keys.sign, now=T0
    )
    stale = {record.id: MetricBinding(metric_id=record.id, digest="0" * 64, num_bits=params.num_bits)}
    rows = rows_of(make_reports(params, None, 4, seed=6, window=T0), record.id, params.num_bits)
    assert storage.store_reports(rows, stale, now=T0) == ["outdated_config"] * 4
    no_round = make_reports(params, None, 3, seed=7, window=T0, round=round_.id + 1, level=3.0)
    assert storage.store_reports(rows_of(no_round, record.id, 20), binding(storage), now=T0) == ["expired"] * 3
    counts = storage.table_counts()
    assert counts["reports"] == counts["aggregates"] == counts["cohort_totals"] == 0
    storage.close_round(round_.id, now=T0 + 1)  # closing refuses nothing: its late reports are counted
    late = make_reports(params, None, 3, seed=8, window=T0, round=round_.id, level=3.0)
    assert storage.store_reports(rows_of(late, record.id, 20), binding(storage), now=T0 + 2) == ["accepted"] * 3
    assert storage.table_counts()["reports"] == 3


def test_tokens_are_stored_hashed_and_checked(storage: Storage) -> None:
    record, secret = storage.create_token(role="analyst", name="alice")
    assert secret.startswith("ons_") and len(secret) == 47
    with storage.engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT token_hash FROM tokens")).scalar_one()
    assert stored == hash_token(secret) and secret not in stored
    assert storage.authenticate(secret) == record
    assert storage.authenticate(secret[:-1] + ("A" if secret[-1] != "A" else "B")) is None
    assert storage.authenticate("not a token") is None
    with pytest.raises(Conflict):
        storage.create_token(role="admin", name="alice")
    with pytest.raises(ParameterError) as err:
        storage.create_token(role="root", name="bob")
    assert err.value.field == "role"
    assert storage.revoke_token("alice").revoked_at is not None
    assert storage.authenticate(secret) is None
    with pytest.raises(NotFound):
        storage.revoke_token("nobody")


def test_rounds_are_signed_listed_and_closed(storage: Storage) -> None:
    params = make_params()
    storage.put_metric(params)
    keys = AggregatorKeys.generate()
    opened = storage.open_round(
        metric="places", level_from=2.0, level_to=4.0, cohorts=[0, 2], expires_at=T0 + 100, sign=keys.sign, now=T0
    )
    announcement = validate_round_announcement(verify_document(keys.sign_public_raw, opened.announcement))
    assert announcement.round_id == opened.id and announcement.cohorts == (0, 2)
    assert announcement.params_digest == params.digest()
    assert storage.get_round(opened.id) == opened
    assert storage.get_round(opened.id + 100) is None
    assert [r.id for r in storage.list_rounds("places", open_only=True, now=T0 + 50)] == [opened.id]
    assert storage.list_rounds("places", open_only=True, now=T0 + 100) == []  # expired
    closed = storage.close_round(opened.id, now=T0 + 10)
    assert closed.closed_at == T0 + 10 and not closed.is_open(T0 + 11)
    with pytest.raises(Conflict):
        storage.close_round(opened.id)
    with pytest.raises(NotFound):
        storage.close_round(9999)
    with pytest.raises(ReportRejected) as err:
        storage.open_round(
            metric="places", level_from=2.0, level_to=1.0, cohorts=None, expires_at=T0 + 100, sign=keys.sign, now=T0
        )
    assert err.value.field == "level_to"
    assert len(storage.list_rounds()) == 1  # the invalid round left nothing behind


def test_releases_round_trip(storage: Storage) -> None:
    storage.put_metric(make_params())
    release = storage.create_release(analyst="alice", metric="places", body={"level": 1.5, "counts": [1, 2]})
    assert storage.get_release(release.id) == release
    updated = storage.update_release(release.id, {"level": 2.5})
    assert updated.body == {"level": 2.5} and updated.metric == "places"
    assert [r.id for r in storage.list_releases(analyst="alice", metric="places")] == [release.id]
    assert storage.list_releases(analyst="bob") == []
    with pytest.raises(NotFound):
        storage.update_release(release.id + 1, {})
    with pytest.raises(ParameterError):
        storage.create_release(analyst="alice", metric="places", body={"x": float("nan")})


def test_purge_deletes_only_expired_raw_reports(storage: Storage) -> None:
    params = make_params()
    record, _ = storage.put_metric(params)
    old = make_reports(params, None, 5, seed=8, window=T0)
    new = make_reports(params, None, 7, seed=9, window=T0 + 10 * 3600)
    for batch in (old, new):
        storage.store_reports(rows_of(batch, record.id, params.num_bits), binding(storage), now=T0)
    retention = 3600
    # old window ends at T0 + 3600: expired once now - retention >= T0 + 3600
    assert storage.purge_expired(retention, now=T0 + 2 * 3600 - 1) == 0
    assert storage.purge_expired(retention, now=T0 + 2 * 3600) == 5
    assert storage.table_counts()["reports"] == 7
    assert storage.bit_counts("places")[1].sum() == 12  # aggregates are kept


def test_racing_writers_store_a_batch_once(storage: Storage) -> None:
    params = make_params()
    record, _ = storage.put_metric(params)
    reports = make_reports(params, None, 50, seed=10, window=T0)
    rows = rows_of(reports, record.id, params.num_bits)
    bound = binding(storage)
    barrier = threading.Barrier(4)
    outcomes: list[list[str]] = []

    def writer() -> None:
        barrier.wait()
        outcomes.append(storage.store_reports(rows, bound, now=T0))

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes == [["accepted"] * 50] * 4
    ones, totals = storage.bit_counts("places")
    np.testing.assert_array_equal(ones, reports.expected(params.num_cohorts)[0])
    assert totals.sum() == 50


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_sum_bits_matches_a_plain_loop(data: st.DataObject) -> None:
    n = data.draw(st.integers(0, 30))
    num_bits = data.draw(st.integers(1, 20))
    width = (num_bits + 7) // 8
    keys = [data.draw(st.tuples(st.sampled_from([0, 60]), st.integers(0, 2), st.integers(0, 3))) for _ in range(n)]
    bits = np.array(
        [data.draw(st.lists(st.booleans(), min_size=num_bits, max_size=num_bits)) for _ in range(n)], dtype=bool
    ).reshape(n, num_bits)
    packed = np.packbits(bits, axis=1, bitorder="little").reshape(n, width)
    sums = sum_bits(
        windows=[k[0] for k in keys], rounds=[k[1] for k in keys], cohorts=[k[2] for k in keys],
        packed=packed, num_bits=num_bits,
    )
    expected: dict[tuple[int, int, int], np.ndarray] = {}
    for key, row in zip(keys, bits, strict=True):
        expected[key] = expected.get(key, np.zeros(num_bits, dtype=np.int64)) + row
    assert [tuple(k) for k in sums.keys.tolist()] == sorted(expected)
    for g, key in enumerate(sorted(expected)):
        np.testing.assert_array_equal(sums.ones[g], expected[key])
        assert sums.reports[g] == sum(k == key for k in keys)


def test_sqlite_checkpoints_the_wal_every_10000_pages(tmp_path: Path) -> None:
    store = Storage.open(f"sqlite:///{tmp_path / 'wal.db'}")
    try:
        with store.engine.connect() as conn:
            pragma = {name: conn.exec_driver_sql(f"PRAGMA {name}").scalar_one()
                      for name in ("journal_mode", "wal_autocheckpoint", "journal_size_limit")}
    finally:
        store.close()
    assert pragma == {"journal_mode": "wal", "wal_autocheckpoint": 10_000, "journal_size_limit": 64 * 1024 * 1024}
