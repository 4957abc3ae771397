"""Estimates and certificates over the real HTTP API on loopback, and the decoding CLI.

Populations are planted: each simulated client holds at most one known
value, its bits are randomized here with the metric's randomizer (seeded)
and sealed like a device's report, then go through the real ingestion
(``POST /v1/reports``). So the true counts and the stored counts are both
known to the test.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import requests
from aggsupport import (
    BACKENDS,
    WINDOW,
    LiveServer,
    bearer,
    current_window,
    database_url,
    live_server,
    make_params,
    make_reports,
    post_reports,
)

from aggregator.analysis.decoding import BitCounts
from aggregator.analysis.rappor_io import RESULT_COLUMNS, export_rappor
from aggregator.analysis.tables import CERTIFICATE_COLUMNS, ESTIMATE_COLUMNS, display_rows
from aggregator.cli.main import main
from aggregator.server.errors import NotFound
from aggregator.server.services.estimates import (
    CertifyRequest,
    DecodeRequest,
    choose_collection,
)
from aggregator.server.storage import Collection, MetricRecord, RoundRecord
from protocol.encodings import BloomEncoding, DirectEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.rng import SeededRandom
from protocol.wire import ReportEnvelope, build_report

PLACES = tuple(f"place-{i:02d}" for i in range(12))
DIRECT = MetricParams(
    name="visits", encoding=DirectEncoding(domain=PLACES), mode="asymmetric", level=6.0,
    time_precision=WINDOW, min_batch_size=50,
)
# 4 x 64 bits, 2 hashes: 256 (cohort, bit) rows, so 12 candidates are fitted by OLS.
BLOOM = MetricParams(
    name="urls", encoding=BloomEncoding(num_bits=64, num_hashes=2, num_cohorts=4), mode="asymmetric",
    level=4.0, time_precision=WINDOW, min_batch_size=100,
)
SYMMETRIC = make_params("sym", mode="symmetric", level=2.0)
TRUSTED = MetricParams(
    name="exact", encoding=DirectEncoding(domain=PLACES), mode="trusted", level=math.inf,
    time_precision=WINDOW, min_batch_size=20, max_items=len(PLACES),  # whole sets kept: exact counts
)
SMALL = dataclasses.replace(DIRECT, name="small", min_batch_size=100)

DIRECT_HOLDERS = {"place-00": 150, "place-01": 80, "place-02": 30, "place-03": 10}
DIRECT_REPORTS = 400
URLS = tuple(f"https://example.org/page/{i}" for i in range(12))
BLOOM_HOLDERS = {URLS[0]: 300, URLS[1]: 200, URLS[2]: 120}
BLOOM_REPORTS = 1500
THRESHOLD = 50


def planted_reports(
    params: MetricParams, holders: Mapping[str, int], n: int, *, seed: int, window: int,
    seal_public: bytes, round: int = 0, level: float | None = None,
) -> tuple[list[ReportEnvelope], npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
    """``n`` sealed reports: the first ``holders[v]`` clients (after the previous values') hold ``v``.

    Returns the envelopes, the reported bits and the cohorts.
    """
    rng = SeededRandom(seed)
    cohorts = rng.integers(params.num_cohorts, (n,))
    bits = np.zeros((n, params.num_bits), dtype=bool)
    start = 0
    for value, count in holders.items():
        for i in range(start, start + count):
            bits[i] = params.encoding.encode(value, int(cohorts[i]))
        start += count
    level = params.level if level is None else level
    reported = params.randomizer(level).simulate(bits, rng)
    envelopes = [
        build_report(
            params_digest=params.digest(), metric=params.name, round=round, window=window,
            cohort=int(cohorts[i]), level=level, bits=reported[i], seal_public=seal_public,
            ephemeral_private=bytes(rng.integers(256, (32,)).astype(np.uint8)),
        )
        for i in range(n)
    ]
    return envelopes, reported, cohorts


def stored_counts(bits: npt.NDArray[np.bool_], cohorts: npt.NDArray[np.int64], num_cohorts: int) -> BitCounts:
    return BitCounts.from_reports(bits, cohorts, num_cohorts)


def closed_form(ones: npt.NDArray[np.int64], reports: int, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Asymmetric direct metric without IRR: ``p = exp(-L/2)``, ``t = (c - pN)/(1 - p)``,
    ``Var t = (N - t) p / (1 - p)`` with ``t`` clamped to ``[0, N]`` (docs/decoding.md 2)."""
    p = math.exp(-level / 2.0)
    t = (ones - p * reports) / (1.0 - p)
    clamped = np.clip(t, 0.0, reports)
    return t, np.sqrt((reports - clamped) * p / (1.0 - p))


@dataclass
class World:
    srv: LiveServer
    window: int
    admin: str
    analyst: str
    direct_ones: npt.NDArray[np.int64]
    bloom_counts: BitCounts
    trusted_ones: npt.NDArray[np.int64]

    def get(self, path: str, who: str = "analyst", **params: Any) -> requests.Response:
        token = self.admin if who == "admin" else self.analyst
        return requests.get(f"{self.srv.url}{path}", params=params, headers=bearer(token), timeout=60)

    def post(self, path: str, body: Any, who: str = "analyst") -> requests.Response:
        token = self.admin if who == "admin" else self.analyst
        return requests.post(f"{self.srv.url}{path}", json=body, headers=bearer(token), timeout=60)

    def ok(self, path: str, **params: Any) -> dict[str, Any]:
        response = self.get(path, **params)
        assert response.status_code == 200, response.text
        body = response.json()
        assert isinstance(body, dict)
        return body


def _upload(srv: LiveServer, envelopes: list[ReportEnvelope]) -> None:
    for start in range(0, len(envelopes), 1000):
        batch = envelopes[start : start + 1000]
        response = post_reports(srv.url, batch)
        assert response.json()["accepted"] == len(batch), response.text


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("estimates")
    with database_url("sqlite", folder) as url, live_server(url, folder) as srv:
        admin = srv.admin_token()
        for params in (DIRECT, BLOOM, SYMMETRIC, TRUSTED, SMALL):
            assert srv.register(params, admin).status_code == 201
        window = current_window(DIRECT)
        seal = srv.keys.seal_public_raw
        env, bits, cohorts = planted_reports(DIRECT, DIRECT_HOLDERS, DIRECT_REPORTS, seed=11, window=window,
                                             seal_public=seal)
        _upload(srv, env)
        direct_ones = bits.sum(axis=0)
        env, bits, cohorts = planted_reports(BLOOM, BLOOM_HOLDERS, BLOOM_REPORTS, seed=12, window=window,
                                             seal_public=seal)
        _upload(srv, env)
        bloom_counts = stored_counts(bits, cohorts, BLOOM.num_cohorts)
        exact = make_reports(TRUSTED, seal, 60, seed=13, window=window)
        _upload(srv, exact.envelopes)
        _upload(srv, make_reports(SMALL, seal, 37, seed=14, window=window).envelopes)
        yield World(srv=srv, window=window, admin=admin, analyst=srv.analyst_token(), direct_ones=direct_ones,
                    bloom_counts=bloom_counts, trusted_ones=exact.expected(1)[0][0])


def by_candidate(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["candidate"]: row for row in rows}


# ---------------------------------------------------------------------------
# estimates
# ---------------------------------------------------------------------------


def test_direct_estimates_are_the_closed_form_of_the_stored_counts(world: World) -> None:
    body = world.ok("/v1/metrics/visits/estimates")
    assert (body["window"], body["round"], body["level"], body["reports"]) == (world.window, 0, 6.0, DIRECT_REPORTS)
    assert body["reason"] is None and body["method"] == "direct" and body["candidates"] == len(PLACES)
    rows = by_candidate(body["rows"])
    assert set(rows) == set(PLACES)
    estimates, std_errors = closed_form(world.direct_ones, DIRECT_REPORTS, DIRECT.level)
    for i, place in enumerate(PLACES):
        assert rows[place]["estimate"] == pytest.approx(estimates[i], rel=1e-12, abs=1e-9)
        assert rows[place]["std_error"] == pytest.approx(std_errors[i], rel=1e-12, abs=1e-9)
        assert rows[place]["proportion"] == pytest.approx(estimates[i] / DIRECT_REPORTS, rel=1e-12, abs=1e-12)
    assert body["detected"] == sum(r["detected"] for r in rows.values())
    # The three largest planted places stand out: 150, 80, 30 holders, standard errors about 4.5,
    # Bonferroni over 12 at 5% needs z > 2.64; missing 30 (z ~ 6.8) has probability ~2e-5.
    assert {p for p, r in rows.items() if r["detected"]} >= {"place-00", "place-01", "place-02"}
    # Candidates subset, in any order; rows come largest first.
    subset = world.ok("/v1/metrics/visits/estimates", candidates="place-03,place-00")
    assert [r["candidate"] for r in subset["rows"]] == ["place-00", "place-03"]
    assert subset["rows"][0]["estimate"] == rows["place-00"]["estimate"]


def test_bloom_estimates_detect_the_planted_values(world: World) -> None:
    # alpha 0.001 (Bonferroni over 12, z > 3.76): the 9 absent values are all undetected except
    # with probability <= 0.001; the planted ones have z ~ 10 (standard errors ~ 11), each missed
    # with probability < 1e-8.
    body = world.ok("/v1/metrics/urls/estimates", candidates=",".join(URLS), alpha="0.001")
    assert body["method"] == "ols" and body["reports"] == BLOOM_REPORTS and body["level"] == 4.0
    rows = by_candidate(body["rows"])
    detected = {url for url, row in rows.items() if row["detected"]}
    assert detected == set(BLOOM_HOLDERS)
    assert body["detected"] == len(BLOOM_HOLDERS)
    for url, holders in BLOOM_HOLDERS.items():
        # 4.5 standard errors: each fails with probability 6.8e-6.
        assert abs(rows[url]["estimate"] - holders) <= 4.5 * rows[url]["std_error"]
        assert rows[url]["lower"] < rows[url]["estimate"] < rows[url]["upper"]
    # The same query as a JSON body (long or comma-holding candidate lists) gives the same answer.
    posted = world.post("/v1/metrics/urls/estimates", {"candidates": list(URLS), "alpha": 0.001})
    assert posted.status_code == 200 and posted.json() == body


def test_bloom_needs_candidates(world: World) -> None:
    response = world.get("/v1/metrics/urls/estimates")
    assert response.status_code == 400 and response.json()["field"] == "candidates"


def test_trusted_exact_counts_for_admins_only(world: World) -> None:
    body = world.get("/v1/metrics/exact/estimates", who="admin").json()
    assert body["level"] is None and body["reports"] == 60
    rows = by_candidate(body["rows"])
    assert [rows[p]["estimate"] for p in PLACES] == world.trusted_ones.tolist()
    assert all(rows[p]["std_error"] == 0.0 for p in PLACES)
    certificates = world.get("/v1/metrics/exact/certificates", who="admin", threshold=10, alpha=0).json()
    bounds = {c["candidate"]: c["upper_bound"] for c in certificates["rows"]}
    assert [bounds[p] for p in PLACES] == world.trusted_ones.tolist()
    for path in ("estimates", "certificates?threshold=1&alpha=0"):
        refused = world.get(f"/v1/metrics/exact/{path}")
        assert refused.status_code == 403 and refused.json()["field"] == "metric", refused.text


def test_below_min_batch_size_no_numbers(world: World) -> None:
    body = world.ok("/v1/metrics/small/estimates")
    assert body["rows"] is None and body["detected"] is None and body["reports"] == 37
    assert "37" in body["reason"] and "min_batch_size 100" in body["reason"]
    certificates = world.ok("/v1/metrics/small/certificates", threshold=5, alpha=0)
    assert certificates["rows"] is None and certificates["safe"] is None and certificates["reason"]
    csv_answer = world.get("/v1/metrics/small/estimates", format="csv")
    assert csv_answer.status_code == 200 and csv_answer.text == ",".join(ESTIMATE_COLUMNS) + "\n"
    assert "min_batch_size" in csv_answer.headers["X-Onesided-Reason"]
    # A window without reports is below it too; a metric without any report says so.
    empty = world.ok("/v1/metrics/visits/estimates", window=world.window - WINDOW)
    assert empty["rows"] is None and empty["reports"] == 0
    nothing = world.ok("/v1/metrics/sym/estimates", candidates="a")
    assert nothing["window"] is None and "no reports" in nothing["reason"]


def test_csv_parses_to_the_json_rows(world: World) -> None:
    body = world.ok("/v1/metrics/visits/estimates")
    answer = world.get("/v1/metrics/visits/estimates", format="csv")
    assert answer.headers["Content-Type"].startswith("text/csv")
    assert answer.headers["X-Onesided-Window"] == str(world.window)
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    assert [r["candidate"] for r in rows] == [r["candidate"] for r in body["rows"]]
    for parsed, row in zip(rows, body["rows"], strict=True):
        # CSV floats carry 6 significant digits (JSON keeps every digit)
        assert float(parsed["estimate"]) == pytest.approx(row["estimate"], rel=1e-5, abs=1e-12)
        assert float(parsed["std_error"]) == pytest.approx(row["std_error"], rel=1e-5)
        assert parsed["detected"] == ("true" if row["detected"] else "false")
    certificates = world.get("/v1/metrics/visits/certificates", threshold=THRESHOLD, alpha=0, format="csv")
    parsed_certificates = list(csv.DictReader(io.StringIO(certificates.text)))
    assert tuple(parsed_certificates[0]) == CERTIFICATE_COLUMNS and len(parsed_certificates) == len(PLACES)


def test_nonnegative_display_clips_only_when_asked(world: World) -> None:
    body = world.ok("/v1/metrics/visits/estimates")
    assert body["display"] == "unbiased"
    negative = [r for r in body["rows"] if r["estimate"] < 0]
    assert negative  # 8 of the 12 places are held by nobody; this seeded collection (seed 11) has negatives
    shown = world.ok("/v1/metrics/visits/estimates", display="nonnegative")
    assert shown["display"] == "nonnegative"
    assert shown["rows"] == display_rows(body["rows"])
    assert all(r[key] >= 0 for r in shown["rows"] for key in ("estimate", "lower", "upper", "proportion"))
    assert all(r["std_error"] == u["std_error"] and r["p_value"] == u["p_value"]
               for r, u in zip(shown["rows"], body["rows"], strict=True))
    assert world.ok("/v1/metrics/visits/estimates") == body  # the unbiased answer is untouched afterwards
    posted = world.post("/v1/metrics/visits/estimates", {"display": "nonnegative"})
    assert posted.status_code == 200 and posted.json() == shown
    answer = world.get("/v1/metrics/visits/estimates", display="nonnegative", format="csv")
    assert answer.headers["X-Onesided-Display"] == "nonnegative"
    assert all(float(r["estimate"]) >= 0 for r in csv.DictReader(io.StringIO(answer.text)))
    below = world.ok("/v1/metrics/small/estimates", display="nonnegative")
    assert below["rows"] is None and below["display"] == "nonnegative"


# ---------------------------------------------------------------------------
# certificates
# ---------------------------------------------------------------------------


def test_alpha_zero_certificates_are_never_wrong(world: World) -> None:
    body = world.ok("/v1/metrics/visits/certificates", threshold=THRESHOLD, alpha=0)
    assert body["threshold"] == THRESHOLD and body["alpha"] == 0.0 and body["reports"] == DIRECT_REPORTS
    truth = {p: DIRECT_HOLDERS.get(p, 0) for p in PLACES}
    rows = by_candidate(body["rows"])
    for place, row in rows.items():
        # Direct metric, one-sided noise: the bound at alpha 0 is the stored count of ones itself.
        assert row["upper_bound"] == world.direct_ones[PLACES.index(place)] >= truth[place]
        assert row["safe"] == (row["upper_bound"] <= THRESHOLD)
        assert row["verdict"] == ("safe" if row["safe"] else "obscure")
        if row["safe"]:
            assert truth[place] <= THRESHOLD
    # Not vacuous: about 20 noise ones per place (q = e^-3), so the 8 empty places and place-03
    # (10 holders) are certified at 50; binomial tails: place-03 fails with 7e-6, the others 1e-9.
    assert {p for p, r in rows.items() if r["safe"]} >= {"place-03", *PLACES[4:]}
    assert body["safe"] == sum(r["safe"] for r in rows.values())


def test_bloom_certificates_hold_against_the_planted_truth(world: World) -> None:
    for alpha in (0, 0.05):
        body = world.ok("/v1/metrics/urls/certificates", threshold=100, alpha=alpha, candidates=",".join(URLS))
        for row in body["rows"]:
            # 300, 200 and 120 holders are above 100: an alpha 0 bound is >= the truth, never safe.
            # At 0.05 a false "safe" for 120 holders needs a 4-sigma deficit of noise ones (sd ~ 13)
            # on one of the 16 bit selections: probability < 1e-3 (the guarantee alone says 5%).
            if row["candidate"] in BLOOM_HOLDERS:
                assert not row["safe"], (alpha, row)
                assert row["upper_bound"] >= BLOOM_HOLDERS[row["candidate"]] or alpha > 0


def test_symmetric_metric_refused_with_mode(world: World) -> None:
    response = world.get("/v1/metrics/sym/certificates", threshold=1, alpha=0, candidates="a")
    assert response.status_code == 400
    assert response.json()["field"] == "mode" and "two-sided" in response.json()["detail"]


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("estimates", {"alpha": "2"}, "alpha"),
        ("estimates", {"alpha": "x"}, "alpha"),
        ("estimates", {"alpha": "nan"}, "alpha"),
        ("estimates", {"correction": "holm"}, "correction"),
        ("estimates", {"confidence": "1"}, "confidence"),
        ("estimates", {"method": "magic"}, "method"),
        ("estimates", {"window": "-3600"}, "window"),
        ("estimates", {"window": "soon"}, "window"),
        ("estimates", {"window": "1"}, "window"),
        ("estimates", {"round": "one"}, "round"),
        ("estimates", {"candidates": "nowhere"}, "candidates"),
        ("estimates", {"candidates": "place-00,place-00"}, "candidates"),
        ("estimates", {"candidates": ","}, "candidates"),
        ("estimates", {"format": "xml"}, "format"),
        ("estimates", {"display": "clipped"}, "display"),
        ("certificates", {"threshold": "5", "alpha": "0", "display": "nonnegative"}, "display"),
        ("estimates", {"treshold": "3"}, "treshold"),
        ("estimates", {"threshold": "3"}, "threshold"),
        ("certificates", {"alpha": "0"}, "threshold"),
        ("certificates", {"threshold": "5"}, "alpha"),
        ("certificates", {"threshold": "-1", "alpha": "0"}, "threshold"),
        ("certificates", {"threshold": "1.5", "alpha": "0"}, "threshold"),
        ("certificates", {"threshold": "5", "alpha": "1"}, "alpha"),
        ("certificates", {"threshold": "5", "alpha": "-0.1"}, "alpha"),
        ("certificates", {"threshold": "5", "alpha": "0", "correction": "bh"}, "correction"),
    ],
)
def test_bad_parameters_name_the_field(world: World, path: str, params: dict[str, str], field: str) -> None:
    response = world.get(f"/v1/metrics/visits/{path}", **params)
    assert response.status_code == 400, response.text
    assert response.json()["field"] == field, response.text


def test_bad_bodies_and_unknown_things(world: World) -> None:
    for body, field in (([1], "body"), ({"alpha": True}, "alpha"), ({"candidates": "a,b"}, "candidates"),
                        ({"window": 3600.5}, "window"), ({"extra": 1}, "extra")):
        response = world.post("/v1/metrics/visits/estimates", body)
        assert response.status_code == 400 and response.json()["field"] == field, (body, response.text)
    assert world.get("/v1/metrics/visits/estimates", round="999").json()["field"] == "round"
    assert world.get("/v1/metrics/visits/estimates", round="999").status_code == 404
    assert world.get("/v1/metrics/nothing/estimates").status_code == 404
    assert requests.get(f"{world.srv.url}/v1/metrics/visits/estimates", timeout=30).status_code == 401


def test_request_validators_directly() -> None:
    assert DecodeRequest.from_mapping({}).candidates is None
    assert CertifyRequest.from_mapping({"threshold": "0", "alpha": "0"}).threshold == 0
    with pytest.raises(ParameterError) as caught:
        DecodeRequest(alpha=0.05, correction="bh", candidates=("a", ""))
    assert caught.value.field == "candidates"
    with pytest.raises(ParameterError) as caught:
        CertifyRequest(threshold=True, alpha=0.0)
    assert caught.value.field == "threshold"


# ---------------------------------------------------------------------------
# window and round defaulting, rounds API summary (SQLite and PostgreSQL)
# ---------------------------------------------------------------------------


def _open_round(srv: LiveServer, admin: str, level_to: float) -> int:
    response = requests.post(f"{srv.url}/v1/metrics/visits/rounds", json={"level_to": level_to},
                             headers=bearer(admin), timeout=30)
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def _close_round(srv: LiveServer, admin: str, round_id: int) -> None:
    response = requests.post(f"{srv.url}/v1/rounds/{round_id}/close", headers=bearer(admin), timeout=30)
    assert response.status_code == 200, response.text


@contextlib.contextmanager
def _rounds_world(backend: str, folder: Path) -> Iterator[tuple[World, int]]:
    with database_url(backend, folder) as url, live_server(url, folder) as srv:
        admin = srv.admin_token()
        assert srv.register(DIRECT, admin).status_code == 201
        window = current_window(DIRECT)
        world = World(srv=srv, window=window, admin=admin, analyst=srv.analyst_token(),
                      direct_ones=np.zeros(0, np.int64), bloom_counts=BitCounts.zeros(1, 1),
                      trusted_ones=np.zeros(0, np.int64))
        yield world, window


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_and_round_defaults(backend: str, tmp_path: Path) -> None:
    with _rounds_world(backend, tmp_path) as (world, window):
        srv, seal = world.srv, world.srv.keys.seal_public_raw
        previous = window - WINDOW
        _upload(srv, make_reports(DIRECT, seal, 60, seed=1, window=previous).envelopes)
        current = make_reports(DIRECT, seal, 80, seed=2, window=window)
        _upload(srv, current.envelopes)
        body = world.ok("/v1/metrics/visits/estimates")
        assert (body["window"], body["round"], body["reports"]) == (window, 0, 80)  # the latest window
        assert world.ok("/v1/metrics/visits/estimates", window=previous)["reports"] == 60

        first = _open_round(srv, world.admin, 8.0)
        relaxed = make_reports(DIRECT, seal, 70, seed=3, window=window, round=first, level=8.0)
        _upload(srv, relaxed.envelopes)
        body = world.ok("/v1/metrics/visits/estimates")
        assert (body["round"], body["level"], body["reports"]) == (0, 6.0, 80)  # an open round does not supersede
        explicit = world.ok("/v1/metrics/visits/estimates", round=first)
        assert (explicit["round"], explicit["level"], explicit["reports"]) == (first, 8.0, 70)

        _close_round(srv, world.admin, first)
        body = world.ok("/v1/metrics/visits/estimates")
        assert (body["window"], body["round"], body["level"], body["reports"]) == (window, first, 8.0, 70)
        ones, _ = relaxed.expected(1)
        estimates, std_errors = closed_form(ones[0], 70, 8.0)  # decoded at the round's level
        rows = by_candidate(body["rows"])
        assert [rows[p]["estimate"] for p in PLACES] == pytest.approx(estimates.tolist(), rel=1e-12, abs=1e-9)
        assert [rows[p]["std_error"] for p in PLACES] == pytest.approx(std_errors.tolist(), rel=1e-12, abs=1e-9)
        certificates = world.ok("/v1/metrics/visits/certificates", threshold=5, alpha=0)
        assert certificates["round"] == first
        assert [c["upper_bound"] for c in certificates["rows"]] == ones[0].tolist()
        assert world.ok("/v1/metrics/visits/estimates", window=previous)["round"] == 0  # no round reports there
        assert world.ok("/v1/metrics/visits/estimates", round=0)["reports"] == 80

        # A later round closed with fewer than min_batch_size reports does not supersede the first.
        second = _open_round(srv, world.admin, 10.0)
        _upload(srv, make_reports(DIRECT, seal, 10, seed=4, window=window, round=second, level=10.0).envelopes)
        _close_round(srv, world.admin, second)
        assert world.ok("/v1/metrics/visits/estimates")["round"] == first
        assert world.ok("/v1/metrics/visits/estimates", round=second)["rows"] is None

        # GET /v1/rounds/<id> carries the summary, and none below min_batch_size.
        summary = world.ok(f"/v1/rounds/{first}")["decoding"]
        assert summary["reports"] == 70 and summary["windows"] == [window] and summary["level"] == 8.0
        top = summary["top"]
        assert len(top) == len(PLACES) and [r["estimate"] for r in top] == sorted(estimates.tolist(), reverse=True)
        assert "decoding" not in world.ok(f"/v1/rounds/{second}")


def test_round_summary_of_a_bloom_metric(tmp_path: Path) -> None:
    params = dataclasses.replace(BLOOM, min_batch_size=50)
    with database_url("sqlite", tmp_path) as url, live_server(url, tmp_path) as srv:
        admin = srv.admin_token()
        assert srv.register(params, admin).status_code == 201
        response = requests.post(f"{srv.url}/v1/metrics/urls/rounds", json={"level_to": 5.0},
                                 headers=bearer(admin), timeout=30)
        round_id = response.json()["id"]
        window = current_window(params)
        env, bits, cohorts = planted_reports(params, BLOOM_HOLDERS, 800, seed=21, window=window,
                                             seal_public=srv.keys.seal_public_raw, round=round_id, level=5.0)
        _upload(srv, env)
        summary = requests.get(f"{srv.url}/v1/rounds/{round_id}", headers=bearer(admin), timeout=30).json()["decoding"]
        assert summary["reports"] == 800 and "top" not in summary
        # Mean over (cohort, bit) of sqrt((N_j - t) p / (1 - p)), t = clamped bit estimate, p = e^-2.5.
        counts = stored_counts(bits, cohorts, params.num_cohorts)
        p = math.exp(-2.5)
        n = counts.totals[:, None].astype(float)
        t = np.clip((counts.ones - p * n) / (1 - p), 0, n)
        assert summary["mean_bit_std_error"] == pytest.approx(float(np.sqrt((n - t) * p / (1 - p)).mean()))


def test_choose_collection_rules() -> None:
    metric = MetricRecord(id=1, params=DIRECT, digest=DIRECT.digest(), created_at=0, updated_at=0)

    def round_(rid: int, closed: bool, metric_name: str = "visits") -> RoundRecord:
        return RoundRecord(id=rid, metric=metric_name, level_from=6.0, level_to=6.0 + rid, cohorts=None,
                           opened_at=0, expires_at=10**10, closed_at=5 if closed else None, announcement={})

    collections = [Collection(window=0, round=0, reports=80), Collection(window=3600, round=0, reports=10),
                   Collection(window=0, round=2, reports=60), Collection(window=0, round=3, reports=90)]
    rounds = [round_(2, True), round_(3, False), round_(4, True, "other")]
    # Window 3600 is too small, so the default window is 0; round 3 is open, so round 2 wins.
    chosen = choose_collection(metric, collections, rounds, window=None, round=None, now=100)
    assert (chosen.window, chosen.round, chosen.level, chosen.reports) == (0, 2, 8.0, 60)
    # Round 3 expired by now: it is finished and supersedes round 2.
    later = choose_collection(metric, collections, rounds, window=None, round=None, now=10**10)
    assert (later.round, later.level, later.reports) == (3, 9.0, 90)
    small = choose_collection(metric, collections, rounds, window=3600, round=None, now=100)
    assert (small.window, small.round, small.reports) == (3600, 0, 10)
    with pytest.raises(NotFound):
        choose_collection(metric, collections, rounds, window=None, round=4, now=100)  # another metric's round
    with pytest.raises(ParameterError):
        choose_collection(metric, collections, rounds, window=1800, round=None, now=100)
    nothing = choose_collection(metric, [], [], window=None, round=None, now=0)
    assert (nothing.window, nothing.round, nothing.reports) == (None, 0, 0)


# ---------------------------------------------------------------------------
# the CLI
# ---------------------------------------------------------------------------


def _cli(world: World, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([*args[:1], "--server", world.srv.url, "--token", world.analyst, *args[1:]])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_estimates_and_certify(world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = _cli(world, capsys, "estimates", "visits", "--format", "csv")
    assert code == 0
    assert out == world.get("/v1/metrics/visits/estimates", format="csv").text  # one CSV writer for both
    code, out, _ = _cli(world, capsys, "certify", "visits", "--threshold", str(THRESHOLD), "--alpha", "0",
                        "--candidates", "place-00,place-03", "--json")
    answer = json.loads(out)
    assert code == 0 and [(c["candidate"], c["verdict"]) for c in answer["rows"]] == [
        ("place-00", "obscure"), ("place-03", "safe")]
    # A long candidate list from a file travels as a JSON body; same numbers as the query string.
    many = [f"https://example.org/unlisted/{i:04d}" for i in range(150)] + list(URLS)
    listing = tmp_path / "candidates.txt"
    listing.write_text("\n".join(many) + "\n\n")
    code, out, _ = _cli(world, capsys, "estimates", "urls", "--candidates-file", str(listing), "--json")
    rows = by_candidate(json.loads(out)["rows"])
    assert code == 0 and set(rows) == set(many)
    code, out, err = _cli(world, capsys, "estimates", "small", "--json")
    assert code == 0 and json.loads(out)["rows"] is None and "min_batch_size" in err
    code, _, err = _cli(world, capsys, "certify", "sym", "--threshold", "1", "--alpha", "0", "--candidates", "a")
    assert code == 2 and "mode" in err


def test_cli_decode_rappor_on_exported_aggregates(
    world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ones, totals = world.srv.storage.bit_counts("urls", window=world.window, round=0)
    paths = export_rappor(tmp_path, BitCounts(ones=ones, totals=totals), BLOOM, None, list(URLS))
    code = main(["decode-rappor", "--params", str(paths["params"]), "--counts", str(paths["counts"]),
                 "--map", str(paths["map"])])
    out, err = capsys.readouterr()
    assert code == 0
    parsed = list(csv.reader(out.splitlines()))
    assert tuple(parsed[0]) == RESULT_COLUMNS
    # The planted values are detected (z ~ 10 at Bonferroni 5% over 12: missed with probability < 1e-9).
    assert {row[0] for row in parsed[1:]} >= set(BLOOM_HOLDERS)
    assert f"note: {len(parsed) - 1} strings of the map detected" in err
    # --all: every string of the map, with a detected column that agrees with the default output
    assert main(["decode-rappor", "--params", str(paths["params"]), "--counts", str(paths["counts"]),
                 "--map", str(paths["map"]), "--all"]) == 0
    every = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["string"] for r in every} == set(URLS)
    assert {r["string"] for r in every if r["detected"] == "TRUE"} == {row[0] for row in parsed[1:]}
    assert main(["decode-rappor", "--params", str(tmp_path / "missing.csv"), "--counts", "x", "--map", "y"]) == 2
    assert "error" in capsys.readouterr().err
