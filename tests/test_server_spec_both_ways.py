"""The spec is the validator, the invalid way: generated invalid requests are refused.

schemathesis generates requests from ``GET /v1/openapi.json`` in its negative
mode (each request breaks the document somewhere: a wrong type, a value out
of range, a missing or undocumented parameter) and the server must refuse
every one with a 4xx, never accept it and never fail (5xx). Operations that
take no input at all (nothing to break) are left out. Seeded and bounded like
tests/test_server_schemathesis.py, whose world (a metric with reports, an
open round) this reuses. (tests/test_server_schemathesis.py checks the valid
way's answers against the document.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection
from test_server_schemathesis import world  # noqa: F401  (the fixture)

MAX_EXAMPLES = 25
HYPOTHESIS = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
                      suppress_health_check=list(HealthCheck), database=None)


def _takes_input(context: Any) -> bool:
    definition = context.operation.definition.raw
    return bool(definition.get("parameters") or definition.get("requestBody"))



def _schema(world: dict[str, Any], mode: GenerationMode) -> Any:  # noqa: F811
    loaded = schemathesis.openapi.from_wsgi("/v1/openapi.json", world["app"])
    loaded.config.generation.update(modes=[mode])
    return loaded


@pytest.fixture(scope="module")
def negative_schema(world: dict[str, Any]) -> Iterator[Any]:  # noqa: F811
    yield _schema(world, GenerationMode.NEGATIVE)


negative = schemathesis.pytest.from_fixture("negative_schema").include(func=_takes_input)


def _admin(world: dict[str, Any]) -> dict[str, str]:  # noqa: F811
    return {"Authorization": f"Bearer {world['tokens']['admin']}"}


@pytest.mark.slow
@negative.parametrize()
@HYPOTHESIS
def test_invalid_requests_are_refused(case: Any, world: dict[str, Any]) -> None:  # noqa: F811
    case.call_and_validate(headers=_admin(world), checks=[not_a_server_error, negative_data_rejection])
