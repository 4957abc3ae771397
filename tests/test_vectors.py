"""Test vectors of docs/wire.md (``tests/vectors/*.json``), regenerated and compared.

Each ``make_*`` function rebuilds one vector file from fixed inputs. Where it
is cheap, the expected bytes are computed from the spec with bare primitives
(``struct``, ``hashlib``, ``cryptography``) and the library is checked
against them, so a vector is not just the library's output written down.

After a deliberate format change, rewrite the files with
``ONESIDED_WRITE_VECTORS=1 pytest tests/test_vectors.py`` and review the diff.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from protocol.crypto import b64e, key_id, open_sealed, sign_document, verify_document
from protocol.encodings import BloomEncoding, DirectEncoding, Hashing, bloom_bits, canonical_value
from protocol.params import MetricParams, canonical_json
from protocol.rng import KeyedRandom, noise_seed
from protocol.wire import (
    ReportPayload,
    build_report,
    encode_batch_binary,
    encode_batch_json,
    pack_payload,
    parse_batch_binary,
    parse_batch_json,
    unpack_payload,
)

VECTORS = Path(__file__).parent / "vectors"
WRITE = os.environ.get("ONESIDED_WRITE_VECTORS") == "1"

VALUES = ["home", "café", "東京", "🙂 emoji", "", "https://example.com/a?b=c&d=é"]


BLOOM_SHAPES: list[tuple[Hashing, list[tuple[int, int]]]] = [
    ("mmh3", [(16, 2), (128, 4), (4096, 16)]),
    ("rappor-md5", [(16, 2), (128, 4), (256, 16)]),
]


def make_bloom_bits() -> dict[str, Any]:
    cases = []
    for hashing, shapes in BLOOM_SHAPES:
        for num_bits, num_hashes in shapes:
            for cohort in (0, 1, 63, 65535):
                for value in VALUES:
                    cases.append({
                        "hashing": hashing, "num_bits": num_bits, "num_hashes": num_hashes, "cohort": cohort,
                        "value": value, "value_hex": value.encode("utf-8").hex(),
                        "bits": bloom_bits(value, cohort, num_bits=num_bits, num_hashes=num_hashes, hashing=hashing),
                    })
    return {"section": "docs/wire.md 2.1", "cases": cases}


def _canonical_from_spec(members: list[str]) -> bytes:
    distinct = sorted({m.encode("utf-8") for m in members})
    return b"S" + struct.pack(">I", len(distinct)) + b"".join(struct.pack(">I", len(m)) + m for m in distinct)


def make_canonical_value() -> dict[str, Any]:
    sets = [["home"], ["work", "home", "home"], [], ["é", "e", "f"], ["東京", "🙂 emoji", ""], ["ab", "a", "b"]]
    cases = []
    for members in sets:
        expected = _canonical_from_spec(members)
        assert canonical_value(members) == expected
        cases.append({"members": members, "canonical_hex": expected.hex()})
    assert canonical_value("home") == canonical_value(["home"])
    return {"section": "docs/wire.md 2.2", "cases": cases}


NOISE_SECRET = bytes(range(32))


def make_noise() -> dict[str, Any]:
    cases = []
    for metric, members, step in (("places", ["home"], 0), ("places", ["home"], 1), ("urls", ["é", "a"], 0)):
        value = canonical_value(members)
        message = (b"onesided/noise/v1" + struct.pack(">I", len(metric)) + metric.encode()
                   + struct.pack(">I", len(value)) + value + struct.pack(">I", step))
        seed = noise_seed(NOISE_SECRET, metric, value, step)
        assert seed == hmac.new(NOISE_SECRET, message, hashlib.sha256).digest()
        stream = hashlib.shake_256(seed).digest(64)
        words = struct.unpack("<8Q", stream)
        uniforms = [((w >> 12) + 0.5) / 2**52 for w in words]
        assert KeyedRandom(seed).uniform(8).tolist() == uniforms
        cases.append({
            "secret_hex": NOISE_SECRET.hex(), "metric": metric, "members": members,
            "canonical_value_hex": value.hex(), "step": step, "hmac_message_hex": message.hex(),
            "seed_hex": seed.hex(), "stream_hex": stream.hex(),
            "words": [str(w) for w in words], "uniforms": uniforms,
            "exponential_rate_2": KeyedRandom(seed).exponential(2.0, 8).tolist(),
            "laplace_rate_2": KeyedRandom(seed).laplace(2.0, 8).tolist(),
        })
    return {
        "section": "docs/wire.md 3",
        "note": "words are decimal strings (u64); sampler outputs use libm log and may differ in the last ulp",
        "cases": cases,
    }


def _metrics() -> list[MetricParams]:
    bloom = BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=64)
    return [
        MetricParams(name="places", encoding=bloom, mode="asymmetric", level=1.5, irr_q=0.25, time_precision=3600),
        MetricParams(name="urls.v2", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=8,
                     hashing="rappor-md5"), mode="symmetric", level=1e-05, irr_p=0.25, irr_q=0.75),
        MetricParams(name="lang", encoding=DirectEncoding(domain=("none", "français", "日本語", 'q"uote\n')),
                     mode="asymmetric", level=2.0, value_kind="categorical", none_value="none"),
        MetricParams(name="exact", encoding=bloom, mode="trusted", level=math.inf, min_batch_size=1),
    ]


def make_params_digest() -> dict[str, Any]:
    cases = []
    for params in _metrics():
        text = canonical_json(params.to_dict())
        assert params.digest() == hashlib.sha256(text).hexdigest()
        assert MetricParams.from_dict(json.loads(text)) == params
        cases.append({"params": params.to_dict(), "canonical_json": text.decode("utf-8"), "digest": params.digest()})
    return {"section": "docs/wire.md 1.2, 1.3", "cases": cases}


def _payload_from_spec(cohort: int, level: float, ones: list[int], num_bits: int) -> bytes:
    packed = bytearray((num_bits + 7) // 8)
    for i in ones:
        packed[i // 8] |= 1 << (i % 8)
    return struct.pack(">BHd", 1, cohort, level) + bytes(packed)


PAYLOAD_CASES = [  # (num_bits, num_cohorts, cohort, level, ones)
    (1, 1, 0, 1.0, [0]),
    (8, 2, 1, 0.5, [0, 7]),
    (9, 4, 3, 1.5, [0, 8]),
    (16, 64, 63, 2.0, [1, 2, 3, 15]),
    (128, 65536, 65535, 0.1, [0, 5, 64, 127]),
    (13, 1, 0, math.inf, []),
]


def make_payloads() -> dict[str, Any]:
    cases = []
    for num_bits, num_cohorts, cohort, level, ones in PAYLOAD_CASES:
        expected = _payload_from_spec(cohort, level, ones, num_bits)
        bits = [i in ones for i in range(num_bits)]
        payload = ReportPayload(cohort=cohort, level=level, bits=bits)  # type: ignore[arg-type]
        assert pack_payload(payload) == expected
        assert unpack_payload(expected, num_bits=num_bits, num_cohorts=num_cohorts) == payload
        cases.append({
            "num_bits": num_bits, "num_cohorts": num_cohorts, "cohort": cohort,
            "level": "inf" if math.isinf(level) else level, "ones": ones, "payload_hex": expected.hex(),
        })
    return {"section": "docs/wire.md 4", "note": "level is a number or the string 'inf'", "cases": cases}


RECIPIENT = bytes(range(64, 96))
EPHEMERAL = bytes(range(96, 128))
SIGNER = bytes(range(128, 160))


def make_sealed_report() -> dict[str, Any]:
    recipient = X25519PrivateKey.from_private_bytes(RECIPIENT)
    pk_r = recipient.public_key().public_bytes_raw()
    ephemeral = X25519PrivateKey.from_private_bytes(EPHEMERAL)
    pk_e = ephemeral.public_key().public_bytes_raw()
    params = _metrics()[0]
    meta: dict[str, Any] = {"params_digest": params.digest(), "metric": params.name, "round": 2, "window": 1_700_002_800}
    report_id = hashlib.sha256(b"onesided/report-id/v1" + pk_e).digest()[:16]  # bound to the ephemeral key
    ones = [3, 17, 64, 100]
    bits = [i in ones for i in range(params.num_bits)]
    payload = _payload_from_spec(41, 3.0, ones, params.num_bits)
    aad = (b"onesided/report/v1" + report_id + bytes([len(params.name)]) + params.name.encode()
           + bytes.fromhex(params.digest()) + struct.pack(">IQ", meta["round"], meta["window"]))
    shared = ephemeral.exchange(X25519PublicKey.from_public_bytes(pk_r))
    okm = HKDF(algorithm=hashes.SHA256(), length=28, salt=None, info=b"onesided/seal/v1" + pk_e + pk_r).derive(shared)
    envelope = pk_e + AESGCM(okm[:16]).encrypt(okm[16:], payload, aad)

    report = build_report(**meta, cohort=41, level=3.0, bits=bits, seal_public=pk_r, ephemeral_private=EPHEMERAL)
    assert report.report_id == report_id
    assert report.aad() == aad and report.sealed == envelope
    assert open_sealed(recipient, envelope, aad) == payload
    plain = build_report(**meta, cohort=7, level=3.0, bits=[False] * params.num_bits, seal_public=None,
                         report_id=bytes(16))
    batch = [report, plain]
    binary = encode_batch_binary(batch)
    assert parse_batch_binary(binary, max_reports=2) == batch
    assert parse_batch_json(encode_batch_json(batch), max_reports=2) == batch
    return {
        "section": "docs/wire.md 5, 6, 7",
        "recipient_private_hex": RECIPIENT.hex(), "recipient_public_hex": pk_r.hex(),
        "ephemeral_private_hex": EPHEMERAL.hex(), "ephemeral_public_hex": pk_e.hex(),
        "report_id_hex": report_id.hex(), **meta,
        "cohort": 41, "level": 3.0, "ones": ones, "num_bits": params.num_bits,
        "payload_hex": payload.hex(), "aad_hex": aad.hex(), "shared_secret_hex": shared.hex(),
        "key_hex": okm[:16].hex(), "nonce_hex": okm[16:].hex(), "envelope_hex": envelope.hex(),
        "batch_json": encode_batch_json(batch), "batch_binary_hex": binary.hex(),
    }


def make_signature() -> dict[str, Any]:
    private = Ed25519PrivateKey.from_private_bytes(SIGNER)
    public = private.public_key().public_bytes_raw()
    payload = {
        "version": 1, "round_id": 3, "metric": "places", "params_digest": "0f" * 32, "level_from": 1.5,
        "level_to": 2.0, "cohorts": [0, 2], "opened_at": 1_700_000_000, "expires_at": 1_700_086_400,
        "note": "Zürich 東京 \"q\" \n \u0001", "small": 1e-05, "big": 1e16, "third": 1 / 3, "none": None,
    }
    message = b"onesided/sign/v1" + canonical_json(payload)
    document = sign_document(private, payload)
    assert document["signature"] == b64e(private.sign(message))
    assert verify_document(public, document) == payload
    return {
        "section": "docs/wire.md 1.2, 8.1",
        "private_seed_hex": SIGNER.hex(), "public_hex": public.hex(), "key_id": key_id(public),
        "canonical_json": canonical_json(payload).decode("utf-8"), "message_hex": message.hex(),
        "document": document,
    }


GENERATORS: dict[str, Callable[[], dict[str, Any]]] = {
    "bloom_bits": make_bloom_bits,
    "canonical_value": make_canonical_value,
    "noise": make_noise,
    "params_digest": make_params_digest,
    "payloads": make_payloads,
    "sealed_report": make_sealed_report,
    "signature": make_signature,
}


def _close(expected: Any, actual: Any) -> bool:
    """Equal, except floats from libm samplers, which may differ by an ulp or so (rel 1e-12)."""
    if isinstance(expected, float) and isinstance(actual, float):
        return math.isclose(expected, actual, rel_tol=1e-12, abs_tol=0.0)
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(_close(expected[k], actual[k]) for k in expected)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(_close(e, a) for e, a in zip(expected, actual, strict=True))
    return bool(expected == actual)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_vectors_match(name: str) -> None:
    regenerated = json.loads(json.dumps(GENERATORS[name]()))
    path = VECTORS / f"{name}.json"
    if WRITE:
        VECTORS.mkdir(exist_ok=True)
        path.write_text(json.dumps(regenerated, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    stored = json.loads(path.read_text(encoding="utf-8"))
    if name == "noise":  # sampler outputs go through log(); everything else is exact
        assert _close(stored, regenerated)
    else:
        assert stored == regenerated


def test_sealed_vector_opens_from_the_file_alone() -> None:
    """What a port does: read the file, open the envelope with the stored key, compare the payload."""
    data = json.loads((VECTORS / "sealed_report.json").read_text(encoding="utf-8"))
    recipient = X25519PrivateKey.from_private_bytes(bytes.fromhex(data["recipient_private_hex"]))
    reports = parse_batch_json(data["batch_json"], max_reports=2)
    assert reports == parse_batch_binary(bytes.fromhex(data["batch_binary_hex"]), max_reports=2)
    opened = open_sealed(recipient, bytes.fromhex(data["envelope_hex"]), bytes.fromhex(data["aad_hex"]))
    assert opened.hex() == data["payload_hex"]
    payload = unpack_payload(opened, num_bits=data["num_bits"], num_cohorts=64)
    assert payload.cohort == data["cohort"] and payload.bits.nonzero()[0].tolist() == data["ones"]


def test_vector_files_are_all_checked() -> None:
    from tests import (
        js_vectors,  # the TypeScript client's vectors: checked by test_client_js_vectors.py
    )

    ported = {name.removesuffix(".json") for name in js_vectors.FILES}
    assert {p.stem for p in VECTORS.glob("*.json")} == set(GENERATORS) | ported
