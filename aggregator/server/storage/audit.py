"""The audit log: who did what with a token, or on the command line (append-only).

One row per authenticated request (admin and analyst routes, answered or
refused with 403) and per administrative command run on the database
(``onesided token create|revoke``, ``onesided purge``). The database
refuses UPDATE and DELETE on the table (triggers of schema version 4), so
an entry stays as written; the client's address is kept only as its class
and its network (IPv4 /24, IPv6 /48).
"""

from __future__ import annotations

import getpass
import json
import time
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from aggregator.server.storage import schema
from protocol.validation import check_int

MAX_LIMIT = 10_000


@dataclass(frozen=True, kw_only=True)
class AuditEntry:
    """One audited action.

    Attributes:
        at: Unix milliseconds.
        actor: the token's name (``cli:USER`` for a command run on the database).
        role: the token's role (``admin``, ``analyst``), ``operator`` for a command.
        action: ``METHOD /route/<rule>`` or the command (``token create``).
        target: the request's path (with its query) or what the command acted on.
        status: the HTTP status answered; 0 for a command that succeeded.
        address_class: ``loopback``, ``private``, ``link_local``, ``public``, ``unknown`` or ``local``.
        address: the client's network (``203.0.113.0/24``), ``None`` for a command.
        detail: the request's scalar JSON fields (``{"level_to": 4.0}``), or the command's.
        id: the row id (``None`` before it is stored).
    """

    at: int
    actor: str
    role: str
    action: str
    target: str | None
    status: int
    address_class: str
    address: str | None
    detail: dict[str, Any]
    id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _row(entry: AuditEntry) -> dict[str, Any]:
    values = entry.to_dict()
    values.pop("id")
    values["detail"] = json.dumps(entry.detail, sort_keys=True, separators=(",", ":")) if entry.detail else None
    values["target"] = None if entry.target is None else entry.target[:300]
    values["action"] = entry.action[:120]
    return values


def _entry(row: Any) -> AuditEntry:
    return AuditEntry(
        id=row.id, at=row.at, actor=row.actor, role=row.role, action=row.action, target=row.target,
        status=row.status, address_class=row.address_class, address=row.address,
        detail=json.loads(row.detail) if row.detail else {},
    )


class AuditStore:
    """Mixin of :class:`aggregator.server.storage.Storage`: the ``audit_log`` table."""

    engine: Engine

    def record_audit(self, entry: AuditEntry) -> None:
        """Append ``entry``."""
        with self.engine.begin() as conn:
            conn.execute(sa.insert(schema.audit_log).values(**_row(entry)))

    def audit_entries(
        self, *, actor: str | None = None, action: str | None = None, target: str | None = None,
        since_ms: int | None = None, until_ms: int | None = None, limit: int = 1000,
    ) -> list[AuditEntry]:
        """Entries, oldest first, filtered (``action`` and ``target``: substrings; times in ms, ``until`` excluded).

        Raises:
            ParameterError: ``limit`` outside ``1 .. 10000``.
        """
        check_int("limit", limit, low=1, high=MAX_LIMIT)
        table = schema.audit_log
        query = sa.select(table)
        if actor is not None:
            query = query.where(table.c.actor == actor)
        if action is not None:
            query = query.where(table.c.action.contains(action, autoescape=True))
        if target is not None:
            query = query.where(table.c.target.contains(target, autoescape=True))
        if since_ms is not None:
            query = query.where(table.c.at >= since_ms)
        if until_ms is not None:
            query = query.where(table.c.at < until_ms)
        query = query.order_by(table.c.at.desc(), table.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [_entry(row) for row in reversed(rows)]


def now_ms() -> int:
    return int(time.time() * 1000)


def operator_entry(action: str, target: str | None, detail: dict[str, Any] | None = None) -> AuditEntry:
    """The entry of an administrative command run on the database by this machine's user."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (containers)
        user = "unknown"
    return AuditEntry(at=now_ms(), actor=f"cli:{user}"[:64], role="operator", action=action, target=target,
                      status=0, address_class="local", address=None, detail=detail or {})
