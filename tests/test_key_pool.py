"""The ephemeral key pool: one fresh X25519 key per sealed report, none made only to be dropped."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import client_sdk.pools as pools
from client_sdk import Client
from client_sdk.pools import EPHEMERAL_POOL, MAX_EPHEMERAL_POOL, EphemeralPool
from client_sdk.testing import FakeAggregator
from protocol.crypto import PUBLIC_KEY_BYTES, b64e, x25519_backend
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams
from protocol.wire import sealed_report_id

PLACES = MetricParams(
    name="places", encoding=BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=64),
    mode="asymmetric", level=2.0, irr_q=0.1, value_kind="set", time_precision=1,
)
T0 = 1_700_000_000.0


@pytest.fixture
def keys_made(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The public half of every ephemeral key the SDK generates, on any thread, in order."""
    made: list[bytes] = []
    lock = threading.Lock()
    original = pools._ephemeral
    x25519_backend()  # chosen now: a key made on the spot goes through _ephemeral as well (pools._ephemeral_now)

    def counted() -> Any:
        key = original()
        with lock:
            made.append(key[2])
        return key

    monkeypatch.setattr(pools, "_ephemeral", counted)
    return made


def new_client(fake: FakeAggregator, path: Path, now: list[float]) -> Client:
    client = Client("http://agg.test", path, background=False, server_public_keys=fake.sign_public, session=fake,
                    max_epsilon=1e9, max_queue=10**6, autosave=False, clock=lambda: now[0])
    client.sync()
    return client


def sealed_keys(fake: FakeAggregator) -> list[bytes]:
    """The ephemeral public key each stored report was sealed with (the envelope's first 32 bytes)."""
    out = []
    for report, _ in fake.stored.values():
        assert report.sealed is not None
        out.append(report.sealed[:PUBLIC_KEY_BYTES])
    return out


def test_a_new_client_that_reports_once_makes_a_few_keys_not_a_block(tmp_path: Path, keys_made: list[bytes]) -> None:
    # The demo makes 200 such clients; a phone app killed after one report loses whatever was made ahead.
    fake = FakeAggregator([PLACES])
    now = [T0]
    client = new_client(fake, tmp_path / "s", now)
    assert len(keys_made) == EPHEMERAL_POOL <= 2
    client.report("places", {"home"})
    assert client.flush().delivered == 1
    client.close()
    assert len(keys_made) <= EPHEMERAL_POOL + 1  # the one used, and the pool topped up once
    assert sealed_keys(fake)[0] in keys_made


def test_a_burst_seals_each_report_with_its_own_key_and_makes_one_key_per_report(
    tmp_path: Path, keys_made: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeAggregator([PLACES])
    now = [T0]
    # the sender's turns alone refill here, so that what is kept ahead depends on them only: the filler thread
    # (tested below and in test_client_fast) runs beside the burst, with libsodium off the interpreter lock,
    # and a refill of its own that spans a turn counts that turn's takes too
    monkeypatch.setattr(EphemeralPool, "_wake", lambda self: None)
    client = new_client(fake, tmp_path / "s", now)
    reports = 1500
    for i in range(reports):  # one new window per report, handed over every 100 as the sender would
        now[0] += 1
        client.report("places", {f"place-{i % 50}"})
        if (i + 1) % 100 == 0:
            client.flush()
    client.flush()
    pool = client._reporter.ephemeral
    client.close()
    used = sealed_keys(fake)
    assert len(used) == reports
    assert len(set(used)) == reports  # never a key twice: a report's seal and id are its key's alone
    assert set(used) <= set(keys_made)
    assert len(set(keys_made)) == len(keys_made)
    # Every key made went to a report or is still ahead; what is ahead is sized by use (twice the 100 reports
    # between two of the sender's turns at most), whatever the cap a longer burst could grow it to.
    assert len(keys_made) == reports + len(pool)
    assert len(pool) <= 200 < MAX_EPHEMERAL_POOL
    assert pool.made == len(keys_made)
    for report, _ in fake.stored.values():
        assert report.report_id == sealed_report_id(report.sealed or b"")


def test_concurrent_takes_never_share_a_key_and_every_key_made_is_accounted_for() -> None:
    pool = EphemeralPool(size=2, max_size=16)
    pool.refill()
    taken: list[list[tuple[Any, ...]]] = [[] for _ in range(4)]
    start = threading.Barrier(4)

    def burst(out: list[tuple[Any, ...]]) -> None:
        start.wait()
        for _ in range(150):
            out.append(pool.take())

    threads = [threading.Thread(target=burst, args=(out,)) for out in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pool.refill()
    handed = [item for out in taken for item in out]
    publics = [public for _, _, public, _ in handed]
    assert len(set(publics)) == len(publics) == 600
    assert all(rid == b64e(sealed_report_id(public)) for _, _, public, rid in handed)
    assert pool.made == len(handed) + len(pool)
    assert 2 <= pool.size <= 16 and len(pool) <= 16
