"""Randomness made ahead of time, off the caller's thread: ephemeral X25519 keys and IRR masks.

:meth:`client_sdk.Client.report` takes one key pair (for the report's
sealing and its id) and one IRR from these pools, so that it neither
generates an X25519 key (~25 us) nor asks the OS for its IRR uniforms per
call. The pools are refilled by ``sync()``, ``flush()`` and the background
sender; an empty pool makes what is asked on the spot (slower, the same
reports). Memory only; each item is handed out once; all are emptied in a
forked child (which must never reuse its parent's keys or uniforms).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import weakref
from collections.abc import Iterable
from typing import NamedTuple

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from protocol.crypto import b64e, ephemeral_key, ephemeral_keypair, x25519_backend, x25519_loaded
from protocol.randomizers import Randomizer
from protocol.rng import RandomSource
from protocol.wire import sealed_report_id

from .memo import IrrMasks, irr_masks

log = logging.getLogger("onesided.client")

# Randomness made ahead of time, off the caller's thread (by sync(), flush() and the sender), so that
# report() neither generates an X25519 key (~25 us) nor asks the OS for its IRR uniforms and compares
# them through numpy (~5 us) per call. Apps report a few values a day, and a phone app's process is
# often killed between two of them: what is made ahead and not used is lost with the process, so the
# first blocks are small (a new client makes 2 keys; a metric's first report draws 8 IRRs) and grow by
# doubling only while reports outrun them, up to a cap; keys are then kept ahead in proportion to their
# use (twice the keys taken since the last refill), so a finished burst leaves few behind. Both,
# and the key objects kept for the sender (HeldKeys), are memory only; each item is handed out once,
# and all are emptied in a forked child (which must never reuse its parent's keys or uniforms).
EPHEMERAL_POOL = 2  # keys a new client makes ahead: the first report's and the next one's
# What a burst can grow the pool to: a woken filler may wait one GIL switch interval (5 ms) before it
# runs, while back-to-back reports (~20 us each) take ~250 keys; 512 keeps it ahead (128 did not).
MAX_EPHEMERAL_POOL = 512
IRR_AHEAD = 4  # a metric's first report draws twice this on the spot
MAX_IRR_AHEAD = 512
# An IRR pool found empty (a metric's first report, a burst that outran the sender) draws a small block on
# the spot, on the caller's thread: this many reports' rows, at most this many uniforms (tens of
# microseconds), never its next full block of up to MAX_IRR_AHEAD reports.
CALLER_IRR_ROWS = 32
CALLER_IRR_UNIFORMS = 4096
FILLER_IDLE = 30.0  # seconds a filler thread waits for work before it ends
_AHEAD: weakref.WeakSet[EphemeralPool | IrrPool | HeldKeys] = weakref.WeakSet()


def _empty_after_fork() -> None:
    for held in list(_AHEAD):
        held.clear()


os.register_at_fork(after_in_child=_empty_after_fork)


class SealingKey(NamedTuple):
    """One report's ephemeral key as the pool made it: the object, its raw halves and the report's id.

    Kept for the sender (:class:`HeldKeys`): sealing with it needs neither
    the public half derived again nor the id hashed again
    (:func:`client_sdk.queue.envelope_of`). Only the pool makes them, so
    their fields agree (the public half is the key's, the id the public
    half's); the sender uses one only for the queued report whose private
    key and id are its own.
    """

    key: X25519PrivateKey | None  # None where libsodium made it: sealing uses the raw halves
    private: bytes
    public: bytes
    report_id: bytes  # sealed_report_id(public)
    report_id_text: str  # its base64url, as report() returns it


Ephemeral = tuple[SealingKey, bytes, bytes, str]


def _sealing_key(key: X25519PrivateKey | None, private: bytes, public: bytes) -> Ephemeral:
    rid = sealed_report_id(public)
    text = b64e(rid)
    return SealingKey(key, private, public, rid, text), private, public, text


def _ephemeral() -> Ephemeral:
    if x25519_backend() == "libsodium":
        return _sealing_key(None, *ephemeral_keypair())
    return _sealing_key(*ephemeral_key())


def _ephemeral_now() -> Ephemeral:
    """A key made on the caller's thread (an empty pool): by libsodium only once it is loaded; its first
    import (~20 ms) is left to the filler thread, and OpenSSL makes this one (~34 us)."""
    return _ephemeral() if x25519_loaded() else _sealing_key(*ephemeral_key())


class EphemeralPool:
    """Fresh X25519 key pairs for sealing, made ahead of time with their report ids; each is handed out once.

    One key per report, never reused (a report's id and its seal both come
    from its key), and none made only to be dropped: keys are made to
    replace the ones taken, a few ahead. Kept in memory only (never
    written: a pool lost in a crash or with the process costs what it holds:
    twice the keys taken between the last two refills, at least ``first``,
    at most ``max_size``). ``take()`` never waits: an empty pool makes a key
    on the spot. Thread-safe (``deque`` appends and pops are atomic; one
    refill at a time).

    A new client makes ``size`` keys ahead (2 by default: a client that
    reports once and exits made 3 keys, not a block of 32). A burst
    of reports (more than the pool between two refills by the sender) would
    make a key inline on every call: ``take()`` therefore wakes a filler
    thread of its own when half of what the last refill aimed at is gone, and an empty pool
    doubles its size (up to ``max_size``), so that keys are made off the
    caller's thread at the rate they are used. The filler is a daemon that
    ends after ``FILLER_IDLE`` seconds without work (and with the pool); a
    forked child starts its own.
    """

    def __init__(self, size: int = EPHEMERAL_POOL, max_size: int = MAX_EPHEMERAL_POOL) -> None:
        self.size = size
        self.max_size = max(size, max_size)
        self.first = size
        self._keys: collections.deque[Ephemeral] = collections.deque()
        self._taken = 0  # keys handed out since the last refill (a sizing hint: a lost count only sizes)
        self._ahead = size  # what the last refill aimed at: the filler is woken when half of it is gone
        self._made = 0
        self._count_lock = threading.Lock()
        self._refilling = threading.Lock()
        self._wanted = threading.Event()
        self._filler: threading.Thread | None = None
        self._filler_pid = 0
        _AHEAD.add(self)

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def made(self) -> int:
        """Keys this pool has generated so far (handed out, held, or emptied in a forked child)."""
        return self._made

    def take(self) -> Ephemeral:
        """``(key, private, public, report id)``: a key never handed out before (a :class:`SealingKey`),
        its raw halves, and ``b64e(sealed_report_id(public))``."""
        self._taken += 1
        try:
            key = self._keys.popleft()
        except IndexError:
            self.size = min(self.max_size, 2 * self.size)  # a burst: keep more ahead
            made = self._make(now=True)  # before the filler starts: it would compete for the interpreter
            self._wake()
            return made
        if len(self._keys) < self._ahead // 2:
            self._wake()
        return key

    def refill(self) -> None:
        """Make keys until twice the keys taken since the last refill are ahead (at least ``first``, at most
        ``size``); returns at once if another thread is refilling.

        Sized by use: in a burst the pool keeps ahead what the caller takes
        between two turns of the filler; once the burst is over, a refill
        does not top up keys that nothing is taking.
        """
        if not self._refilling.acquire(blocking=False):
            return
        try:
            wanted = self._ahead = min(self.size, max(self.first, 2 * self._taken))
            self._taken = 0
            while len(self._keys) < wanted:
                self._keys.append(self._make())
        finally:
            self._refilling.release()

    def clear(self) -> None:
        """Drop the keys ahead (a forked child's, which must not use its parent's)."""
        self._keys.clear()
        # a child forked while another thread held one would find it held forever
        self._refilling, self._count_lock = threading.Lock(), threading.Lock()

    def _make(self, now: bool = False) -> Ephemeral:
        made = _ephemeral_now() if now else _ephemeral()
        with self._count_lock:
            self._made += 1
        return made

    def _wake(self) -> None:
        """Ask the filler thread to refill (starting it if it is not running in this process)."""
        self._wanted.set()
        filler = self._filler
        if filler is not None and filler.is_alive() and self._filler_pid == os.getpid():
            return
        self._filler_pid = os.getpid()
        self._filler = threading.Thread(target=_fill, args=(weakref.ref(self), self._wanted),
                                        name="onesided-keys", daemon=True)
        self._filler.start()


def _fill(pool_ref: weakref.ref[EphemeralPool], wanted: threading.Event) -> None:
    """The filler thread: refill when woken; end when idle or when the pool is gone. Never raises."""
    while wanted.wait(FILLER_IDLE):
        wanted.clear()
        pool = pool_ref()
        if pool is None:
            return
        try:
            pool.refill()
        except Exception:  # keys made ahead are an optimization: take() makes them itself
            log.exception("making ephemeral keys ahead failed")
        del pool


class HeldKeys:
    """The ephemeral keys of the reports queued since start (:class:`SealingKey`), by report id, for the sender.

    Sealing from the queued raw bytes would derive each key's public half
    again (an X25519 scalar multiplication) and hash its id again; the pool
    made both with the key. Memory only: after a restart
    the sender loads the bytes. Emptied in a forked child. Thread-safe
    (single dict operations).
    """

    def __init__(self) -> None:
        self._keys: dict[str, SealingKey] = {}
        _AHEAD.add(self)

    def __len__(self) -> int:
        return len(self._keys)

    def put(self, report_id: str, key: SealingKey) -> None:
        self._keys[report_id] = key

    def get(self, report_id: str) -> SealingKey | None:
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
    law; only the moment of drawing moves. ``take()`` on an empty pool
    draws a small block on the spot (:data:`CALLER_IRR_ROWS` reports, at
    most :data:`CALLER_IRR_UNIFORMS` uniforms), keeps its other rows for the
    next reports, and doubles ``size`` (up to ``MAX_IRR_AHEAD``) once until
    the next ``refill()``, which draws the larger block off the caller's
    thread. Rows are handed out in the order drawn. (No thread of its own:
    the source may be a seeded generator, which is not shared across
    threads.) Thread-safe.
    """

    def __init__(self, source: RandomSource, randomizer: Randomizer, num_bits: int, size: int = IRR_AHEAD) -> None:
        self.source = source
        self.randomizer = randomizer
        self.num_bits = num_bits
        self.size = size
        self._masks: collections.deque[IrrMasks] = collections.deque()
        self._starved = False  # found empty since the last refill() (size doubled once)
        _AHEAD.add(self)

    def __len__(self) -> int:
        return len(self._masks)

    def take(self) -> IrrMasks:
        """One report's ``(below_p, below_q)`` masks, never handed out before."""
        if not self.randomizer.has_irr:
            return (0, 0)
        try:
            return self._masks.popleft()
        except IndexError:  # a first report or a burst: a small block now; a larger one at the next refill
            if not self._starved:
                self._starved = True
                self.size = min(MAX_IRR_AHEAD, 2 * self.size)
            drawn = self._draw(max(1, min(CALLER_IRR_ROWS, CALLER_IRR_UNIFORMS // self.num_bits)))
            self._masks.extend(drawn[1:])
            return drawn[0]

    def refill(self) -> None:
        """Draw the next reports' IRR now if less than half of ``size`` is left."""
        self._starved = False
        if self.randomizer.has_irr and len(self._masks) < self.size // 2:
            self._masks.extend(self._draw(self.size - len(self._masks)))

    def clear(self) -> None:
        self._masks.clear()

    def _draw(self, reports: int) -> list[IrrMasks]:
        return irr_masks(self.randomizer, self.source.uniform((reports, self.num_bits)))


__all__ = ["CALLER_IRR_ROWS", "CALLER_IRR_UNIFORMS", "EPHEMERAL_POOL", "IRR_AHEAD", "MAX_EPHEMERAL_POOL",
           "MAX_IRR_AHEAD", "Ephemeral", "EphemeralPool", "HeldKeys", "IrrPool", "SealingKey"]
