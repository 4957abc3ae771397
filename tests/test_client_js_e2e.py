"""End to end for the TypeScript client: Node clients and a Chromium page against a real ``onesided serve``.

Each run: clients report while offline (a first launch, before any config), come online and send,
then follow a relaxation round the operator opens; the aggregator decodes what they sent and its
estimates of round 0 and of the round hold the true counts within 5 standard errors, and each
client's ledger charged what the Python ledger charges. Node runs an asymmetric level round and a
symmetric round that also relaxes the IRR (re-sends drawn from the last report); the Chromium page
(IndexedDB state) runs the asymmetric one, then a client flushes when the page is hidden. Skips,
saying why, when Node.js is missing (and the browser run when Debian's Chromium is missing;
``.ci/setup --browser`` installs it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from aggsupport import bearer, serve_subprocess
from test_client_js import CLIENT_JS, run_npm

from aggregator.server.storage import Storage
from client_sdk.ledger import window_cost
from protocol.crypto import AggregatorKeys
from protocol.encodings import DirectEncoding
from protocol.params import MetricParams

DOMAIN = DirectEncoding(domain=("park", "gym", "cafe", "museum", "pool"))
PLACES = MetricParams(name="places", encoding=DOMAIN, mode="asymmetric", level=2.0, time_precision=3600,
                      min_batch_size=10)
# Symmetric with IRR, and a round that raises the level and relaxes the IRR: the re-send's IRR is
# relaxed from the window's last report, charged by the proven enclosure (the Python ledger's charge).
APPS = MetricParams(name="apps", encoding=DOMAIN, mode="symmetric", level=2.0, irr_p=0.25, irr_q=0.75,
                    time_precision=3600, min_batch_size=10)
APPS_ROUND = {"level_to": 3.0, "irr_p": 0.2, "irr_q": 0.8}
HIDDEN = MetricParams(name="hidden", encoding=DOMAIN, mode="asymmetric", level=2.0, time_precision=3600,
                      min_batch_size=10)
CHROMIUM = Path("/usr/bin/chromium")


class Aggregator:
    def __init__(self, url: str, folder: Path) -> None:
        self.url = url
        storage = Storage.open(f"sqlite:///{folder / 'onesided.db'}")
        try:
            self.token = storage.create_token(role="admin", name="ops")[1]
        finally:
            storage.close()
        self.pin = AggregatorKeys.load(folder / "keys").public_info()["sign_public"]
        for params in (PLACES, APPS, HIDDEN):
            answer = requests.post(f"{url}/v1/metrics", json=params.to_dict(), headers=bearer(self.token), timeout=30)
            assert answer.status_code == 201, answer.text

    def estimates(self, metric: str, window: int, round_id: int) -> dict[str, Any]:
        answer = requests.get(f"{self.url}/v1/metrics/{metric}/estimates", params={"window": window, "round": round_id},
                              headers=bearer(self.token), timeout=60)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body


@pytest.fixture(scope="module")
def built() -> None:
    done = run_npm("run", "build")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture
def aggregator(tmp_path: Path, built: None) -> Iterator[Aggregator]:
    with serve_subprocess("--data-dir", str(tmp_path), "--threads", "4") as url:
        yield Aggregator(url, tmp_path)


def window_charge(params: MetricParams, round_body: dict[str, float]) -> float:
    """What the Python ledger charges one window for its first report and the round's re-send."""
    irr = (round_body["irr_p"], round_body["irr_q"]) if "irr_q" in round_body else None
    chain = [float(params.level or 0), round_body["level_to"]]
    costs = [window_cost(params, chain, [None, irr], [flag])[0] for flag in ((True, False) if irr else (False,))]
    return min(costs)  # the client relaxes the IRR exactly when that costs no more (protocol.chain.WindowChain.after)


def check(agg: Aggregator, outcome: dict[str, Any], clients: int, params: MetricParams = PLACES,
          round_body: dict[str, float] | None = None) -> None:
    round_body = round_body or {"level_to": 4.0}
    assert outcome["offline"] == ["waiting"] * clients
    assert outcome["first"] == [1] * clients
    assert outcome["joined"] == [1] * clients
    assert outcome["offlineErrors"] >= clients  # each tried, failed quietly, and kept its report
    assert outcome["errors"] == []
    assert [(b["metric"], b["spent"], b["level"], b["round"]) for b in outcome["ledger"]] == [
        (params.name, window_charge(params, round_body), round_body["level_to"], outcome["round_id"])]
    for round_id, level in ((0, params.level), (outcome["round_id"], round_body["level_to"])):
        body = agg.estimates(params.name, outcome["window"], round_id)
        assert (body["reports"], body["level"]) == (clients, level)
        rows = {row["candidate"]: row for row in body["rows"]}
        # 10 checks at 5 standard errors: a false failure has probability below 1e-5.
        for place, count in outcome["truth"].items():
            row = rows[place]
            assert abs(row["estimate"] - count) <= 5 * row["std_error"], (round_id, place, row, count)


def run_node(script: str, *args: str, timeout: int = 300) -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run([node, script, *args], cwd=CLIENT_JS, capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stderr == "", "the SDK stays silent on stderr"
    outcome: dict[str, Any] = json.loads(done.stdout)
    return outcome


@pytest.mark.slow
@pytest.mark.parametrize(("params", "round_body"), [(PLACES, {"level_to": 4.0}), (APPS, APPS_ROUND)],
                         ids=["asymmetric", "symmetric-irr"])
def test_node_clients_offline_then_online_follow_a_round(aggregator: Aggregator, tmp_path: Path,
                                                         params: MetricParams, round_body: dict[str, float]) -> None:
    clients = 60
    outcome = run_node("e2e/node-e2e.mjs", aggregator.url, aggregator.pin, aggregator.token, str(clients),
                       str(tmp_path / "states"), params.name, json.dumps(round_body))
    check(aggregator, outcome, clients, params, round_body)
    assert len(list((tmp_path / "states").glob("client-*/state.bin"))) == clients


@pytest.mark.slow
def test_chromium_page_offline_then_online_follows_a_round(aggregator: Aggregator) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install -y chromium; .ci/setup --browser)")
    clients = 40
    outcome = run_node("e2e/browser-e2e.mjs", aggregator.url, aggregator.pin, aggregator.token, str(clients),
                       str(CHROMIUM))
    assert outcome["pageErrors"] == []
    check(aggregator, outcome, clients)
    # hidden page: the queued report left through the visibilitychange flush, not the 10-minute timer
    assert outcome["hide"] == {"status": "queued", "before": 1, "after": 0, "sent": 1}
