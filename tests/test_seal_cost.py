"""Sealing's shortcuts (the recipient's key loaded once, the ephemeral public half passed in) keep the bytes."""

from __future__ import annotations

import os

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from protocol.crypto import AggregatorKeys, ephemeral_key, open_sealed, seal
from protocol.errors import DecryptError, ParameterError
from protocol.wire import seal_report, sealed_report_id


def test_passing_the_ephemeral_public_half_gives_the_same_envelope_byte_for_byte() -> None:
    keys = AggregatorKeys.generate()
    for n in (0, 1, 40, 300):
        key, private, public = ephemeral_key()
        plain, aad = os.urandom(n), os.urandom(n + 3)
        reference = seal(keys.seal_public_raw, plain, aad, ephemeral_private=X25519PrivateKey.from_private_bytes(private))
        assert seal(keys.seal_public_raw, plain, aad, ephemeral_private=key, ephemeral_public=public) == reference
        assert seal(keys.seal_public_raw, plain, aad, ephemeral_private=private) == reference
        assert reference[:32] == public
        assert open_sealed(keys.seal_private, reference, aad) == plain


def test_the_recipient_key_cache_follows_the_recipient() -> None:
    first, second = AggregatorKeys.generate(), AggregatorKeys.generate()
    key = ephemeral_key()[0]
    for keys in (first, second, first):  # a rotation and back: each envelope opens with its own recipient only
        envelope = seal(keys.seal_public_raw, b"payload", b"aad", ephemeral_private=key)
        assert open_sealed(keys.seal_private, envelope, b"aad") == b"payload"
        other = second if keys is first else first
        with pytest.raises(DecryptError):
            open_sealed(other.seal_private, envelope, b"aad")


def test_a_public_half_without_its_private_key_is_refused() -> None:
    with pytest.raises(ParameterError) as raised:
        seal(AggregatorKeys.generate().seal_public_raw, b"x", b"", ephemeral_public=bytes(32))
    assert raised.value.field == "ephemeral_public"


def test_a_sealed_report_opens_with_the_aggregator_and_its_id_is_its_key() -> None:
    keys = AggregatorKeys.generate()
    key, _, public = ephemeral_key()
    payload = bytes([0, 0]) + os.urandom(8)
    report = seal_report(payload=payload, metric="places", round=0, window=1_700_000_000, params_digest="ab" * 32,
                         seal_public=keys.seal_public_raw, ephemeral_private=key)
    assert report.sealed is not None and report.sealed[:32] == public
    assert open_sealed(keys.seal_private, report.sealed, report.aad()) == payload
    assert report.report_id == sealed_report_id(public)
