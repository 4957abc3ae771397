"""Probes (public): ``/v1/livez`` (the process runs), ``/v1/readyz`` (it can serve), ``/v1/health`` (details).

``/v1/livez`` is always 200 while the process answers: an orchestrator
restarts on it, and restarting does not bring a database back. ``/v1/readyz``
is 503 while the database or the keys are away, the SQLite file was removed
or replaced, or the server's clock disagrees with the reports it receives:
take the instance out of the load balancer, do not restart it.
``/v1/health`` (kept for compatibility) says:

* ``ok``: the database answers and nothing failed lately;
* ``degraded`` (still 200): the database answers, but a write failed for lack
  of space in the last minute, the SQLite disk has under 16 MiB free, or most
  recent reports were refused by the server's clock (``problems`` says which);
* ``unavailable`` (503 with ``Retry-After``): the database does not answer, its
  file was removed or replaced, or the keys cannot be read.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from flask import Blueprint, current_app

from aggregator.server.dependencies import app_guard
from aggregator.server.errors import DatabaseUnavailable, DependencyFailed, KeysUnavailable
from aggregator.server.faults import classify, first_line
from aggregator.server.storage.migrations import LATEST_VERSION

blueprint = Blueprint("health", __name__)
RETRY_AFTER_SECONDS = 5


READY_DEPENDENCIES = frozenset({"database", "keys", "clock"})  # a nearly full disk still serves: ready


def _unavailable(answer: dict[str, Any], problem: dict[str, str], version: int | None) -> tuple[dict[str, Any], int]:
    return {**answer, "status": "unavailable", "schema_version": version, "problems": [problem]}, 503


def _problem(exc: DependencyFailed) -> dict[str, str]:
    dependency = "keys" if isinstance(exc, KeysUnavailable) else "database"
    return {"dependency": dependency, "error": exc.code, "detail": exc.detail}


def _report() -> tuple[dict[str, Any], int]:
    """The health body and its status (200 or 503)."""
    guard = app_guard(current_app)
    answer: dict[str, Any] = {"database": guard.settings.dialect, "plaintext_allowed": guard.settings.allow_plaintext}
    try:
        state = guard.state()
    except DependencyFailed as exc:
        return _unavailable(answer, _problem(exc), None)
    try:
        state.storage.check_file()
        version = state.storage.schema_version()
    except DatabaseUnavailable as exc:
        state.faults.note("database_unavailable", exc.detail)
        return _unavailable(answer, _problem(exc), None)
    except (sa.exc.DBAPIError, OSError) as exc:
        if classify(exc) is None:
            raise
        state.faults.note("database_unavailable", first_line(exc))
        return _unavailable(answer, _problem(DatabaseUnavailable(None, first_line(exc))), None)
    if version < LATEST_VERSION:  # the tables are gone: the SQLite file was removed or replaced
        detail = f"the database has schema version {version}, not {LATEST_VERSION}: was it removed or replaced?"
        state.faults.note("database_unavailable", detail)
        return _unavailable(answer, _problem(DatabaseUnavailable(None, detail)), version)
    problems = state.faults.recent()
    suspicion = state.clock_watch.suspicion()
    if suspicion is not None:
        problems.append({"dependency": "clock", "error": "clock_suspect", "detail": suspicion})
    return {**answer, "status": "degraded" if problems else "ok", "schema_version": version, "problems": problems}, 200


def _retry_later(status: int) -> dict[str, str]:
    return {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 503 else {}


@blueprint.get("/v1/health")
def health() -> Any:
    """Readiness with details (kept for compatibility; orchestrators probe livez and readyz)."""
    body, status = _report()
    return body, status, _retry_later(status)


@blueprint.get("/v1/livez")
def livez() -> Any:
    """Liveness: the process runs and answers; never looks at a dependency (a restart would not bring it back)."""
    return {"status": "ok"}


@blueprint.get("/v1/readyz")
def readyz() -> Any:
    """Readiness: the database answers from the file it opened, the keys are loaded, the clock agrees."""
    body, status = _report()
    problems = [p for p in body["problems"] if status == 503 or p["dependency"] in READY_DEPENDENCIES]
    status = 503 if problems and status == 200 else status
    return {"status": "ready" if status == 200 else "not_ready", "problems": problems}, status, _retry_later(status)


_ANSWER = {"application/json": {"schema": {"$ref": "#/components/schemas/Health"}}}
_PROBE = {"application/json": {"schema": {"$ref": "#/components/schemas/Readiness"}}}
OPENAPI_PATHS: dict[str, Any] = {
    "/v1/livez": {
        "get": {
            "summary": "Liveness: the process answers (never depends on the database)",
            "operationId": "livez",
            "security": [],
            "responses": {"200": {"description": "the process runs", "content": {"application/json": {
                "schema": {"type": "object", "required": ["status"], "properties": {"status": {"const": "ok"}}}}}}},
        }
    },
    "/v1/readyz": {
        "get": {
            "summary": "Readiness: database, keys and clock",
            "operationId": "readyz",
            "security": [],
            "responses": {
                "200": {"description": "ready to serve", "content": _PROBE},
                "503": {"description": "not ready (problems say why; Retry-After)", "content": _PROBE},
            },
        }
    },
    "/v1/health": {
        "get": {
            "summary": "Liveness, schema version and failing dependencies",
            "operationId": "health",
            "security": [],
            "responses": {
                "200": {"description": "the aggregator is up and its database answers (status ok or degraded)",
                        "content": _ANSWER},
                "503": {"description": "the database or the keys are away (status unavailable; Retry-After)",
                        "content": _ANSWER},
            },
        }
    }
}

OPENAPI_SCHEMAS: dict[str, Any] = {
    "Readiness": {
        "type": "object",
        "required": ["status", "problems"],
        "properties": {
            "status": {"enum": ["ready", "not_ready"]},
            "problems": {"type": "array", "items": {"$ref": "#/components/schemas/Problem"}},
        },
    },
    "Health": {
        "type": "object",
        "required": ["status", "schema_version", "database", "plaintext_allowed", "problems"],
        "properties": {
            "status": {"enum": ["ok", "degraded", "unavailable"]},
            "schema_version": {"type": ["integer", "null"]},
            "database": {"enum": ["sqlite", "postgresql"]},
            "plaintext_allowed": {"type": "boolean"},
            "problems": {"type": "array", "items": {"$ref": "#/components/schemas/Problem"}},
        },
    },
    "Problem": {
        "type": "object",
        "required": ["dependency", "error", "detail"],
        "properties": {
            "dependency": {"enum": ["database", "storage", "keys", "clock"]},
            "error": {"type": "string"},
            "detail": {"type": "string"},
        },
    },
}
