"""Wire schemas: payload packing, report batches (JSON and binary), results, config, rounds."""

from __future__ import annotations

import copy
import math
import struct
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.crypto import AggregatorKeys, b64e, sign_document
from protocol.encodings import BloomEncoding
from protocol.errors import DecryptError, ParameterError, ReportRejected, SignatureError
from protocol.params import MetricParams
from protocol.wire import (
    BATCH_MAGIC,
    STATUSES,
    MetricEntry,
    ReportEnvelope,
    ReportPayload,
    ReportResult,
    RoundAnnouncement,
    build_config_payload,
    build_report,
    encode_batch_binary,
    encode_batch_json,
    open_report,
    pack_payload,
    parse_batch_binary,
    parse_batch_json,
    parse_upload_response,
    payload_size,
    report_aad,
    sealed_report_id,
    unpack_payload,
    upload_response,
    validate_round_announcement,
    verify_config,
    window_start,
)

DIGEST = "ab" * 32
SEAL_KEY = X25519PrivateKey.from_private_bytes(bytes(range(32)))
SEAL_PUBLIC = SEAL_KEY.public_key().public_bytes_raw()


# --- payload ----------------------------------------------------------------


@st.composite
def payloads(draw: st.DrawFn) -> tuple[ReportPayload, int, int]:
    num_bits = draw(st.integers(min_value=1, max_value=300))
    num_cohorts = draw(st.integers(min_value=1, max_value=65536))
    cohort = draw(st.integers(min_value=0, max_value=num_cohorts - 1))
    level = draw(st.floats(min_value=1e-300, allow_infinity=True, allow_nan=False))
    bits = np.array(draw(st.lists(st.booleans(), min_size=num_bits, max_size=num_bits)), dtype=bool)
    return ReportPayload(cohort=cohort, level=level, bits=bits), num_bits, num_cohorts


@given(payloads())
def test_payload_round_trip(case: tuple[ReportPayload, int, int]) -> None:
    payload, num_bits, num_cohorts = case
    data = pack_payload(payload)
    assert len(data) == payload_size(num_bits) == 11 + math.ceil(num_bits / 8)
    assert unpack_payload(data, num_bits=num_bits, num_cohorts=num_cohorts) == payload


def test_payload_layout_is_lsb_first_big_endian_header() -> None:
    bits = np.zeros(10, dtype=bool)
    bits[[0, 3, 9]] = True
    data = pack_payload(ReportPayload(cohort=258, level=0.5, bits=bits))
    assert data[:3] == bytes([1, 1, 2])
    assert data[3:11] == struct.pack(">d", 0.5)
    assert data[11:] == bytes([0b00001001, 0b00000010])


def test_payload_bits_are_read_only_copies() -> None:
    source = np.array([True, False])
    payload = ReportPayload(cohort=0, level=1.0, bits=source)
    source[1] = True
    assert not payload.bits[1]
    with pytest.raises(ValueError):
        payload.bits[0] = False
    assert ReportPayload(cohort=0, level=1.0, bits=np.array([1, 0])) == payload


def _valid_payload(num_bits: int = 12) -> bytes:
    return pack_payload(ReportPayload(cohort=2, level=1.0, bits=np.ones(num_bits, dtype=bool)))


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d[:-1], "payload"),
        (lambda d: d + b"\0", "payload"),
        (lambda d: b"\x02" + d[1:], "payload.version"),
        (lambda d: d[:1] + struct.pack(">H", 4) + d[3:], "payload.cohort"),
        (lambda d: d[:3] + struct.pack(">d", 0.0) + d[11:], "payload.level"),
        (lambda d: d[:3] + struct.pack(">d", -1.0) + d[11:], "payload.level"),
        (lambda d: d[:3] + struct.pack(">d", math.nan) + d[11:], "payload.level"),
        (lambda d: d[:-1] + bytes([d[-1] | 0x10]), "payload.bits"),
    ],
)
def test_unpack_errors_name_the_field(mutate: Any, field: str) -> None:
    with pytest.raises(ReportRejected) as info:
        unpack_payload(mutate(_valid_payload()), num_bits=12, num_cohorts=4)
    assert info.value.field == field
    assert info.value.code == "invalid_message"


@settings(max_examples=200)
@given(st.binary(min_size=13, max_size=13))
def test_unpack_of_arbitrary_bytes_is_valid_or_names_a_payload_field(data: bytes) -> None:
    try:
        payload = unpack_payload(data, num_bits=12, num_cohorts=7)
    except ReportRejected as exc:
        assert exc.field.startswith("payload")
    else:
        assert pack_payload(payload) == data


@pytest.mark.parametrize(
    "kwargs, field",
    [({"cohort": -1}, "payload.cohort"), ({"cohort": 65536}, "payload.cohort"), ({"cohort": True}, "payload.cohort"),
     ({"level": 0}, "payload.level"), ({"level": "1"}, "payload.level"), ({"bits": [[1]]}, "payload.bits"),
     ({"bits": []}, "payload.bits"), ({"bits": [0, 2]}, "payload.bits"), ({"bits": [0.5]}, "payload.bits")],
)
def test_payload_construction_errors(kwargs: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {"cohort": 0, "level": 1.0, "bits": [1, 0]} | kwargs
    with pytest.raises(ReportRejected) as info:
        ReportPayload(**args)
    assert info.value.field == field


def test_unpack_checks_its_own_parameters() -> None:
    with pytest.raises(ParameterError):
        unpack_payload(b"", num_bits=0, num_cohorts=1)
    with pytest.raises(ParameterError):
        unpack_payload(b"", num_bits=8, num_cohorts=65537)


# --- envelopes and batches --------------------------------------------------------


@st.composite
def envelopes(draw: st.DrawFn) -> ReportEnvelope:
    body = draw(st.binary(min_size=1, max_size=200))
    sealed = draw(st.booleans())
    return ReportEnvelope(
        # a sealed report's id is bound to its body (its ephemeral key's hash)
        report_id=sealed_report_id(body) if sealed else draw(st.binary(min_size=16, max_size=16)),
        metric=draw(st.from_regex(r"\A[a-z0-9][a-z0-9_.-]{0,63}\Z")),
        round=draw(st.integers(min_value=0, max_value=2**32 - 1)),
        window=draw(st.integers(min_value=0, max_value=2**63 - 1)),
        params_digest=draw(st.binary(min_size=32, max_size=32)).hex(),
        sealed=body if sealed else None,
        plain=None if sealed else body,
    )


batches = st.lists(envelopes(), min_size=1, max_size=5, unique_by=lambda e: e.report_id)


@given(batches)
def test_batch_json_round_trip(reports: list[ReportEnvelope]) -> None:
    assert parse_batch_json(encode_batch_json(reports), max_reports=5) == reports


@given(batches)
def test_batch_binary_round_trip(reports: list[ReportEnvelope]) -> None:
    data = encode_batch_binary(reports)
    assert data[:4] == BATCH_MAGIC
    assert parse_batch_binary(data, max_reports=5) == reports


@given(envelopes())
def test_binary_record_header_is_the_aad_without_its_label(report: ReportEnvelope) -> None:
    data = encode_batch_binary([report])
    header = report.aad()[len(b"onesided/report/v1") :]
    assert data[9 : 9 + len(header)] == header


@settings(max_examples=30)
@given(batches, st.data())
def test_every_truncation_of_a_binary_batch_is_rejected(reports: list[ReportEnvelope], data: st.DataObject) -> None:
    encoded = encode_batch_binary(reports)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(ReportRejected):
        parse_batch_binary(encoded[:cut], max_reports=5)


def _report(**overrides: Any) -> ReportEnvelope:
    """A sealed report (its id derived from its body) unless ``plain`` is given."""
    fields: dict[str, Any] = {
        "metric": "places", "round": 0, "window": 1_700_000_000, "params_digest": DIGEST, "sealed": b"\x01" * 60,
    } | overrides
    if isinstance(fields.get("sealed"), bytes):
        fields.setdefault("report_id", sealed_report_id(fields["sealed"]))
    fields.setdefault("report_id", bytes(16))
    return ReportEnvelope(**fields)


def _numbered(i: int) -> ReportEnvelope:
    """Report ``i`` of a batch: its own sealed body, so its own id."""
    return _report(sealed=bytes([i + 1]) * 60)


def _json_batch(n: int = 3) -> dict[str, Any]:
    return encode_batch_json([_numbered(i) for i in range(n)])


BAD_REPORT_FIELDS = [
    ("report_id", "AAAA"), ("report_id", 7), ("report_id", "A" * 22 + "=="), ("metric", "Places"),
    ("metric", ""), ("metric", 3), ("round", -1), ("round", 2**32), ("round", 1.0), ("round", True),
    ("round", "0"), ("window", -5), ("window", 2**63), ("window", 1.5e9), ("params_digest", "AB" * 32),
    ("params_digest", "ab" * 31), ("sealed", "!!"), ("sealed", ""), ("sealed", "A" * 3000), ("sealed", None),
]


@pytest.mark.parametrize("name, value", BAD_REPORT_FIELDS)
def test_json_batch_field_errors_name_the_path(name: str, value: Any) -> None:
    batch = _json_batch()
    batch["reports"][2][name] = value
    with pytest.raises(ReportRejected) as info:
        parse_batch_json(batch, max_reports=10)
    assert info.value.field == f"reports[2].{name}"
    assert info.value.code == "invalid_message"


@settings(max_examples=60)
@given(st.sampled_from([n for n, _ in BAD_REPORT_FIELDS]), st.integers(min_value=0, max_value=4), st.data())
def test_any_bad_field_in_any_position_is_named(name: str, index: int, data: st.DataObject) -> None:
    value = data.draw(st.sampled_from([v for n, v in BAD_REPORT_FIELDS if n == name]))
    batch = _json_batch(5)
    batch["reports"][index][name] = value
    with pytest.raises(ReportRejected) as info:
        parse_batch_json(batch, max_reports=5)
    assert info.value.field == f"reports[{index}].{name}"


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda b: b.pop("version"), "version"),
        (lambda b: b.update(version=2), "version"),
        (lambda b: b.update(version=True), "version"),
        (lambda b: b.update(extra=1), "extra"),
        (lambda b: b.update(reports={}), "reports"),
        (lambda b: b.update(reports=[]), "reports"),
        (lambda b: b["reports"].__setitem__(1, []), "reports[1]"),
        (lambda b: b["reports"][1].pop("window"), "reports[1].window"),
        (lambda b: b["reports"][1].update(colour="red"), "reports[1].colour"),
        (lambda b: b["reports"][1].update(plain="AAAA"), "reports[1].sealed"),
        (lambda b: b["reports"][1].pop("sealed"), "reports[1].sealed"),
    ],
)
def test_json_batch_structure_errors(change: Any, field: str) -> None:
    batch = _json_batch()
    change(batch)
    with pytest.raises(ReportRejected) as info:
        parse_batch_json(batch, max_reports=10)
    assert info.value.field == field


def test_json_batch_must_be_an_object() -> None:
    with pytest.raises(ReportRejected, match="JSON object"):
        parse_batch_json([], max_reports=10)


def test_too_many_reports() -> None:
    with pytest.raises(ReportRejected) as info:
        parse_batch_json(_json_batch(3), max_reports=2)
    assert (info.value.field, info.value.code) == ("reports", "too_many_reports")
    reports = [_report(report_id=bytes([i]) * 16) for i in range(3)]
    with pytest.raises(ReportRejected) as info:
        parse_batch_binary(encode_batch_binary(reports), max_reports=2)
    assert (info.value.field, info.value.code) == ("reports", "too_many_reports")
    assert len(parse_batch_json(_json_batch(3), max_reports=3)) == 3


def test_duplicate_report_ids_name_the_second() -> None:
    reports = [_report(report_id=bytes([i % 2]) * 16, plain=b"\x01", sealed=None) for i in range(4)]
    for parse in (
        lambda: parse_batch_json(encode_batch_json(reports), max_reports=10),
        lambda: parse_batch_binary(encode_batch_binary(reports), max_reports=10),
    ):
        with pytest.raises(ReportRejected) as info:
            parse()
        assert (info.value.field, info.value.code) == ("reports[2].report_id", "duplicate_report_id")


def test_binary_batch_errors() -> None:
    good = encode_batch_binary([_report(), _report(report_id=b"\x09" * 16, plain=b"\x01", sealed=None)])
    cases = [
        (b"XNSB" + good[4:], "magic"),
        (good[:4] + b"\x02" + good[5:], "version"),
        (good[:5] + struct.pack(">I", 0), "reports"),
        (good + b"\0", "reports"),
        (good[:-1], "reports[1].plain"),
        (good[:40], "reports[0].params_digest"),
    ]
    kind_at = 9 + 16 + 1 + 6 + 32 + 12
    assert good[kind_at] == 1
    cases.append((good[:kind_at] + b"\x03" + good[kind_at + 1 :], "reports[0].kind"))
    bad_name = bytearray(good)
    bad_name[9 + 17] = 0xC3
    cases.append((bytes(bad_name), "reports[0].metric"))
    for data, field in cases:
        with pytest.raises(ReportRejected) as info:
            parse_batch_binary(data, max_reports=10)
        assert info.value.field == field


def test_envelope_needs_exactly_one_body() -> None:
    with pytest.raises(ReportRejected) as info:
        _report(plain=b"x")
    assert info.value.field == "sealed"
    with pytest.raises(ReportRejected):
        _report(sealed=None)
    with pytest.raises(ReportRejected) as info:
        _report(sealed=None, plain=b"")
    assert info.value.field == "plain"


# --- build and open ------------------------------------------------------------------


META: dict[str, Any] = {"params_digest": DIGEST, "metric": "places", "round": 3, "window": 1_700_006_400}
BITS = np.array([True, False, True] + [False] * 13)


def test_build_and_open_a_sealed_report() -> None:
    report = build_report(**META, cohort=5, level=2.0, bits=BITS, seal_public=SEAL_PUBLIC)
    assert report.sealed is not None and report.plain is None and len(report.report_id) == 16
    payload = open_report(report, seal_private=SEAL_KEY, num_bits=16, num_cohorts=8, allow_plain=False)
    assert payload == ReportPayload(cohort=5, level=2.0, bits=BITS)
    again = build_report(**META, cohort=5, level=2.0, bits=BITS, seal_public=SEAL_PUBLIC)
    assert again.report_id != report.report_id


def test_plain_reports_only_when_allowed() -> None:
    report = build_report(**META, cohort=1, level=2.0, bits=BITS, seal_public=None, report_id=b"\x07" * 16)
    assert report.plain == pack_payload(ReportPayload(cohort=1, level=2.0, bits=BITS))
    assert open_report(report, seal_private=None, num_bits=16, num_cohorts=2, allow_plain=True).cohort == 1
    with pytest.raises(ReportRejected) as info:
        open_report(report, seal_private=SEAL_KEY, num_bits=16, num_cohorts=2, allow_plain=False)
    assert (info.value.field, info.value.code) == ("plain", "invalid_message")


@pytest.mark.parametrize(
    "change",
    [{"metric": "placez"}, {"params_digest": "ac" * 32}, {"round": 4}, {"window": 1_700_006_401}],
)
def test_changing_any_aad_field_breaks_the_seal(change: dict[str, Any]) -> None:
    report = build_report(**META, cohort=5, level=2.0, bits=BITS, seal_public=SEAL_PUBLIC)
    moved = ReportEnvelope(**(vars(report) | change))
    assert moved.aad() != report.aad()
    with pytest.raises(DecryptError) as info:
        open_report(moved, seal_private=SEAL_KEY, num_bits=16, num_cohorts=8, allow_plain=False)
    assert info.value.code == "decrypt_error"


def test_tampering_any_byte_of_a_sealed_report_is_refused() -> None:
    # the ephemeral key (first 32 bytes) no longer hashes to the id; any later byte fails the AEAD
    report = build_report(**META, cohort=5, level=2.0, bits=BITS, seal_public=SEAL_PUBLIC)
    sealed = report.sealed
    assert sealed is not None
    for pos in range(len(sealed)):
        tampered = bytearray(sealed)
        tampered[pos] ^= 0x01
        expected: type[Exception] = ReportRejected if pos < 32 else DecryptError
        with pytest.raises(expected):
            open_report(
                ReportEnvelope(**(vars(report) | {"sealed": bytes(tampered)})),
                seal_private=SEAL_KEY, num_bits=16, num_cohorts=8, allow_plain=False,
            )


def test_a_report_id_is_bound_to_its_sealed_body() -> None:
    # whoever learns a queued id cannot post a forged body under it first: the id is the hash of the
    # body's ephemeral key, and a body sealed under a copied key without its private key does not open
    report = build_report(**META, cohort=5, level=2.0, bits=BITS, seal_public=SEAL_PUBLIC)
    assert report.sealed is not None and report.report_id == sealed_report_id(report.sealed)
    other = build_report(**META, cohort=1, level=2.0, bits=BITS, seal_public=SEAL_PUBLIC)
    forged = ReportEnvelope(**(vars(other) | {"report_id": report.report_id}))
    for parse in (lambda: parse_batch_json(encode_batch_json([forged]), max_reports=1),
                  lambda: parse_batch_binary(encode_batch_binary([forged]), max_reports=1)):
        with pytest.raises(ReportRejected) as info:
            parse()
        assert (info.value.field, info.value.code) == ("reports[0].report_id", "invalid_message")
    copied_key = ReportEnvelope(**(vars(report) | {"sealed": report.sealed[:32] + other.sealed[32:]}))
    with pytest.raises(DecryptError):
        open_report(copied_key, seal_private=SEAL_KEY, num_bits=16, num_cohorts=8, allow_plain=False)
    with pytest.raises(ParameterError):
        build_report(**META, cohort=5, level=2.0, bits=BITS, seal_public=SEAL_PUBLIC, report_id=bytes(16))


def test_sealed_payload_errors_are_invalid_message() -> None:
    report = build_report(**META, cohort=5, level=2.0, bits=BITS, seal_public=SEAL_PUBLIC)
    with pytest.raises(ReportRejected) as info:
        open_report(report, seal_private=SEAL_KEY, num_bits=16, num_cohorts=5, allow_plain=False)
    assert (info.value.field, info.value.code) == ("payload.cohort", "invalid_message")
    with pytest.raises(ReportRejected) as info:
        open_report(report, seal_private=SEAL_KEY, num_bits=17, num_cohorts=8, allow_plain=False)
    assert info.value.field == "payload"
    with pytest.raises(ParameterError):
        open_report(report, seal_private=None, num_bits=16, num_cohorts=8, allow_plain=False)


def test_report_aad_layout() -> None:
    aad = report_aad(report_id=bytes(range(16)), metric="ab", params_digest=DIGEST, round=1, window=2)
    assert aad == (b"onesided/report/v1" + bytes(range(16)) + b"\x02ab" + bytes.fromhex(DIGEST)
                   + b"\0\0\0\x01" + b"\0" * 7 + b"\x02")


@pytest.mark.parametrize("t, precision, expected", [(0, 60, 0), (59.9, 60, 0), (60, 60, 60), (1_700_000_123.7, 3600, 1_699_999_200)])
def test_window_start(t: float, precision: int, expected: int) -> None:
    assert window_start(t, precision) == expected


def test_window_start_checks_precision() -> None:
    with pytest.raises(ParameterError):
        window_start(10, 0)


# --- results ------------------------------------------------------------------------


def test_results_and_response_round_trip() -> None:
    results = [ReportResult(report_id=b64e(bytes([i]) * 16), status=s) for i, s in enumerate(STATUSES)]
    results.append(ReportResult.from_error(b"\x01" * 16, DecryptError()))
    results.append(ReportResult.from_error(b"\x02" * 16, ReportRejected("payload.cohort", "too big")))
    results.append(ReportResult.from_error(b"\x03" * 16, ReportRejected("x", "y", code="made_up")))
    response = upload_response(results)
    assert response["accepted"] == 1
    assert response["results"][-3:] == [
        {"report_id": b64e(b"\x01" * 16), "status": "decrypt_error", "field": "sealed", "detail": "envelope does not open"},
        {"report_id": b64e(b"\x02" * 16), "status": "invalid_message", "field": "payload.cohort", "detail": "too big"},
        {"report_id": b64e(b"\x03" * 16), "status": "invalid_message", "field": "x", "detail": "y"},
    ]
    assert parse_upload_response(response) == results


def test_result_and_response_validation() -> None:
    with pytest.raises(ReportRejected) as info:
        ReportResult(report_id="A", status="ok")
    assert info.value.field == "status"
    response = upload_response([ReportResult(report_id="A", status="accepted")])
    with pytest.raises(ReportRejected) as info:
        parse_upload_response(response | {"accepted": 0})
    assert info.value.field == "accepted"
    response["results"][0]["status"] = "fine"
    with pytest.raises(ReportRejected) as info:
        parse_upload_response(response)
    assert info.value.field == "results[0].status"


# --- rounds and config ------------------------------------------------------------------


ROUND = {
    "version": 1, "round_id": 7, "metric": "places", "params_digest": DIGEST, "level_from": 1.0,
    "level_to": 2.0, "cohorts": None, "opened_at": 1_700_000_000, "expires_at": 1_700_086_400,
}


def test_round_announcement_round_trip() -> None:
    announcement = validate_round_announcement(ROUND)
    assert announcement.to_payload() == ROUND
    with_cohorts = validate_round_announcement(ROUND | {"cohorts": [0, 3, 9]})
    assert with_cohorts.cohorts == (0, 3, 9)
    assert isinstance(announcement, RoundAnnouncement)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"version": 2}, "version"), ({"round_id": 0}, "round_id"), ({"round_id": "7"}, "round_id"),
        ({"metric": "A"}, "metric"), ({"params_digest": "00"}, "params_digest"),
        ({"level_from": 0.0}, "level_from"), ({"level_from": math.nan}, "level_from"),
        ({"level_to": 1.0}, "level_to"), ({"level_to": math.inf}, "level_to"), ({"level_to": None}, "level_to"),
        ({"cohorts": []}, "cohorts"), ({"cohorts": 3}, "cohorts"), ({"cohorts": [1, 1]}, "cohorts[1]"),
        ({"cohorts": [0, -1]}, "cohorts[1]"), ({"cohorts": [70000]}, "cohorts[0]"),
        ({"opened_at": -1}, "opened_at"), ({"expires_at": 1_700_000_000}, "expires_at"), ({"extra": 1}, "extra"),
    ],
)
def test_round_announcement_errors_name_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ReportRejected) as info:
        validate_round_announcement(ROUND | change)
    assert info.value.field == field


@pytest.mark.parametrize("missing", sorted(ROUND))
def test_round_announcement_missing_fields(missing: str) -> None:
    payload = dict(ROUND)
    del payload[missing]
    with pytest.raises(ReportRejected) as info:
        validate_round_announcement(payload)
    assert info.value.field == missing


KEYS = AggregatorKeys(
    seal_private=SEAL_KEY, sign_private=Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
)
PARAMS = MetricParams(
    name="places", encoding=BloomEncoding(num_bits=16, num_hashes=2, num_cohorts=8), mode="asymmetric", level=1.0
)


def _config(rounds: list[dict[str, Any]] | None = None, metrics: list[MetricEntry] | None = None) -> dict[str, Any]:
    entry = MetricEntry.of(PARAMS, current_round=7, current_level=2.0)
    if rounds is None:
        rounds = [KEYS.sign(ROUND | {"params_digest": PARAMS.digest()})]
    payload = build_config_payload(
        issued_at=1_700_000_000, aggregator=KEYS.public_info(), metrics=metrics or [entry], rounds=rounds
    )
    return KEYS.sign(payload)


def test_config_round_trip() -> None:
    config = verify_config(_config(), sign_public=KEYS.sign_public_raw)
    assert config.aggregator.seal_public == KEYS.seal_public_raw
    entry = config.metric("places")
    assert entry is not None and entry.params == PARAMS and entry.digest == PARAMS.digest()
    assert (entry.current_round, entry.current_level) == (7, 2.0)
    assert config.rounds[0].round_id == 7 and config.metric("other") is None
    assert config.round_documents[0]["payload"]["round_id"] == 7


def test_trusted_metric_level_is_null_on_the_wire() -> None:
    trusted = MetricParams(name="exact", encoding=PARAMS.encoding, mode="trusted", level=math.inf)
    document = _config(rounds=[], metrics=[MetricEntry.of(trusted)])
    assert document["payload"]["metrics"][0]["current_level"] is None
    entry = verify_config(document, sign_public=KEYS.sign_public_raw).metrics[0]
    assert math.isinf(entry.current_level) and math.isinf(entry.params.level)


def test_config_signed_by_another_key_is_refused() -> None:
    other = Ed25519PrivateKey.generate()
    with pytest.raises(SignatureError) as info:
        verify_config(_config(), sign_public=other.public_key().public_bytes_raw())
    assert info.value.field == "key_id"
    # A config signed by the pinned key but naming another signing key.
    payload = copy.deepcopy(_config()["payload"])
    payload["aggregator"] = AggregatorKeys(seal_private=SEAL_KEY, sign_private=other).public_info()
    with pytest.raises(SignatureError) as info:
        verify_config(KEYS.sign(payload), sign_public=KEYS.sign_public_raw)
    assert info.value.field == "aggregator.sign_public"


def test_config_with_a_forged_or_tampered_round_is_refused() -> None:
    forged = sign_document(Ed25519PrivateKey.generate(), ROUND | {"params_digest": PARAMS.digest()})
    with pytest.raises(SignatureError) as info:
        verify_config(_config(rounds=[forged]), sign_public=KEYS.sign_public_raw)
    assert info.value.field == "rounds[0].key_id"
    good = KEYS.sign(ROUND | {"params_digest": PARAMS.digest()})
    good["payload"] = good["payload"] | {"level_to": 9.0}
    with pytest.raises(SignatureError) as info:
        verify_config(_config(rounds=[good]), sign_public=KEYS.sign_public_raw)
    assert info.value.field == "rounds[0].signature"


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda p: p.update(version=2), "version"),
        (lambda p: p.update(issued_at=-1), "issued_at"),
        (lambda p: p["aggregator"].update(seal_key_id="00" * 8), "aggregator.seal_key_id"),
        (lambda p: p["aggregator"].update(seal_public=b64e(bytes(31))), "aggregator.seal_public"),
        (lambda p: p["metrics"][0]["params"].update(mode="loud"), "metrics[0].params.mode"),
        (lambda p: p["metrics"][0].update(digest="x"), "metrics[0].digest"),
        (lambda p: p["metrics"][0].update(current_level=0), "metrics[0].current_level"),
        (lambda p: p["metrics"].append(copy.deepcopy(p["metrics"][0])), "metrics[1].params.name"),
        (lambda p: p.update(metrics={}), "metrics"),
        (lambda p: p.update(rounds=None), "rounds"),
        (lambda p: p.update(rounds=[KEYS.sign(ROUND | {"metric": "other"})]), "rounds[0].payload.metric"),
        (lambda p: p.update(rounds=[KEYS.sign(ROUND)]), "rounds[0].payload.params_digest"),
        (lambda p: p.update(rounds=[KEYS.sign(ROUND | {"level_to": 0.5})]), "rounds[0].payload.level_to"),
        (lambda p: p.update(rounds=[KEYS.sign(ROUND | {"params_digest": PARAMS.digest(), "cohorts": [1, 8]})]),
         "rounds[0].payload.cohorts[1]"),
        (lambda p: p.update(rounds=[{"payload": {}}]), "rounds[0].key_id"),
    ],
)
def test_config_errors_name_the_field(mutate: Any, field: str) -> None:
    payload = copy.deepcopy(_config()["payload"])
    mutate(payload)
    with pytest.raises(ReportRejected) as info:
        verify_config(KEYS.sign(payload), sign_public=KEYS.sign_public_raw)
    assert info.value.field == field


def test_aggregator_info_announces_next_signing_key() -> None:
    from protocol.crypto import key_id, public_key_info
    from protocol.wire import AggregatorInfo

    seal, sign, nxt = bytes(range(32)), bytes(range(1, 33)), bytes(range(2, 34))
    info = AggregatorInfo.from_dict(public_key_info(seal, sign, nxt))
    assert info.next_sign_public == nxt
    assert info.to_dict()["next_sign_key_id"] == key_id(nxt)
    assert AggregatorInfo.from_dict(public_key_info(seal, sign)).next_sign_public is None
    half = public_key_info(seal, sign, nxt)
    del half["next_sign_key_id"]
    with pytest.raises(ReportRejected) as caught:
        AggregatorInfo.from_dict(half)
    assert caught.value.field == "next_sign_key_id"
    wrong = public_key_info(seal, sign, nxt) | {"next_sign_key_id": key_id(seal)}
    with pytest.raises(ReportRejected) as caught:
        AggregatorInfo.from_dict(wrong)
    assert caught.value.field == "next_sign_key_id"


def test_clock_answers_round_trip_and_stay_off_final_results() -> None:
    from protocol.wire import MAX_RETRY_AFTER, upload_server_time

    waiting = ReportResult(report_id=b64e(b"\x01" * 16), status="too_early", field="window", retry_after=3600)
    final = ReportResult(report_id=b64e(b"\x02" * 16), status="expired")
    body = upload_response([waiting, final], server_time=1_795_737_600)
    assert body["server_time"] == 1_795_737_600
    assert "retry_after" not in body["results"][1]  # a final result is byte for byte as before
    assert parse_upload_response(body) == [waiting, final]
    assert upload_server_time(body) == 1_795_737_600
    assert not waiting.final and final.final
    assert "server_time" not in upload_response([final])
    for status, value in (("accepted", 5), ("too_early", 0), ("expired", MAX_RETRY_AFTER + 1), ("expired", 1.5)):
        with pytest.raises(ReportRejected) as info:
            ReportResult(report_id="AA", status=status, retry_after=value)
        assert info.value.field == "retry_after"
    with pytest.raises(ReportRejected) as info:
        parse_upload_response({**body, "server_time": -1})
    assert info.value.field == "server_time"
