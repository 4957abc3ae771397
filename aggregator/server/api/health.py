"""``GET /v1/health``: liveness and the database's schema version (public)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from aggregator.server.context import app_state

blueprint = Blueprint("health", __name__)


@blueprint.get("/v1/health")
def health() -> dict[str, Any]:
    state = app_state()
    return {
        "status": "ok",
        "schema_version": state.storage.schema_version(),
        "database": state.storage.dialect,
        "plaintext_allowed": state.settings.allow_plaintext,
    }


OPENAPI_PATHS: dict[str, Any] = {
    "/v1/health": {
        "get": {
            "summary": "Liveness and schema version",
            "operationId": "health",
            "security": [],
            "responses": {
                "200": {
                    "description": "the aggregator is up and its database answers",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Health"}}},
                }
            },
        }
    }
}

OPENAPI_SCHEMAS: dict[str, Any] = {
    "Health": {
        "type": "object",
        "required": ["status", "schema_version", "database", "plaintext_allowed"],
        "properties": {
            "status": {"const": "ok"},
            "schema_version": {"type": "integer"},
            "database": {"enum": ["sqlite", "postgresql"]},
            "plaintext_allowed": {"type": "boolean"},
        },
    }
}
