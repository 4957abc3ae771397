"""Request helpers shared by the blueprints."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
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


MAX_NUMBER_DIGITS = 40  # longer JSON numbers are refused before any conversion (no field needs more)


class _TooLong:
    """A JSON number too long to convert, kept in place so that its field can be named."""

    def __init__(self, text: str) -> None:
        self.digits = len(text)


def _bounded_number(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        if len(text) > MAX_NUMBER_DIGITS:
            return _TooLong(text)
        value = convert(text)
        return _TooLong(text) if isinstance(value, float) and not math.isfinite(value) else value
    return parse


def _too_long_path(value: Any, path: str = "") -> tuple[str, _TooLong] | None:
    """The path (``a.b[2]``) of the first number :func:`_bounded_number` refused, if any."""
    if isinstance(value, _TooLong):
        return path or "body", value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _too_long_path(item, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key)
        if found is not None:
            return found
    return None


def parse_json(raw: bytes) -> Any:
    """Parse a request body: no NaN/Infinity, no number over :data:`MAX_NUMBER_DIGITS` characters or out of range.

    A 4,300-digit integer costs a quadratic conversion and cannot become a
    float (a 500 before); it is refused as text, naming its field.

    Raises:
        ParameterError: not JSON (field ``body``) or a number too long (its field).
    """
    try:
        body = json.loads(raw, parse_constant=_no_constants, parse_int=_bounded_number(int),
                          parse_float=_bounded_number(float))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ParameterError("body", f"is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ParameterError("body", "is nested too deeply") from exc
    found = _too_long_path(body)
    if found is not None:
        path, number = found
        raise ParameterError(path, f"is a number of {number.digits} characters or out of range; numbers here have "
                                   f"at most {MAX_NUMBER_DIGITS}")
    return body


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
        ParameterError: the body is not valid UTF-8 JSON (field ``body``, 400), has
            a number too long to convert (its field, 400), or breaks the schema ``GET /v1/openapi.json`` gives it (the field, 400).
    """
    if request.mimetype != JSON_MIMETYPE:
        raise UnsupportedMediaType(f"send the body as {JSON_MIMETYPE}, not {request.mimetype or 'nothing'}")
    g.json_body = body = parse_json(body_bytes())  # the audit log's detail
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
