"""``onesided keys init|show|rotate|backup|restore``: the aggregator's X25519 and Ed25519 keys.

The private keys are files (mode 0600) in a 0700 directory (``--key-dir``,
default ``DATA_DIR/keys``; a data directory created here is 0700 too);
``show`` prints only the public halves and their key ids, which clients pin.
``rotate --seal`` replaces the sealing key and keeps the old one opening
reports until a stated date; ``rotate --sign`` first announces the next
signing key in the signed config, and run again switches to it.
``backup`` writes every key file encrypted with a passphrase (scrypt and
AES-256-GCM); ``restore`` writes them back. A running server reads its keys
when its workers start: after a rotation or restore, send its master SIGHUP.
``init``, ``rotate``, ``backup`` and ``restore`` are recorded in the audit
log (actor ``cli:USER``; key ids and file names, never a key or the
passphrase): they open the database (``--db``) before touching any file, so
one that cannot be opened stops them with nothing changed, and write the
entry once the files are written. Only an ``init`` or ``restore`` that
replaces no key, on a machine with no SQLite database yet (a new install,
before the first ``serve`` makes it; a new disk), goes on without one and
says on stderr that it is not in the audit log.
Each action prints the keys for people (times in ISO-8601 UTC), or JSON with
``--json``; no action ever prints a private key.
The layout and the cryptography: ``aggregator.server.keyring``.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from typing import Any

from aggregator.cli.options import (
    Subparsers,
    add_json_option,
    add_key_options,
    add_storage_options,
    command_group,
    emit,
    open_audit_log,
    open_audit_log_if_any,
    record_operator,
    settings_from_args,
)
from protocol.errors import OnesidedError, ParameterError

DAY = 86400
PASSPHRASE_ENV = "ONESIDED_KEY_PASSPHRASE"


def register(subparsers: Subparsers) -> None:
    actions = command_group(subparsers, "keys", "create, show, rotate, back up or restore the aggregator's keys")
    init = actions.add_parser("init", help="create the sealing (X25519) and signing (Ed25519) keys")
    add_storage_options(init)  # the database holds the audit log (a new install has none yet: init goes on)
    add_json_option(init)
    init.add_argument("--force", action="store_true", help="replace existing keys (clients must re-pin!)")
    init.set_defaults(func=run_init)
    show = actions.add_parser("show", help="print the public keys, key ids and retired sealing keys")
    add_key_options(show)
    add_json_option(show)
    show.set_defaults(func=run_show)
    rotate = actions.add_parser("rotate", help="replace the sealing key, or announce and then switch the signing key")
    add_storage_options(rotate)  # the database holds the audit log
    add_json_option(rotate)
    which = rotate.add_mutually_exclusive_group(required=True)
    which.add_argument("--seal", action="store_true", help="a new sealing key; the old one keeps opening reports")
    which.add_argument("--sign", action="store_true",
                       help="first run: announce the next signing key in the config; second run: switch to it")
    rotate.add_argument("--keep-old-days", type=float, default=30.0,
                        help="--seal: days the old sealing key still opens reports sealed to it (default 30)")
    rotate.set_defaults(func=run_rotate)
    for name, help_text, func in (("backup", "write the key files, encrypted with a passphrase", run_backup),
                                  ("restore", "write the key files back from a backup", run_restore)):
        action = actions.add_parser(name, help=help_text)
        add_storage_options(action)  # the database holds the audit log
        add_json_option(action)
        action.add_argument("file", help="the backup file (written with mode 0600)" if name == "backup"
                            else "a file written by `onesided keys backup`")
        action.add_argument("--passphrase-file", help=f"read the passphrase from this file (else ${PASSPHRASE_ENV}, "
                                                      "else a prompt)")
        if name == "restore":
            action.add_argument("--force", action="store_true", help="replace keys already in the key directory")
        action.set_defaults(func=func)


def _key_path(args: argparse.Namespace) -> str:
    """The key directory; a data directory that holds it is created 0700 (its parents are not ours)."""
    settings = settings_from_args(args)
    if settings.key_dir is None:
        from aggregator.server.private_files import prepare_data_dir

        prepare_data_dir(settings.data_dir, allow_shared=settings.allow_shared_data_dir)
    return str(settings.key_path)


def run_init(args: argparse.Namespace) -> int:
    from protocol.crypto import SEAL_KEY_FILE, SIGN_KEY_FILE

    key_path = settings_from_args(args).key_path
    existing = [name for name in (SEAL_KEY_FILE, SIGN_KEY_FILE) if (key_path / name).exists()]
    if existing and not args.force:  # before the database is opened: the refusal is the whole answer
        raise ParameterError(existing[0], f"{key_path / existing[0]} exists; refusing to replace keys (--force "
                                          "replaces them, and every client must then pin the new signing key)")
    # replacing keys needs the database, opened before any file is written; a first init on a new install (no
    # SQLite database until the first `serve`) goes on without one
    storage = open_audit_log(args) if existing else open_audit_log_if_any(args)
    try:
        path = _key_path(args)
        replaced = _replaced_ids(path) if existing else {}
        from protocol.crypto import AggregatorKeys

        keys = AggregatorKeys.generate()
        keys.save(path, overwrite=args.force)
    except BaseException:
        if storage is not None:
            storage.close()
        raise
    action = "keys init --force" if existing else "keys init"
    detail = _ids(keys.public_info(), **replaced)
    if storage is None:
        code = 0
        _not_recorded("init", detail, "the audit log starts with the database (the first `serve` or "
                                      "`token create` makes it)")
    else:
        code = record_operator(storage, action, path, detail, done=f"new keys were written into {path}")
    if existing:
        print("keys replaced: every client must pin the new signing key; send a running server's master SIGHUP "
              "to load them", file=sys.stderr)
    emit(args, {"key_dir": path, **keys.public_info()}, keys_text)
    return code


def _replaced_ids(path: str) -> dict[str, Any]:
    """The key ids of the keys about to be replaced, as ``replaced_*`` entries; none for a damaged directory."""
    from aggregator.server.keyring import load_keyring

    try:
        return {f"replaced_{k}": v for k, v in _ids(load_keyring(path).public_info()).items()}
    except OnesidedError:  # a damaged directory is what --force repairs; nothing to name
        return {}


def _not_recorded(command: str, detail: dict[str, Any], next_step: str) -> None:
    """The one stderr line of a command that ran with no database yet to record it in."""
    print(f"note: no database yet, so this {command} is not in the audit log ({json.dumps(detail, sort_keys=True)});"
          f" {next_step}", file=sys.stderr)


def run_show(args: argparse.Namespace) -> int:
    path = str(settings_from_args(args).key_path)
    from aggregator.server.keyring import load_keyring

    emit(args, {"key_dir": path, **load_keyring(path).summary(time.time())}, keys_text)
    return 0


def run_rotate(args: argparse.Namespace) -> int:
    path = str(settings_from_args(args).key_path)
    from aggregator.server.keyring import load_keyring, rotate_seal, rotate_sign

    before = load_keyring(path).public_info()  # a missing or damaged directory is one line before anything changes
    if args.seal and not 0 <= args.keep_old_days <= 3650:
        raise ParameterError("keep_old_days", f"must be in [0, 3650], got {args.keep_old_days}")
    storage = open_audit_log(args)  # a database that cannot be opened stops it here, keys untouched
    detail: dict[str, Any]
    try:
        if args.seal:
            ring, step = rotate_seal(path, int(args.keep_old_days * DAY)), "seal key replaced"
            action, detail = "keys rotate --seal", {
                "old_seal_key_id": before["seal_key_id"], "new_seal_key_id": ring.public_info()["seal_key_id"],
                "old_opens_until": next(r.until for r in ring.retired if r.key_id == before["seal_key_id"])}
        else:
            ring, state = rotate_sign(path)
            after = ring.public_info()
            action = f"keys rotate --sign ({state})"
            detail = ({"sign_key_id": after["sign_key_id"], "next_sign_key_id": after["next_sign_key_id"]}
                      if state == "announced" else
                      {"old_sign_key_id": before["sign_key_id"], "new_sign_key_id": after["sign_key_id"]})
            step = {"announced": "next signing key announced in the config; run `keys rotate --sign` again once "
                                 "devices have fetched it", "switched": "signing key switched"}[state]
    except BaseException:
        storage.close()
        raise
    code = record_operator(storage, action, path, detail, done=step)
    print(f"{step}; send the server's master SIGHUP to load the keys", file=sys.stderr)
    emit(args, {"key_dir": path, **ring.summary(time.time())}, keys_text)
    return code


def keys_text(data: dict[str, Any]) -> str:
    """The key directory, each public key with its id, and the retired sealing keys with their dates."""
    from aggregator.cli.render import table

    rows = [{"key": "sealing (X25519)", "key_id": data["seal_key_id"], "public": data["seal_public"]},
            {"key": "signing (Ed25519)", "key_id": data["sign_key_id"], "public": data["sign_public"]}]
    if data.get("next_sign_public"):
        rows.append({"key": "next signing (announced)", "key_id": data["next_sign_key_id"],
                     "public": data["next_sign_public"]})
    out = f"key directory {data['key_dir']}\n\n" + table(rows, ["key", "key_id", "public"])
    retired = data.get("retired_seal_keys") or []
    if retired:
        out += "\nretired sealing keys:\n" + table(
            [{**r, "opens": "yes" if r["honoured"] else "no (expired)"} for r in retired],
            ["key_id", "until", "opens"], ["key_id", "opens reports until", "opens now"])
    return out + f"\nclients pin the signing key: ONESIDED_SERVER_KEY={data['sign_public']}\n"


def backup_text(data: dict[str, Any]) -> str:
    """What ``keys backup`` wrote, and the keys it holds."""
    return (f"wrote {len(data['files'])} key files, encrypted with the passphrase, to {data['destination']} "
            f"(mode 0600)\nsealing key {data['seal_key_id']}, signing key {data['sign_key_id']}\n")


def _passphrase(args: argparse.Namespace, *, confirm: bool) -> str:
    if args.passphrase_file:
        try:
            with open(args.passphrase_file, encoding="utf-8") as handle:
                return handle.read().rstrip("\n")
        except OSError as exc:
            raise ParameterError("passphrase_file", f"cannot read {args.passphrase_file}: {exc.strerror}") from exc
    if os.environ.get(PASSPHRASE_ENV):
        return os.environ[PASSPHRASE_ENV]
    if not sys.stdin.isatty():
        raise ParameterError("passphrase", f"give --passphrase-file or ${PASSPHRASE_ENV} (no terminal to ask on)")
    first = getpass.getpass("passphrase: ")
    if confirm and getpass.getpass("again: ") != first:
        raise ParameterError("passphrase", "the two entries differ")
    return first


def run_backup(args: argparse.Namespace) -> int:
    path = str(settings_from_args(args).key_path)
    from aggregator.server.keyring import backup_keys, check_passphrase

    passphrase = _passphrase(args, confirm=True)
    check_passphrase(passphrase)
    storage = open_audit_log(args)  # before the backup is written
    try:
        written = backup_keys(path, args.file, passphrase)
    except BaseException:
        storage.close()
        raise
    code = record_operator(storage, "keys backup", written["destination"], _ids(written, files=len(written["files"])),
                           done=f"the key backup {written['destination']} was written")
    emit(args, written, backup_text)
    return code


def _ids(info: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """What an audit entry keeps of a key directory: its key ids (public), never a key."""
    return {name: info[name] for name in ("seal_key_id", "sign_key_id", "next_sign_key_id") if name in info} | extra


def run_restore(args: argparse.Namespace) -> int:
    from aggregator.server.keyring import open_backup, write_backup_files

    files = open_backup(args.file, _passphrase(args, confirm=False))  # a wrong passphrase: one line, nothing opened
    # before any folder or key file is written; only a restore that replaces no key (a new disk, whose database is
    # restored after) may go on without a database to record it in
    from protocol.crypto import SEAL_KEY_FILE

    replaces = (settings_from_args(args).key_path / SEAL_KEY_FILE).exists()
    storage = open_audit_log(args) if replaces else open_audit_log_if_any(args)
    try:
        path = _key_path(args)
        replaced = _replaced_ids(path) if args.force and os.path.isdir(path) else {}
        ring = write_backup_files(files, path, overwrite=args.force)
    except BaseException:
        if storage is not None:
            storage.close()
        raise
    detail = _ids(ring.public_info(), key_dir=path, **replaced)
    if storage is None:
        code = 0
        _not_recorded("restore", detail, "restore the database's backup next")
    else:
        code = record_operator(storage, "keys restore", str(args.file), detail,
                               done=f"the keys of {args.file} were restored into {path}")
    print("keys restored; send a running server's master SIGHUP to load them", file=sys.stderr)
    emit(args, {"key_dir": path, **ring.summary(time.time())}, keys_text)
    return code
