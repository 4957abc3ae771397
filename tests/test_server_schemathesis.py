"""Property-based API run: schemathesis generates requests from ``GET /v1/openapi.json``.

Every operation, as admin, as analyst and anonymously, with at most
``MAX_EXAMPLES`` generated cases each (seeded: the run is reproducible). Each
answer must not be a 5xx, must have a status the document lists for the
operation, a documented content type and a body that matches the documented
schema. The app runs in-process (WSGI) on a SQLite database with one metric
that has reports and one open round, so the read paths have something to show.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from aggsupport import make_params, make_reports
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from aggregator import create_app
from aggregator.server.ingest import Ingestor
from protocol.crypto import AggregatorKeys

MAX_EXAMPLES = 20
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder: Path = tmp_path_factory.mktemp("schemathesis")
    keys = AggregatorKeys.generate()
    app = create_app({"data_dir": folder, "decode_processes": 0, "max_decode_cells": 200_000}, keys=keys)
    state = app.extensions["onesided"]
    params = make_params(level=1.0)
    state.storage.put_metric(params)
    batch = make_reports(params, keys.seal_public_raw, 120, seed=5)
    Ingestor(storage=state.storage, opener=state.opener, settings=state.settings).ingest(batch.envelopes, now=batch.envelopes[0].window + 10)
    tokens = {
        "admin": state.storage.create_token(role="admin", name="fuzz-admin")[1],
        "analyst": state.storage.create_token(role="analyst", name="fuzz-analyst")[1],
    }
    yield {"app": app, "tokens": tokens}
    state.storage.close()


@pytest.fixture(scope="module")
def api_schema(world: dict[str, Any]) -> Any:
    return schemathesis.openapi.from_wsgi("/v1/openapi.json", world["app"])


schema = schemathesis.pytest.from_fixture("api_schema")


HYPOTHESIS = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
                      suppress_health_check=list(HealthCheck), database=None)


def call_as(role: str, case: Any, world: dict[str, Any]) -> None:
    headers = {} if role == "anonymous" else {"Authorization": f"Bearer {world['tokens'][role]}"}
    case.call_and_validate(headers=headers, checks=CHECKS)


@pytest.mark.slow
@schema.parametrize()
@HYPOTHESIS
def test_the_api_answers_an_admin_as_documented(case: Any, world: dict[str, Any]) -> None:
    call_as("admin", case, world)


@pytest.mark.slow
@schema.parametrize()
@HYPOTHESIS
def test_the_api_answers_an_analyst_as_documented(case: Any, world: dict[str, Any]) -> None:
    call_as("analyst", case, world)


@pytest.mark.slow
@schema.parametrize()
@HYPOTHESIS
def test_the_api_answers_anyone_as_documented(case: Any, world: dict[str, Any]) -> None:
    call_as("anonymous", case, world)
