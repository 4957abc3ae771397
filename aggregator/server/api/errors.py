"""Every error answer is JSON: ``{"error": code, "field": name | null, "detail": text}``.

* :class:`aggregator.server.errors.ApiError` subclasses carry their status (404, 409, 401, 403).
* Protocol errors (``ParameterError``, ``ReportRejected`` and the rest of
  ``protocol.errors``) are 400 with their own code and field, except a batch
  over the report limit, which is 413 ``too_many_reports``.
* werkzeug's HTTP errors (unknown route, wrong method, body too large,
  malformed request, body too slow) keep their status with a snake_case
  code; a 405 lists the route's methods in ``Allow``.
* A failing dependency (:mod:`aggregator.server.faults`): the database not
  answering is 503 ``database_unavailable``, a full disk or database 507
  ``insufficient_storage``, both with ``Retry-After``, one log line each (no
  traceback), noted for ``/v1/health``; the transaction was rolled back.
* Anything else is a bug: 500 ``internal_error``, logged with its
  traceback, no detail leaked to the client.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from aggregator.server.context import app_state
from aggregator.server.errors import ApiError, DatabaseUnavailable, DependencyFailed, StorageFull
from aggregator.server.faults import classify, first_line
from protocol.errors import OnesidedError
from protocol.wire import CODE_TOO_MANY_REPORTS

log = logging.getLogger(__name__)

HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "too_many_requests",
    503: "unavailable",
    507: "insufficient_storage",
}
DETAILS = {
    413: "the request body is larger than this aggregator accepts (setting max_body_bytes)",
}


def error_response(status: int, code: str, field: str | None, detail: str) -> tuple[Response, int]:
    """The JSON error body with its status."""
    return jsonify({"error": code, "field": field, "detail": detail}), status


def _snake(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _protocol_error(exc: OnesidedError) -> tuple[Response, int]:
    if isinstance(exc, ApiError):
        response, status = error_response(exc.status, exc.code, exc.field, exc.detail)
        retry_after = getattr(exc, "retry_after", None)  # dependencies away, rate limits
        if retry_after is not None:
            response.headers["Retry-After"] = str(retry_after)
        return response, status
    field = getattr(exc, "field", None) or None
    if field is None and exc.code in ("invalid_message", "invalid_parameter"):
        field = "body"  # the whole body is wrong, e.g. a JSON list where an object belongs
    detail = getattr(exc, "detail", None) or getattr(exc, "reason", None) or str(exc)
    status = 413 if exc.code == CODE_TOO_MANY_REPORTS else 400
    return error_response(status, exc.code, field, str(detail))


def _http_error(exc: HTTPException) -> tuple[Response, int]:
    status = exc.code or 500
    code = HTTP_CODES.get(status, _snake(exc.name))
    response, status = error_response(status, code, None, DETAILS.get(status, exc.description or exc.name))
    if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
        response.headers["Allow"] = ", ".join(sorted(exc.valid_methods))  # RFC 9110 15.5.6: a 405 must say
    return response, status


def _unexpected(exc: Exception) -> tuple[Response, int]:
    """A database or disk failure: 503 or 507 with ``Retry-After``; anything else is a bug: 500."""
    kind = classify(exc)
    if kind is None:
        log.exception("unhandled error: %s", type(exc).__name__)
        return error_response(500, "internal_error", None, "internal error; the server log has the details")
    detail = first_line(exc)
    app_state().faults.note(kind, detail)
    log.warning("%s: %s", kind, detail)
    if kind == "storage_full":
        failure: DependencyFailed = StorageFull(None, "the server's storage is full; nothing was stored, retry later")
    else:
        failure = DatabaseUnavailable(None, "the database is not answering; nothing was stored, retry later")
    return _protocol_error(failure)


def register_error_handlers(app: Flask) -> None:
    """Install the JSON error handlers on ``app``."""
    app.register_error_handler(OnesidedError, _protocol_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)


def error_schema() -> dict[str, Any]:
    """The OpenAPI schema of the error body."""
    return {
        "type": "object",
        "required": ["error", "field", "detail"],
        "properties": {
            "error": {"type": "string", "description": "stable machine-readable code"},
            "field": {"type": ["string", "null"], "description": "the offending field, by path"},
            "detail": {"type": "string"},
        },
    }
