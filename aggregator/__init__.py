"""onesided aggregator, one subpackage per role.

* :mod:`aggregator.analysis`: decoding, certificates, RAPPOR file formats (numpy/scipy, no server);
* :mod:`aggregator.server`: the flask service (API, storage, ingestion, the services behind the
  views: rounds, estimates, releases; the dashboard page);
* :mod:`aggregator.research`: simulations and the empirical auditor;
* :mod:`aggregator.demo`: the whole system run once in one process (``onesided demo``);
* :mod:`aggregator.cli`: the ``onesided`` command line.

Layers, enforced by the import-linter contracts in pyproject.toml (docs/architecture.md):
cli -> demo -> research | server -> analysis -> protocol, research and server independent.
Importing this package loads none of them; ``aggregator.create_app`` loads the server on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from aggregator.server.app import create_app

        return create_app
    raise AttributeError(f"module 'aggregator' has no attribute {name!r}")
