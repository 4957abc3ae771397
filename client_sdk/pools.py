"""Randomness made ahead of time, off the caller's thread: ephemeral X25519 keys and IRR masks.

:meth:`client_sdk.Client.report` takes one key pair (for the report's
sealing and its id) and one IRR from these pools, so that it neither
generates an X25519 key (~30 us) nor asks the OS for its IRR uniforms per
call. The pools are refilled by ``sync()``, ``flush()`` and the background
sender; an empty pool makes what is asked on the spot (slower, the same
reports). Memory only; each item is handed out once; all are emptied in a
forked child (which must never reuse its parent's keys or uniforms).
"""

from __future__ import annotations

import collections
import os
import weakref
from collections.abc import Iterable

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from protocol.crypto import b64e, ephemeral_key
from protocol.randomizers import Randomizer
from protocol.rng import RandomSource
from protocol.wire import sealed_report_id

from .memo import IrrMasks, irr_masks

# Randomness made ahead of time, off the caller's thread (by sync(), flush() and the sender), so that
# report() neither generates an X25519 key (~30 us) nor asks the OS for its IRR uniforms and compares
# them through numpy (~5 us) per call. Apps report a few values a day; a burst beyond the pools makes
# its keys and IRR inline (slower, the same reports). Both, and the key objects kept for the sender
# (HeldKeys), are memory only; each item is handed out once, and all are emptied in a forked child
# (which must never reuse its parent's keys or uniforms).
EPHEMERAL_POOL = 32
IRR_AHEAD = 64
_AHEAD: weakref.WeakSet[EphemeralPool | IrrPool | HeldKeys] = weakref.WeakSet()


def _empty_after_fork() -> None:
    for held in list(_AHEAD):
        held.clear()


os.register_at_fork(after_in_child=_empty_after_fork)


Ephemeral = tuple[X25519PrivateKey, bytes, bytes, str]


def _ephemeral() -> Ephemeral:
    key, private, public = ephemeral_key()
    return key, private, public, b64e(sealed_report_id(public))


class EphemeralPool:
    """Fresh X25519 key pairs for sealing, made ahead of time with their report ids; each is handed out once.

    Kept in memory only (never written: a pool lost in a crash costs
    nothing). ``take()`` never waits: an empty pool makes a key on the spot.
    Thread-safe (``deque`` appends and pops are atomic).
    """

    def __init__(self, size: int = EPHEMERAL_POOL) -> None:
        self.size = size
        self._keys: collections.deque[Ephemeral] = collections.deque()
        _AHEAD.add(self)

    def __len__(self) -> int:
        return len(self._keys)

    def take(self) -> Ephemeral:
        """``(key, private, public, report id)``: a key never handed out before, its raw halves, and
        ``b64e(sealed_report_id(public))``."""
        try:
            return self._keys.popleft()
        except IndexError:
            return _ephemeral()

    def refill(self) -> None:
        while len(self._keys) < self.size:
            self._keys.append(_ephemeral())

    def clear(self) -> None:
        self._keys.clear()


class HeldKeys:
    """The ephemeral key objects of the reports queued since start, by report id, for the sender.

    Sealing from the queued raw bytes would derive each key's public half
    again (~30 us); the object already has it. Memory only: after a restart
    the sender loads the bytes. Emptied in a forked child. Thread-safe
    (single dict operations).
    """

    def __init__(self) -> None:
        self._keys: dict[str, X25519PrivateKey] = {}
        _AHEAD.add(self)

    def __len__(self) -> int:
        return len(self._keys)

    def put(self, report_id: str, key: X25519PrivateKey) -> None:
        self._keys[report_id] = key

    def get(self, report_id: str) -> X25519PrivateKey | None:
        return self._keys.get(report_id)

    def forget(self, report_ids: Iterable[str]) -> None:
        for report_id in report_ids:
            self._keys.pop(report_id, None)

    def clear(self) -> None:
        self._keys.clear()


class IrrPool:
    """The IRR of reports to come (:func:`client_sdk.memo.irr_masks`) for one IRR and number of bits.

    ``refill()`` draws the uniforms of up to ``size`` reports from ``source``
    in one call and compares them with ``irr_p`` / ``irr_q`` in one
    vectorized step (:meth:`Randomizer.instantaneous`'s comparisons, row by
    row); each report then takes one pair of masks, once. Same source, same
    law; only the moment of drawing moves. ``take()`` never waits: an empty
    pool draws one report's uniforms on the spot. Thread-safe.
    """

    def __init__(self, source: RandomSource, randomizer: Randomizer, num_bits: int, size: int = IRR_AHEAD) -> None:
        self.source = source
        self.randomizer = randomizer
        self.num_bits = num_bits
        self.size = size
        self._masks: collections.deque[IrrMasks] = collections.deque()
        _AHEAD.add(self)

    def __len__(self) -> int:
        return len(self._masks)

    def take(self) -> IrrMasks:
        """One report's ``(below_p, below_q)`` masks, never handed out before."""
        if not self.randomizer.has_irr:
            return (0, 0)
        try:
            return self._masks.popleft()
        except IndexError:
            return self._draw(1)[0]

    def refill(self) -> None:
        """Draw the next reports' IRR now if less than half of ``size`` is left."""
        if self.randomizer.has_irr and len(self._masks) < self.size // 2:
            self._masks.extend(self._draw(self.size - len(self._masks)))

    def clear(self) -> None:
        self._masks.clear()

    def _draw(self, reports: int) -> list[IrrMasks]:
        return irr_masks(self.randomizer, self.source.uniform((reports, self.num_bits)))


__all__ = ["EPHEMERAL_POOL", "IRR_AHEAD", "Ephemeral", "EphemeralPool", "HeldKeys", "IrrPool"]
