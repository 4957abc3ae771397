"""``onesided token create|list|revoke``: bearer tokens, directly on the database.

Works without a running server so an operator can bootstrap the first admin
token. Creating and revoking are recorded in the audit log (actor
``cli:USER``). ``create`` prints the secret alone on stdout and its note on
stderr (the secret is shown once and stored only as its SHA-256), so
``export ONESIDED_TOKEN=$(onesided token create --role admin --name ops)``
works. ``list`` and ``revoke`` print a table or a line for people, JSON with
``--json``; neither ever shows a secret.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from aggregator.cli.options import (
    Subparsers,
    add_json_option,
    add_storage_options,
    command_group,
    emit,
    settings_from_args,
)
from aggregator.server.roles import ROLES

if TYPE_CHECKING:
    from aggregator.server.storage import AuditEntry, Storage


def register(subparsers: Subparsers) -> None:
    actions = command_group(subparsers, "token", "create, list or revoke bearer tokens (on the database)")
    create = actions.add_parser("create", help="create a token and print its secret once")
    add_storage_options(create)
    create.add_argument("--role", required=True, choices=ROLES, help="admin: manage metrics and rounds; analyst: read answers")
    create.add_argument("--name", required=True, help="a unique label, e.g. the analyst's name")
    create.set_defaults(func=run_create)
    listing = actions.add_parser("list", help="list tokens (never their secrets)")
    add_storage_options(listing)
    add_json_option(listing)
    listing.set_defaults(func=run_list)
    revoke = actions.add_parser("revoke", help="revoke a token by name")
    add_storage_options(revoke)
    revoke.add_argument("--name", required=True, help="the label given at create")
    add_json_option(revoke)
    revoke.set_defaults(func=run_revoke)


def _storage(args: argparse.Namespace) -> Storage:
    settings = settings_from_args(args)
    from aggregator.server.storage import Storage
    return Storage.open(settings.database_url, attempts=settings.db_retries)


def operator_entry(action: str, target: str, detail: dict[str, str]) -> AuditEntry:
    from aggregator.server.storage.audit import operator_entry as entry

    return entry(action, target, detail)


def run_create(args: argparse.Namespace) -> int:
    storage = _storage(args)
    try:
        record, secret = storage.create_token(role=args.role, name=args.name)
        storage.record_audit(operator_entry("token create", record.name, {"role": record.role}))
    finally:
        storage.close()
    print(f"created {record.role} token {record.name!r}; its secret below is shown only now "
          "(it is stored only as a hash)", file=sys.stderr)
    print(secret)
    return 0


def run_list(args: argparse.Namespace) -> int:
    storage = _storage(args)
    try:
        tokens = [t.to_dict() for t in storage.list_tokens()]
    finally:
        storage.close()
    emit(args, {"tokens": tokens}, tokens_text)
    return 0


def tokens_text(data: dict[str, Any]) -> str:
    """The token list for people: one row per token, active or revoked, times in ISO-8601 UTC."""
    from aggregator.cli.render import table

    rows = [{**t, "state": "revoked" if t.get("revoked_at") else "active"} for t in data["tokens"]]
    if not rows:
        return "no tokens yet: create one with `onesided token create --role admin --name NAME`\n"
    return table(rows, ["id", "name", "role", "state", "created_at", "revoked_at"])


def revoked_text(token: dict[str, Any]) -> str:
    """One line: which token was revoked, and when."""
    from aggregator.cli.render import cell

    return (f"revoked {token['role']} token {token['name']!r} (created {cell('created_at', token['created_at'])}, "
            f"revoked {cell('revoked_at', token['revoked_at'])}); requests with it now get 401\n")


def run_revoke(args: argparse.Namespace) -> int:
    storage = _storage(args)
    try:
        revoked = storage.revoke_token(args.name)
        storage.record_audit(operator_entry("token revoke", revoked.name, {"role": revoked.role}))
    finally:
        storage.close()
    emit(args, revoked.to_dict(), revoked_text)
    return 0
