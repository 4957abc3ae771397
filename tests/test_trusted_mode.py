"""Trusted mode end to end: real clients send exact presence sets, the aggregator stores exact counts.

A trusted metric (``mode="trusted"``, level ``inf``, the direct encoding)
has no noise on the device: each ``client_sdk.Client`` (its own state
file) seals its exact set of places to the aggregator, which counts them
per window. The stored counts must equal the truth exactly, and central
releases on them (over the HTTP API) must keep their one-sided promise.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
from aggsupport import WINDOW, LiveServer, bearer, current_window, live_server

from client_sdk import Client, RetryPolicy
from protocol.encodings import DirectEncoding
from protocol.errors import BudgetExceeded
from protocol.params import MetricParams
from protocol.rng import SeededRandom

PLACES = tuple(f"place-{i:02d}" for i in range(30))
MAX_VISITED = 6
VISITS = MetricParams(
    name="visits", encoding=DirectEncoding(domain=PLACES), mode="trusted", level=math.inf, time_precision=WINDOW,
    # A client visits at most 5 common places and 1 rare one: every set is kept whole (no clipping, exact
    # counts), and the releases' sensitivity is 6, not the domain's 30.
    max_items=MAX_VISITED,
)
CLIENTS = 200
COMMON = 20  # places 0..19 are common; 20..29 are rare (visited by about 1 client in 10)
THRESHOLD = 8


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    with live_server(f"sqlite:///{tmp_path / 'agg.db'}", tmp_path / "agg") as srv:
        assert srv.register(VISITS, srv.admin_token()).status_code == 201
        yield srv


def new_client(srv: LiveServer, path: Path, *, clock: float, session: requests.Session, seed: int,
               max_epsilon: float = math.inf) -> Client:
    # strict: a refusal raises here, as it does for an app that asks for it
    return Client(srv.url, path, background=False, server_public_keys=srv.keys.sign_public_raw, max_epsilon=max_epsilon,
                  session=session, retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05),
                  clock=lambda: clock, rng=seed, autosave=False, insecure_rng_for_testing=True, strict=True)


def test_clients_send_exact_sets_and_counts_are_exact(server: LiveServer, tmp_path: Path) -> None:
    rng = SeededRandom(7)
    now = current_window(VISITS)
    windows = (now - WINDOW, now)
    truth = {w: np.zeros(len(PLACES), dtype=np.int64) for w in windows}
    reports = dict.fromkeys(windows, 0)
    session = requests.Session()
    for i in range(CLIENTS):
        window = windows[i % 2]
        client = new_client(server, tmp_path / "clients" / f"{i}.state", clock=window + 1800.0, session=session,
                            seed=i)
        client.sync()
        visited = {PLACES[j] for j in rng.integers(COMMON, (int(rng.integers(5, (1,))[0]) + 1,))}
        if rng.uniform(1)[0] < 0.1:
            visited.add(PLACES[COMMON + int(rng.integers(len(PLACES) - COMMON, (1,))[0])])
        client.report("visits", visited)
        result = client.flush()
        assert (result.delivered, result.remaining, result.error) == (1, 0, None)
        client.close()
        for place in visited:
            truth[window][PLACES.index(place)] += 1
        reports[window] += 1
    for window in windows:
        ones, totals = server.storage.bit_counts("visits", window=window, round=0)
        assert ones.shape == (1, len(PLACES))
        assert np.array_equal(ones[0], truth[window])  # exact: no noise anywhere
        assert int(totals.sum()) == reports[window] == CLIENTS // 2
    # the data are not degenerate: some places under the threshold, some above
    assert (truth[now] <= THRESHOLD).any() and (truth[now] > THRESHOLD).any()

    # a central release on the exact counts, over the API: safe answers are never wrong
    analyst = server.analyst_token("alice")
    body = {"metric": "visits", "window": now, "mechanism": "ageo", "epsilon": 1.0, "threshold": THRESHOLD}
    response = requests.post(f"{server.url}/v1/releases", json=body, headers=bearer(analyst), timeout=30)
    assert response.status_code == 201, response.text
    answers = response.json()["answers"]
    assert [a["place"] for a in answers] == list(PLACES)
    for count, answer in zip(truth[now], answers, strict=True):
        assert answer["answer"] >= count
        assert not (answer["safe"] and count > THRESHOLD)
    # The release noise is the server's (secure, unseeded): AGeo's P(G >= n) = exp(-eps n / 6), so a place of
    # count c <= 8 is safe w.p. 1 - exp(-(9 - c) / 6); none of the 10 rare places (counts sum to 9) is safe
    # w.p. exp(-(90 - 9) / 6) = 1.4e-6: this line's false-failure rate.
    assert any(a["safe"] for a in answers)


def test_a_client_with_a_finite_ceiling_refuses_to_send_exact_data(server: LiveServer, tmp_path: Path) -> None:
    session = requests.Session()
    client = new_client(server, tmp_path / "careful.state", clock=float(current_window(VISITS)), session=session,
                        seed=1, max_epsilon=10.0)
    client.sync()
    with pytest.raises(BudgetExceeded):
        client.report("visits", {"place-01"})
    assert client.flush().delivered == 0
    client.close()
    assert int(server.storage.bit_counts("visits")[1].sum()) == 0
