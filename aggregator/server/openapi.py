"""The OpenAPI 3.1 document of the HTTP API, assembled from the blueprints.

Each API module declares its own ``OPENAPI_PATHS`` next to its routes (and
``OPENAPI_SCHEMAS`` for the bodies it uses), so a route and its description
change together. The document is also the first validator: JSON request
bodies are checked against it (:mod:`aggregator.server.api.schema`), and
query parameters that it does not document or whose values break their
schema are refused (:func:`install_openapi`). Routes are authenticated by default (bearer token); a
public operation says ``"security": []``; an authenticated one lists its
roles in ``x-roles``.

>>> flask_path("/v1/rounds/<int:round_id>/close")
'/v1/rounds/{round_id}/close'
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any

from flask import Flask, request

from aggregator.server.api.errors import error_schema
from aggregator.server.api.schema import check_query, flask_path
from aggregator.server.api.spec import DOCUMENT_KEY
from aggregator.server.auth import authenticate_once
from aggregator.server.routes import API_MODULES
from protocol.errors import ParameterError

OPENAPI_VERSION = "3.1.0"
API_VERSION = "1"
HTTP_METHODS = ("get", "put", "post", "delete", "patch")


def _error_response(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _components() -> dict[str, Any]:
    return {
        "securitySchemes": {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "an admin or analyst token from `onesided token create`",
            }
        },
        "schemas": {"Error": error_schema()},
        "responses": {
            "BadRequest": _error_response("invalid input; `field` names it"),
            "Unauthorized": _error_response("missing, unknown or revoked token"),
            "Forbidden": _error_response("the token's role may not use this route"),
            "NotFound": _error_response("no such resource"),
            "Conflict": _error_response("contradicts stored state"),
            "RequestTimeout": _error_response("the request body did not arrive within read_timeout_seconds"),
            "PayloadTooLarge": _error_response("the body is larger than max_body_bytes (any framing)"),
            "UnsupportedMediaType": _error_response("the body's Content-Type is not one the operation takes"),
        },
    }


BODY_RESPONSES = {
    "408": {"$ref": "#/components/responses/RequestTimeout"},
    "413": {"$ref": "#/components/responses/PayloadTooLarge"},
    "415": {"$ref": "#/components/responses/UnsupportedMediaType"},
}


def with_body_responses(item: dict[str, Any]) -> dict[str, Any]:
    """A path item whose operations with a request body also list 408, 413 and 415 (any body may get them)."""
    out = dict(item)
    for method, operation in item.items():
        if method in HTTP_METHODS and "requestBody" in operation:
            out[method] = {**operation, "responses": {**BODY_RESPONSES, **operation["responses"]}}
    return out


def with_state_dependent(path: str, item: dict[str, Any]) -> dict[str, Any]:
    """A path item whose operations on a named resource (``{name}``, ``{round_id}``...) list 404 as state-dependent.

    ``x-state-dependent`` names the 4xx answers that a request valid by this
    document may still get because of what is stored, not because of its
    form: no resource of that name (404), a conflict with stored state (409,
    where the operation says so). Any other refusal of a valid request is a
    disagreement between the document and the validators.
    """
    if "{" not in path:
        return item
    out = dict(item)
    for method, operation in item.items():
        if method in HTTP_METHODS and "404" in operation["responses"]:
            declared = operation.get("x-state-dependent", [])
            out[method] = {**operation, "x-state-dependent": sorted({*declared, "404"})}
    return out


def openapi_document(modules: Iterable[ModuleType] = API_MODULES) -> dict[str, Any]:
    """The document for ``modules`` (default: every API module).

    Raises:
        ValueError: two modules describe the same path or schema.
    """
    components = _components()
    paths: dict[str, Any] = {}
    for module in modules:
        for path, item in getattr(module, "OPENAPI_PATHS", {}).items():
            if path in paths:
                raise ValueError(f"OpenAPI path {path} is described by two modules")
            paths[path] = with_state_dependent(path, with_body_responses(item))
        for name, schema in getattr(module, "OPENAPI_SCHEMAS", {}).items():
            if name in components["schemas"]:
                raise ValueError(f"OpenAPI schema {name} is defined by two modules")
            components["schemas"][name] = schema
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "onesided aggregator",
            "version": API_VERSION,
            "description": "Locally private telemetry with one-sided error; wire format in docs/wire.md. "
                           "An integer is a JSON number written without a fraction or exponent (1, not 1.0): "
                           "JSON Schema would take 1.0, this API refuses it (400 naming the field). "
                           "x-state-dependent lists the 4xx that a request valid by this document may still get "
                           "from stored state; x-checked-in-code lists the fields whose rules across fields "
                           "(in the operation's description) JSON Schema cannot say.",
        },
        "security": [{"bearer": []}],
        "paths": dict(sorted(paths.items())),
        "components": components,
    }


def app_operations(app: Flask, prefix: str = "/v1/") -> set[tuple[str, str]]:
    """``(path, method)`` of every route of ``app`` under ``prefix`` (HEAD and OPTIONS aside)."""
    out = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith(prefix):
            for method in rule.methods or ():
                if method.lower() in HTTP_METHODS:
                    out.add((flask_path(rule.rule), method.lower()))
    return out


def document_operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    """``(path, method)`` of every operation of an OpenAPI document."""
    return {
        (path, method) for path, item in document["paths"].items() for method in item if method in HTTP_METHODS
    }


def query_parameters(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    """``(path, method) -> {name: schema}`` of the query parameters the operation documents (path-item ones too)."""
    out = {}
    for path, item in document["paths"].items():
        shared = [p for p in item.get("parameters", ()) if p.get("in") == "query"]
        for method, operation in item.items():
            if method in HTTP_METHODS:
                own = [p for p in operation.get("parameters", ()) if p.get("in") == "query"]
                out[(path, method)] = {p["name"]: p.get("schema", {}) for p in (*shared, *own)}
    return out


def install_openapi(app: Flask, modules: Iterable[ModuleType] = API_MODULES) -> None:
    """Build ``modules``' document once, for ``GET /v1/openapi.json`` to serve, and enforce its query parameters.

    The document goes to ``app.extensions[DOCUMENT_KEY]``. The check: a query
    parameter the operation does not document is 400 (field: its name), and
    so is a value that breaks the parameter's schema (:func:`check_query`).
    Whether a required one is present is left to the view, after the token.
    On a route that needs a token, the token is checked first.

    The document is the one source of which parameters exist: before, any
    name was silently ignored, so a misspelt ``windw=`` answered as if absent.
    Routes outside the document (``/metrics``, the dashboard) are not checked.
    """
    document = app.extensions[DOCUMENT_KEY] = openapi_document(modules)
    allowed = query_parameters(document)

    def check() -> None:
        if not request.args or request.url_rule is None:
            return
        names = allowed.get((flask_path(request.url_rule.rule), request.method.lower()))
        if names is None:
            return
        roles = getattr(app.view_functions.get(request.url_rule.endpoint), "required_roles", None)
        if roles is not None:
            authenticate_once(roles)  # 401 before any 400; an authenticated refusal is audited
        unknown = sorted(set(request.args) - set(names))
        if unknown:
            takes = ", ".join(sorted(names)) or "none"
            raise ParameterError(unknown[0], f"is not a query parameter of this operation (it takes: {takes})")
        for name, schema in names.items():
            check_query(name, request.args.getlist(name), schema)

    app.before_request(check)
