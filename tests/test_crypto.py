"""Crypto envelopes: base64url, sealing, signatures, key files, blobs at rest."""

from __future__ import annotations

import base64
import hashlib
import os
import stat

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.crypto import (
    SEAL_KEY_FILE,
    SEAL_OVERHEAD,
    SIGN_KEY_FILE,
    AggregatorKeys,
    b64d,
    b64e,
    decrypt_blob,
    encrypt_blob,
    key_id,
    open_sealed,
    seal,
    sign_document,
    verify_document,
)
from protocol.errors import DecryptError, ParameterError, ReportRejected, SignatureError

RECIPIENT = X25519PrivateKey.from_private_bytes(bytes(range(32)))
RECIPIENT_PUBLIC = RECIPIENT.public_key().public_bytes_raw()
SIGNER = Ed25519PrivateKey.from_private_bytes(bytes(range(100, 132)))
SIGNER_PUBLIC = SIGNER.public_key().public_bytes_raw()


# --- base64url -------------------------------------------------------------


@given(st.binary(max_size=100))
def test_b64_round_trip_without_padding(data: bytes) -> None:
    text = b64e(data)
    assert "=" not in text and "+" not in text and "/" not in text
    assert b64d(text, "f") == data
    assert text == base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")  # RFC 4648 section 5, unpadded


@pytest.mark.parametrize(
    "text, why",
    [("AA==", "padding"), ("A", "length 1 mod 4"), ("AB+/", "standard alphabet"), ("AA A", "space"),
     ("AB", "non-zero trailing bits"), ("QUI\n", "newline")],
)
def test_b64d_rejects_non_canonical_text(text: str, why: str) -> None:
    with pytest.raises(ReportRejected) as info:
        b64d(text, "reports[2].sealed")
    assert info.value.field == "reports[2].sealed", why


def test_b64d_rejects_non_strings() -> None:
    with pytest.raises(ReportRejected, match="must be a base64url string"):
        b64d(b"AAAA", "report_id")


# --- sealing ---------------------------------------------------------------


@settings(max_examples=50)
@given(st.binary(max_size=600), st.binary(max_size=80))
def test_seal_round_trip(plaintext: bytes, aad: bytes) -> None:
    envelope = seal(RECIPIENT_PUBLIC, plaintext, aad)
    assert len(envelope) == SEAL_OVERHEAD + len(plaintext)
    assert open_sealed(RECIPIENT, envelope, aad) == plaintext
    assert open_sealed(RECIPIENT.private_bytes_raw(), envelope, aad) == plaintext


def test_seal_is_fresh_per_call_and_fixed_with_an_injected_ephemeral_key() -> None:
    assert seal(RECIPIENT_PUBLIC, b"x", b"a") != seal(RECIPIENT_PUBLIC, b"x", b"a")
    eph = bytes(range(32, 64))
    first = seal(RECIPIENT_PUBLIC, b"x", b"a", ephemeral_private=eph)
    assert first == seal(RECIPIENT_PUBLIC, b"x", b"a", ephemeral_private=X25519PrivateKey.from_private_bytes(eph))
    assert first[:32] == X25519PrivateKey.from_private_bytes(eph).public_key().public_bytes_raw()


def test_every_flipped_bit_of_an_envelope_fails_to_open() -> None:
    envelope = seal(RECIPIENT_PUBLIC, b"payload bytes", b"aad")
    for pos in range(len(envelope)):
        for bit in range(8):
            tampered = bytearray(envelope)
            tampered[pos] ^= 1 << bit
            with pytest.raises(DecryptError) as info:
                open_sealed(RECIPIENT, bytes(tampered), b"aad")
            assert info.value.field == "sealed"


@pytest.mark.parametrize("cut", [0, 1, 31, 32, 47])
def test_short_envelopes_fail_to_open(cut: int) -> None:
    envelope = seal(RECIPIENT_PUBLIC, b"", b"aad")
    assert len(envelope) == 48
    with pytest.raises(DecryptError, match="shorter"):
        open_sealed(RECIPIENT, envelope[:cut], b"aad")


def test_wrong_aad_wrong_key_and_truncation_fail_to_open() -> None:
    envelope = seal(RECIPIENT_PUBLIC, b"payload", b"aad")
    with pytest.raises(DecryptError):
        open_sealed(RECIPIENT, envelope, b"aae")
    with pytest.raises(DecryptError):
        open_sealed(X25519PrivateKey.generate(), envelope, b"aad")
    with pytest.raises(DecryptError):
        open_sealed(RECIPIENT, envelope[:-1], b"aad")
    with pytest.raises(DecryptError):
        open_sealed(RECIPIENT, envelope + b"\0", b"aad")


def test_low_order_points_are_refused() -> None:
    with pytest.raises(ParameterError) as info:
        seal(bytes(32), b"x", b"")
    assert info.value.field == "seal_public"
    with pytest.raises(DecryptError, match="low-order"):
        open_sealed(RECIPIENT, bytes(32) + bytes(20), b"")


def test_seal_checks_the_public_key_length() -> None:
    with pytest.raises(ParameterError) as info:
        seal(RECIPIENT_PUBLIC[:31], b"x", b"")
    assert info.value.field == "seal_public"


# --- signatures --------------------------------------------------------------


PAYLOAD = {"version": 1, "metric": "places", "level_to": 2.5, "cohorts": [1, 2], "name": "café"}


def test_key_id_is_a_truncated_sha256() -> None:
    assert key_id(SIGNER_PUBLIC) == hashlib.sha256(SIGNER_PUBLIC).hexdigest()[:16]


def test_sign_and_verify_round_trip() -> None:
    document = sign_document(SIGNER, PAYLOAD)
    assert set(document) == {"payload", "key_id", "signature"}
    assert document["key_id"] == key_id(SIGNER_PUBLIC)
    assert verify_document(SIGNER_PUBLIC, document) == PAYLOAD
    # Ed25519 is deterministic: the same payload gives the same signature.
    assert sign_document(SIGNER, dict(reversed(PAYLOAD.items()))) == document


def test_wrong_signing_key_is_refused() -> None:
    document = sign_document(SIGNER, PAYLOAD)
    other = Ed25519PrivateKey.generate().public_key().public_bytes_raw()
    with pytest.raises(SignatureError) as info:
        verify_document(other, document)
    assert info.value.field == "key_id"
    forged = sign_document(Ed25519PrivateKey.generate(), PAYLOAD) | {"key_id": key_id(SIGNER_PUBLIC)}
    with pytest.raises(SignatureError) as info:
        verify_document(SIGNER_PUBLIC, forged)
    assert info.value.field == "signature"


@pytest.mark.parametrize(
    "change",
    [{"level_to": 2.6}, {"cohorts": [1, 3]}, {"name": "cafe"}, {"extra": None}, {"version": 1.0}],
)
def test_tampered_payload_is_refused(change: dict[str, object]) -> None:
    document = sign_document(SIGNER, PAYLOAD)
    document["payload"] = PAYLOAD | change
    with pytest.raises(SignatureError) as info:
        verify_document(SIGNER_PUBLIC, document)
    assert info.value.field == "signature"


@pytest.mark.parametrize("missing", ["payload", "key_id", "signature"])
def test_missing_fields_are_named(missing: str) -> None:
    document = sign_document(SIGNER, PAYLOAD)
    del document[missing]
    with pytest.raises(SignatureError) as info:
        verify_document(SIGNER_PUBLIC, document)
    assert info.value.field == missing


@pytest.mark.parametrize(
    "change, field",
    [({"extra": 1}, "extra"), ({"payload": [1]}, "payload"), ({"signature": "AA=="}, "signature"),
     ({"signature": b64e(bytes(63))}, "signature"), ({"signature": 5}, "signature")],
)
def test_malformed_documents_name_the_field(change: dict[str, object], field: str) -> None:
    document = sign_document(SIGNER, PAYLOAD) | change
    with pytest.raises(SignatureError) as info:
        verify_document(SIGNER_PUBLIC, document)
    assert info.value.field == field


def test_non_object_document_and_non_json_payload() -> None:
    with pytest.raises(SignatureError):
        verify_document(SIGNER_PUBLIC, [])
    with pytest.raises(ParameterError) as info:
        sign_document(SIGNER, {"level": float("nan")})
    assert info.value.field == "payload"


@given(st.integers(min_value=0, max_value=63), st.integers(min_value=0, max_value=7))
def test_every_flipped_signature_bit_is_refused(pos: int, bit: int) -> None:
    document = sign_document(SIGNER, PAYLOAD)
    raw = bytearray(b64d(document["signature"], "signature"))
    raw[pos] ^= 1 << bit
    with pytest.raises(SignatureError):
        verify_document(SIGNER_PUBLIC, document | {"signature": b64e(bytes(raw))})


# --- aggregator keys -----------------------------------------------------------


def test_keys_save_load_with_private_permissions(tmp_path: os.PathLike[str]) -> None:
    folder = os.path.join(tmp_path, "keys")
    keys = AggregatorKeys.generate()
    keys.save(folder)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert sorted(os.listdir(folder)) == sorted([SEAL_KEY_FILE, SIGN_KEY_FILE])
    for name in (SEAL_KEY_FILE, SIGN_KEY_FILE):
        assert stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode) == 0o600
    loaded = AggregatorKeys.load(folder)
    assert loaded.public_info() == keys.public_info()
    envelope = seal(keys.seal_public_raw, b"x", b"")
    assert open_sealed(loaded.seal_private, envelope, b"") == b"x"
    assert verify_document(keys.sign_public_raw, loaded.sign({"a": 1})) == {"a": 1}


def test_keys_are_not_replaced_unless_asked(tmp_path: os.PathLike[str]) -> None:
    first, second = AggregatorKeys.generate(), AggregatorKeys.generate()
    first.save(tmp_path)
    with pytest.raises(ParameterError, match="refusing"):
        second.save(tmp_path)
    assert AggregatorKeys.load(tmp_path).public_info() == first.public_info()
    second.save(tmp_path, overwrite=True)
    assert AggregatorKeys.load(tmp_path).public_info() == second.public_info()


def test_existing_directory_is_made_private(tmp_path: os.PathLike[str]) -> None:
    os.chmod(tmp_path, 0o755)
    AggregatorKeys.generate().save(tmp_path)
    assert stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o700


def test_missing_or_corrupt_key_files_are_named(tmp_path: os.PathLike[str]) -> None:
    with pytest.raises(ParameterError) as info:
        AggregatorKeys.load(tmp_path)
    assert info.value.field == SEAL_KEY_FILE and "missing" in str(info.value)
    AggregatorKeys.generate().save(tmp_path)
    sign_path = os.path.join(tmp_path, SIGN_KEY_FILE)
    for corrupt in ("not base64!", b64e(bytes(31))):
        with open(sign_path, "w") as handle:
            handle.write(corrupt)
        with pytest.raises(ParameterError) as info:
            AggregatorKeys.load(tmp_path)
        assert info.value.field == SIGN_KEY_FILE and "corrupt" in str(info.value)


def test_public_info_shape() -> None:
    keys = AggregatorKeys(seal_private=RECIPIENT, sign_private=SIGNER)
    info = keys.public_info()
    assert info == {
        "seal_public": b64e(RECIPIENT_PUBLIC),
        "seal_key_id": key_id(RECIPIENT_PUBLIC),
        "sign_public": b64e(SIGNER_PUBLIC),
        "sign_key_id": key_id(SIGNER_PUBLIC),
    }
    with pytest.raises(ParameterError) as err:
        AggregatorKeys(seal_private=SIGNER, sign_private=SIGNER)  # type: ignore[arg-type]
    assert err.value.field == "seal_private"


# --- blobs at rest ---------------------------------------------------------------


@pytest.mark.parametrize("key_size", [16, 32])
def test_blob_round_trip_and_tampering(key_size: int) -> None:
    key = bytes(range(key_size))
    blob = encrypt_blob(key, b"client state", b"state/v1")
    assert blob != encrypt_blob(key, b"client state", b"state/v1")  # random nonce
    assert decrypt_blob(key, blob, b"state/v1") == b"client state"
    for pos in range(len(blob)):
        tampered = bytearray(blob)
        tampered[pos] ^= 0x80
        with pytest.raises(DecryptError):
            decrypt_blob(key, bytes(tampered), b"state/v1")
    with pytest.raises(DecryptError):
        decrypt_blob(key, blob, b"state/v2")
    with pytest.raises(DecryptError):
        decrypt_blob(bytes(key_size), blob, b"state/v1")
    with pytest.raises(DecryptError, match="shorter"):
        decrypt_blob(key, blob[:27], b"state/v1")


@pytest.mark.parametrize("size", [0, 15, 24, 33])
def test_blob_key_sizes(size: int) -> None:
    with pytest.raises(ParameterError) as info:
        encrypt_blob(bytes(size), b"x", b"")
    assert info.value.field == "key"
