"""``onesided keys init|show``: the aggregator's X25519 and Ed25519 keys.

The private keys are two files (mode 0600) in a 0700 directory
(``protocol.crypto.AggregatorKeys.save``); ``show`` prints only the public
halves and their key ids, which clients pin.
"""

from __future__ import annotations

import argparse

from aggregator.cli.options import (
    Subparsers,
    add_storage_options,
    command_group,
    print_json,
    settings_from_args,
)


def register(subparsers: Subparsers) -> None:
    actions = command_group(subparsers, "keys", "create or show the aggregator's keys")
    init = actions.add_parser("init", help="create the sealing (X25519) and signing (Ed25519) keys")
    add_storage_options(init)
    init.add_argument("--force", action="store_true", help="replace existing keys (clients must re-pin!)")
    init.set_defaults(func=run_init)
    show = actions.add_parser("show", help="print the public keys and key ids")
    add_storage_options(show)
    show.set_defaults(func=run_show)


def run_init(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    from protocol.crypto import AggregatorKeys

    keys = AggregatorKeys.generate()
    keys.save(settings.key_path, overwrite=args.force)
    print_json({"key_dir": str(settings.key_path), **keys.public_info()})
    return 0


def run_show(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    from aggregator.server.app import load_keys
    print_json({"key_dir": str(settings.key_path), **load_keys(settings).public_info()})
    return 0
