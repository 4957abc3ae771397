"""Ingestion remembers metrics and closed rounds between batches (``ingest.RecordCache``) without
changing any answer: a changed metric, a stale digest and a round closed meanwhile are answered as
if everything had been read again. SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aggsupport import BACKENDS, database_url, make_params, make_reports

from aggregator.server.ingest import Ingestor
from aggregator.server.opener import EnvelopeOpener
from aggregator.server.settings import Settings
from aggregator.server.storage import Storage
from protocol.crypto import AggregatorKeys
from protocol.params import MetricParams
from protocol.wire import ReportResult

T0 = 1_700_000_000 // 3600 * 3600
NOW = T0 + 10
KEYS = AggregatorKeys.generate()


class Counting:
    """Counts the calls of a storage method."""

    def __init__(self, storage: Storage, name: str) -> None:
        self.calls = 0
        real = getattr(storage, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        setattr(storage, name, counted)


@pytest.fixture(params=BACKENDS)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    with database_url(request.param, tmp_path) as url, contextlib.closing(Storage.open(url)) as store:
        yield store


def ingest(storage: Storage, params: MetricParams, n: int, *, seed: int, window: int = T0, digest: str | None = None,
           round: int = 0, level: float | None = None) -> list[ReportResult]:
    settings = Settings(data_dir="/nonexistent", allow_plaintext=True)
    ingestor = Ingestor(storage=storage, opener=EnvelopeOpener(KEYS), settings=settings)
    reports = make_reports(params, None, n, seed=seed, window=window, digest=digest, round=round, level=level)
    return ingestor.ingest(reports.envelopes, now=NOW)


def statuses(results: list[ReportResult]) -> list[tuple[str, str | None]]:
    return [(r.status, r.field) for r in results]


def test_a_remembered_metric_saves_the_query_and_a_changed_one_is_read_again(storage: Storage) -> None:
    places = make_params()
    storage.put_metric(places)
    reads = Counting(storage, "metrics_by_name")
    assert statuses(ingest(storage, places, 4, seed=1)) == [("accepted", None)] * 4
    assert statuses(ingest(storage, places, 4, seed=2)) == [("accepted", None)] * 4
    assert reads.calls == 1
    # A metric without data may change: a report of the old digest, remembered from a too-early
    # report, is then told outdated_config by the store's check under lock.
    old = make_params("other")
    storage.put_metric(old)
    assert statuses(ingest(storage, old, 1, seed=3, window=T0 + 7200)) == [("too_early", "window")]
    new = make_params("other", level=3.0)
    assert storage.put_metric(new)[1] == "updated"
    calls = reads.calls
    assert statuses(ingest(storage, old, 2, seed=4)) == [("outdated_config", None)] * 2
    assert reads.calls == calls  # the remembered digest matched: no read, the store caught the change
    assert statuses(ingest(storage, new, 3, seed=5)) == [("accepted", None)] * 3
    assert reads.calls == calls + 1  # another digest: read again
    assert statuses(ingest(storage, old, 1, seed=6)) == [("outdated_config", "params_digest")]
    assert statuses(ingest(storage, make_params("nothing"), 1, seed=7)) == [("unknown_metric", "metric")]
    assert storage.table_counts()["reports"] == 11


def test_open_rounds_are_read_for_every_batch_and_closed_ones_remembered(storage: Storage) -> None:
    params = make_params()
    storage.put_metric(params)
    opened = storage.open_round(metric="places", level_from=2.0, level_to=3.0, cohorts=None,
                                expires_at=T0 + 86400, sign=KEYS.sign, now=T0)
    reads = Counting(storage, "rounds_by_id")
    assert statuses(ingest(storage, params, 3, seed=8, round=opened.id, level=3.0)) == [("accepted", None)] * 3
    storage.close_round(opened.id, now=T0 + 5)
    assert statuses(ingest(storage, params, 2, seed=9, round=opened.id, level=3.0)) == [("accepted", None)] * 2
    assert reads.calls == 2  # open when first read: read again
    assert statuses(ingest(storage, params, 2, seed=10, round=opened.id, level=3.0)) == [("accepted", None)] * 2
    assert reads.calls == 2  # closed: remembered
    assert storage.table_counts()["reports"] == 7  # a closed round's reports are still counted
