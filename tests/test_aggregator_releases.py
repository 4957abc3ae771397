"""Central releases over the real HTTP API on loopback (aggregator.server.api.releases).

A trusted metric with the direct encoding gets sealed reports with known
bits, so the exact per-place counts of each window are known here; the
releases are then requested as analysts would, over TCP.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
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
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.cli.main import main
from aggregator.server.openapi import app_operations, document_operations, openapi_document
from aggregator.server.services.releases import (
    BUDGET_ENV,
    DEFAULT_ANALYST_BUDGET,
    REQUEST_FIELDS,
    ReleaseRequest,
    ReleaseService,
    analyst_budget,
)
from protocol.central import mechanism_names
from protocol.encodings import DirectEncoding
from protocol.errors import BudgetExceeded, ParameterError
from protocol.params import MetricParams

DOMAIN = tuple(f"place-{i:02d}" for i in range(16))
MAX_ITEMS = 8  # a person's report keeps at most 8 places (a few of the 200 reports are clipped)
VISITS = MetricParams(
    name="visits", encoding=DirectEncoding(domain=DOMAIN), mode="trusted", level=math.inf, time_precision=WINDOW,
    max_items=MAX_ITEMS,
)
BLOOM = make_params("visits-bloom", mode="trusted", level=math.inf)
NOISY = MetricParams(
    name="visits-noisy", encoding=DirectEncoding(domain=DOMAIN), mode="asymmetric", level=2.0, time_precision=WINDOW
)
N_REPORTS = 200  # each place's bit is Bernoulli(0.3), at most 8 kept per report: counts near 59
THRESHOLD = 60
ONE_SIDED = ("alap", "ageo", "salap")
SECRET_KEYS = {"server", "counts", "noise"}


@dataclass
class World:
    """A live aggregator with three metrics, reports in two windows, and tokens."""

    srv: LiveServer
    window: int
    counts: dict[int, np.ndarray]  # exact per-place counts by window
    tokens: dict[str, str]

    def call(self, method: str, who: str | None, path: str, body: Any = None,
             params: dict[str, Any] | None = None) -> requests.Response:
        headers = bearer(self.tokens[who]) if who else {}
        return requests.request(method, f"{self.srv.url}{path}", json=body, params=params, headers=headers,
                                timeout=30)

    def create(self, who: str, **body: Any) -> requests.Response:
        """``POST /v1/releases`` with defaults for the fields not given (``None`` leaves one out)."""
        full = {"metric": "visits", "window": self.window, "mechanism": "ageo", "threshold": THRESHOLD, **body}
        return self.call("POST", who, "/v1/releases", {k: v for k, v in full.items() if v is not None})

    def spent(self, who: str, window: int | None = None) -> float:
        params = {"metric": "visits", "window": self.window if window is None else window}
        response = self.call("GET", who, "/v1/releases/budget", params=params)
        assert response.status_code == 200, response.text
        return float(response.json()["spent"])

    def stored(self) -> int:
        return self.srv.storage.table_counts()["releases"]


@contextlib.contextmanager
def make_world(backend: str, folder: Path) -> Iterator[World]:
    with database_url(backend, folder) as url, live_server(url, folder) as srv:
        admin = srv.admin_token()
        for params in (VISITS, BLOOM, NOISY):
            assert srv.register(params, admin).status_code == 201
        window = current_window(VISITS)
        counts = {}
        for i, w in enumerate((window, window - WINDOW)):
            reports = make_reports(VISITS, srv.keys.seal_public_raw, N_REPORTS, seed=100 + i, window=w)
            response = post_reports(srv.url, reports.envelopes)
            assert response.json()["accepted"] == N_REPORTS, response.text
            counts[w] = srv.storage.bit_counts("visits", window=w, round=0)[0][0]  # exact, after clipping
            assert np.all(counts[w] <= reports.expected(1)[0][0])
        bloom = make_reports(BLOOM, srv.keys.seal_public_raw, 20, seed=7, window=window)
        assert post_reports(srv.url, bloom.envelopes).json()["accepted"] == 20
        tokens = {"admin": admin, "alice": srv.analyst_token("alice"), "bob": srv.analyst_token("bob")}
        yield World(srv=srv, window=window, counts=counts, tokens=tokens)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with make_world("sqlite", tmp_path) as w:
        yield w


def secret_keys(data: Any) -> set[str]:
    """Every key anywhere in a JSON document that would carry exact counts or noise."""
    if isinstance(data, dict):
        return {k for k in data if k in SECRET_KEYS}.union(*(secret_keys(v) for v in data.values()))
    if isinstance(data, list):
        return set().union(*(secret_keys(v) for v in data))
    return set()


def answers(view: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    return [a["answer"] for a in view["answers"]], [a["safe"] for a in view["answers"]]


# ---------------------------------------------------------------------------
# releases, safety, privacy of the responses
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_safe_answers_never_wrong_and_nothing_secret(backend: str, tmp_path: Path) -> None:
    with make_world(backend, tmp_path) as w:
        truth = w.counts[w.window]
        # the data straddle the threshold, so "safe" and "unsafe" are both possible
        assert (truth <= THRESHOLD).any() and (truth > THRESHOLD).any()
        for mechanism in ("alap", "ageo", "salap", "laplace", "geometric"):
            response = w.create("alice", mechanism=mechanism, epsilon=1.0)
            assert response.status_code == 201, response.text
            view = response.json()
            assert secret_keys(view) == set() and '"server"' not in response.text
            assert [a["place"] for a in view["answers"]] == list(DOMAIN)
            assert view["mechanism"] == mechanism and view["levels"] == [1.0] and view["epsilon"] == 1.0
            values, safe = answers(view)
            if mechanism in ONE_SIDED:
                for count, answer, is_safe in zip(truth, values, safe, strict=True):
                    assert not (is_safe and count > THRESHOLD)  # never wrong
                    if answer is not None and mechanism != "salap":
                        assert answer >= count  # the noise only adds
                assert view["guarantee"]["one_sided"] is not None
            else:
                assert view["guarantee"]["one_sided"] is None
            assert view["max_items"] == MAX_ITEMS and "at most 8 items" in view["guarantee"]["neighbour"]
            assert view["sensitivity"] == (1 if mechanism == "salap" else MAX_ITEMS)
            assert all(v is None or v / view["grid"] == int(v / view["grid"]) for v in values)  # on the grid
            fetched = w.call("GET", "alice", f"/v1/releases/{view['id']}")
            assert fetched.status_code == 200 and secret_keys(fetched.json()) == set()
            assert answers(fetched.json()) == answers(view)
        assert w.spent("alice") == 5.0
        # non-vacuous (seeded noise; the server's own is secure): some places certified, some not
        bob = w.srv.storage.authenticate(w.tokens["bob"])
        assert bob is not None
        for mechanism in ("alap", "ageo"):
            request = ReleaseRequest.from_dict({"metric": "visits", "window": w.window, "mechanism": mechanism,
                                                "threshold": THRESHOLD, "epsilon": 2.0})
            made = ReleaseService(w.srv.storage, rng=9).create(request, caller=bob)[0].public_view()
            safe = answers(made)[1]
            assert any(safe) and not all(safe)
        listed = w.call("GET", "alice", "/v1/releases").json()["releases"]
        assert len(listed) == 5 and secret_keys(listed) == set()


def test_release_of_selected_places_and_stored_counts(world: World) -> None:
    response = world.create("alice", places=["place-03", "place-00"], mechanism="salap", epsilon=0.5,
                            threshold=1000)
    assert response.status_code == 201, response.text
    view = response.json()
    # threshold far above every count: SALap answers every place "below threshold"
    assert view["answers"] == [{"place": "place-03", "answer": None, "safe": True},
                               {"place": "place-00", "answer": None, "safe": True}]
    stored = world.srv.storage.get_release(view["id"])
    assert stored is not None and stored.analyst == "alice"
    truth = world.counts[world.window]
    assert stored.body["release"]["server"]["counts"] == [truth[3], truth[0]]  # the server keeps the exact counts


# ---------------------------------------------------------------------------
# relaxation and budgets
# ---------------------------------------------------------------------------


def test_relax_charges_the_final_level(world: World) -> None:
    truth = world.counts[world.window]
    for mechanism in ("ageo", "alap", "laplace"):
        first = world.create("alice", mechanism=mechanism, epsilon=1.0).json()
        relaxed = world.call("POST", "alice", f"/v1/releases/{first['id']}/relax", {"epsilon": 3.0})
        assert relaxed.status_code == 200, relaxed.text
        view = relaxed.json()
        assert view["levels"] == [1.0, 3.0] and view["epsilon"] == 3.0 and secret_keys(view) == set()
        before, _ = answers(first)
        after, safe = answers(view)
        if mechanism != "laplace":  # one-sided noise only shrinks: a safe answer stays safe
            assert all(count <= b2 <= b1 for count, b1, b2 in zip(truth, before, after, strict=True))
            assert not any(s and c > THRESHOLD for s, c in zip(safe, truth, strict=True))
    # three releases, each at 3.0 after relaxing from 1.0: 9 spent, not 12
    assert world.spent("alice") == 9.0
    assert view["budget"]["remaining"] == DEFAULT_ANALYST_BUDGET - 9.0


def test_relax_same_level_is_a_no_op_and_lowering_is_refused(world: World) -> None:
    made = world.create("alice", epsilon=2.0).json()
    path = f"/v1/releases/{made['id']}/relax"
    same = world.call("POST", "alice", path, {"epsilon": 2.0})
    assert same.status_code == 200 and same.json()["levels"] == [2.0] and answers(same.json()) == answers(made)
    lower = world.call("POST", "alice", path, {"epsilon": 1.0})
    assert lower.status_code == 409
    assert lower.json()["error"] == "tightening_refused" and lower.json()["field"] == "epsilon"
    assert (lower.json()["current"], lower.json()["requested"]) == (2.0, 1.0)
    assert world.call("GET", "alice", f"/v1/releases/{made['id']}").json()["levels"] == [2.0]


def test_budget_exceeded_stores_nothing(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUDGET_ENV, "2.0")
    assert world.create("alice", epsilon=1.5).status_code == 201
    stored = world.stored()
    refused = world.create("alice", epsilon=1.0)
    assert refused.status_code == 409
    body = refused.json()
    assert (body["error"], body["field"], body["requested"], body["remaining"]) == (
        "budget_exceeded", "epsilon", 1.0, 0.5)
    assert "remaining 0.5" in body["detail"]
    assert world.stored() == stored and world.spent("alice") == 1.5
    # relaxing past the budget: remaining for this release is the budget minus the others (0)
    release_id = world.call("GET", "alice", "/v1/releases").json()["releases"][0]["id"]
    too_far = world.call("POST", "alice", f"/v1/releases/{release_id}/relax", {"epsilon": 2.5})
    assert too_far.status_code == 409 and (too_far.json()["requested"], too_far.json()["remaining"]) == (2.5, 2.0)
    assert world.call("GET", "alice", f"/v1/releases/{release_id}").json()["levels"] == [1.5]
    # the exact limit is allowed
    assert world.call("POST", "alice", f"/v1/releases/{release_id}/relax", {"epsilon": 2.0}).status_code == 200
    assert world.spent("alice") == 2.0
    # budgets are per analyst and per window
    assert world.create("bob", epsilon=2.0).status_code == 201
    assert world.create("alice", epsilon=2.0, window=world.window - WINDOW).status_code == 201
    assert world.spent("alice", world.window - WINDOW) == 2.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_requests_never_overspend(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUDGET_ENV, "1.0")
    with make_world(backend, tmp_path) as w:
        statuses: list[int] = []
        lock = threading.Lock()

        def ask() -> None:
            status = w.create("alice", mechanism="alap", epsilon=0.3).status_code
            with lock:
                statuses.append(status)

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(statuses) == [201] * 3 + [409] * 5
        assert w.stored() == 3 and math.isclose(w.spent("alice"), 0.9)


def test_analyst_budget_setting() -> None:
    assert analyst_budget({}) == DEFAULT_ANALYST_BUDGET == 10.0
    assert analyst_budget({BUDGET_ENV: "2.5"}) == 2.5
    for bad in ("0", "-1", "inf", "nan", "ten"):
        with pytest.raises(RuntimeError, match=BUDGET_ENV):
            analyst_budget({BUDGET_ENV: bad})


# ---------------------------------------------------------------------------
# who sees what
# ---------------------------------------------------------------------------


def test_an_analyst_cannot_read_or_relax_another_analysts_release(world: World) -> None:
    mine = world.create("alice", epsilon=1.0).json()
    path = f"/v1/releases/{mine['id']}"
    for response in (world.call("GET", "bob", path), world.call("POST", "bob", f"{path}/relax", {"epsilon": 2.0})):
        assert response.status_code == 404 and response.json()["field"] == "id"
        assert "answers" not in response.json()
    assert world.call("GET", "bob", "/v1/releases").json()["releases"] == []
    other_budget = world.call("GET", "bob", "/v1/releases/budget",
                              params={"metric": "visits", "window": world.window, "analyst": "alice"})
    assert other_budget.status_code == 403 and other_budget.json()["field"] == "analyst"
    assert world.call("GET", None, path).status_code == 401
    admin_view = world.call("GET", "admin", path)
    assert admin_view.status_code == 200 and answers(admin_view.json()) == answers(mine)
    assert len(world.call("GET", "admin", "/v1/releases").json()["releases"]) == 1
    assert world.call("GET", "alice", path).json()["levels"] == [1.0]  # bob's relax changed nothing


def test_correlated_releases_for_several_analysts(world: World) -> None:
    response = world.create("admin", mechanism="ageo", analysts={"alice": 0.5, "bob": 2.0})
    assert response.status_code == 201, response.text
    made = {r["analyst"]: r for r in response.json()["releases"]}
    assert secret_keys(response.json()) == set()
    assert made["alice"]["group"] == made["bob"]["group"] is not None
    assert (made["alice"]["levels"], made["bob"]["levels"]) == ([0.5], [2.0])
    truth = world.counts[world.window]
    alice, _ = answers(made["alice"])
    bob, _ = answers(made["bob"])
    # one draw, relaxed up the chain: the more trusted analyst's answers are pointwise closer
    assert all(c <= b <= a for c, a, b in zip(truth, alice, bob, strict=True))
    assert (world.spent("alice"), world.spent("bob")) == (0.5, 2.0)
    assert world.call("GET", "alice", f"/v1/releases/{made['alice']['id']}").status_code == 200
    assert world.call("GET", "alice", f"/v1/releases/{made['bob']['id']}").status_code == 404
    # a member may be relaxed only to at least the group's top level, stepping from the top's noise
    path = f"/v1/releases/{made['alice']['id']}/relax"
    between = world.call("POST", "alice", path, {"epsilon": 1.0})
    assert between.status_code == 409 and between.json()["error"] == "correlated_release"
    above = world.call("POST", "alice", path, {"epsilon": 2.5})
    assert above.status_code == 200 and above.json()["levels"] == [0.5, 2.5]
    assert all(c <= a <= b for c, a, b in zip(truth, answers(above.json())[0], bob, strict=True))
    assert world.spent("alice") == 2.5


def test_correlated_release_refusals_store_nothing(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    cases: list[tuple[str, dict[str, Any], int, str]] = [
        ("alice", {"analysts": {"alice": 0.5, "bob": 1.0}}, 403, "analysts"),
        ("admin", {"analysts": {"alice": 0.5, "carol": 1.0}}, 400, "analysts.carol"),
        ("admin", {"analysts": {"alice": 0.5, "bob": -1}}, 400, "analysts.bob"),
        ("admin", {"analysts": {"alice": 0.5}, "epsilon": 1.0}, 400, "epsilon"),
        ("admin", {"analysts": {"alice": 0.5}, "mechanism": "salap"}, 400, "mechanism"),
        ("admin", {"analysts": {}}, 400, "analysts"),
    ]
    for who, body, status, field in cases:
        response = world.create(who, **body)
        assert (response.status_code, response.json()["field"]) == (status, field), (body, response.text)
    monkeypatch.setenv(BUDGET_ENV, "1.0")
    over = world.create("admin", analysts={"alice": 0.5, "bob": 2.0})
    assert over.status_code == 409 and over.json()["field"] == "analysts.bob"
    assert world.stored() == 0


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------

BAD_CREATE = [
    ({"metric": "nothing"}, 404, "metric"),
    ({"metric": "visits-bloom"}, 400, "metric"),
    ({"metric": "visits-noisy"}, 400, "metric"),
    ({"mechanism": "gauss"}, 400, "mechanism"),
    ({"epsilon": 0}, 400, "epsilon"),
    ({"epsilon": -1.0}, 400, "epsilon"),
    ({"epsilon": "1"}, 400, "epsilon"),
    ({"epsilon": None}, 400, "epsilon"),
    ({"threshold": None}, 400, "threshold"),
    ({"places": ["place-01", "atlantis"]}, 400, "places[1]"),
    ({"places": ["place-01", "place-01"]}, 400, "places[1]"),
    ({"places": []}, 400, "places"),
    ({"window": 17}, 400, "window"),
    ({"window": -3600}, 400, "window"),
    ({"window": 0}, 404, "window"),
    ({"sensitivity": 2}, 400, "sensitivity"),  # below max_items = 8: would under-protect a person
    ({"sensitivity": 8.5}, 400, "sensitivity"),  # ageo needs an integer
    ({"sensitivity": 0.5, "mechanism": "alap"}, 400, "sensitivity"),
    ({"colour": "red"}, 400, "colour"),
]


@pytest.mark.parametrize(("change", "status", "field"), BAD_CREATE)
def test_bad_release_requests_name_the_field(world: World, change: dict[str, Any], status: int, field: str) -> None:
    response = world.create("alice", **{"epsilon": 1.0, **change})
    assert (response.status_code, response.json()["field"]) == (status, field), response.text
    if change.get("metric") == "visits-bloom":
        assert "direct" in response.json()["detail"]
    assert world.stored() == 0


def test_bad_relax_requests_name_the_field(world: World) -> None:
    salap = world.create("alice", mechanism="salap", epsilon=1.0).json()
    response = world.call("POST", "alice", f"/v1/releases/{salap['id']}/relax", {"epsilon": 2.0})
    assert (response.status_code, response.json()["field"]) == (400, "mechanism")
    ageo = world.create("alice", epsilon=1.0).json()
    for body in ({"epsilon": 0}, {"epsilon": "2"}, {"eps": 2.0}, [2.0]):
        response = world.call("POST", "alice", f"/v1/releases/{ageo['id']}/relax", body)
        assert (response.status_code, response.json()["field"]) == (400, "body" if body == [2.0] else "epsilon"), body
    missing = world.call("POST", "alice", "/v1/releases/999/relax", {"epsilon": 2.0})
    assert (missing.status_code, missing.json()["field"]) == (404, "id")
    assert world.spent("alice") == 2.0


def test_request_validation_without_a_server() -> None:
    base = {"metric": "visits", "window": 0, "mechanism": "alap", "threshold": 3, "epsilon": 1.0}
    assert ReleaseRequest.from_dict(base).levels is None
    with pytest.raises(ParameterError) as info:
        ReleaseRequest.from_dict({**base, "epsilon": math.inf})
    assert info.value.field == "epsilon"
    with pytest.raises(ParameterError) as info:
        ReleaseRequest.from_dict({k: v for k, v in base.items() if k != "window"})
    assert info.value.field == "window"
    with pytest.raises(ParameterError) as info:
        ReleaseRequest.from_dict([base])
    assert info.value.field == "body"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


VALID_BODY = {"metric": "visits", "window": 3600, "mechanism": "alap", "threshold": 3, "epsilon": 1.0}


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from([*REQUEST_FIELDS, "other"]), JSON_VALUES, max_size=3),
    st.sets(st.sampled_from(sorted(VALID_BODY)), max_size=2),
)
def test_any_json_body_is_a_request_or_a_field_error(changes: dict[str, Any], dropped: set[str]) -> None:
    """A valid body with a few fields replaced by arbitrary JSON or removed: valid, or one named field."""
    body = {k: v for k, v in {**VALID_BODY, **changes}.items() if k not in dropped}
    try:
        parsed = ReleaseRequest.from_dict(body)
    except ParameterError as exc:
        assert exc.field in (*REQUEST_FIELDS, "body", "other") or exc.field.startswith(("places[", "analysts."))
        return
    assert parsed.metric == body["metric"] and 0 <= parsed.window < 2**62 and parsed.mechanism in mechanism_names()
    assert (parsed.epsilon is None) != (parsed.analysts is None)


def test_service_with_a_seeded_source(world: World) -> None:
    """The service alone: same seed, same answers; the budget is checked before anything is stored."""
    admin = world.srv.storage.authenticate(world.tokens["alice"])
    assert admin is not None
    request = ReleaseRequest.from_dict({"metric": "visits", "window": world.window, "mechanism": "ageo",
                                        "threshold": THRESHOLD, "epsilon": 1.0})
    first = ReleaseService(world.srv.storage, budget=2.0, rng=5).create(request, caller=admin)[0]
    second = ReleaseService(world.srv.storage, budget=2.0, rng=5).create(request, caller=admin)[0]
    assert first.release.answers == second.release.answers and first.id != second.id
    with pytest.raises(BudgetExceeded) as info:
        ReleaseService(world.srv.storage, budget=2.0, rng=5).create(request, caller=admin)
    assert (info.value.requested, info.value.remaining) == (1.0, 0.0)
    assert world.stored() == 2


# ---------------------------------------------------------------------------
# OpenAPI and the command line
# ---------------------------------------------------------------------------


def test_openapi_lists_the_release_routes(world: World) -> None:
    served = world.call("GET", None, "/v1/openapi.json").json()
    assert served == json.loads(json.dumps(openapi_document()))
    mine = {op for op in document_operations(served) if op[0].startswith("/v1/releases")}
    assert mine == {
        ("/v1/releases", "post"), ("/v1/releases", "get"), ("/v1/releases/budget", "get"),
        ("/v1/releases/{release_id}", "get"), ("/v1/releases/{release_id}/relax", "post"),
    }
    assert mine == {op for op in app_operations(world.srv.app) if op[0].startswith("/v1/releases")}
    for path, method in mine:
        assert served["paths"][path][method]["x-roles"] == ["analyst", "admin"]
    assert "Release" in served["components"]["schemas"]


def test_cli_release_create_show_relax(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--server", world.srv.url, "--token", world.tokens["alice"]]

    def run(*argv: str) -> tuple[int, Any]:
        code = main(["release", *argv, *common, "--json"])
        out = capsys.readouterr()
        return code, json.loads(out.out) if code == 0 else out.err

    code, made = run("create", "--metric", "visits", "--window", str(world.window), "--epsilon", "1",
                     "--threshold", str(THRESHOLD), "--places", "place-00,place-05")
    assert code == 0 and made["levels"] == [1.0] and len(made["answers"]) == 2 and secret_keys(made) == set()
    code, shown = run("show", str(made["id"]))
    assert code == 0 and answers(shown) == answers(made)
    code, relaxed = run("relax", str(made["id"]), "--epsilon", "2.5")
    assert code == 0 and relaxed["levels"] == [1.0, 2.5] and relaxed["budget"]["spent"] == 2.5
    code, listed = run("list", "--metric", "visits")
    assert code == 0 and [r["id"] for r in listed["releases"]] == [made["id"]]
    code, budget = run("budget", "--metric", "visits", "--window", str(world.window))
    assert code == 0 and budget["remaining"] == DEFAULT_ANALYST_BUDGET - 2.5
    code, err = run("relax", str(made["id"]), "--epsilon", "1")
    assert code == 2 and "tightening_refused" in err and "(epsilon)" in err
    code, err = run("create", "--metric", "visits", "--window", str(world.window), "--threshold", "3",
                    "--analyst", "bob")
    assert code == 2 and "error: --analyst:" in err
