"""``GET /v1/openapi.json``: the OpenAPI document of this API (public).

The document is built once, when the app is made, from the API modules that
:mod:`aggregator.server.routes` lists (:func:`aggregator.server.openapi.install_openapi`
stores it under ``DOCUMENT_KEY``); this view only serves it, so it needs
neither the list nor the builder.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app

blueprint = Blueprint("spec", __name__)
DOCUMENT_KEY = "onesided.openapi"


@blueprint.get("/v1/openapi.json")
def openapi_json() -> dict[str, Any]:
    document: dict[str, Any] = current_app.extensions[DOCUMENT_KEY]
    return document


OPENAPI_PATHS: dict[str, Any] = {
    "/v1/openapi.json": {
        "get": {
            "summary": "This document",
            "operationId": "openapi",
            "security": [],
            "responses": {"200": {"description": "OpenAPI 3.1", "content": {"application/json": {}}}},
        }
    }
}
