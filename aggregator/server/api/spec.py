"""``GET /v1/openapi.json``: the OpenAPI document of this API (public)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from aggregator.server.openapi import openapi_document

blueprint = Blueprint("spec", __name__)


@blueprint.get("/v1/openapi.json")
def openapi_json() -> dict[str, Any]:
    return openapi_document()


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
