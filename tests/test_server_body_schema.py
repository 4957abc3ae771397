"""The request-body check that the served OpenAPI document drives (aggregator/server/api/schema.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aggregator import create_app
from aggregator.server.api.schema import check
from aggregator.server.openapi import openapi_document
from protocol.crypto import AggregatorKeys
from protocol.errors import ParameterError

DOCUMENT = openapi_document()
DEFINITIONS = DOCUMENT["components"]["schemas"]
BLOOM = {"kind": "bloom", "num_bits": 64, "num_hashes": 2, "num_cohorts": 4}


def _refused(body: Any, schema_name: str) -> tuple[str, str]:
    with pytest.raises(ParameterError) as caught:
        check(body, DEFINITIONS[schema_name], "body", DEFINITIONS)
    return caught.value.field, str(caught.value)


@pytest.mark.parametrize(("body", "field", "words"), [
    ([], "body", "must be an object"),
    ({"encoding": BLOOM, "mode": "symmetric"}, "name", "is required"),
    ({"name": "m", "encoding": BLOOM, "mode": "loose"}, "mode", "must be one of"),
    ({"name": "M", "encoding": BLOOM, "mode": "trusted"}, "name", "must match"),
    ({"name": "m", "encoding": {**BLOOM, "num_bits": 5000}, "mode": "trusted"}, "encoding.num_bits", "<= 4096"),
    ({"name": "m", "encoding": {**BLOOM, "kind": "blom"}, "mode": "trusted"}, "encoding.kind", "one of"),
    ({"name": "m", "encoding": {**BLOOM, "num_bits": 64.0}, "mode": "trusted"}, "encoding.num_bits", "an integer"),
    ({"name": "m", "encoding": {"kind": "direct", "domain": ["a", "a"]}, "mode": "trusted"},
     "encoding.domain[1]", "repeats"),
    ({"name": "m", "encoding": BLOOM, "mode": "trusted", "colour": 1}, "colour", "not a known field"),
    ({"name": "m", "encoding": BLOOM, "mode": "symmetric", "level": 0.0}, "level", ">= 1e-06"),
    ({"name": "m", "encoding": BLOOM, "mode": "symmetric", "level": True}, "level", "a number or null"),
])
def test_metric_params_breaking_the_document_name_the_field(body: Any, field: str, words: str) -> None:
    got_field, message = _refused(body, "MetricParams")
    assert got_field == field and words in message, message


def test_a_body_the_document_allows_passes() -> None:
    check({"name": "m", "encoding": BLOOM, "mode": "symmetric", "level": 1.0}, DEFINITIONS["MetricParams"],
          "body", DEFINITIONS)
    check({"name": "m", "encoding": {"kind": "prefix", "num_bits": 8, "num_hashes": 1, "lengths": [2, 4]},
           "mode": "trusted", "level": None}, DEFINITIONS["MetricParams"], "body", DEFINITIONS)


@pytest.fixture
def client(tmp_path: Path) -> Any:
    app = create_app({"data_dir": tmp_path}, keys=AggregatorKeys.generate())
    state = app.extensions["onesided"]
    token = state.storage.create_token(role="admin", name="admin")[1]
    yield app.test_client(), {"Authorization": f"Bearer {token}"}
    state.storage.close()


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/metrics/m/rounds", {"level_to": 2.0, "colour": 1}, "colour"),
    ("/v1/metrics/m/rounds", {"level_to": 2.0, "expires_in": 0}, "expires_in"),
    ("/v1/metrics/m/rounds", {"level_to": 2.0, "cohorts": [1, 1]}, "cohorts[1]"),
    ("/v1/releases/1/relax", {"epsilon": 2.0, "extra": 1}, "extra"),
    ("/v1/releases/1/relax", {"epsilon": 2.0**21}, "epsilon"),
    ("/v1/metrics/m/association", {"values_a": [], "values_b": ["x"]}, "values_a"),
    ("/v1/releases", {"metric": "", "window": 0, "mechanism": "ageo", "threshold": 1, "epsilon": 1}, "metric"),
])
def test_the_routes_refuse_what_the_document_forbids_before_looking_anything_up(
    client: Any, path: str, body: Any, field: str
) -> None:
    # no metric "m", round or release exists: the 400 comes from the document, ahead of the 404
    test_client, headers = client
    answer = test_client.post(path, json=body, headers=headers)
    assert answer.status_code == 400 and answer.get_json()["field"] == field, answer.get_data(as_text=True)


@pytest.mark.parametrize(("query", "field"), [
    ("window=-1", "window"),
    ("window=1.5", "window"),
    ("alpha=1", "alpha"),
    ("alpha=nan", "alpha"),
    ("method=magic", "method"),
    ("candidates=" + ",".join(f"c{i}" for i in range(10_001)), "candidates"),
])
def test_query_values_breaking_the_document_are_refused(client: Any, query: str, field: str) -> None:
    test_client, headers = client
    answer = test_client.get(f"/v1/metrics/m/estimates?{query}", headers=headers)
    assert answer.status_code == 400 and answer.get_json()["field"] == field, answer.get_data(as_text=True)


def test_empty_query_values_count_as_absent(client: Any) -> None:
    test_client, headers = client
    answer = test_client.get("/v1/metrics/m/estimates?window=&alpha=", headers=headers)
    assert answer.status_code == 404 and answer.get_json()["field"] == "metric"  # reached the lookup


def _metric(encoding: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "m", "encoding": encoding, "mode": "trusted", **extra}


def _bound(schema: str, *path: str) -> int:
    node: Any = DEFINITIONS[schema]
    for step in path:
        node = node[step]
    return int(node)


# each written-down bound of the metric schema, and a body at that value (the document's maximum)
BOUNDS = [
    (("BloomEncoding", "properties", "num_bits", "maximum"),
     lambda n: _metric({**BLOOM, "num_bits": n})),
    (("BloomEncoding", "properties", "num_hashes", "maximum"),
     lambda n: _metric({**BLOOM, "num_bits": 4096, "num_hashes": n})),
    (("BloomEncoding", "properties", "num_cohorts", "maximum"),
     lambda n: _metric({**BLOOM, "num_cohorts": n})),
    (("PrefixEncoding", "properties", "lengths", "items", "maximum"),
     lambda n: _metric({"kind": "prefix", "num_bits": 8, "num_hashes": 1, "lengths": [n]})),
    (("PrefixEncoding", "properties", "lengths", "maxItems"),
     lambda n: _metric({"kind": "prefix", "num_bits": 8, "num_hashes": 1, "lengths": [1] * n})),
    (("DirectEncoding", "properties", "domain", "maxItems"),
     lambda n: _metric({"kind": "direct", "domain": [f"v{i}" for i in range(n)]})),
    (("MetricParams", "properties", "time_precision", "maximum"),
     lambda n: _metric(BLOOM, time_precision=n)),
    (("MetricParams", "properties", "min_batch_size", "maximum"),
     lambda n: _metric(BLOOM, min_batch_size=n)),
    (("MetricParams", "properties", "max_items", "maximum"),
     lambda n: _metric({**BLOOM, "num_bits": 4096}, max_items=n)),
]


@pytest.mark.parametrize(("path", "body"), BOUNDS, ids=[".".join(p[:3]) for p, _ in BOUNDS])
def test_the_documents_metric_bounds_are_the_protocols_exactly(path: tuple[str, ...], body: Any) -> None:
    # the schema writes these bounds as numbers; the protocol's checks must allow exactly up to them
    from protocol.params import MetricParams

    bound = _bound(*path)
    MetricParams.from_dict(body(bound))  # at the bound: accepted
    with pytest.raises(ParameterError):
        MetricParams.from_dict(body(bound + 1))  # one past: refused
