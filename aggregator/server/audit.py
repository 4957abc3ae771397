"""Recording admin and analyst actions: the audit log's entries and its JSON log events.

Every request through :func:`aggregator.server.auth.require_role` with a
known token (answered, or refused with 403) becomes one
:class:`~aggregator.server.storage.audit.AuditEntry` in the database and one
``onesided.audit`` log event (``--log-format json`` puts the entry under
``audit``). 401s (no or unknown token) are not recorded: anyone can send
them, and the table must not be fillable by strangers.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from flask import Response, g, request

from aggregator.server.context import app_state
from aggregator.server.faults import classify, first_line
from aggregator.server.logs import logged_address, scrub_secrets
from aggregator.server.storage.audit import AuditEntry, now_ms
from aggregator.server.storage.records import TokenRecord

log = logging.getLogger("onesided.audit")
MAX_FIELDS = 20
MAX_TEXT = 100


def address_class(address: str | None) -> str:
    """``loopback``, ``private``, ``link_local``, ``public`` or ``unknown``.

    >>> address_class("127.0.0.1"), address_class("10.1.2.3"), address_class("8.8.8.8"), address_class("x")
    ('loopback', 'private', 'public', 'unknown')
    """
    try:
        ip = ipaddress.ip_address((address or "").split("%", 1)[0])
    except ValueError:
        return "unknown"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link_local"
    if ip.is_private:
        return "private"
    return "public"


def scalar_fields(body: Any) -> dict[str, Any]:
    """The top-level scalar fields of a JSON object, at most 20, texts cut at 100 characters."""
    if not isinstance(body, dict):
        return {}
    kept: dict[str, Any] = {}
    for key, value in list(body.items())[:MAX_FIELDS]:
        if isinstance(value, str):
            kept[str(key)[:MAX_TEXT]] = scrub_secrets(value[:MAX_TEXT])
        elif value is None or isinstance(value, bool | int | float):
            kept[str(key)[:MAX_TEXT]] = value
    return kept


def record(entry: AuditEntry) -> None:
    """Store ``entry`` and log it; a database that cannot take it is one warning line, not a failed request."""
    log.info("%s %s %s -> %s", entry.actor, entry.action, entry.target or "", entry.status,
             extra={"audit": entry.to_dict()})
    try:
        app_state().storage.record_audit(entry)
    except Exception as exc:
        if classify(exc) is None:
            raise
        log.warning("audit entry not stored (%s): %s", classify(exc), first_line(exc))


def entry_for(token: TokenRecord, response: Response) -> AuditEntry:
    """The audit entry of the current request, answered with ``response``."""
    rule = request.url_rule.rule if request.url_rule is not None else request.path
    query = request.query_string.decode("latin-1")
    address = request.remote_addr
    return AuditEntry(
        at=now_ms(), actor=token.name, role=token.role, action=f"{request.method} {rule}",
        target=scrub_secrets(request.path + (f"?{query}" if query else "")), status=response.status_code,
        address_class=address_class(address), address=logged_address(address, "truncated"),
        detail=scalar_fields(g.get("json_body")),
    )


def audit_response(response: Response) -> Response:
    """``after_this_request`` hook of audited routes: record the caller's action (if the token was known)."""
    token = g.get("audit_token")
    if isinstance(token, TokenRecord):
        record(entry_for(token, response))
    return response
