"""The OpenAPI document matches the routes, and no route that needs a role is open."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from aggregator import create_app
from aggregator.server.openapi import (
    HTTP_METHODS,
    app_operations,
    document_operations,
    flask_path,
    openapi_document,
)
from aggregator.server.routes import API_MODULES
from protocol.crypto import AggregatorKeys

PUBLIC = {
    ("/v1/health", "get"),
    ("/v1/livez", "get"),
    ("/v1/readyz", "get"),
    ("/v1/config", "get"),
    ("/v1/openapi.json", "get"),
    ("/v1/reports", "post"),
}


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    application = create_app({"data_dir": tmp_path}, keys=AggregatorKeys.generate())
    yield application
    application.extensions["onesided"].storage.close()


def served_document(app: Flask) -> dict[str, Any]:
    answer = app.test_client().get("/v1/openapi.json")
    assert answer.status_code == 200
    document = answer.get_json()
    assert isinstance(document, dict)
    return document


def test_every_route_is_documented_and_every_documented_route_exists(app: Flask) -> None:
    document = served_document(app)
    assert document["openapi"].startswith("3.")
    routes, described = app_operations(app), document_operations(document)
    assert routes == described, {"undocumented": routes - described, "missing": described - routes}
    assert PUBLIC <= routes
    assert len(routes) >= 7


def test_every_blueprint_module_describes_its_routes() -> None:
    modules = API_MODULES
    assert {m.__name__.rsplit(".", 1)[1] for m in modules} >= {"config", "health", "metrics", "reports", "spec"}
    # every view module of the package is listed (the list is explicit, not discovered)
    views = {p.stem for p in Path(API_MODULES[0].__file__).parent.glob("*.py")} - {"__init__", "common", "errors", "schema"}
    assert views == {m.__name__.rsplit(".", 1)[1] for m in modules}
    for module in modules:
        # the API is under /v1; pages (the dashboard) are not API routes
        own = {flask_path(rule.rule) for rule in _rules_of(module) if rule.rule.startswith("/v1/")}
        assert own == set(module.OPENAPI_PATHS), module.__name__


def _rules_of(module: Any) -> list[Any]:
    app = Flask("probe")
    app.register_blueprint(module.blueprint)
    return [r for r in app.url_map.iter_rules() if r.endpoint != "static"]


def test_references_resolve(app: Flask) -> None:
    document = served_document(app)
    text = repr(document)
    for ref in set(re.findall(r"'#/components/([a-zA-Z]+)/([A-Za-z]+)'", text)):
        assert ref[1] in document["components"][ref[0]], ref


def test_roles_in_the_document_are_the_roles_the_views_enforce(app: Flask) -> None:
    document = openapi_document()
    views = {
        (flask_path(rule.rule), method.lower()): app.view_functions[rule.endpoint]
        for rule in app.url_map.iter_rules()
        for method in rule.methods or ()
        if method.lower() in HTTP_METHODS
    }
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            enforced = getattr(views[(path, method)], "required_roles", None)
            if operation.get("security") == []:
                assert (path, method) in PUBLIC and enforced is None, (path, method)
            else:
                assert enforced is not None and list(enforced) == operation["x-roles"], (path, method)


def test_no_route_needing_a_role_answers_without_a_token(app: Flask) -> None:
    client = app.test_client()
    for path, method in app_operations(app) - PUBLIC:
        concrete = re.sub(r"\{[^}]+\}", "1", path)
        for headers in ({}, {"Authorization": "Bearer ons_not-a-real-token"}, {"Authorization": "Basic abc"}):
            answer = client.open(concrete, method=method.upper(), json={}, headers=headers)
            assert answer.status_code == 401, (path, method, headers, answer.get_data(as_text=True))
            assert answer.get_json()["error"] == "unauthorized"


def _keywords(schema: Any, definitions: dict[str, Any], seen: set[str]) -> set[str]:
    """Every keyword used in ``schema`` and what it refers to (``$ref`` followed once)."""
    if not isinstance(schema, dict):
        return set()
    found = set(schema)
    ref = schema.get("$ref")
    if ref is not None and ref not in seen:
        seen.add(ref)
        found |= _keywords(definitions[ref.rsplit("/", 1)[1]], definitions, seen)
    for key in ("items", "additionalProperties"):
        found |= _keywords(schema.get(key), definitions, seen)
    for sub in (*schema.get("properties", {}).values(), *schema.get("oneOf", ())):
        found |= _keywords(sub, definitions, seen)
    return found


def test_request_schemas_use_only_what_the_body_check_understands() -> None:
    # a keyword the check does not know would be documented but not enforced
    from aggregator.server.api.schema import ANNOTATIONS, KEYWORDS, body_schema

    document = openapi_document()
    definitions = document["components"]["schemas"]
    checked = 0
    for path, method in document_operations(document):
        schema = body_schema(document, path, method)
        if schema is not None:
            checked += 1
            assert _keywords(schema, definitions, set()) <= KEYWORDS | ANNOTATIONS, (path, method)
    assert checked >= 9
