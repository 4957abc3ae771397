"""A round that relaxes the level and the IRR, end to end with a real aggregator (in-process, SQLite).

Simulated clients take the client's own report pipeline (``ReportPlan``: a
window's first report, then the round's re-send drawn by the relaxed IRR
step); a few full ``client_sdk.Client`` instances follow the round from the
signed config. The round's reports are decoded with the round's IRR, and
the estimates are within their error bars.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from aggsupport import live_server

from aggregator.analysis.decoding import BitCounts, direct_estimates
from aggregator.api_client import ApiClient
from aggregator.cli.main import main
from aggregator.demo.local import client_secrets, local_aggregator, upload
from client_sdk import Client
from client_sdk.ledger import window_cost, with_irr
from client_sdk.memo import ReportPlan, noise_key
from client_sdk.pools import IrrPool
from protocol.encodings import DirectEncoding, canonical_value
from protocol.irr_relaxation import enclosed_report_chain_charge, report_chain_epsilon
from protocol.params import MetricParams
from protocol.rng import SeededRandom
from protocol.wire import seal_report, window_start

DOMAIN = tuple(f"v{i}" for i in range(8))
PARAMS = MetricParams(name="apps", encoding=DirectEncoding(domain=DOMAIN), mode="symmetric", level=1.0,
                      irr_p=0.5, irr_q=0.75, min_batch_size=50)
LEVEL_TO, IRR_TO = 3.0, (0.2, 0.8)
SIMULATED = 2500
SDK_CLIENTS = 6
Z_LIMIT = 4.5  # two-sided, per candidate: 6.8e-6; over 2 x 8 candidates 1.1e-4 (and the seeds are fixed)


def value_of(i: int) -> str:
    return DOMAIN[min(int(i % 11), len(DOMAIN) - 1)]  # v7 is the most common (4 of 11)


def simulated_reports(secrets: list[bytes], window: int, seal: bytes, digest: str, round_id: int) -> tuple[
        list[object], list[object]]:
    """Each simulated client's window report, and its re-send for ``round_id`` relaxed from the bits it sent."""
    base = ReportPlan(secrets[0], PARAMS, 0, PARAMS.level)
    relaxed = ReportPlan(secrets[0], with_irr(PARAMS, IRR_TO), 0, LEVEL_TO)
    pool = IrrPool(SeededRandom(11), base.randomizer, PARAMS.num_bits)
    step = SeededRandom(12)
    first, second = [], []
    for i, secret in enumerate(secrets):
        value = (value_of(i),)
        key = noise_key(window, canonical_value(value))
        payload = base.for_secret(secret).payload(value, key, pool.take())
        sent = int.from_bytes(payload[11:], "little")
        again = relaxed.for_secret(secret).relaxed_payload(value, key, (PARAMS.level, LEVEL_TO), sent,
                                                           base.randomizer, step)
        for out, body, rnd in ((first, payload, 0), (second, again, round_id)):
            out.append(seal_report(payload=body, metric=PARAMS.name, round=rnd, window=window, params_digest=digest,
                                   seal_public=seal))
    return first, second


def check_within_error_bars(rows: list[dict[str, object]], truth: dict[str, int]) -> None:
    for row in rows:
        z = (float(row["estimate"]) - truth[str(row["candidate"])]) / float(row["std_error"])  # type: ignore[arg-type]
        assert abs(z) < Z_LIMIT, (row, truth)


def test_a_round_relaxing_level_and_irr_decodes_within_its_error_bars(tmp_path: Path) -> None:
    with local_aggregator(tmp_path / "agg") as agg:
        digest = agg.admin.post("/v1/metrics", PARAMS.to_dict())["digest"]
        seal = agg.keys.seal_public_raw
        now = time.time()
        window = window_start(now, PARAMS.time_precision)
        sdk = [Client(agg.url, tmp_path / f"c{i}.state", server_public_keys=agg.keys.sign_public_raw,
                      max_epsilon=20.0, rng=1000 + i, insecure_rng_for_testing=True, background=False)
               for i in range(SDK_CLIENTS)]
        for i, client in enumerate(sdk):
            client.sync()
            client.report("apps", [value_of(SIMULATED + i)])
            assert client.flush().delivered == 1
        secrets = client_secrets(SIMULATED, 5)
        opened = agg.admin.post("/v1/metrics/apps/rounds", {"level_to": LEVEL_TO, "irr_p": IRR_TO[0],
                                                            "irr_q": IRR_TO[1]})
        assert (opened["irr_p"], opened["irr_q"]) == IRR_TO
        assert opened["announcement"]["payload"]["irr_q"] == IRR_TO[1]
        first, second = simulated_reports(secrets, window, seal, digest, opened["id"])
        for batch in (first, second):
            assert upload(agg.url, iter(batch), total=len(batch), progress=lambda n: None) == {"accepted": SIMULATED}
        for client in sdk:  # the SDK clients follow the round from the signed config
            client.sync()
            assert client.flush().delivered == 1
            entry = client.ledger()["apps"]
            assert entry.levels == (PARAMS.level, LEVEL_TO) and entry.irrs == (None, IRR_TO)
            chain = [PARAMS.randomizer(), with_irr(PARAMS, IRR_TO).randomizer(LEVEL_TO)]
            charged = window_cost(PARAMS, [PARAMS.level, LEVEL_TO], [None, IRR_TO], [True])[0]
            assert entry.spent == charged == min(report_chain_epsilon(chain), charged)
            assert charged == enclosed_report_chain_charge(chain)[0]  # the proven charge of the report chain
            assert entry.spent < window_cost(PARAMS, [PARAMS.level, LEVEL_TO], [None, IRR_TO], [False])[0]
            client.close()
        agg.admin.post(f"/v1/rounds/{opened['id']}/close")
        truth = {v: 0 for v in DOMAIN}
        for i in range(SIMULATED + SDK_CLIENTS):
            truth[value_of(i)] += 1
        status = agg.analyst.get(f"/v1/rounds/{opened['id']}")
        assert status["reports"] == SIMULATED + SDK_CLIENTS
        for rnd in (0, opened["id"]):
            answer = agg.analyst.get("/v1/metrics/apps/estimates", {"window": window, "round": rnd})
            assert answer["round"] == rnd and answer["reports"] == SIMULATED + SDK_CLIENTS
            check_within_error_bars(answer["rows"], truth)
        # the test has power: the round's counts decoded with the metric's own IRR are far off
        ones, totals = agg.storage.bit_counts("apps", window=window, round=opened["id"])
        wrong = direct_estimates(BitCounts(ones=ones, totals=totals), PARAMS, LEVEL_TO).rows()
        with pytest.raises(AssertionError):
            check_within_error_bars(wrong, truth)


def test_the_round_api_checks_the_irr(tmp_path: Path) -> None:
    asym = MetricParams(name="seen", encoding=DirectEncoding(domain=("a", "b")), mode="asymmetric", level=2.0,
                        irr_q=0.5)
    with local_aggregator(tmp_path / "agg") as agg:
        agg.admin.post("/v1/metrics", PARAMS.to_dict())
        agg.admin.post("/v1/metrics", asym.to_dict())

        def post(path: str, body: object) -> tuple[int, dict[str, object]]:
            r = requests.post(agg.url + path, json=body, headers={"Authorization": f"Bearer {agg.admin.token}"},
                              timeout=30)
            return r.status_code, r.json()

        refusals = [
            ("apps", {"level_to": 1.0}, 409, "level_to"),  # keeps the level and the IRR
            ("apps", {"level_to": 1.0, "irr_p": 0.5, "irr_q": 0.75}, 409, "level_to"),  # the same IRR
            ("apps", {"level_to": 2.0, "irr_p": 0.6, "irr_q": 0.75}, 400, "irr"),  # tighter
            ("apps", {"level_to": 2.0, "irr_p": 0.2}, 400, "irr_q"),
            ("apps", {"level_to": 2.0, "irr_q": 0.9}, 400, "irr_q"),  # the symmetric IRR is a pair
            ("apps", {"level_to": 2.0, "irr_q": 1.5}, 400, "irr_q"),
            ("seen", {"level_to": 2.0, "irr_p": 0.1, "irr_q": 0.2}, 400, "irr_p"),  # asymmetric: irr_q only
        ]
        for metric, body, code, field in refusals:
            status, answer = post(f"/v1/metrics/{metric}/rounds", body)
            assert (status, answer["field"]) == (code, field), (body, answer)
        assert agg.storage.list_rounds() == []
        only = agg.admin.post("/v1/metrics/seen/rounds", {"level_to": 2.0, "irr_q": 0.2})  # an IRR-only round
        assert (only["level_from"], only["level_to"], only["irr_p"], only["irr_q"]) == (2.0, 2.0, None, 0.2)
        status, answer = post("/v1/metrics/seen/rounds", {"level_to": 3.0, "irr_q": 0.5})  # back above 0.2
        assert (status, answer["field"]) == (400, "irr")
        later = agg.admin.post("/v1/metrics/seen/rounds", {"level_to": 3.0})  # keeps the IRR: announced again
        assert later["irr_q"] == 0.2 and later["announcement"]["payload"]["irr_q"] == 0.2
        plain = agg.admin.post("/v1/metrics/apps/rounds", {"level_to": 2.0})  # never relaxed: as before
        assert plain["irr_q"] is None and "irr_q" not in plain["announcement"]["payload"]
        config = requests.get(agg.url + "/v1/config", timeout=30).json()["payload"]
        assert sorted(r["payload"].get("irr_q", -1) for r in config["rounds"]) == [-1, 0.2]


@pytest.fixture()
def cli_server(tmp_path: Path) -> Iterator[dict[str, str]]:
    with live_server(f"sqlite:///{tmp_path}/a.db", tmp_path) as srv:
        admin = srv.admin_token()
        ApiClient(srv.url, admin).post("/v1/metrics", PARAMS.to_dict())
        yield {"url": srv.url, "admin": admin, "analyst": srv.analyst_token()}


def test_round_open_takes_the_irr_and_round_list_shows_it(capsys: pytest.CaptureFixture[str],
                                                         cli_server: dict[str, str]) -> None:
    def run(*argv: str, role: str = "analyst") -> str:
        code = main([*argv, "--server", cli_server["url"], "--token", cli_server[role]])
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    opened = json.loads(run("round", "open", "apps", "--level-to", "1", "--irr-p", "0.25", "--irr-q", "0.75",
                            "--json", role="admin"))
    assert (opened["level_to"], opened["irr_p"], opened["irr_q"]) == (1.0, 0.25, 0.75)
    listed = run("round", "list", "apps").splitlines()
    assert listed[0].split()[-2:] == ["irr_p", "irr_q"] and listed[1].split()[-2:] == ["0.25", "0.75"]
    shown = run("round", "status", str(opened["id"]))
    assert any(line.split() == ["irr_q", "0.75"] for line in shown.splitlines())
