"""Point 8 of the campaign: bounded numbers, tokens never logged, authentication before validation, audited refusals.

* A JSON number of hundreds or thousands of digits was a 500 with a
  traceback (``int too large to convert to float``): now 400 naming the field,
  before any conversion.
* A token pasted into a URL (path or query) is redacted in the access log
  and in the append-only audit table.
* Query validation ran before authentication (strangers learned parameter
  limits instead of 401) and an authenticated request it refused left no
  audit row.

No timing assumptions (flask's test client).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aggsupport import app_in, bearer, make_params

from aggregator.server.logs import (
    ACCESS_LOGGER,
    JsonFormatter,
    TextFormatter,
    access_log_middleware,
)

PARAMS = make_params()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Any, str, str]]:
    """(app, admin token, analyst token) with the metric ``places`` registered."""
    with app_in(tmp_path) as app:
        storage = app.extensions["onesided"].storage
        admin = storage.create_token(role="admin", name="admin")[1]
        analyst = storage.create_token(role="analyst", name="analyst")[1]
        assert app.test_client().post("/v1/metrics", json=PARAMS.to_dict(), headers=bearer(admin)).status_code == 201
        yield app, admin, analyst


@pytest.mark.parametrize("digits", [310, 4300, 5000])
@pytest.mark.parametrize("path, field, role", [
    ("/v1/metrics/places/rounds", "level_to", "admin"), ("/v1/releases", "epsilon", "analyst"),
])
def test_a_huge_json_number_is_400_naming_its_field(
    served: tuple[Any, str, str], digits: int, path: str, field: str, role: str,
) -> None:
    app, admin, analyst = served
    number = "1" + "0" * (digits - 1)
    body = f'{{"metric": "places", "{field}": {number}}}'
    answer = app.test_client().post(path, data=body, content_type="application/json",
                                    headers=bearer(admin if role == "admin" else analyst))
    assert answer.status_code == 400, answer.get_data(as_text=True)
    assert answer.get_json()["field"] == field


def test_a_float_out_of_range_is_400_naming_its_field(served: tuple[Any, str, str]) -> None:
    app, _admin, analyst = served
    answer = app.test_client().post("/v1/releases", data='{"metric": "places", "epsilon": 1e400}',
                                    content_type="application/json", headers=bearer(analyst))
    assert answer.status_code == 400 and answer.get_json()["field"] == "epsilon"


def test_tokens_in_urls_stay_out_of_the_access_log_and_the_audit_table(
    served: tuple[Any, str, str], caplog: pytest.LogCaptureFixture,
) -> None:
    app, admin, analyst = served
    app.wsgi_app = access_log_middleware(app.wsgi_app, "truncated")
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    client = app.test_client()
    client.get(f"/v1/metrics?token={admin}", headers=bearer(admin))
    client.get(f"/v1/metrics/{analyst}/estimates", headers=bearer(admin))
    client.get("/v1/health?access_token=sekrit")
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert admin not in logged and analyst not in logged and "sekrit" not in logged, logged
    assert "[redacted]" in logged
    entries = app.extensions["onesided"].storage.audit_entries()
    targets = " ".join(e.target or "" for e in entries)
    assert entries and admin not in targets and analyst not in targets and "[redacted]" in targets, targets


def test_authentication_comes_before_query_validation(served: tuple[Any, str, str]) -> None:
    app, _admin, _analyst = served
    answer = app.test_client().get("/v1/metrics/places/certificates?threshold=-5&nonsense=1")
    assert answer.status_code == 401, answer.get_json()  # a stranger learns no parameter limits


def test_an_authenticated_request_refused_by_query_validation_is_audited(served: tuple[Any, str, str]) -> None:
    app, _admin, analyst = served
    storage = app.extensions["onesided"].storage
    before = len(storage.audit_entries())
    answer = app.test_client().get("/v1/metrics/places/certificates?nonsense=1", headers=bearer(analyst))
    assert answer.status_code == 400
    entries = storage.audit_entries()
    assert len(entries) == before + 1  # exactly one row, not one per hook
    assert entries[-1].actor == "analyst" and entries[-1].status == 400


def test_every_log_line_redacts_tokens() -> None:
    token = "ons_" + "A" * 43
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "no metric named %r", (token,), None)
    for formatter in (TextFormatter(), JsonFormatter()):
        line = formatter.format(record)
        assert token not in line and "[redacted]" in line, line
