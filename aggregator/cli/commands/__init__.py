"""Subcommands of ``onesided``; each module has a ``register(subparsers)`` (see ``aggregator.cli.main``)."""
