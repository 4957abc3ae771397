"""A settable clock for client tests (import as ``from clocks import Clock``).

A metric takes one value per window, so tests move time by whole windows to report again.
"""

from __future__ import annotations


class Clock:
    """Returns ``now`` when called; tests set or :meth:`advance` it."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
