"""onesided aggregator: ingestion, storage, decoding, rounds and releases (flask)."""
