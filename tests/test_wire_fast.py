"""The batch parsers' fast paths and the per-metric payload check decide exactly as the careful code.

``parse_batch_json`` / ``parse_batch_binary`` first try a whole-batch fast
path and fall back to the careful per-report parser when it gives up. These
tests run both on valid batches and on many malformed variants and require
the same outcome: equal envelopes (and the same AAD and id text), or the same
error (field, reason, code). ``PayloadCheck.header`` is compared with the
payload rules written out here independently.
"""

from __future__ import annotations

import copy
import json
import math
import random
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.crypto import b64e
from protocol.errors import ReportRejected
from protocol.wire import (
    PAYLOAD_HEADER,
    PayloadCheck,
    ReportEnvelope,
    build_report,
    encode_batch_binary,
    encode_batch_json,
    parse_batch_binary,
    parse_batch_json,
    report_aad,
    unpack_payload,
)
from protocol.wire import batch as wire  # the parsers and their fast paths

DIGEST = "cd" * 32
SEAL_PUBLIC = X25519PrivateKey.from_private_bytes(bytes(range(1, 33))).public_key().public_bytes_raw()


def _report(i: int, *, sealed: bool = True, num_bits: int = 128, metric: str = "places", window: int = 7200) -> ReportEnvelope:
    bits = np.array([(i >> (j % 16)) & 1 for j in range(num_bits)], dtype=bool)
    return build_report(params_digest=DIGEST, metric=metric, round=i % 3, window=window, cohort=i % 4, level=1.5,
                        bits=bits, seal_public=SEAL_PUBLIC if sealed else None,
                        report_id=None if sealed else bytes([i % 256]) * 15 + bytes([i // 256]),
                        ephemeral_private=bytes([i % 200 + 1, num_bits % 256]) * 16 if sealed else None)


SEALED = [_report(i) for i in range(12)]
PLAIN = [_report(i, sealed=False) for i in range(12)]


@contextmanager
def careful_only() -> Iterator[None]:
    """The parsers with their fast paths switched off."""
    saved = wire._fast_json_reports, wire._fast_binary_reports
    wire._fast_json_reports = lambda items: None
    wire._fast_binary_reports = lambda data, pos, count: None
    try:
        yield
    finally:
        wire._fast_json_reports, wire._fast_binary_reports = saved


def _outcome(parse: Callable[[], list[ReportEnvelope]]) -> Any:
    try:
        reports = parse()
    except ReportRejected as exc:
        return ("error", exc.field, exc.reason, exc.code)
    return ("ok", [(r, r.aad(), r.report_id_text) for r in reports])


def _same_json(obj: Any, max_reports: int = 100) -> Any:
    fast = _outcome(lambda: parse_batch_json(copy.deepcopy(obj), max_reports=max_reports))
    with careful_only():
        careful = _outcome(lambda: parse_batch_json(copy.deepcopy(obj), max_reports=max_reports))
    assert fast == careful
    return fast


def _same_binary(data: bytes, max_reports: int = 100) -> Any:
    fast = _outcome(lambda: parse_batch_binary(data, max_reports=max_reports))
    with careful_only():
        careful = _outcome(lambda: parse_batch_binary(data, max_reports=max_reports))
    assert fast == careful
    return fast


def _recomputed(r: ReportEnvelope) -> tuple[bytes, str]:
    aad = report_aad(report_id=r.report_id, metric=r.metric, params_digest=r.params_digest, round=r.round,
                     window=r.window)
    return aad, b64e(r.report_id)


@pytest.mark.parametrize("reports", [SEALED, PLAIN, SEALED[:1]], ids=["sealed", "plain", "one"])
def test_valid_batches_take_the_fast_path_and_equal_the_careful_parse(reports: list[ReportEnvelope]) -> None:
    obj = encode_batch_json(reports)
    assert wire._fast_json_reports(copy.deepcopy(obj)["reports"]) is not None
    assert wire._fast_binary_reports(encode_batch_binary(reports), 9, len(reports)) is not None
    for outcome in (_same_json(obj), _same_binary(encode_batch_binary(reports))):
        assert outcome[0] == "ok"
        assert [r for r, _, _ in outcome[1]] == reports
        for r, aad, text in outcome[1]:
            assert (aad, text) == _recomputed(r)


@pytest.mark.parametrize("num_bits", [1, 8, 63, 64, 120, 128, 256, 1000])
def test_every_body_length_decodes_as_the_careful_parser(num_bits: int) -> None:
    """Bodies of every length mod 4 in base64 (padding completed with zero bits and cut back)."""
    for sealed in (True, False):
        reports = [_report(i, sealed=sealed, num_bits=num_bits) for i in range(5)]
        obj = encode_batch_json(reports)
        assert wire._fast_json_reports(copy.deepcopy(obj)["reports"]) is not None
        assert _same_json(obj) == ("ok", [(r, *_recomputed(r)) for r in reports])
        assert _same_binary(encode_batch_binary(reports))[0] == "ok"


def _set(index: int, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        obj["reports"][index][key] = value
    return change


def _drop(index: int, key: str) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        del obj["reports"][index][key]
    return change


def _canonical_break(text: str) -> str:
    """The same bytes' text with a non-zero unused trailing bit (when it has one)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    return text[:-1] + alphabet[alphabet.index(text[-1]) + 1]


def _json_variants() -> Iterator[tuple[str, Callable[[dict[str, Any]], None]]]:
    rid = b64e(SEALED[3].report_id)
    sealed = b64e(SEALED[3].body)
    for key in ("report_id", "metric", "round", "window", "params_digest", "sealed"):
        odd: tuple[Any, ...] = (None, True, 1.0, [], {}, "", 3)
        for value in odd:
            yield f"{key}={value!r}", _set(3, key, value)
        yield f"drop {key}", _drop(3, key)
    for value in (rid + "=", rid[:-1], rid + "A", rid + "\n", _canonical_break(rid), rid[:-1] + "+",
                  "é" * 22, rid[:-2] + "\x00A"):
        yield f"report_id={value!r}", _set(3, "report_id", value)
    yield "sealed with one more byte (valid)", _set(3, "sealed", sealed + "AA")
    yield "sealed one character shorter (either)", _set(3, "sealed", sealed[:-1])
    for value in (sealed + "=", sealed + "\n", sealed[:-1] + "/", "A" * 2732,
                  "A" * 2731, "A" * 2728, "QQ", _canonical_break(sealed + "AA"), sealed[:50] + " " + sealed[51:]):
        yield f"sealed={value[:30]!r}... ({len(value)})", _set(3, "sealed", value)
    for value in ("Places", "places\n", "a" * 65, "a" * 64, "pla ces", "-x", "ünï"):
        yield f"metric={value!r}", _set(3, "metric", value)
    for value in (DIGEST.upper(), DIGEST + "\n", DIGEST[:-1], "z" * 64, "cd" * 31 + "c", 1):
        yield f"params_digest={value!r}", _set(3, "params_digest", value)
    for key, high in (("round", 2**32 - 1), ("window", 2**63 - 1)):
        for value in (-1, high, high + 1, 2**70, 0, False):
            yield f"{key}={value!r}", _set(3, key, value)
    yield "plain and sealed", _set(3, "plain", sealed)
    yield "unknown field", _set(3, "extra", 1)
    yield "id of another report", _set(3, "report_id", b64e(SEALED[4].report_id))
    yield "id not derived", _set(3, "report_id", b64e(bytes(16)))
    yield "duplicate", lambda obj: obj["reports"].append(copy.deepcopy(obj["reports"][0]))
    yield "plain in a sealed batch (valid)", lambda obj: obj["reports"].append(encode_batch_json(PLAIN[:1])["reports"][0])
    yield "not an object", lambda obj: obj["reports"].__setitem__(3, [1])
    yield "first not an object", lambda obj: obj["reports"].__setitem__(0, "x")
    yield "unhashable metric", _set(3, "metric", ["places"])
    yield "too many", lambda obj: obj["reports"].extend(copy.deepcopy(obj["reports"]) * 10)
    yield "version", lambda obj: obj.__setitem__("version", 2)
    yield "empty", lambda obj: obj.__setitem__("reports", [])


@pytest.mark.parametrize("name,change", list(_json_variants()), ids=[name for name, _ in _json_variants()])
def test_a_changed_json_batch_gets_the_careful_outcome(name: str, change: Callable[[dict[str, Any]], None]) -> None:
    obj = encode_batch_json(SEALED)
    change(obj)
    outcome = _same_json(obj)
    valid = {"round=0", "round=3", "window=0", "window=3", f"round={2**32 - 1}", f"window={2**63 - 1}",
             f"metric={'a' * 64!r}"}
    if name in valid or name.endswith("(valid)"):
        assert outcome[0] == "ok"  # valid variants: accepted by both
    elif name == "too many":
        assert outcome == ("error", "reports", "has 132 reports, the limit is 100", "too_many_reports")
    else:
        assert outcome[0] == "error" or name.endswith("(either)"), name


def test_fast_json_gives_up_on_every_rejected_variant() -> None:
    """Whatever the careful parser refuses, the fast path refuses too (it never decides an error itself)."""
    for _name, change in _json_variants():
        obj = encode_batch_json(SEALED)
        change(obj)
        items = obj.get("reports")
        with careful_only():
            careful = _outcome(partial(parse_batch_json, copy.deepcopy(obj), max_reports=1000))
        if careful[0] == "error" and careful[1] != "version" and isinstance(items, list) and items:
            assert wire._fast_json_reports(copy.deepcopy(items)) is None, _name


def test_binary_truncated_anywhere_names_the_same_field() -> None:
    data = encode_batch_binary(SEALED[:3])
    for end in range(len(data) + 1):
        outcome = _same_binary(data[:end])
        assert (outcome[0] == "ok") == (end == len(data))
    assert _same_binary(data + b"\x00")[1] == "reports"


def test_binary_every_byte_changed_gives_the_careful_outcome() -> None:
    reports = SEALED[:2] + [_report(5, sealed=True, window=2**62)]
    data = encode_batch_binary(reports)
    outcomes = set()
    for pos in range(len(data)):
        for value in {0, 1, 2, 0x7F, 0x80, 0xFF, data[pos] ^ 1}:
            changed = data[:pos] + bytes([value]) + data[pos + 1 :]
            outcomes.add(_same_binary(changed)[0])
    assert outcomes == {"ok", "error"}


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_random_json_mutations(data: st.DataObject) -> None:
    obj = encode_batch_json(data.draw(st.sampled_from([SEALED[:4], PLAIN[:4]])))
    index = data.draw(st.integers(0, 3))
    key = data.draw(st.sampled_from(["report_id", "metric", "round", "window", "params_digest", "sealed", "plain"]))
    value = data.draw(st.one_of(st.text(max_size=40), st.integers(-2, 2**64), st.none(), st.booleans(),
                                st.floats(allow_nan=False), st.text(alphabet="AQgwBh-_09", min_size=20, max_size=24)))
    obj["reports"][index][key] = value
    _same_json(obj)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=8), st.integers(0, 500))
def test_random_binary_splices(noise: bytes, pos: int) -> None:
    data = encode_batch_binary(PLAIN[:2] + SEALED[:2])
    pos = min(pos, len(data))
    _same_binary(data[:pos] + noise + data[pos + len(noise) :])
    _same_binary(data[:pos] + noise + data[pos:])


def test_a_fast_envelope_behaves_as_a_careful_one() -> None:
    """Equality, replace (which drops the kept AAD), JSON and binary re-encoding."""
    import dataclasses

    fast = parse_batch_json(encode_batch_json(SEALED[:2]), max_reports=10)[0]
    assert fast == SEALED[0] and hash(repr(fast)) == hash(repr(SEALED[0]))
    moved = dataclasses.replace(fast, window=fast.window + 3600)
    assert moved.aad() != fast.aad() and moved.aad() == _recomputed(moved)[0]
    assert fast.to_json() == SEALED[0].to_json()
    assert json.dumps(encode_batch_json([fast])) == json.dumps(encode_batch_json(SEALED[:1]))
    assert encode_batch_binary([fast]) == encode_batch_binary(SEALED[:1])


# --- the payload check -----------------------------------------------------------------


def _reference_payload(data: bytes, num_bits: int, num_cohorts: int) -> tuple[str, ...] | tuple[int, float]:
    """docs/wire.md 4 written out: the outcome a payload must get (field and message of the first failure)."""
    size = 11 + (num_bits + 7) // 8
    if len(data) != size:
        return ("payload", f"must be {size} bytes for {num_bits} bits, got {len(data)}")
    version, cohort, level = struct.unpack(">BHd", data[:11])
    if version != 1:
        return ("payload.version", f"must be 1, got {version}")
    if cohort >= num_cohorts:
        return ("payload.cohort", f"must be < {num_cohorts}, got {cohort}")
    if num_bits % 8 and data[-1] >> (num_bits % 8):
        return ("payload.bits", "unused high bits of the last byte must be zero")
    if math.isnan(level):
        return ("payload.level", "must not be NaN")
    if not level > 0:
        return ("payload.level", f"must be > 0, got {level}")
    return cohort, level


def _checked(function: Callable[[], Any]) -> Any:
    try:
        return function()
    except ReportRejected as exc:
        return (exc.field, exc.reason)


def test_payload_check_matches_the_rules_and_unpack_payload() -> None:
    rng = random.Random(5)
    levels = [1.5, 0.0, -0.0, -1.0, math.inf, -math.inf, math.nan, 5e-324, 2.0]
    cases = 0
    for num_bits in (1, 7, 8, 9, 64, 127, 128):
        for num_cohorts in (1, 3, 65536):
            check = PayloadCheck(num_bits, num_cohorts)
            for _ in range(60):
                body = bytearray(rng.randbytes((num_bits + 7) // 8))
                if rng.random() < 0.5 and num_bits % 8:
                    body[-1] &= (1 << (num_bits % 8)) - 1
                header = PAYLOAD_HEADER.pack(rng.choice([1, 1, 1, 0, 2]), rng.choice([0, 1, 2, 3, 65535]),
                                             rng.choice(levels))
                data = header + bytes(body)
                if rng.random() < 0.1:
                    data = data[: rng.randrange(len(data))] if rng.random() < 0.5 else data + b"\x00"
                expected = _reference_payload(data, num_bits, num_cohorts)  # NaN levels are errors: == works
                assert _checked(partial(check.header, data)) == expected
                unpacked = _checked(partial(unpack_payload, data, num_bits=num_bits, num_cohorts=num_cohorts))
                if isinstance(expected[0], str):
                    assert unpacked == expected
                else:
                    assert (unpacked.cohort, unpacked.level) == expected
                    cases += 1
    assert cases > 100
