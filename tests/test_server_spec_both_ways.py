"""The spec is the validator, both ways: generated valid requests are accepted, invalid ones refused.

schemathesis generates requests from ``GET /v1/openapi.json``.

* Positive mode (every request satisfies the document): the server must
  accept it (2xx), or answer one of the 4xx that the operation lists under
  ``x-state-dependent`` (a well-formed request about state that is not there:
  a metric name the generator made up is 404, a round that cannot be opened
  is 409), or a 400 naming a field the operation lists under
  ``x-checked-in-code`` (a rule across fields that JSON Schema cannot say,
  written in the operation's description). Any other refusal is drift: the
  validators are stricter than the document.
* Negative mode (each request breaks the document somewhere: a wrong type, a
  value out of range, a missing or undocumented parameter): the server must
  refuse every one with a 4xx, never accept it and never fail (5xx).

Operations that take no input at all are left out of both. Seeded
(``derandomize``) and bounded like tests/test_server_schemathesis.py, whose
world (a metric with reports, an open round) this reuses; a failure is a
real disagreement, not chance (false-failure rate 0: the runs are
deterministic).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)
from test_server_schemathesis import world  # noqa: F401  (the fixture)

MAX_EXAMPLES = 12
POSITIVE_EXAMPLES = 12
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


@pytest.fixture(scope="module")
def positive_schema(world: dict[str, Any]) -> Iterator[Any]:  # noqa: F811
    yield _schema(world, GenerationMode.POSITIVE)


negative = schemathesis.pytest.from_fixture("negative_schema").include(func=_takes_input)
positive = schemathesis.pytest.from_fixture("positive_schema").include(func=_takes_input)


def _admin(world: dict[str, Any]) -> dict[str, str]:  # noqa: F811
    return {"Authorization": f"Bearer {world['tokens']['admin']}"}


@pytest.mark.slow
@negative.parametrize()
@HYPOTHESIS
def test_invalid_requests_are_refused(case: Any, world: dict[str, Any]) -> None:  # noqa: F811
    case.call_and_validate(headers=_admin(world), checks=[not_a_server_error, negative_data_rejection])


def sent_value(case: Any, field: str) -> Any:
    """The value the request sent for an error's ``field`` (``reports[0].window``: body or query), else None.

    A bare name not at the top is looked for one object down: the encodings
    name their fields without the ``encoding.`` prefix.
    """
    top: Any = case.body if isinstance(case.body, dict) else (case.query or {})
    value = top
    for step in re.findall(r"[^.\[\]]+|\[\d+\]", field):
        try:
            value = value[int(step[1:-1])] if step.startswith("[") else value[step]
        except (KeyError, IndexError, TypeError, ValueError):
            inner = [v[field] for v in top.values() if isinstance(v, dict) and field in v]
            return inner[0] if len(inner) == 1 else None
    return value


def accepted_as_documented(case: Any, response: Any) -> None:
    """2xx, a documented state-dependent 4xx, or a 400 on a documented cross-field rule; nothing else."""
    operation = case.operation.definition.raw
    status = response.status_code
    if 200 <= status < 300 or str(status) in operation.get("x-state-dependent", ()):
        return
    try:
        body = response.json()
    except ValueError:
        body = {}
    raw_field = str(body.get("field", "")) if isinstance(body, dict) else ""
    field = re.sub(r"\[\d+\]", "[]", raw_field)
    checked_in_code = operation.get("x-checked-in-code", ())
    if status == 400 and any(field == name or field.startswith(f"{name}.") for name in checked_in_code):
        return
    if status == 400 and "must be an integer" in str(body.get("detail", "")):
        sent = sent_value(case, raw_field)
        if isinstance(sent, float) and sent.is_integer():
            return  # JSON Schema counts 1.0 as an integer; the document says this API does not
    raise AssertionError(f"{case.operation.label}: a valid request was refused: {status} {response.text[:300]}")


@pytest.mark.slow
@positive.parametrize()
@settings(max_examples=POSITIVE_EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck), database=None)
def test_valid_requests_are_accepted(case: Any, world: dict[str, Any]) -> None:  # noqa: F811
    response = case.call(headers=_admin(world))
    case.validate_response(response, checks=[
        not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
    ])
    accepted_as_documented(case, response)
