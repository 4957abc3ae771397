"""HTTP edges found by a black-box campaign: huge ids, chunked bodies, 405 without Allow, the spec's bounds.

* ids of 2**31 and more (and 2**63, past SQLite's integers) on every ``<id>``
  route answered 500 from the database; they are 404 like any missing row;
* a chunked body over ``max_body_bytes`` was cut at the limit and answered
  400 (the cut JSON); it is 413 ``payload_too_large``, in both body forms;
* 405 answers carry ``Allow``;
* the OpenAPI document states 415 for every operation with a body, and the
  bounds the validators enforce, from the same constants.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from aggsupport import BACKENDS, LiveServer, bearer, database_url, live_server, make_params

from aggregator.server.api.common import MAX_ROW_ID
from aggregator.server.openapi import HTTP_METHODS
from protocol.randomizers import MAX_LEVEL
from protocol.wire import CONTENT_TYPE_BINARY, CONTENT_TYPE_JSON

BODY_LIMIT = 4096


@pytest.fixture(params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LiveServer]:
    with database_url(request.param, tmp_path) as url, live_server(url, tmp_path, max_body_bytes=BODY_LIMIT) as srv:
        yield srv


@pytest.mark.parametrize("number", [MAX_ROW_ID + 1, 2**63 - 1, 2**63, 2**64 + 5, 10**30])
def test_ids_beyond_the_column_are_404(server: LiveServer, number: int) -> None:
    admin = server.admin_token()
    calls = (
        ("GET", f"/v1/releases/{number}", None),
        ("POST", f"/v1/releases/{number}/relax", {"epsilon": 1.0}),
        ("GET", f"/v1/rounds/{number}", None),
        ("POST", f"/v1/rounds/{number}/close", None),
    )
    for method, path, body in calls:
        answer = requests.request(method, server.url + path, json=body, headers=bearer(admin), timeout=10)
        assert answer.status_code == 404, (path, answer.text)
        assert answer.json()["error"] == "not_found"


def test_an_existing_id_at_the_bound_still_routes(server: LiveServer) -> None:
    admin = server.admin_token()
    answer = requests.get(f"{server.url}/v1/rounds/{MAX_ROW_ID}", headers=bearer(admin), timeout=10)
    assert answer.status_code == 404 and answer.json()["field"] == "round"  # the view answered, not the router


def _post_chunked(server: LiveServer, pieces: list[bytes], content_type: str) -> tuple[int, dict[str, Any]]:
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", "/v1/reports", body=iter(pieces), encode_chunked=True,
                           headers={"Content-Type": content_type})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


@pytest.mark.parametrize("content_type", [CONTENT_TYPE_JSON, CONTENT_TYPE_BINARY])
def test_chunked_bodies_over_the_limit_are_413(server: LiveServer, content_type: str) -> None:
    status, body = _post_chunked(server, [b"{" + b" " * 1000] * 8, content_type)
    assert (status, body["error"]) == (413, "payload_too_large")
    # just under the limit the body is read whole and judged on its content
    status, body = _post_chunked(server, [b'{"version": 1, "reports": []}', b" " * (BODY_LIMIT - 100)],
                                 CONTENT_TYPE_JSON)
    assert status == 400 and body["error"] != "payload_too_large"


def test_405_says_which_methods_are_allowed(server: LiveServer) -> None:
    for method, path, allowed in (
        ("DELETE", "/v1/health", {"GET", "HEAD", "OPTIONS"}),
        ("GET", "/v1/reports", {"POST", "OPTIONS"}),
        ("PUT", "/v1/metrics", {"GET", "HEAD", "POST", "OPTIONS"}),
    ):
        answer = requests.request(method, server.url + path, timeout=10)
        assert answer.status_code == 405 and answer.json()["error"] == "method_not_allowed"
        assert set(answer.headers["Allow"].split(", ")) == allowed


def test_the_spec_states_415_and_the_bounds_the_server_enforces(server: LiveServer) -> None:
    document = requests.get(f"{server.url}/v1/openapi.json", timeout=10).json()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS and "requestBody" in operation:
                assert "415" in operation["responses"], (path, method)
                assert "413" in operation["responses"], (path, method)
    params = {p["name"]: p["schema"] for p in document["paths"]["/v1/rounds/{round_id}/close"]["post"]["parameters"]}
    assert params["round_id"] == {"type": "integer", "minimum": 1, "maximum": MAX_ROW_ID}
    body = document["paths"]["/v1/metrics/{name}/rounds"]["post"]["requestBody"]["content"][CONTENT_TYPE_JSON]
    assert body["schema"]["properties"]["level_to"]["maximum"] == MAX_LEVEL
    # and the server refuses what the spec excludes, naming the field
    admin = server.admin_token()
    assert server.register(make_params(level=1.0), admin).status_code == 201
    over = requests.post(f"{server.url}/v1/metrics/places/rounds", json={"level_to": MAX_LEVEL * 2},
                         headers=bearer(admin), timeout=10)
    assert over.status_code == 400 and over.json()["field"] == "level_to"
    metric = document["components"]["schemas"]["MetricParams"]["properties"]["level"]
    assert metric["maximum"] == MAX_LEVEL
    too_high = {**make_params("high").to_dict(), "level": MAX_LEVEL * 2}
    answer = requests.post(f"{server.url}/v1/metrics", json=too_high, headers=bearer(admin), timeout=10)
    assert answer.status_code == 400 and answer.json()["field"] == "level"
