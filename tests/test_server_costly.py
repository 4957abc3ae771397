"""Analyst requests are bounded in work, and the server stays responsive while one runs.

Before: one estimate with 10,000 candidates on a Bloom metric held a core
for minutes. Now the design-matrix cells (candidates x (cohort, bit) rows)
are capped by the setting ``max_decode_cells``: over it, 422 ``too_costly``
naming ``candidates`` and the limit, before any decoding. And a large but
allowed request leaves ``/v1/health`` answering within a second.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import requests
from aggsupport import (
    bearer,
    database_url,
    live_server,
    make_reports,
    post_reports,
    serve_subprocess,
)

from aggregator.server.settings import DEFAULT_MAX_DECODE_CELLS, Settings
from aggregator.server.storage import Storage
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams


def bloom(num_bits: int, num_cohorts: int) -> MetricParams:
    encoding = BloomEncoding(num_bits=num_bits, num_hashes=2, num_cohorts=num_cohorts)
    return MetricParams(name="wide", encoding=encoding, mode="asymmetric", level=2.0, time_precision=3600,
                        min_batch_size=1)


def test_too_many_candidates_are_refused_before_decoding(tmp_path: Path) -> None:
    params = bloom(128, 16)  # 2,048 (cohort, bit) rows
    with database_url("sqlite", tmp_path) as url, live_server(url, tmp_path, allow_plaintext=True) as srv:
        admin = srv.admin_token()
        assert srv.register(params, admin).status_code == 201
        assert post_reports(srv.url, make_reports(params, None, 30, seed=1).envelopes).status_code == 200
        candidates = [f"item-{i}" for i in range(10_000)]
        base = f"{srv.url}/v1/metrics/wide"
        for path, extra in (("estimates", {}), ("certificates", {"threshold": 5, "alpha": 0.01})):
            started = time.monotonic()
            answer = requests.post(f"{base}/{path}", json={"candidates": candidates, **extra},
                                   headers=bearer(admin), timeout=10)
            assert time.monotonic() - started < 2.0
            assert answer.status_code == 422, answer.text[:200]
            error = answer.json()
            assert (error["error"], error["field"]) == ("too_costly", "candidates")
            assert str(DEFAULT_MAX_DECODE_CELLS) in error["detail"] and "max_decode_cells" in error["detail"]
        allowed = DEFAULT_MAX_DECODE_CELLS // 2048
        answer = requests.get(f"{base}/estimates", params={"candidates": ",".join(candidates[:allowed])},
                              headers=bearer(admin), timeout=60)
        assert answer.status_code == 200 and answer.json()["candidates"] == allowed


@pytest.mark.slow
def test_health_answers_within_a_second_during_a_large_estimate(tmp_path: Path) -> None:
    params = bloom(256, 16)  # 4,096 rows; 2,000 candidates is ~2 s of OLS on one core
    storage = Storage.open(Settings(data_dir=tmp_path).database_url)
    admin = storage.create_token(role="admin", name="ops")[1]
    storage.close()
    env = {"ONESIDED_MAX_DECODE_CELLS": str(10**8), "ONESIDED_ALLOW_PLAINTEXT": "1"}
    with serve_subprocess("--data-dir", str(tmp_path), "--threads", "4", env=env) as url:
        assert requests.post(f"{url}/v1/metrics", json=params.to_dict(), headers=bearer(admin),
                             timeout=10).status_code == 201
        assert post_reports(url, make_reports(params, None, 40, seed=2).envelopes).status_code == 200
        done: list[float] = []

        def analyst() -> None:
            started = time.monotonic()
            answer = requests.post(f"{url}/v1/metrics/wide/estimates", headers=bearer(admin), timeout=120,
                                   json={"candidates": [f"item-{i}" for i in range(2000)], "method": "ols"})
            assert answer.status_code == 200
            done.append(time.monotonic() - started)

        worker = threading.Thread(target=analyst)
        worker.start()
        time.sleep(0.2)
        latencies: list[float] = []
        while worker.is_alive() and len(latencies) < 50:
            started = time.monotonic()
            assert requests.get(f"{url}/v1/health", timeout=5).status_code == 200
            latencies.append(time.monotonic() - started)
            time.sleep(0.1)
        worker.join(timeout=120)
    assert done, "the estimate did not finish"
    assert len(latencies) >= 3, (latencies, done)  # the estimate ran long enough to overlap
    assert max(latencies) < 1.0, latencies
