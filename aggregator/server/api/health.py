"""``GET /v1/health``: liveness, the database's schema version, and failing dependencies (public).

* ``ok``: the database answers and nothing failed lately;
* ``degraded`` (still 200): the database answers, but a write failed for lack
  of space in the last minute, or the SQLite disk has under 16 MiB free
  (``problems`` says which);
* ``unavailable`` (503 with ``Retry-After``): the database does not answer.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from flask import Blueprint

from aggregator.server.context import app_state
from aggregator.server.faults import classify, first_line
from aggregator.server.storage.migrations import LATEST_VERSION

blueprint = Blueprint("health", __name__)
RETRY_AFTER_SECONDS = 5


@blueprint.get("/v1/health")
def health() -> Any:
    state = app_state()
    answer: dict[str, Any] = {
        "database": state.storage.dialect,
        "plaintext_allowed": state.settings.allow_plaintext,
    }
    try:
        version = state.storage.schema_version()
    except (sa.exc.DBAPIError, OSError) as exc:
        if classify(exc) is None:
            raise
        state.faults.note("database_unavailable", first_line(exc))
        problem = {"dependency": "database", "error": "database_unavailable", "detail": first_line(exc)}
        body = {**answer, "status": "unavailable", "schema_version": None, "problems": [problem]}
        return body, 503, {"Retry-After": str(RETRY_AFTER_SECONDS)}
    if version < LATEST_VERSION:  # the tables are gone: the SQLite file was removed or replaced
        detail = f"the database has schema version {version}, not {LATEST_VERSION}: was it removed or replaced?"
        state.faults.note("database_unavailable", detail)
        problem = {"dependency": "database", "error": "database_unavailable", "detail": detail}
        body = {**answer, "status": "unavailable", "schema_version": version, "problems": [problem]}
        return body, 503, {"Retry-After": str(RETRY_AFTER_SECONDS)}
    problems = state.faults.recent()
    return {**answer, "status": "degraded" if problems else "ok", "schema_version": version, "problems": problems}


_ANSWER = {"application/json": {"schema": {"$ref": "#/components/schemas/Health"}}}
OPENAPI_PATHS: dict[str, Any] = {
    "/v1/health": {
        "get": {
            "summary": "Liveness, schema version and failing dependencies",
            "operationId": "health",
            "security": [],
            "responses": {
                "200": {"description": "the aggregator is up and its database answers (status ok or degraded)",
                        "content": _ANSWER},
                "503": {"description": "the database does not answer (status unavailable; Retry-After)",
                        "content": _ANSWER},
            },
        }
    }
}

OPENAPI_SCHEMAS: dict[str, Any] = {
    "Health": {
        "type": "object",
        "required": ["status", "schema_version", "database", "plaintext_allowed", "problems"],
        "properties": {
            "status": {"enum": ["ok", "degraded", "unavailable"]},
            "schema_version": {"type": ["integer", "null"]},
            "database": {"enum": ["sqlite", "postgresql"]},
            "plaintext_allowed": {"type": "boolean"},
            "problems": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["dependency", "error", "detail"],
                    "properties": {
                        "dependency": {"enum": ["database", "storage"]},
                        "error": {"type": "string"},
                        "detail": {"type": "string"},
                    },
                },
            },
        },
    }
}
