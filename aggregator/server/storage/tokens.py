"""Bearer tokens, stored hashed.

A token is ``"ons_" + base64url(32 random bytes)``; only ``SHA-256(token)``
(hex) is stored, so a database leak gives no usable credential (a 256-bit
random secret needs no slow hash). Lookup is by hash; the stored and the
computed hash are then compared with ``hmac.compare_digest``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from aggregator.server.errors import Conflict, NotFound
from aggregator.server.storage import schema
from aggregator.server.storage.records import ROLES, TokenRecord
from protocol.crypto import b64e
from protocol.errors import ParameterError

TOKEN_PREFIX = "ons_"
TOKEN_BYTES = 32
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


def new_token_secret() -> str:
    """A fresh token: ``ons_`` and 32 bytes from ``os.urandom`` in base64url (47 characters)."""
    return TOKEN_PREFIX + b64e(os.urandom(TOKEN_BYTES))


def hash_token(secret: str) -> str:
    """``SHA-256(secret as UTF-8)`` in hex: what the ``tokens`` table keeps."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def token_from_row(row: Any) -> TokenRecord:
    return TokenRecord(id=row.id, name=row.name, role=row.role, created_at=row.created_at, revoked_at=row.revoked_at)


class TokenStore:
    """Mixin of :class:`aggregator.server.storage.Storage`: the ``tokens`` table."""

    engine: Engine

    def create_token(self, *, role: str, name: str, now: int | None = None) -> tuple[TokenRecord, str]:
        """Create a token; the secret is returned once and never stored.

        Raises:
            ParameterError: ``role`` is not admin or analyst; ``name`` is malformed.
            Conflict: a token with this name exists.
        """
        if role not in ROLES:
            raise ParameterError("role", f"must be one of {ROLES}, got {role!r}")
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            raise ParameterError("name", f"must match {NAME_PATTERN.pattern}, got {name!r}")
        secret = new_token_secret()
        stamp = int(time.time()) if now is None else now
        table = schema.tokens
        try:
            with self.engine.begin() as conn:
                values = {"name": name, "role": role, "token_hash": hash_token(secret), "created_at": stamp}
                conn.execute(sa.insert(table).values(**values))
                row = conn.execute(sa.select(table).where(table.c.name == name)).one()
        except sa.exc.IntegrityError as exc:
            raise Conflict("name", f"a token named {name!r} exists", code="token_exists") from exc
        return token_from_row(row), secret

    def authenticate(self, secret: str) -> TokenRecord | None:
        """The live (not revoked) token whose secret this is, or ``None``."""
        if not isinstance(secret, str) or not secret.startswith(TOKEN_PREFIX) or len(secret) > 128:
            return None
        digest = hash_token(secret)
        table = schema.tokens
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(table).where(table.c.token_hash == digest)).first()
        if row is None or not hmac.compare_digest(row.token_hash, digest) or row.revoked_at is not None:
            return None
        return token_from_row(row)

    def list_tokens(self) -> list[TokenRecord]:
        """All tokens (revoked ones too), by name."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(schema.tokens).order_by(schema.tokens.c.name)).all()
        return [token_from_row(r) for r in rows]

    def revoke_token(self, name: str, *, now: int | None = None) -> TokenRecord:
        """Revoke a token by name (idempotent).

        Raises:
            NotFound: no token with this name.
        """
        stamp = int(time.time()) if now is None else now
        table = schema.tokens
        with self.engine.begin() as conn:
            live = sa.update(table).where(table.c.name == name, table.c.revoked_at.is_(None))
            conn.execute(live.values(revoked_at=stamp))
            row = conn.execute(sa.select(table).where(table.c.name == name)).first()
        if row is None:
            raise NotFound("name", f"no token named {name!r}")
        return token_from_row(row)
