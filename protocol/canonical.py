"""The canonical JSON bytes that are hashed and signed (metric digests, configs, stored records)."""

from __future__ import annotations

import json
from typing import Any


def canonical_json(data: Any) -> bytes:
    """Sorted keys, no spaces, UTF-8, no NaN: the bytes that are hashed and signed."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8"
    )
