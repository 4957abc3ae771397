"""Superseded by :mod:`protocol.mechanisms` (the mechanisms and their registry) and :mod:`protocol.releases`.

Kept only for ``tests/test_aggregator_releases.py``, which imports
``MECHANISMS`` from here and belongs to the server's owners: once it
imports :func:`protocol.mechanisms.mechanism_names`, delete this module.
"""

from __future__ import annotations

from .mechanisms import mechanism_names

MECHANISMS: tuple[str, ...] = mechanism_names()
