"""Values reported before the first config: kept in the encrypted state, reported when a config arrives.

An offline first launch has no verified config yet, so nothing can be
encoded or charged. :func:`hold` keeps the value's canonical encoding, its
kind (one value or a set) and the time it was given in
``ClientState.waiting`` (saved encrypted, never in a plain file, never
sent); :func:`released` gives them back, oldest first, for the client to
report each in the window of its own time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from protocol.crypto import b64d, b64e
from protocol.encodings import Value, canonical_value, members_of_canonical
from protocol.errors import ParameterError

SAME_VALUE_SECONDS = 3600.0  # the same value of a metric given again within this is kept once


def hold(waiting: list[dict[str, Any]], metric: str, value_or_set: Value | tuple[Value, ...], at: float,
         limit: int, *, offset: float = 0.0) -> int:
    """Append a value to ``waiting``; beyond ``limit`` the oldest go. Returns how many went, or ``-1``
    when the same value of the metric is already waiting from less than an hour before (an app that
    reports every few seconds while no config can be verified keeps one entry, not thousands).

    Raises:
        ParameterError: ``metric`` is not a metric name (nothing is kept).
    """
    if not isinstance(metric, str) or not metric:
        raise ParameterError("metric", f"must be a metric name, got {metric!r}")
    kind = "one" if isinstance(value_or_set, str | bytes) else "set"
    value = b64e(canonical_value(value_or_set))
    for held in reversed(waiting):
        if held["metric"] == metric and abs(at - float(held["at"])) < SAME_VALUE_SECONDS:
            if held["value"] == value and held["kind"] == kind:
                return -1
            break
    waiting.append({"metric": metric, "value": value, "kind": kind, "at": at, "offset": offset})
    overflow = len(waiting) - limit
    if overflow <= 0:
        return 0
    del waiting[:overflow]
    return overflow


def released(waiting: list[dict[str, Any]]) -> Iterator[tuple[str, Value | tuple[Value, ...], float]]:
    """The held values as ``(metric, value or set, time given)``, oldest first."""
    for held in waiting:
        members = members_of_canonical(b64d(held["value"], "value"))
        value: Value | tuple[Value, ...] = members[0] if held["kind"] == "one" and members else tuple(members)
        yield str(held["metric"]), value, float(held["at"])


__all__ = ["SAME_VALUE_SECONDS", "hold", "released"]
