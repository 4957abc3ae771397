"""Bearer-token authentication for admin and analyst routes.

``Authorization: Bearer <token>``; the token is looked up by its SHA-256
(see ``aggregator.server.storage.tokens``). A route declares who may call it:

    @blueprint.post("/v1/metrics")
    @require_role(*ADMIN)
    def create_metric(): ...

Missing, unknown or revoked token: 401 ``unauthorized``; a valid token of
another role: 403 ``forbidden``. Every request with a known token is
recorded in the audit log (:mod:`aggregator.server.audit`), answered or refused. Admins may use analyst routes. The roles a
view requires are kept on it (``view.required_roles``) so the OpenAPI
document and the tests can check that no admin route is open.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from flask import after_this_request, g, request

from aggregator.server.audit import audit_response
from aggregator.server.context import app_state
from aggregator.server.errors import Forbidden, Unauthorized
from aggregator.server.storage import TokenRecord

ADMIN: tuple[str, ...] = ("admin",)
ANALYST: tuple[str, ...] = ("analyst", "admin")
F = TypeVar("F", bound=Callable[..., Any])


def bearer_token() -> str | None:
    """The token of the ``Authorization: Bearer`` header, or ``None``."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def authenticate_request(roles: tuple[str, ...]) -> TokenRecord:
    """The caller's token if its role is one of ``roles``.

    Raises:
        Unauthorized: no usable token.
        Forbidden: the token's role is not allowed here.
    """
    secret = bearer_token()
    if secret is None:
        raise Unauthorized("authorization", "this route needs an 'Authorization: Bearer <token>' header")
    token = app_state().storage.authenticate(secret)
    if token is None:
        raise Unauthorized("authorization", "unknown or revoked token")
    g.audit_token = token  # known from here on: the request is audited, refused or not
    if token.role not in roles:
        raise Forbidden("authorization", f"a {token.role} token may not use this route (needs {' or '.join(roles)})")
    return token


def authenticate_once(roles: tuple[str, ...]) -> TokenRecord:
    """Authenticate the request (once, whoever asks first) and audit its answer whatever it is.

    The query check runs before the view and calls this first, so that an
    unauthenticated caller learns nothing of the parameters (401 before
    400) and an authenticated request refused by validation is audited.
    """
    token = g.get("token")
    if isinstance(token, TokenRecord):
        return token
    if not g.get("audit_hooked"):
        g.audit_hooked = True
        after_this_request(audit_response)
    g.token = authenticate_request(roles)
    return g.token


def require_role(*roles: str) -> Callable[[F], F]:
    """Decorator: authenticate, then call the view with ``flask.g.token`` set."""

    def decorate(view: F) -> F:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            authenticate_once(roles)
            return view(*args, **kwargs)

        wrapper.required_roles = roles  # type: ignore[attr-defined]
        return cast(F, wrapper)

    return decorate


def current_token() -> TokenRecord:
    """The token of the current request (inside a ``require_role`` view)."""
    token = g.get("token")
    if not isinstance(token, TokenRecord):
        raise Unauthorized("authorization", "no authenticated token for this request")
    return token
