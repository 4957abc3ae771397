"""Sealing keys made by libsodium (PyNaCl, the ``sodium`` extra) give the bytes OpenSSL's give.

libsodium's fixed-base multiplication makes a key's public half in about half of OpenSSL's time; the
envelope, the report id and every failure must not depend on which library made the key.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from clocks import Clock
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from client_sdk import Client
from client_sdk.pools import EphemeralPool
from client_sdk.queue import envelope_of, item_id
from client_sdk.testing import FakeAggregator
from protocol import crypto
from protocol.crypto import (
    X25519_BACKEND_ENV,
    AggregatorKeys,
    ephemeral_keypair,
    open_sealed,
    seal,
    x25519_backend,
)
from protocol.encodings import BloomEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.wire import seal_report, sealed_report_id

sodium = pytest.importorskip("nacl.bindings", reason="PyNaCl (the 'sodium' extra) is not installed")

ROOT = Path(__file__).resolve().parents[1]

# RFC 7748 section 6.1: Alice's and Bob's keys and their shared secret
ALICE = bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
ALICE_PUBLIC = bytes.fromhex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
BOB = bytes.fromhex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
BOB_PUBLIC = bytes.fromhex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f")
SHARED = bytes.fromhex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742")

LOW_ORDER = [bytes(32), (1).to_bytes(32, "little")]  # points whose product with any clamped scalar is zero

METRIC = MetricParams(name="places", encoding=BloomEncoding(num_bits=64, num_hashes=2, num_cohorts=4),
                      mode="asymmetric", level=2.0, irr_q=0.1)
DAY = 86_400


def _use(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    if backend == "cryptography":
        monkeypatch.setenv(X25519_BACKEND_ENV, "cryptography")
    else:
        monkeypatch.delenv(X25519_BACKEND_ENV, raising=False)
    crypto._sodium.cache_clear()


@pytest.fixture(autouse=True)
def _forget_the_backend() -> Iterator[None]:
    """Each test here may switch the library; later tests find the process's own choice again."""
    yield
    crypto._sodium.cache_clear()


@pytest.fixture(params=["libsodium", "cryptography"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    _use(monkeypatch, request.param)
    assert x25519_backend() == request.param
    yield request.param


def test_both_libraries_compute_rfc_7748s_vectors() -> None:
    base, exchange = sodium.crypto_scalarmult_base, sodium.crypto_scalarmult
    assert base(ALICE) == ALICE_PUBLIC and base(BOB) == BOB_PUBLIC
    assert exchange(ALICE, BOB_PUBLIC) == exchange(BOB, ALICE_PUBLIC) == SHARED
    alice = X25519PrivateKey.from_private_bytes(ALICE)
    assert alice.public_key().public_bytes_raw() == ALICE_PUBLIC
    assert alice.exchange(X25519PublicKey.from_public_bytes(BOB_PUBLIC)) == SHARED


def test_libsodiums_keys_are_openssls_keys_and_seal_to_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = AggregatorKeys.generate()
    _use(monkeypatch, "libsodium")
    pairs = [ephemeral_keypair() for _ in range(200)]
    for n, (private, public) in enumerate(pairs):
        # stored clamped, as OpenSSL stores a generated key; loading it derives the same public half
        assert private[0] & 7 == 0 and private[31] & 0xC0 == 0x40
        assert X25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw() == public
        plain, aad = os.urandom(n % 50), os.urandom(7)
        mine = seal(keys.seal_public_raw, plain, aad, ephemeral_private=private, ephemeral_public=public)
        theirs = seal(keys.seal_public_raw, plain, aad, ephemeral_private=X25519PrivateKey.from_private_bytes(private))
        assert mine == theirs and open_sealed(keys.seal_private, mine, aad) == plain
    assert len({public for _, public in pairs}) == 200
    _use(monkeypatch, "cryptography")  # and the other way round: OpenSSL's envelope from the same raw halves
    private, public = pairs[0]
    assert seal(keys.seal_public_raw, b"x", b"a", ephemeral_private=private, ephemeral_public=public) == seal(
        keys.seal_public_raw, b"x", b"a", ephemeral_private=X25519PrivateKey.from_private_bytes(private))


@pytest.mark.parametrize("point", LOW_ORDER)
def test_a_low_order_recipient_is_refused_by_either_library(backend: str, point: bytes) -> None:
    private, public = ephemeral_keypair()
    with pytest.raises(ParameterError) as raised:
        seal(point, b"payload", b"aad", ephemeral_private=private, ephemeral_public=public)
    assert raised.value.field == "seal_public"


def test_a_wrong_sized_raw_private_key_names_its_field(backend: str) -> None:
    with pytest.raises(ParameterError) as raised:
        seal(AggregatorKeys.generate().seal_public_raw, b"x", b"", ephemeral_private=bytes(31), ephemeral_public=bytes(32))
    assert raised.value.field == "ephemeral_private"


def test_the_pool_makes_raw_keys_with_libsodium_and_key_objects_without(backend: str) -> None:
    pool = EphemeralPool(size=4)
    pool.refill()
    for key, private, public, _ in [pool.take() for _ in range(6)]:
        assert (key.key is None) == (backend == "libsodium")
        assert X25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw() == public


def test_a_client_reports_through_either_library_and_the_aggregator_opens_every_report(
        backend: str, tmp_path: Path) -> None:
    fake = FakeAggregator([METRIC])
    clock = Clock(1_699_920_000 + 3600.0)
    client = Client("http://agg.test", tmp_path / "s", background=False, strict=True, autosave=False, clock=clock, max_epsilon=100.0,
                    server_public_keys=[fake.sign_public], session=fake)  # type: ignore[arg-type]
    client.sync()
    ids = []
    for day in range(5):
        ids.append(client.report("places", {"home", str(day)}))
        clock.advance(DAY)
    for item in client._queue:  # the key kept in memory seals to the bytes the queued raw key gives
        held = client._held.get(item_id(item))
        assert held is not None and envelope_of(item, held).sealed == envelope_of(item).sealed
    assert client.flush().delivered == 5
    assert sorted(rid for _, rid in fake.stored) == sorted(ids)  # the fake opens each one with its key
    client.close()


def test_the_setting_switches_libsodium_off_and_importing_the_sdk_loads_neither() -> None:
    code = ("import sys, client_sdk, protocol.crypto as c; assert 'nacl' not in sys.modules, 'nacl imported'; "
            "print(c.x25519_backend())")
    env = {**os.environ, X25519_BACKEND_ENV: "cryptography"}
    off = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert off.stdout.strip() == "cryptography"
    env.pop(X25519_BACKEND_ENV)
    on = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert on.stdout.strip() == "libsodium"


def test_a_queued_raw_key_seals_to_the_same_report_under_either_library(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = AggregatorKeys.generate()
    private, public = ephemeral_keypair()
    made = {}
    for name in ("libsodium", "cryptography"):  # a report queued before a restart is sealed from its raw key
        _use(monkeypatch, name)
        made[name] = seal_report(payload=b"\0\0bits", metric="places", round=0, window=86_400,
                                 params_digest="ab" * 32, seal_public=keys.seal_public_raw, ephemeral_private=private)
        fresh = seal_report(payload=b"\0\0bits", metric="places", round=0, window=86_400, params_digest="ab" * 32,
                            seal_public=keys.seal_public_raw)  # a fresh key from this library
        assert open_sealed(keys.seal_private, fresh.sealed or b"", fresh.aad()) == b"\0\0bits"
    assert made["libsodium"] == made["cryptography"]
    assert made["libsodium"].report_id == sealed_report_id(public)


def test_a_key_made_on_the_callers_thread_never_waits_for_libsodiums_first_import() -> None:
    """An empty pool makes the caller's key at once with OpenSSL; the filler thread loads libsodium (~20 ms) and
    makes the next keys with it; once loaded, a key made on the spot is libsodium's."""
    code = """
import sys, time
from client_sdk.pools import EphemeralPool
from protocol.crypto import x25519_loaded
pool = EphemeralPool(size=2)
key = pool.take()[0]  # the pool is empty: made on the spot
assert key.key is not None, 'made by libsodium on the caller thread'
for _ in range(1000):  # the filler thread, woken by take(), loads libsodium and refills
    if x25519_loaded() and len(pool) >= 2:
        break
    time.sleep(0.01)
assert 'nacl' in sys.modules and all(pool.take()[0].key is None for _ in range(2))
assert EphemeralPool(size=2).take()[0].key is None  # loaded: libsodium on the spot too
print('ok')
"""
    env = {k: v for k, v in os.environ.items() if k != X25519_BACKEND_ENV}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
