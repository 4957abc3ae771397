"""The server's batch opener answers exactly as ``protocol.crypto.open_sealed``: same plaintexts, same errors.

``open_in_place`` computes the recipient's public half once per batch and HKDF-SHA256 with ``hmac.digest``;
every kind of envelope (good, tampered, wrong metadata, wrong key, short, low-order ephemeral key, retired
keys) is compared with the reference.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from aggregator.server.opener import open_in_place
from protocol.crypto import SEAL_OVERHEAD, AggregatorKeys, open_sealed, seal
from protocol.errors import DecryptError


def _reference(privates: list[X25519PrivateKey], envelope: bytes, aad: bytes) -> bytes | tuple[str, str]:
    errors = []
    for private in privates:
        try:
            return open_sealed(private, envelope, aad)
        except DecryptError as exc:
            errors.append((exc.field, exc.reason))
    return errors[0]


def _answers(privates: list[X25519PrivateKey], items: list[tuple[bytes, bytes]]) -> list[bytes | tuple[str, str]]:
    return [a if isinstance(a, bytes) else (a.field, a.reason) for a in open_in_place(privates, items)]


def _cases(public: bytes) -> list[tuple[bytes, bytes]]:
    good = seal(public, b"payload", b"aad")
    flipped = good[:-1] + bytes([good[-1] ^ 1])
    cases = [(good, b"aad"), (seal(public, b"", b""), b""), (flipped, b"aad"), (good, b"other aad"),
             (good[:SEAL_OVERHEAD - 1], b"aad"), (good[:SEAL_OVERHEAD], b"aad"), (bytes(32) + good[32:], b"aad"),
             (seal(X25519PrivateKey.generate().public_key().public_bytes_raw(), b"x", b"aad"), b"aad")]
    return cases + [(seal(public, bytes(range(n)), b"m" * n), b"m" * n) for n in (1, 31, 200)]


def test_the_batch_opener_equals_open_sealed_for_every_kind_of_envelope() -> None:
    keys = AggregatorKeys.generate()
    privates = [keys.seal_private]
    items = _cases(keys.seal_public_raw)
    assert _answers(privates, items) == [_reference(privates, e, a) for e, a in items]
    assert isinstance(open_in_place(privates, items)[2], DecryptError)


def test_retired_keys_are_tried_in_order_and_the_current_keys_error_is_answered() -> None:
    current, old, older = X25519PrivateKey.generate(), X25519PrivateKey.generate(), X25519PrivateKey.generate()
    privates = [current, old, older]
    items = [item for key in privates for item in _cases(key.public_key().public_bytes_raw())]
    answers = _answers(privates, items)
    assert answers == [_reference(privates, e, a) for e, a in items]
    assert answers.count(b"payload") == 3
