"""Aggregator-side errors, each with its HTTP status.

The protocol's errors (``ParameterError``, ``ReportRejected``, ...) map to
400; these add the cases that only a server has: a missing resource, a
conflict with stored state, missing or insufficient credentials. The HTTP
layer (``aggregator.server.api.errors``) turns any of them into
``{"error": code, "field": ..., "detail": ...}``.
"""

from __future__ import annotations

from protocol.errors import OnesidedError


class ApiError(OnesidedError):
    """An error with an HTTP status, a stable code, an optional field and a detail."""

    status = 400
    code = "bad_request"

    def __init__(self, field: str | None, detail: str, *, code: str | None = None) -> None:
        super().__init__(f"{field}: {detail}" if field else detail)
        self.field = field
        self.detail = detail
        if code is not None:
            self.code = code


class NotFound(ApiError, LookupError):
    """No such metric, round, release or token (404)."""

    status = 404
    code = "not_found"


class Conflict(ApiError):
    """The request contradicts stored state, e.g. new parameters for a metric with reports (409)."""

    status = 409
    code = "conflict"


class Unauthorized(ApiError):
    """No bearer token, or an unknown or revoked one (401)."""

    status = 401
    code = "unauthorized"


class Forbidden(ApiError):
    """A valid token whose role may not use this route (403)."""

    status = 403
    code = "forbidden"


class TooCostly(ApiError):
    """The request would hold a core longer than the operator allows (422 ``too_costly``)."""

    status = 422
    code = "too_costly"


class DependencyFailed(ApiError):
    """A dependency of the server failed, not the request: the client should retry later.

    ``retry_after`` (seconds) becomes the answer's ``Retry-After`` header.
    """

    status = 503
    code = "unavailable"
    retry_after = 5


class DatabaseUnavailable(DependencyFailed):
    """The database does not answer, refuses the connection, or its file cannot be opened (503)."""

    code = "database_unavailable"


class KeysUnavailable(DependencyFailed):
    """The aggregator's key files cannot be read or are damaged (503): reports cannot be opened."""

    code = "keys_unavailable"


class StorageFull(DependencyFailed):
    """The disk (or the database's space) is full: nothing was stored (507 Insufficient Storage)."""

    status = 507
    code = "insufficient_storage"
    retry_after = 60
