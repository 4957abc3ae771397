"""Request helpers shared by the blueprints."""

from __future__ import annotations

import json
from typing import Any

from flask import request
from werkzeug.exceptions import UnsupportedMediaType

from protocol.errors import ParameterError

JSON_MIMETYPE = "application/json"


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_body() -> Any:
    """The request body parsed as JSON.

    Raises:
        UnsupportedMediaType: the content type is not ``application/json`` (415).
        ParameterError: the body is not valid UTF-8 JSON (field ``body``, 400).
    """
    if request.mimetype != JSON_MIMETYPE:
        raise UnsupportedMediaType(f"send the body as {JSON_MIMETYPE}, not {request.mimetype or 'nothing'}")
    try:
        return json.loads(request.get_data(cache=False), parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ParameterError("body", f"is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ParameterError("body", "is nested too deeply") from exc


def int_arg(name: str, *, minimum: int = 0) -> int | None:
    """An optional integer query argument.

    Raises:
        ParameterError: present but not an integer ``>= minimum`` (field ``name``).
    """
    text = request.args.get(name)
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError as exc:
        raise ParameterError(name, f"must be an integer, got {text!r}") from exc
    if value < minimum:
        raise ParameterError(name, f"must be >= {minimum}, got {value}")
    return value
