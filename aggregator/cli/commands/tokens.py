"""``onesided token create|list|revoke``: bearer tokens, directly on the database.

Works without a running server so an operator can bootstrap the first admin
token. Creating and revoking are recorded in the audit log (actor ``cli:USER``). ``create`` prints the secret alone on stdout (it is shown once and
stored only as its SHA-256), so ``export ONESIDED_TOKEN=$(onesided token
create --role admin --name ops)`` works.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from aggregator.cli.options import (
    Subparsers,
    add_storage_options,
    command_group,
    print_json,
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
    listing.set_defaults(func=run_list)
    revoke = actions.add_parser("revoke", help="revoke a token by name")
    add_storage_options(revoke)
    revoke.add_argument("--name", required=True, help="the label given at create")
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
    print(f"created {record.role} token {record.name!r}; it is shown only now", file=sys.stderr)
    print(secret)
    return 0


def run_list(args: argparse.Namespace) -> int:
    storage = _storage(args)
    try:
        print_json({"tokens": [t.to_dict() for t in storage.list_tokens()]})
    finally:
        storage.close()
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    storage = _storage(args)
    try:
        revoked = storage.revoke_token(args.name)
        storage.record_audit(operator_entry("token revoke", revoked.name, {"role": revoked.role}))
        print_json(revoked.to_dict())
    finally:
        storage.close()
    return 0
