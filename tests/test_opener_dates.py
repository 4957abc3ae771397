"""A retired sealing key opens reports until its date by the opener's clock, read at each batch.

Before, the server handed the opener the retired keys honoured at start-up, so one running past a key's date kept
opening reports sealed to it until it was restarted. The helper processes get the batch's time with each chunk.
"""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from aggregator.server.keyring import RetiredSealKey
from aggregator.server.opener import MIN_POOLED_BATCH, EnvelopeOpener
from protocol.crypto import AggregatorKeys, seal
from protocol.errors import DecryptError


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _sealed(public: bytes, count: int) -> list[tuple[bytes, bytes]]:
    return [(seal(public, f"report {i}".encode(), b"aad"), b"aad") for i in range(count)]


@pytest.mark.parametrize("processes", [0, 2])
def test_a_retired_key_stops_at_its_date_while_the_opener_runs(processes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    keys, old, older = AggregatorKeys.generate(), X25519PrivateKey.generate(), X25519PrivateKey.generate()
    clock = Clock(1_000.0)
    opener = EnvelopeOpener(keys, processes=processes, clock=clock,
                            retired=[RetiredSealKey(private=old, until=2_000), RetiredSealKey(private=older, until=500)])
    count = MIN_POOLED_BATCH * 2 if processes else 3  # large enough to go to the helpers when there are any
    current = _sealed(keys.seal_public_raw, count)
    to_old = _sealed(old.public_key().public_bytes_raw(), count)
    to_older = _sealed(older.public_key().public_bytes_raw(), count)
    if processes:  # every batch must be opened by the helpers (a fresh interpreter, without this patch)
        def in_place(*_: object) -> None:
            raise AssertionError("opened in this process, not in the helpers")

        monkeypatch.setattr("aggregator.server.opener.open_in_place", in_place)
    try:
        assert opener.open_all(current) == [f"report {i}".encode() for i in range(count)]
        assert opener.open_all(to_old) == [f"report {i}".encode() for i in range(count)]  # before its date
        assert all(isinstance(r, DecryptError) for r in opener.open_all(to_older))  # past its date at start
        clock.now = 1_999.0
        assert opener.open_all(to_old)[0] == b"report 0"
        clock.now = 2_000.0  # its date: the same running opener (and its helpers) refuse it now
        assert all(isinstance(r, DecryptError) for r in opener.open_all(to_old))
        assert opener.open_all(current)[-1] == f"report {count - 1}".encode()  # the current key never expires
        clock.now = 100.0  # a clock set back: the dates are compared, not remembered
        assert opener.open_all(to_older)[0] == b"report 0"
    finally:
        opener.close()
