"""End to end: the real aggregator on loopback, 1,000 clients with their own state files.

The aggregator's bit counts must equal the sum of what the clients sent,
where "what was sent" is read back by sealing each client's queued reports
as its sender does and opening them with the aggregator's key before they
are uploaded.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
from aggsupport import LiveServer, live_server
from clocks import Clock

from aggregator.cli.commands.client import register
from client_sdk import Client, RetryPolicy
from client_sdk.client import AlreadyReported
from client_sdk.queue import envelope_of
from protocol.crypto import AggregatorKeys, b64e
from protocol.encodings import BloomEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.rng import SeededRandom
from protocol.wire import open_report

PLACES = MetricParams(
    name="places", encoding=BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=16), mode="asymmetric",
    level=2.0, irr_q=0.1, time_precision=3600,
)
CITY = [f"place-{i:03d}" for i in range(200)]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    with live_server(f"sqlite:///{tmp_path / 'agg.db'}", tmp_path / "agg") as srv:
        srv.storage.put_metric(PLACES)
        yield srv


def sent_payloads(client: Client, keys: AggregatorKeys) -> list[tuple[int, np.ndarray]]:
    """Open this client's queued reports (only a test holding the aggregator's key can)."""
    out = []
    for item in client._state.queue:
        envelope = envelope_of(item)  # sealed as the sender seals it: the same bytes it uploads
        payload = open_report(envelope, seal_private=keys.seal_private, num_bits=PLACES.num_bits,
                              num_cohorts=PLACES.num_cohorts, allow_plain=False)
        out.append((payload.cohort, payload.bits))
    return out


@pytest.mark.slow
def test_thousand_clients_counts_match(server: LiveServer, tmp_path: Path) -> None:
    url, keys, storage = server.url, server.keys, server.storage
    rng = SeededRandom(2024)
    expected = np.zeros((PLACES.num_cohorts, PLACES.num_bits), dtype=np.int64)
    totals = np.zeros(PLACES.num_cohorts, dtype=np.int64)
    sent = 0
    session = requests.Session()
    retry = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05)
    for i in range(1000):
        clock = Clock(time.time() - PLACES.time_precision)
        client = Client(url, tmp_path / "clients" / f"{i}.state", background=False, strict=True, server_public_keys=keys.sign_public_raw,
                        max_epsilon=10.0, session=session, retry=retry, rng=rng, autosave=False,
                        insecure_rng_for_testing=True, clock=clock)
        client.sync()
        visits = rng.integers(len(CITY), int(rng.integers(4, 1)[0]) + 1)
        client.report("places", {CITY[j] for j in visits})
        if i % 10 == 0:  # some clients report a second, different window (one value per window)
            clock.now += PLACES.time_precision
            client.report("places", {CITY[j] for j in visits[:1]})
        mine = sent_payloads(client, keys)
        for cohort, bits in mine:
            expected[cohort] += bits
            totals[cohort] += 1
        sent += len(mine)
        result = client.flush()
        assert (result.delivered, result.remaining, result.error) == (len(mine), 0, None)
        client.close()
    ones, counted = storage.bit_counts("places")
    assert sent == 1100 and counted.sum() == sent
    assert np.array_equal(counted, totals)
    assert np.array_equal(ones, expected)
    # the clients' cohorts are spread over all 16 (each chosen uniformly once)
    assert (totals > 0).all()


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="onesided")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_report_flush_ledger(server: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    url, keys, storage = server.url, server.keys, server.storage
    monkeypatch.setenv("ONESIDED_SERVER_KEY", b64e(keys.sign_public_raw))
    common = ["--server", url, "--state", str(tmp_path / "cli.state"), "--json"]
    assert run_cli(["client", "report", *common, "--no-send", "--metric", "places", "home", "cafe"]) == 0
    assert json.loads(capsys.readouterr().out)["flush"] is None
    assert run_cli(["client", "flush", *common]) == 0
    assert json.loads(capsys.readouterr().out)["delivered"] == 1
    # the same value again in the window sends nothing new; another value is refused
    assert run_cli(["client", "report", *common, "--metric", "places", "cafe", "home"]) == 0
    out = json.loads(capsys.readouterr().out)
    # one report with IRR costs RAPPOR's eps_1: k ln(1/p*), p* = q + (1 - q) q_irr, q = e^-1 (below k L/2 = 2)
    q = math.exp(-1.0)
    assert out["flush"]["delivered"] == 0
    assert out["ledger"]["spent"] == pytest.approx(2 * math.log(1 / (q + (1 - q) * 0.1)), abs=1e-6)
    with pytest.raises(AlreadyReported):
        run_cli(["client", "report", *common, "--metric", "places", "home"])
    assert run_cli(["client", "ledger", *common]) == 0
    ledger = json.loads(capsys.readouterr().out)
    assert ledger["entries"][0]["windows"] == 1 and ledger["queued_reports"] == 0
    assert storage.bit_counts("places")[1].sum() == 1
    monkeypatch.delenv("ONESIDED_SERVER_KEY")
    with pytest.raises(ParameterError) as info:
        run_cli(["client", "ledger", *common])
    assert info.value.field == "server_key"
