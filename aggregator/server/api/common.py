"""Request helpers shared by the blueprints."""

from __future__ import annotations

import json
from typing import Any

from flask import Blueprint, g, request
from flask.blueprints import BlueprintSetupState
from werkzeug.exceptions import UnsupportedMediaType
from werkzeug.routing import IntegerConverter

from aggregator.server.api.schema import check_body
from aggregator.server.context import app_state
from aggregator.server.request_body import read_body
from protocol.errors import ParameterError

JSON_MIMETYPE = "application/json"
MAX_ROW_ID = 2**31 - 1  # ids are 32-bit signed integer columns (PostgreSQL): larger ones cannot exist


class RowIdConverter(IntegerConverter):
    """``<id:name>``: a database row id, ``1 .. MAX_ROW_ID``; any other number is no route (404).

    Without it ``/v1/releases/9223372036854775808`` reached the database and
    overflowed its integer type (500).
    """

    def __init__(self, map: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(map, min=1, max=MAX_ROW_ID)


ROW_ID_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": MAX_ROW_ID}


def use_row_ids(blueprint: Blueprint) -> None:
    """Let ``blueprint``'s rules say ``<id:name>`` (call before its first route)."""

    def install(state: BlueprintSetupState) -> None:
        state.app.url_map.converters.setdefault("id", RowIdConverter)

    blueprint.record_once(install)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def body_bytes() -> bytes:
    """The request body (either framing), within ``max_body_bytes`` and ``read_timeout_seconds``.

    Raises:
        RequestEntityTooLarge: over the size limit (413), chunked bodies included.
        RequestTimeout: the body did not arrive in time (408).
    """
    settings = app_state().settings
    return read_body(
        request.environ, request.stream, request.content_length,
        limit=settings.max_body_bytes, deadline_seconds=settings.read_timeout_seconds,
    )


def json_body(*, documented: bool = True) -> Any:
    """The request body parsed as JSON and, if ``documented``, checked against the operation's schema.

    Raises:
        UnsupportedMediaType: the content type is not ``application/json`` (415).
        ParameterError: the body is not valid UTF-8 JSON (field ``body``, 400), or
            breaks the schema ``GET /v1/openapi.json`` gives it (the field, 400).
    """
    if request.mimetype != JSON_MIMETYPE:
        raise UnsupportedMediaType(f"send the body as {JSON_MIMETYPE}, not {request.mimetype or 'nothing'}")
    try:
        g.json_body = body = json.loads(body_bytes(), parse_constant=_no_constants)  # the audit log's detail
    except (UnicodeDecodeError, ValueError) as exc:
        raise ParameterError("body", f"is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ParameterError("body", "is nested too deeply") from exc
    if documented:
        check_body(body)
    return body


def int_arg(name: str, *, minimum: int = 0) -> int | None:
    """An optional integer query argument.

    Raises:
        ParameterError: present but not an integer ``>= minimum`` (field ``name``).
    """
    text = request.args.get(name)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError as exc:
        raise ParameterError(name, f"must be an integer, got {text!r}") from exc
    if value < minimum:
        raise ParameterError(name, f"must be >= {minimum}, got {value}")
    return value
