"""onesided aggregator: ingestion, storage, decoding, rounds and releases (flask)."""

from .app import create_app

__all__ = ["create_app"]
