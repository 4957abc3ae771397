"""Opening sealed envelopes, in this process or in a small pool of processes.

Opening an envelope (X25519, HKDF-SHA256, AES-128-GCM: ``protocol.crypto``)
costs about 38 us of CPU here (the X25519 exchange most of it) and holds
Python's GIL, so one process opens at most ~26,000 per second whatever its
threads. With PostgreSQL, more worker
processes add cores. With SQLite, where one process must do all the writing,
``decrypt_processes = N`` hands the opening of large batches to ``N`` helper
processes (started with ``forkserver``, holding the X25519 private key),
while the database work stays in the one worker process.

>>> from protocol.crypto import AggregatorKeys, seal
>>> keys = AggregatorKeys.generate()
>>> opener = EnvelopeOpener(keys, processes=0)
>>> opener.open_all([(seal(keys.seal_public_raw, b"payload", b"aad"), b"aad"), (b"x" * 48, b"aad")])[0]
b'payload'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from aggregator.server.helper_pool import HelperPool
from protocol.crypto import (
    PUBLIC_KEY_BYTES,
    SEAL_OVERHEAD,
    AggregatorKeys,
    seal_key_nonce,
)
from protocol.errors import DecryptError

if TYPE_CHECKING:
    from aggregator.server.keyring import RetiredSealKey

MIN_POOLED_BATCH = 64  # smaller batches are opened in place: the round trip to a helper costs more
Sealed = tuple[bytes, bytes]  # (envelope, associated data)
Opened = bytes | DecryptError

# A helper's keys: (private key, honoured while now < until); the current key's until is infinite.
_helper_keys: list[tuple[X25519PrivateKey, float]] = []


def _start_helper(raw_privates: list[tuple[bytes, float]]) -> None:
    _helper_keys[:] = [(X25519PrivateKey.from_private_bytes(raw), until) for raw, until in raw_privates]


def _honoured(keys: Sequence[tuple[X25519PrivateKey, float]], now: float) -> list[X25519PrivateKey]:
    """The keys whose date has not passed at ``now``, in order (the current key never expires)."""
    return [private for private, until in keys if now < until]


def _open_in_helper(chunk: list[Sealed], now: float) -> list[bytes | tuple[str, str]]:
    """Runs in a helper process: plaintexts, or ``(field, reason)`` of a ``DecryptError``.

    ``now`` is the server's clock when the batch arrived: a retired key past its date opens nothing here either.
    """
    return [item if isinstance(item, bytes) else (item.field, item.reason)
            for item in open_in_place(_honoured(_helper_keys, now), chunk)]


_SHORT = f"envelope shorter than {SEAL_OVERHEAD} bytes"
_LOW_ORDER = "ephemeral key is a low-order point"
_NO_OPEN = "envelope does not open (tampered, wrong key or wrong metadata)"


def _open_with(private: X25519PrivateKey, recipient_public: bytes, envelope: bytes, aad: bytes) -> Opened:
    """:func:`protocol.crypto.open_sealed` with the recipient's public half given, its error returned.

    The same computation and the same errors; what a batch repeats is done
    once (the public half, an object per call); the key schedule is the
    sealing's own (:func:`protocol.crypto.seal_key_nonce`)
    (tests/test_opener_fast.py compares the two).
    """
    if len(envelope) < SEAL_OVERHEAD:
        return DecryptError("sealed", _SHORT)
    eph_public = envelope[:PUBLIC_KEY_BYTES]
    try:
        shared = private.exchange(X25519PublicKey.from_public_bytes(eph_public))
    except ValueError:
        return DecryptError("sealed", _LOW_ORDER)
    key, nonce = seal_key_nonce(shared, eph_public, recipient_public)
    try:
        return AESGCM(key).decrypt(nonce, envelope[PUBLIC_KEY_BYTES:], aad)
    except InvalidTag:
        return DecryptError("sealed", _NO_OPEN)


def open_in_place(privates: Sequence[X25519PrivateKey], items: Sequence[Sealed]) -> list[Opened]:
    """Open each envelope here; a failure is returned (not raised) as its ``DecryptError``.

    The current key first, then each retired one still honoured; the current
    key's error if none opens it.
    """
    keys = [(private, private.public_key().public_bytes_raw()) for private in privates]
    if len(keys) == 1:  # the usual case: no retired key still honoured
        private, public = keys[0]
        return [_open_with(private, public, envelope, aad) for envelope, aad in items]
    out: list[Opened] = []
    for envelope, aad in items:
        errors: list[DecryptError] = []
        for private, public in keys:
            opened = _open_with(private, public, envelope, aad)
            if isinstance(opened, bytes):
                out.append(opened)
                break
            errors.append(opened)
        else:
            out.append(errors[0])
    return out


class EnvelopeOpener:
    """Opens batches of envelopes with the aggregator's X25519 key (and retired ones still honoured).

    Args:
        keys: the aggregator's keys.
        processes: helper processes for large batches (0: open in place).
        retired: sealing keys replaced by a rotation, each with its date
            (``aggregator.server.keyring``): an envelope the current key does
            not open is tried with each whose date has not passed.
        clock: Unix seconds; read once per batch, so a retired key stops
            opening at its date while the server runs (in the helper
            processes too, which are told the batch's time with its chunk).
    """

    def __init__(self, keys: AggregatorKeys, *, processes: int = 0, retired: Sequence[RetiredSealKey] = (),
                 clock: Callable[[], float] = time.time) -> None:
        self.keys: list[tuple[X25519PrivateKey, float]] = [
            (keys.seal_private, float("inf")), *((r.private, float(r.until)) for r in retired)]
        self.clock = clock
        raw = [(private.private_bytes_raw(), until) for private, until in self.keys] if processes else []
        self.pool = HelperPool("decrypt_processes", processes, initializer=_start_helper, initargs=(raw,))
        self.processes = self.pool.processes

    def privates(self, now: float) -> list[X25519PrivateKey]:
        """The current key, then the retired keys still honoured at ``now``."""
        return _honoured(self.keys, now)

    def open_all(self, items: Sequence[Sealed]) -> list[Opened]:
        """Plaintexts in order; an envelope that does not open gives its ``DecryptError``."""
        now = self.clock()
        if not self.pool.enabled or len(items) < MIN_POOLED_BATCH:
            return open_in_place(self.privates(now), items)
        size = -(-len(items) // self.processes)
        chunks = [list(items[i : i + size]) for i in range(0, len(items), size)]

        def in_helpers(executor: ProcessPoolExecutor) -> list[Opened]:
            out: list[Opened] = []
            for result in executor.map(_open_in_helper, chunks, repeat(now)):
                out.extend(item if isinstance(item, bytes) else DecryptError(*item) for item in result)
            return out

        return self.pool.run(in_helpers, lambda: open_in_place(self.privates(now), items),
                             lost="this batch of envelopes is opened in place")

    def close(self) -> None:
        """Stop the helper processes (if any were started)."""
        self.pool.close()
