"""The HTTP API against a real server on loopback, on SQLite and PostgreSQL:
metric registration, the signed config, batch ingestion with exact counts,
every per-report status, and malformed batches refused whole (nothing stored, no 5xx)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from aggsupport import (
    BACKENDS,
    LiveServer,
    ReportSet,
    bearer,
    current_window,
    database_url,
    live_server,
    make_params,
    make_reports,
    post_reports,
)
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from aggregator.server.opener import EnvelopeOpener
from protocol.crypto import AggregatorKeys, b64e, seal
from protocol.rng import SeededRandom
from protocol.wire import (
    CONTENT_TYPE_BINARY,
    PAYLOAD_HEADER,
    ReportEnvelope,
    build_report,
    encode_batch_binary,
    encode_batch_json,
    sealed_report_id,
    verify_config,
)

PARAMS = make_params()


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with database_url(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    with live_server(db_url, tmp_path, max_reports=200, max_body_bytes=256 * 1024) as live:
        yield live


@pytest.fixture
def admin(server: LiveServer) -> str:
    token = server.admin_token()
    assert server.register(PARAMS, token).status_code == 201
    return token


def assert_nothing_stored(server: LiveServer) -> None:
    counts = server.storage.table_counts()
    assert (counts["reports"], counts["aggregates"], counts["cohort_totals"]) == (0, 0, 0)


def results(response: requests.Response) -> list[tuple[str, str | None]]:
    assert response.status_code == 200, response.text
    return [(r["status"], r["field"]) for r in response.json()["results"]]


def assert_counts(server: LiveServer, reports: ReportSet) -> None:
    ones, totals = server.storage.bit_counts(PARAMS.name)
    want_ones, want_totals = reports.expected(PARAMS.num_cohorts)
    np.testing.assert_array_equal(ones, want_ones)
    np.testing.assert_array_equal(totals, want_totals)


def test_metric_registration_needs_admin_and_names_bad_fields(server: LiveServer) -> None:
    url = f"{server.url}/v1/metrics"
    admin, analyst = server.admin_token(), server.analyst_token()
    body = PARAMS.to_dict()
    assert requests.post(url, json=body, timeout=10).json()["error"] == "unauthorized"
    assert requests.post(url, json=body, headers=bearer("ons_wrong"), timeout=10).status_code == 401
    assert requests.post(url, json=body, headers=bearer(analyst), timeout=10).json()["error"] == "forbidden"
    created = requests.post(url, json=body, headers=bearer(admin), timeout=10)
    assert created.status_code == 201 and created.json()["digest"] == PARAMS.digest()
    again = requests.post(url, json=body, headers=bearer(admin), timeout=10)
    assert again.status_code == 200 and again.json()["outcome"] == "unchanged"
    for change, field in (
        ({"level": -1.0}, "level"),
        ({"colour": "red"}, "colour"),
        ({"time_precision": 0}, "time_precision"),
        ({"version": 2}, "version"),
        ({"mode": "sideways"}, "mode"),
    ):
        answer = requests.post(url, json={**body, **change}, headers=bearer(admin), timeout=10)
        assert answer.status_code == 400 and answer.json()["field"] == field, (change, answer.text)
    not_json = requests.post(url, data=b"{", headers={**bearer(admin), "Content-Type": "application/json"}, timeout=10)
    assert not_json.status_code == 400 and not_json.json()["field"] == "body"
    wrong_type = requests.post(url, data=b"{}", headers={**bearer(admin), "Content-Type": "text/plain"}, timeout=10)
    assert wrong_type.status_code == 415
    listing = requests.get(url, headers=bearer(analyst), timeout=10).json()["metrics"]
    assert [(m["name"], m["reports"]) for m in listing] == [("places", 0)]
    missing = requests.get(f"{url}/nothing", headers=bearer(analyst), timeout=10)
    assert missing.status_code == 404 and missing.json()["field"] == "metric"


def test_parameters_freeze_once_reports_exist(server: LiveServer, admin: str) -> None:
    changed = dataclasses.replace(PARAMS, level=3.0)
    reports = make_reports(PARAMS, server.keys.seal_public_raw, 5, seed=1)
    assert results(post_reports(server.url, reports.envelopes)) == [("accepted", None)] * 5
    conflict = server.register(changed, admin)
    assert conflict.status_code == 409 and conflict.json() == {
        "error": "metric_immutable", "field": "params", "detail": conflict.json()["detail"]
    }
    assert server.register(PARAMS, admin).status_code == 200
    shown = requests.get(f"{server.url}/v1/metrics/places", headers=bearer(admin), timeout=10).json()
    assert shown["reports"] == 5 and shown["collections"][0]["reports"] == 5


def test_config_is_signed_with_metrics_keys_and_open_rounds(server: LiveServer, admin: str) -> None:
    opened = server.storage.open_round(
        metric="places", level_from=2.0, level_to=3.5, cohorts=None,
        expires_at=int(time.time()) + 3600,
        sign=server.keys.sign,
    )
    document = requests.get(f"{server.url}/v1/config", timeout=10).json()
    config = verify_config(document, sign_public=server.keys.sign_public_raw)
    assert config.aggregator.seal_public == server.keys.seal_public_raw
    entry = config.metric("places")
    assert entry is not None and entry.digest == PARAMS.digest() and entry.params == PARAMS
    assert (entry.current_round, entry.current_level) == (opened.id, 3.5)
    assert [r.round_id for r in config.rounds] == [opened.id]
    server.storage.close_round(opened.id)
    later = verify_config(requests.get(f"{server.url}/v1/config", timeout=10).json(), sign_public=server.keys.sign_public_raw)
    assert later.rounds == ()
    tampered = dict(document, payload={**document["payload"], "issued_at": 1})
    with pytest.raises(ValueError):
        verify_config(tampered, sign_public=server.keys.sign_public_raw)


def test_batches_in_both_forms_are_counted_exactly_once(server: LiveServer, admin: str) -> None:
    public = server.keys.seal_public_raw
    reports = make_reports(PARAMS, public, 120, seed=2)
    first, second = reports.envelopes[:70], reports.envelopes[70:]
    assert results(post_reports(server.url, first)) == [("accepted", None)] * 70
    assert results(post_reports(server.url, second, form="binary")) == [("accepted", None)] * 50
    assert_counts(server, reports)
    # a retry of the same batch is accepted again and counted once
    assert results(post_reports(server.url, second)) == [("accepted", None)] * 50
    # the same ids with other envelopes (a replay, not a retry) are refused: same seed, so the same
    # ephemeral keys and ids, but other metadata (the previous window), so other ciphertexts
    resealed = make_reports(PARAMS, public, 120, seed=2, window=current_window(PARAMS) - PARAMS.time_precision)
    assert [e.report_id for e in resealed.envelopes] == [e.report_id for e in reports.envelopes]
    assert resealed.envelopes[0].sealed != reports.envelopes[0].sealed
    replayed = results(post_reports(server.url, resealed.envelopes[:10], form="binary"))
    assert replayed == [("replayed", None)] * 10
    assert_counts(server, reports)
    assert server.storage.table_counts()["reports"] == 120


def _payload(cohort: int, level: float, packed: bytes) -> bytes:
    return PAYLOAD_HEADER.pack(1, cohort, level) + packed


def _sealed(server: LiveServer, payload: bytes, seed: int, **meta: Any) -> ReportEnvelope:
    """A report with an arbitrary payload, sealed properly (so only the payload is wrong)."""
    ephemeral = X25519PrivateKey.from_private_bytes(bytes(SeededRandom(seed).integers(256, (32,)).astype(np.uint8)))
    base = build_report(
        params_digest=PARAMS.digest(), metric="places", round=meta.get("round", 0),
        window=meta.get("window", current_window(PARAMS)), cohort=0, level=PARAMS.level,
        bits=np.zeros(PARAMS.num_bits, dtype=bool), seal_public=None,
        report_id=sealed_report_id(ephemeral.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)),
    )
    sealed = seal(server.keys.seal_public_raw, payload, base.aad(), ephemeral_private=ephemeral)
    return dataclasses.replace(base, plain=None, sealed=sealed)


def test_each_bad_report_gets_its_status_and_field_and_is_not_stored(server: LiveServer, admin: str) -> None:
    public = server.keys.seal_public_raw
    now_window = current_window(PARAMS)
    good = make_reports(PARAMS, public, 3, seed=3)

    def one(seed: int, **kwargs: Any) -> ReportEnvelope:
        return make_reports(PARAMS, kwargs.pop("key", public), 1, seed=seed, **kwargs).envelopes[0]

    flipped = one(10)
    assert flipped.sealed is not None
    broken = flipped.sealed[:-1] + bytes([flipped.sealed[-1] ^ 1])
    cases: list[tuple[ReportEnvelope, str, str | None]] = [
        (dataclasses.replace(one(11), metric="other"), "unknown_metric", "metric"),
        (one(12, digest="ab" * 32), "outdated_config", "params_digest"),
        (one(13, window=now_window + 10 * 3600), "too_early", "window"),
        (one(14, window=now_window - 200 * 86400), "expired", "window"),
        (one(15, window=now_window + 1), "invalid_message", "window"),
        (one(16, round=999), "invalid_message", "round"),
        (dataclasses.replace(flipped, sealed=broken), "decrypt_error", "sealed"),
        (one(17, key=AggregatorKeys.generate().seal_public_raw), "decrypt_error", "sealed"),
        (dataclasses.replace(one(18), window=one(18).window - 3600), "decrypt_error", "sealed"),  # AAD binds window
        (one(19, level=2.5), "invalid_message", "payload.level"),
        (_sealed(server, _payload(4, 2.0, b"\x00\x00\x00"), 20), "invalid_message", "payload.cohort"),
        (_sealed(server, _payload(0, 2.0, b"\x00\x00\x00\x00"), 21), "invalid_message", "payload"),
        (_sealed(server, _payload(0, 2.0, b"\x00\x00\x10"), 22), "invalid_message", "payload.bits"),
        (_sealed(server, struct.pack(">BHd", 2, 0, 2.0) + b"\x00\x00\x00", 23), "invalid_message", "payload.version"),
        (_sealed(server, _payload(0, math.nan, b"\x00\x00\x00"), 24), "invalid_message", "payload.level"),
        (one(25, key=None), "invalid_message", "plain"),
    ]
    batch = [good.envelopes[0], *[c[0] for c in cases], *good.envelopes[1:]]
    answer = post_reports(server.url, batch)
    got = results(answer)
    assert got[0] == ("accepted", None) and got[-2:] == [("accepted", None)] * 2
    assert got[1:-2] == [(status, field) for _, status, field in cases]
    for result in answer.json()["results"][1:-2]:
        assert result["detail"]
    assert answer.json()["accepted"] == 3
    assert server.storage.table_counts()["reports"] == 3
    assert_counts(server, good)


def test_round_reports_must_match_their_round(server: LiveServer, admin: str) -> None:
    public = server.keys.seal_public_raw
    far = 2**40
    closed = server.storage.open_round(
        metric="places", level_from=2.0, level_to=3.0, cohorts=None, expires_at=far, sign=server.keys.sign
    )
    server.storage.close_round(closed.id)
    open_ = server.storage.open_round(
        metric="places", level_from=3.0, level_to=4.0, cohorts=[1, 3], expires_at=far, sign=server.keys.sign
    )
    in_round = make_reports(PARAMS, public, 40, seed=30, round=open_.id, level=4.0)
    allowed = [e for e, c in zip(in_round.envelopes, in_round.cohorts, strict=True) if c in (1, 3)]
    refused = [e for e, c in zip(in_round.envelopes, in_round.cohorts, strict=True) if c not in (1, 3)]
    assert allowed and refused
    got = results(post_reports(server.url, in_round.envelopes))
    assert sorted(set(got)) == [("accepted", None), ("invalid_message", "payload.cohort")]
    assert got.count(("accepted", None)) == len(allowed)
    base_level = make_reports(PARAMS, public, 1, seed=31, round=open_.id).envelopes
    late = make_reports(PARAMS, public, 1, seed=32, round=closed.id, level=3.0).envelopes
    round_zero_relaxed = make_reports(PARAMS, public, 1, seed=33, level=4.0).envelopes
    got = results(post_reports(server.url, base_level + late + round_zero_relaxed))
    assert got == [("invalid_message", "payload.level"), ("accepted", None), ("invalid_message", "payload.level")]
    _, totals = server.storage.bit_counts("places", round=open_.id)
    assert totals.sum() == len(allowed) and totals[0] == totals[2] == 0
    assert server.storage.bit_counts("places", round=closed.id)[1].sum() == 1  # a closed round's late report


def _report_json(server: LiveServer, seed: int) -> dict[str, Any]:
    return make_reports(PARAMS, server.keys.seal_public_raw, 1, seed=seed).envelopes[0].to_json()


def test_malformed_batches_are_refused_whole(server: LiveServer, admin: str) -> None:
    valid = [_report_json(server, 40 + i) for i in range(3)]
    url = f"{server.url}/v1/reports"

    def post(body: Any) -> requests.Response:
        return requests.post(url, json=body, timeout=30)

    cases: list[tuple[Any, int, str, str | None]] = [
        ({"version": 2, "reports": valid}, 400, "invalid_message", "version"),
        ({"version": 1, "reports": valid, "extra": 1}, 400, "invalid_message", "extra"),
        ({"version": 1, "reports": {}}, 400, "invalid_message", "reports"),
        ({"version": 1, "reports": []}, 400, "invalid_message", "reports"),
        ({"version": 1, "reports": [*valid, {**valid[0], "report_id": "!!!"}]}, 400, "invalid_message", "reports[3].report_id"),
        ({"version": 1, "reports": [valid[0], {**valid[1], "report_id": b64e(b"x" * 15)}]}, 400, "invalid_message", "reports[1].report_id"),
        ({"version": 1, "reports": [{**valid[0], "report_id": valid[0]["report_id"] + "="}]}, 400, "invalid_message", "reports[0].report_id"),
        ({"version": 1, "reports": [{**valid[0], "sealed": valid[0]["sealed"][:-1] + "?"}]}, 400, "invalid_message", "reports[0].sealed"),
        ({"version": 1, "reports": [{**valid[0], "round": 1.0}]}, 400, "invalid_message", "reports[0].round"),
        ({"version": 1, "reports": [{**valid[0], "window": True}]}, 400, "invalid_message", "reports[0].window"),
        ({"version": 1, "reports": [{**valid[0], "window": -1}]}, 400, "invalid_message", "reports[0].window"),
        ({"version": 1, "reports": [{**valid[0], "metric": "Bad Name"}]}, 400, "invalid_message", "reports[0].metric"),
        ({"version": 1, "reports": [{**valid[0], "params_digest": "AB" * 32}]}, 400, "invalid_message", "reports[0].params_digest"),
        ({"version": 1, "reports": [{**valid[0], "sealed": b64e(b"z" * 2049)}]}, 400, "invalid_message", "reports[0].sealed"),
        ({"version": 1, "reports": [{**valid[0], "plain": "AAAA"}]}, 400, "invalid_message", "reports[0].sealed"),
        ({"version": 1, "reports": [valid[0], valid[1], valid[0]]}, 400, "duplicate_report_id", "reports[2].report_id"),
        ({"version": 1, "reports": valid * 67}, 413, "too_many_reports", "reports"),
        ([1, 2], 400, "invalid_message", "body"),
    ]
    for body, status, code, field in cases:
        answer = post(body)
        assert answer.status_code == status, (field, answer.text)
        assert answer.json()["error"] == code and answer.json()["field"] == field, (field, answer.json())
    huge = requests.post(url, data=b"{" + b" " * (300 * 1024) + b"}", headers={"Content-Type": "application/json"}, timeout=30)
    assert huge.status_code == 413 and huge.json()["error"] == "payload_too_large"
    for data, content_type, status, field in (
        (b'{"version": 1, "reports": [', "application/json", 400, "body"),
        (b"\xff\xfe\x00", "application/json", 400, "body"),
        (b'{"version": NaN, "reports": []}', "application/json", 400, "body"),
        (b"{}", "text/plain", 415, None),
    ):
        answer = requests.post(url, data=data, headers={"Content-Type": content_type}, timeout=30)
        assert answer.status_code == status and answer.json()["field"] == field, answer.text
    assert_nothing_stored(server)


def test_malformed_binary_batches_are_refused_whole(server: LiveServer, admin: str) -> None:
    reports = make_reports(PARAMS, server.keys.seal_public_raw, 3, seed=50).envelopes
    data = encode_batch_binary(reports)
    cases = [
        (b"ONSX" + data[4:], "magic"),
        (data[:4] + b"\x02" + data[5:], "version"),
        (data[:-5], "reports[2].sealed"),
        (data + b"\x00", "reports"),
        (data[:5] + struct.pack(">I", 0) + data[9:], "reports"),
        (encode_batch_binary([reports[0], reports[1], reports[0]]), "reports[2].report_id"),
    ]
    for body, field in cases:
        answer = requests.post(f"{server.url}/v1/reports", data=body, headers={"Content-Type": CONTENT_TYPE_BINARY}, timeout=30)
        assert answer.status_code == 400 and answer.json()["field"] == field, (field, answer.text)
    assert_nothing_stored(server)


def test_garbage_never_causes_a_server_error(server: LiveServer, admin: str) -> None:
    """200 random single-byte corruptions of valid batches: always a 4xx or per-report results."""
    rng = SeededRandom(60)
    reports = make_reports(PARAMS, server.keys.seal_public_raw, 4, seed=61).envelopes
    forms = [
        (encode_batch_binary(reports), CONTENT_TYPE_BINARY),
        (json.dumps(encode_batch_json(reports)).encode(), "application/json"),
    ]
    statuses = set()
    for trial in range(200):
        original, content_type = forms[trial % 2]
        data = bytearray(original)
        position = int(rng.integers(len(data), ()))
        data[position] = int(rng.integers(256, ()))
        answer = requests.post(f"{server.url}/v1/reports", data=bytes(data), headers={"Content-Type": content_type}, timeout=30)
        assert answer.status_code < 500, answer.text
        body = answer.json()
        statuses.add(answer.status_code)
        assert ("results" in body) == (answer.status_code == 200)
        assert answer.status_code == 200 or set(body) == {"error", "field", "detail"}
    assert 200 in statuses and 400 in statuses
    assert server.storage.table_counts()["reports"] <= 4


def test_plaintext_reports_only_when_the_operator_allows_them(db_url: str, tmp_path: Path) -> None:
    with live_server(db_url, tmp_path, allow_plaintext=True) as live:
        live.register(PARAMS, live.admin_token())
        plain = make_reports(PARAMS, None, 30, seed=70)
        assert results(post_reports(live.url, plain.envelopes, form="binary")) == [("accepted", None)] * 30
        assert_counts(live, plain)
        assert requests.get(f"{live.url}/v1/health", timeout=10).json()["plaintext_allowed"] is True


def test_helper_processes_open_large_batches_alike(db_url: str, tmp_path: Path) -> None:
    with live_server(db_url, tmp_path, decrypt_processes=2) as live:
        live.register(PARAMS, live.admin_token())
        reports = make_reports(PARAMS, live.keys.seal_public_raw, 150, seed=80)
        envelopes = list(reports.envelopes)
        for i in range(0, 150, 15):  # every 15th envelope is tampered with
            sealed = envelopes[i].sealed
            assert sealed is not None
            envelopes[i] = dataclasses.replace(envelopes[i], sealed=sealed[:40] + bytes([sealed[40] ^ 1]) + sealed[41:])
        got = results(post_reports(live.url, envelopes, form="binary"))
        assert [i for i, r in enumerate(got) if r != ("accepted", None)] == list(range(0, 150, 15))
        assert {got[i] for i in range(0, 150, 15)} == {("decrypt_error", "sealed")}
        kept = [i for i in range(150) if i % 15]
        ones, totals = live.storage.bit_counts("places")
        expected = ReportSet(envelopes=[], bits=reports.bits[kept], cohorts=reports.cohorts[kept])
        np.testing.assert_array_equal(ones, expected.expected(PARAMS.num_cohorts)[0])
        np.testing.assert_array_equal(totals, expected.expected(PARAMS.num_cohorts)[1])


def test_unknown_routes_and_methods_answer_json(server: LiveServer) -> None:
    missing = requests.get(f"{server.url}/v1/nowhere", timeout=10)
    assert missing.status_code == 404 and set(missing.json()) == {"error", "field", "detail"}
    wrong = requests.put(f"{server.url}/v1/reports", timeout=10)
    assert wrong.status_code == 405 and wrong.json()["error"] == "method_not_allowed"


def test_a_dead_helper_process_is_replaced() -> None:
    keys = AggregatorKeys.generate()
    reports = make_reports(PARAMS, keys.seal_public_raw, 100, seed=90).envelopes
    items = [(e.body, e.aad()) for e in reports]
    opener = EnvelopeOpener(keys, processes=2)
    try:
        first = opener.open_all(items)
        pool = opener.pool.executor()
        for pid in list(pool._processes):  # the helpers, started by this test
            os.kill(pid, signal.SIGKILL)
        assert opener.open_all(items) == first  # opened in place this time
        assert opener.open_all(items) == first  # and by new helpers again
        assert all(isinstance(p, bytes) for p in first)
    finally:
        opener.close()
