"""Closing a round refuses none of its reports (``aggregator/server/ingest.py``, step 4).

A report tagged with a round comes from a client that joined while the round was open and was charged for it:
those of the window the round closed in (and earlier ones) are delivered late, those of later windows carry
on at the round's level. Both are counted, under round 0's lateness bounds, and the estimates of a finished
round say how many reports they decoded, so a late report changes them visibly. SQLite and PostgreSQL.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from aggsupport import BACKENDS, database_url, make_params, make_reports

from aggregator.server.ingest import Ingestor
from aggregator.server.opener import EnvelopeOpener
from aggregator.server.services.estimates import DecodingService
from aggregator.server.settings import Settings
from aggregator.server.storage import RoundRecord, Storage
from protocol.crypto import AggregatorKeys
from protocol.params import MetricParams

HOUR = 3600
T0 = 1_700_000_000 // HOUR * HOUR
KEYS = AggregatorKeys.generate()
SETTINGS = Settings(data_dir="/nonexistent", allow_plaintext=True, retention_seconds=10 * 86400)


@pytest.fixture(params=BACKENDS)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    with database_url(request.param, tmp_path) as url, contextlib.closing(Storage.open(url)) as store:
        yield store


def send(storage: Storage, params: MetricParams, n: int, *, seed: int, window: int, round: int, now: int,
         level: float | None = None) -> list[tuple[str, str | None]]:
    """Ingest ``n`` plain reports at ``now``; a round's are made at its level 3.0 unless ``level`` says otherwise."""
    if level is None and round:
        level = 3.0
    ingestor = Ingestor(storage=storage, opener=EnvelopeOpener(KEYS), settings=SETTINGS)
    reports = make_reports(params, None, n, seed=seed, window=window, round=round, level=level)
    return [(r.status, r.field) for r in ingestor.ingest(reports.envelopes, now=now)]


def open_round(storage: Storage, *, now: int, expires_at: int, level_to: float = 3.0) -> RoundRecord:
    return storage.open_round(metric="places", level_from=2.0, level_to=level_to, cohorts=None,
                              expires_at=expires_at, sign=KEYS.sign, now=now)


def test_a_closed_rounds_reports_are_accepted_in_its_windows_and_later_ones(storage: Storage) -> None:
    params = make_params()
    storage.put_metric(params)
    opened = open_round(storage, now=T0 + 600, expires_at=T0 + 30 * 86400)
    closed_at = T0 + 2 * HOUR + 1800  # in the middle of window T0 + 2h
    storage.close_round(opened.id, now=closed_at)
    later = closed_at + 8 * HOUR  # delivered in the evening
    accepted = [("accepted", None)]
    assert send(storage, params, 1, seed=1, window=T0, round=opened.id, now=later) == accepted  # opened in it
    assert send(storage, params, 1, seed=2, window=T0 + 2 * HOUR, round=opened.id, now=later) == accepted  # closed in
    assert send(storage, params, 1, seed=3, window=T0 + 3 * HOUR, round=opened.id, now=later) == accepted  # after
    assert send(storage, params, 1, seed=4, window=T0 + 3 * HOUR, round=opened.id, now=later + 9 * 86400) == accepted
    # round 0's bounds, unchanged: too far in the future, or ended more than retention_seconds ago
    assert send(storage, params, 1, seed=5, window=T0 + 12 * HOUR, round=opened.id, now=later) == [("too_early", "window")]
    old = send(storage, params, 1, seed=6, window=T0 + 2 * HOUR, round=opened.id, now=T0 + 3 * HOUR + 10 * 86400)
    assert old == [("expired", "window")]
    # still only rounds of this metric, at the round's level
    assert send(storage, params, 1, seed=7, window=T0, round=opened.id + 1, now=later) == [("invalid_message", "round")]
    assert send(storage, params, 1, seed=8, window=T0, round=opened.id, now=later, level=2.0) == [
        ("invalid_message", "payload.level")]
    other = make_params("other")
    storage.put_metric(other)
    assert send(storage, other, 1, seed=9, window=T0, round=opened.id, now=later) == [("invalid_message", "round")]
    _, totals = storage.bit_counts("places", round=opened.id)
    assert int(totals.sum()) == 4
    assert storage.table_counts()["reports"] == 4


def test_an_expired_rounds_reports_are_accepted(storage: Storage) -> None:
    params = make_params()
    storage.put_metric(params)
    opened = open_round(storage, now=T0 + 600, expires_at=T0 + HOUR + 1200)
    now = T0 + 5 * HOUR
    assert not opened.is_open(now)
    for seed, window in enumerate((T0, T0 + HOUR, T0 + 4 * HOUR)):
        assert send(storage, params, 1, seed=seed, window=window, round=opened.id, now=now) == [("accepted", None)]


def test_a_late_report_changes_a_finished_rounds_estimate_visibly(storage: Storage) -> None:
    """The default collection of a window and its ``reports`` count follow late reports; nothing else changes."""
    params = dataclasses.replace(make_params(), min_batch_size=5)
    storage.put_metric(params)
    metric = storage.require_metric("places")
    window = T0 + HOUR
    assert send(storage, params, 6, seed=1, window=window, round=0, now=window + 60) == [("accepted", None)] * 6
    opened = open_round(storage, now=window + 600, expires_at=T0 + 30 * 86400)
    assert send(storage, params, 4, seed=2, window=window, round=opened.id, now=window + 900) == [("accepted", None)] * 4
    storage.close_round(opened.id, now=window + 1200)
    service = DecodingService(storage, now=window + 2 * HOUR)
    first = service.choose(metric, None, None)
    assert (first.window, first.round, first.reports) == (window, 0, 6)  # 4 round reports: below min_batch_size
    assert send(storage, params, 1, seed=3, window=window, round=opened.id, now=window + 3 * HOUR) == [("accepted", None)]
    second = DecodingService(storage, now=window + 3 * HOUR).choose(metric, None, None)
    assert (second.window, second.round, second.level, second.reports) == (window, opened.id, 3.0, 5)
    assert send(storage, params, 2, seed=4, window=window, round=opened.id, now=window + 4 * HOUR) == [("accepted", None)] * 2
    third = DecodingService(storage, now=window + 4 * HOUR).choose(metric, window, opened.id)
    assert (third.round, third.reports) == (opened.id, 7)
    assert DecodingService(storage, now=window + 4 * HOUR).choose(metric, window, 0).reports == 6  # round 0 untouched
