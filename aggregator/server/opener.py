"""Opening sealed envelopes, in this process or in a small pool of processes.

Opening an envelope (X25519, HKDF-SHA256, AES-128-GCM: ``protocol.crypto``)
costs about 55 us of CPU and holds Python's GIL, so one process opens at
most ~18,000 per second whatever its threads. With PostgreSQL, more worker
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

from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from aggregator.server.helper_pool import HelperPool
from protocol.crypto import AggregatorKeys, open_sealed
from protocol.errors import DecryptError

MIN_POOLED_BATCH = 64  # smaller batches are opened in place: the round trip to a helper costs more
Sealed = tuple[bytes, bytes]  # (envelope, associated data)
Opened = bytes | DecryptError

_helper_keys: list[X25519PrivateKey] = []


def _start_helper(raw_privates: list[bytes]) -> None:
    _helper_keys[:] = [X25519PrivateKey.from_private_bytes(raw) for raw in raw_privates]


def _open_in_helper(chunk: list[Sealed]) -> list[bytes | tuple[str, str]]:
    """Runs in a helper process: plaintexts, or ``(field, reason)`` of a ``DecryptError``."""
    return [item if isinstance(item, bytes) else (item.field, item.reason)
            for item in open_in_place(_helper_keys, chunk)]


def _open_one(privates: Sequence[X25519PrivateKey], envelope: bytes, aad: bytes) -> Opened:
    """The current key first, then each retired one still honoured; the current key's error if none opens it."""
    errors: list[DecryptError] = []
    for private in privates:  # never empty: the current key comes first
        try:
            return open_sealed(private, envelope, aad)
        except DecryptError as exc:
            errors.append(exc)
    return errors[0]


def open_in_place(privates: Sequence[X25519PrivateKey], items: Sequence[Sealed]) -> list[Opened]:
    """Open each envelope here; a failure is returned (not raised) as its ``DecryptError``."""
    return [_open_one(privates, envelope, aad) for envelope, aad in items]


class EnvelopeOpener:
    """Opens batches of envelopes with the aggregator's X25519 key (and retired ones still honoured).

    Args:
        keys: the aggregator's keys.
        processes: helper processes for large batches (0: open in place).
        retired: sealing keys replaced by a rotation whose date has not passed
            (``aggregator.server.keyring``): an envelope the current key does
            not open is tried with each.
    """

    def __init__(self, keys: AggregatorKeys, *, processes: int = 0,
                 retired: Sequence[X25519PrivateKey] = ()) -> None:
        self.privates = [keys.seal_private, *retired]
        raw = [private.private_bytes_raw() for private in self.privates] if processes else []  # helpers only
        self.pool = HelperPool("decrypt_processes", processes, initializer=_start_helper, initargs=(raw,))
        self.processes = self.pool.processes

    def open_all(self, items: Sequence[Sealed]) -> list[Opened]:
        """Plaintexts in order; an envelope that does not open gives its ``DecryptError``."""
        if not self.pool.enabled or len(items) < MIN_POOLED_BATCH:
            return open_in_place(self.privates, items)
        size = -(-len(items) // self.processes)
        chunks = [list(items[i : i + size]) for i in range(0, len(items), size)]

        def in_helpers(executor: ProcessPoolExecutor) -> list[Opened]:
            out: list[Opened] = []
            for result in executor.map(_open_in_helper, chunks):
                out.extend(item if isinstance(item, bytes) else DecryptError(*item) for item in result)
            return out

        return self.pool.run(in_helpers, lambda: open_in_place(self.privates, items),
                             lost="this batch of envelopes is opened in place")

    def close(self) -> None:
        """Stop the helper processes (if any were started)."""
        self.pool.close()
