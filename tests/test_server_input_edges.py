"""Small input defects found by a black-box campaign, each pinned by a test.

* Python's ``$`` also matches before a final newline: ``"places\\n"`` passed
  ``^[a-z0-9]...$`` with ``re.match``. Names, digests and base64 fields are
  checked with ``fullmatch``.
* A level of ``5e-324`` (the smallest double) made the kept-probability of a
  0 bit exactly 0 and the decoder divide by zero: levels start at
  ``MIN_LEVEL``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aggsupport import app_in, bearer, make_params
from flask.testing import FlaskClient

from aggregator.server.storage import Storage
from protocol.crypto import b64d
from protocol.errors import ParameterError, ReportRejected
from protocol.params import MetricParams
from protocol.randomizers import MAX_LEVEL, MIN_LEVEL, Randomizer
from protocol.wire import parse_batch_json

PARAMS = make_params()


@pytest.fixture
def app_client(tmp_path: Path) -> Iterator[tuple[FlaskClient, Storage]]:
    with app_in(tmp_path) as app:
        yield app.test_client(), app.extensions["onesided"].storage


def _admin(storage: Storage) -> dict[str, str]:
    return bearer(storage.create_token(role="admin", name="admin")[1])


def test_names_ending_in_a_newline_are_refused(app_client: tuple[FlaskClient, Storage]) -> None:
    client, storage = app_client
    with pytest.raises(ParameterError, match="name"):
        MetricParams.from_dict({**PARAMS.to_dict(), "name": "places\n"})
    answer = client.post("/v1/metrics", json={**PARAMS.to_dict(), "name": "places\n"}, headers=_admin(storage))
    assert answer.status_code == 400 and answer.get_json()["field"] == "name", answer.get_json()
    with pytest.raises(ParameterError, match="name"):
        storage.create_token(role="analyst", name="ops\n")
    with pytest.raises(ReportRejected):
        b64d("AAAA\n", "report_id")


def _batch(**change: Any) -> dict[str, Any]:
    report = {"report_id": "A" * 22, "metric": "places", "round": 0, "window": 0,
              "params_digest": "0" * 64, "plain": "AAAA", **change}
    return {"version": 1, "reports": [report]}


@pytest.mark.parametrize("field, value", [("metric", "places\n"), ("params_digest", "0" * 64 + "\n")])
def test_report_fields_ending_in_a_newline_are_refused(field: str, value: str) -> None:
    parse_batch_json(_batch(), max_reports=10)  # the unchanged report parses
    with pytest.raises(ReportRejected) as caught:
        parse_batch_json(_batch(**{field: value}), max_reports=10)
    assert caught.value.field.endswith(field)


@pytest.mark.parametrize("level", [5e-324, MIN_LEVEL / 2, 0.0, -1.0, MAX_LEVEL * 1.01])
def test_levels_outside_min_and_max_are_refused(app_client: tuple[FlaskClient, Storage], level: float) -> None:
    client, storage = app_client
    with pytest.raises(ParameterError, match="level"):
        Randomizer(mode="asymmetric", level=level)
    answer = client.post("/v1/metrics", json={**PARAMS.to_dict(), "level": level}, headers=_admin(storage))
    assert answer.status_code == 400 and answer.get_json()["field"] == "level", answer.get_json()


def test_the_extreme_levels_themselves_are_accepted(app_client: tuple[FlaskClient, Storage]) -> None:
    client, storage = app_client
    for level in (MIN_LEVEL, MAX_LEVEL):
        assert 0.0 < Randomizer(mode="symmetric", level=level).f < 1.0  # some noise, some signal
    assert 1.0 - Randomizer(mode="asymmetric", level=MIN_LEVEL).f == pytest.approx(MIN_LEVEL / 2, rel=1e-6)
    admin = _admin(storage)
    low = {**PARAMS.to_dict(), "name": "low", "level": MIN_LEVEL}
    assert client.post("/v1/metrics", json=low, headers=admin).status_code == 201
    refused = client.post("/v1/metrics/low/rounds", json={"level_to": 5e-324}, headers=admin)
    assert refused.status_code == 400 and refused.get_json()["field"] == "level_to", refused.get_json()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_database_errors_never_carry_the_statement_parameters(backend: str, tmp_path: Path) -> None:
    import sqlalchemy as sa
    from aggsupport import database_url

    with database_url(backend, tmp_path) as url:
        storage = Storage.open(url)
        try:
            with pytest.raises(sa.exc.DBAPIError) as caught, storage.engine.begin() as conn:
                conn.execute(sa.text("INSERT INTO tokens (id, name, role, token_hash, created_at) "
                                     "VALUES (:a, :b, :c, :d, :e)"),
                             [{"a": 1, "b": "n", "c": "admin", "d": "SECRET-HASH-1", "e": 0},
                              {"a": 1, "b": "m", "c": "admin", "d": "SECRET-HASH-2", "e": 0}])
            assert "SECRET-HASH" not in str(caught.value)
        finally:
            storage.close()
