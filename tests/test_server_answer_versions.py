"""The upload answer by wire version (docs/wire.md 7.4): each client gets the keys it asked for, no more.

Version 1 (no ``Onesided-Wire`` header) and version 2 answers are pinned byte for byte as the
server sent them before version 3 existed (bytes captured from that code, with the server's
clock fixed and seeded report ids); version 3 adds only the top-level ``clipped`` count.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aggsupport import batch_json, bearer, make_params, make_reports

from aggregator.server.app import create_app
from protocol.crypto import AggregatorKeys
from protocol.encodings import DirectEncoding
from protocol.params import MetricParams
from protocol.wire import WIRE_HEADER, ReportEnvelope, build_report, parse_upload_response

NOW = 1_795_737_600 + 1800  # the server's clock, mid-window
WINDOW = 1_795_737_600
PARAMS = make_params()
VISITS = MetricParams(name="visits", encoding=DirectEncoding(domain=tuple(f"p{i}" for i in range(8))),
                      mode="trusted", level=math.inf, time_precision=3600, max_items=2)


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[Any, AggregatorKeys]]:
    keys = AggregatorKeys.generate()
    keys.save(tmp_path / "keys")
    app = create_app({"data_dir": str(tmp_path)}, clock=lambda: NOW)
    state = app.extensions["onesided"]
    admin = state.storage.create_token(role="admin", name="admin")[1]
    for params in (PARAMS, VISITS):
        assert app.test_client().post("/v1/metrics", json=params.to_dict(), headers=bearer(admin)).status_code == 201
    try:
        yield app, keys
    finally:
        state.opener.close()
        state.offloader.close()
        state.storage.close()


def _visit(keys: AggregatorKeys, ones: list[int], seed: int) -> ReportEnvelope:
    bits = np.zeros(VISITS.num_bits, dtype=bool)
    bits[ones] = True
    return build_report(params_digest=VISITS.digest(), metric="visits", round=0, window=WINDOW, cohort=0,
                        level=VISITS.level, bits=bits, seal_public=keys.seal_public_raw,
                        ephemeral_private=bytes([seed]) * 32)


def _batch(keys: AggregatorKeys, seed: int) -> dict[str, Any]:
    """Every kind of result: accepted, too early, expired, outdated, unknown, a clipped and a kept visit."""
    seal = keys.seal_public_raw
    envelopes = [
        *make_reports(PARAMS, seal, 1, seed=seed, window=WINDOW).envelopes,
        *make_reports(PARAMS, seal, 1, seed=seed + 1, window=WINDOW + 2 * 86400).envelopes,
        *make_reports(PARAMS, seal, 1, seed=seed + 2, window=WINDOW - 400 * 86400).envelopes,
        *make_reports(PARAMS, seal, 1, seed=seed + 3, window=WINDOW, digest="0" * 64).envelopes,
        *make_reports(make_params("nothing"), seal, 1, seed=seed + 4, window=WINDOW).envelopes,
        _visit(keys, [0, 2, 3, 5, 7], seed + 5),
        _visit(keys, [1, 6], seed + 6),
    ]
    return batch_json(envelopes)


def _post(app: Any, body: dict[str, Any], version: str | None) -> bytes:
    headers = {} if version is None else {WIRE_HEADER: version}
    response = app.test_client().post("/v1/reports", json=body, headers=headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    return bytes(response.get_data())


# Captured from the server before wire version 3 (same clock, same seeds): 3 accepted (one of them
# clipped), one too early (retry_after from version 2 on), expired, outdated, unknown.
V1 = (
    b'{"accepted":3,"results":[{"detail":null,"field":null,"report_id":"kvbbRfBCbkoyxLUiXunQtQ","status":"accepted"},'
    b'{"detail":"starts in the future","field":"window","report_id":"l-HQ7w8hfhwGcwwiQZIWyg","status":"too_early"},'
    b'{"detail":"is older than the retention period","field":"window","report_id":"nY50ZwsvYds4NsGh11cC2w",'
    b'"status":"expired"},{"detail":"is not the metric\'s current parameters digest; fetch /v1/config",'
    b'"field":"params_digest","report_id":"L6rMkw9h-eaV_uyd6SO-yw","status":"outdated_config"},'
    b'{"detail":"no metric named \'nothing\'","field":"metric","report_id":"jzXAhw-6vMn2wBR75tjQpg",'
    b'"status":"unknown_metric"},{"detail":"clipped: 3 of the report\'s ones dropped at random, 2 kept (max_items)",'
    b'"field":null,"report_id":"AItJmtV49ZUPjZZH3naMNg","status":"accepted"},{"detail":null,"field":null,'
    b'"report_id":"q8fIBZB6WFijxVHvpSyi9g","status":"accepted"}]}\n'
)
V2 = (
    b'{"accepted":3,"results":[{"detail":null,"field":null,"report_id":"4E3HPZboqDjs-315U1a-Bg","status":"accepted"},'
    b'{"detail":"starts in the future","field":"window","report_id":"Civc7nbJ-E4FNbC0egPq4g","retry_after":170701,'
    b'"status":"too_early"},{"detail":"is older than the retention period","field":"window",'
    b'"report_id":"ArOHAsAQGhZPtVUqqfsmIg","status":"expired"},{"detail":"is not the metric\'s current parameters '
    b'digest; fetch /v1/config","field":"params_digest","report_id":"o2fRrbc9vRyfAhz9fgOfuQ",'
    b'"status":"outdated_config"},{"detail":"no metric named \'nothing\'","field":"metric",'
    b'"report_id":"TOlbYPNs6UJU_PMj3bCnuA","status":"unknown_metric"},{"detail":"clipped: 3 of the report\'s ones '
    b'dropped at random, 2 kept (max_items)","field":null,"report_id":"MefrtMsO6YK_PNzGFjFIPw","status":"accepted"},'
    b'{"detail":null,"field":null,"report_id":"Z6gTR_P6S92f7O9wBlWabQ","status":"accepted"}],'
    b'"server_time":1795739400}\n'
)


@pytest.mark.parametrize("version", [None, "1", "", "abc", "0", "-3", "2.5", "99999"])
def test_version_1_answers_are_byte_identical_to_before(app: tuple[Any, AggregatorKeys], version: str | None) -> None:
    flask_app, keys = app
    assert _post(flask_app, _batch(keys, 10), version) == V1


def test_version_2_answers_are_byte_identical_to_before(app: tuple[Any, AggregatorKeys]) -> None:
    flask_app, keys = app
    assert _post(flask_app, _batch(keys, 20), "2") == V2


@pytest.mark.parametrize("version", ["3", "4", " 3 "])
def test_version_3_adds_the_clipped_count_and_nothing_else(app: tuple[Any, AggregatorKeys], version: str) -> None:
    flask_app, keys = app
    answer = _post(flask_app, _batch(keys, 20), version)  # the reports of V2 (a fresh server)
    assert answer == V2.replace(b'"accepted":3,', b'"accepted":3,"clipped":1,')
    parsed = parse_upload_response(json.loads(answer))
    assert parsed.clipped == 1 and parsed.server_time == NOW


def test_version_3_says_0_when_nothing_was_clipped(app: tuple[Any, AggregatorKeys]) -> None:
    flask_app, keys = app
    body = batch_json([_visit(keys, [1, 6], 1), *make_reports(PARAMS, keys.seal_public_raw, 2, seed=1,
                                                              window=WINDOW).envelopes])
    answer = json.loads(_post(flask_app, body, "3"))
    assert answer["accepted"] == 3 and answer["clipped"] == 0
