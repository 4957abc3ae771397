"""Request bodies checked against the served OpenAPI document: the document is the first validator.

:func:`check_body` looks up the JSON schema that ``GET /v1/openapi.json``
gives the current operation's request body and refuses a body that breaks
it (400 naming the field), before the view's own checks. So a limit written
in an operation's schema (a bound, an enum, a required or unknown field) is
enforced by that one declaration; the views keep only what JSON Schema
cannot say (rules across fields and against stored state), listed in the
operation's ``x-checked-in-code``.

The subset of JSON Schema understood is :data:`KEYWORDS` (annotations such
as ``description`` aside); ``tests/test_server_spec_both_ways.py`` checks
that every request schema of the document uses no other. One departure, as
the document says: an integer is a JSON number without a fraction (``1``,
not ``1.0``).

>>> schema = {"type": "object", "required": ["n"], "additionalProperties": False,
...           "properties": {"n": {"type": "integer", "minimum": 1}}}
>>> check({"n": 2}, schema, "body", {})
>>> check({"n": 0}, schema, "body", {})
Traceback (most recent call last):
...
protocol.errors.ParameterError: n must be >= 1, got 0
>>> check({"m": 1, "n": 1}, schema, "body", {})
Traceback (most recent call last):
...
protocol.errors.ParameterError: m is not a known field
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from flask import current_app, request

from aggregator.server.api.spec import DOCUMENT_KEY
from protocol.errors import ParameterError

KEYWORDS = frozenset({
    "$ref", "oneOf", "type", "const", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minLength", "maxLength", "pattern", "required", "properties", "additionalProperties", "minProperties",
    "items", "minItems", "maxItems", "uniqueItems",
})
ANNOTATIONS = frozenset({"description", "default", "format", "title", "examples"})
_CONVERTER = re.compile(r"<(?:[a-z_]+:)?([A-Za-z_][A-Za-z0-9_]*)>")
_NAMES = {"object": "an object", "array": "a list", "string": "a string", "integer": "an integer",
          "number": "a number", "boolean": "true or false", "null": "null"}
_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def flask_path(rule: str) -> str:
    """A werkzeug rule in OpenAPI form: ``<int:id>`` becomes ``{id}``.

    >>> flask_path("/v1/rounds/<id:round_id>/close")
    '/v1/rounds/{round_id}/close'
    """
    return _CONVERTER.sub(r"{\1}", rule)


def body_schema(document: Mapping[str, Any], path: str, method: str) -> dict[str, Any] | None:
    """The JSON schema of the request body of ``method path`` in ``document``, if it documents one."""
    operation = document.get("paths", {}).get(path, {}).get(method, {})
    content = operation.get("requestBody", {}).get("content", {})
    schema: dict[str, Any] | None = content.get("application/json", {}).get("schema")
    return schema


def check_body(body: Any) -> None:
    """Refuse ``body`` (the current request's parsed JSON) where it breaks the operation's documented schema.

    Raises:
        ParameterError: naming the first field that breaks it (``body`` for the whole).
    """
    document = current_app.extensions.get(DOCUMENT_KEY)
    if document is None or request.url_rule is None:
        return
    schema = body_schema(document, flask_path(request.url_rule.rule), request.method.lower())
    if schema is not None:
        check(body, schema, "body", document.get("components", {}).get("schemas", {}))


def check_query(name: str, texts: list[str], schema: Mapping[str, Any]) -> None:
    """Refuse query values of parameter ``name`` that break its ``schema`` (empty values count as absent).

    Text becomes the schema's type first: ``integer`` digits, ``number`` a
    decimal; an ``array`` is the values given, each split on commas.

    >>> check_query("window", ["86400"], {"type": "integer", "minimum": 0})
    >>> check_query("window", ["-1"], {"type": "integer", "minimum": 0})
    Traceback (most recent call last):
    ...
    protocol.errors.ParameterError: window must be >= 0, got -1
    """
    texts = [text for text in texts if text]
    if not texts:
        return
    if schema.get("type") == "array":
        pieces = [piece for text in texts for piece in text.split(",") if piece]
        check([_typed(piece, schema.get("items", {})) for piece in pieces], schema, name, {})
        return
    for text in texts:
        check(_typed(text, schema), schema, name, {})


_INTEGER_TEXT = re.compile(r"-?[0-9]+")


def _typed(text: str, schema: Mapping[str, Any]) -> Any:
    """Query text as the JSON value ``schema`` expects; left text where it is not one (the check then says so)."""
    kinds = schema.get("type")
    if kinds in ("integer", "number") and _INTEGER_TEXT.fullmatch(text) and len(text) <= 40:
        return int(text)
    if kinds == "number":
        try:
            number = float(text)
        except ValueError:
            return text
        return number if math.isfinite(number) else text
    return text


def _child(field: str, name: str | int) -> str:
    if isinstance(name, int):
        return f"{field}[{name}]"
    return name if field == "body" else f"{field}.{name}"


def _show(value: Any) -> str:
    return json.dumps(value)[:80]


def check(value: Any, schema: Mapping[str, Any], field: str, definitions: Mapping[str, Any]) -> None:
    """Refuse ``value`` where it breaks ``schema`` (``$ref`` resolved in ``definitions``); errors name ``field``."""
    if "$ref" in schema:
        check(value, definitions[schema["$ref"].rsplit("/", 1)[1]], field, definitions)
    if "oneOf" in schema:
        _one_of(value, schema["oneOf"], field, definitions)
    _check_kind(value, schema, field)
    if isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(value, schema, field)
    elif isinstance(value, str):
        _check_string(value, schema, field)
    elif isinstance(value, list):
        _check_array(value, schema, field, definitions)
    elif isinstance(value, dict):
        _check_object(value, schema, field, definitions)


def _one_of(value: Any, options: list[Mapping[str, Any]], field: str, definitions: Mapping[str, Any]) -> None:
    errors: list[ParameterError] = []
    for option in options:
        try:
            check(value, option, field, definitions)
        except ParameterError as exc:
            errors.append(exc)
    matched = len(options) - len(errors)
    if matched == 1:
        return
    if matched == 0 and len(errors) == 1:
        raise errors[0]
    if matched == 0:
        meant = [i for i, option in enumerate(options) if _discriminated(value, option, definitions)]
        if len(meant) == 1:  # e.g. the encoding whose "kind" the value names
            raise errors[meant[0]]
        tags = _tags(options, definitions)
        if tags is not None and isinstance(value, dict) and value.get(tags[0]) not in tags[1]:
            shown = ", ".join(map(_show, tags[1]))
            raise ParameterError(_child(field, tags[0]), f"must be one of {shown}, got {_show(value.get(tags[0]))}")
        # else the option that got furthest (its error is deepest) says most about what was meant
        raise max(errors, key=lambda exc: exc.field.count(".") + exc.field.count("["))
    raise ParameterError(field, "matches more than one of its allowed forms")


def _discriminated(value: Any, option: Mapping[str, Any], definitions: Mapping[str, Any]) -> bool:
    """``option`` has ``const`` properties and ``value`` (an object) holds every one of them."""
    if "$ref" in option:
        option = definitions[option["$ref"].rsplit("/", 1)[1]]
    consts = {name: sub["const"] for name, sub in option.get("properties", {}).items() if "const" in sub}
    return bool(consts) and isinstance(value, dict) and all(value.get(k) == v for k, v in consts.items())


def _tags(options: list[Mapping[str, Any]], definitions: Mapping[str, Any]) -> tuple[str, list[Any]] | None:
    """``(name, values)`` when every option fixes property ``name`` with a ``const`` (a tagged union)."""
    resolved = [definitions[o["$ref"].rsplit("/", 1)[1]] if "$ref" in o else o for o in options]
    for name in resolved[0].get("properties", {}) if resolved else ():
        values = [option.get("properties", {}).get(name, {}).get("const") for option in resolved]
        if all("const" in option.get("properties", {}).get(name, {}) for option in resolved):
            return name, values
    return None


def _check_kind(value: Any, schema: Mapping[str, Any], field: str) -> None:
    kinds = schema.get("type")
    if kinds is not None:
        allowed = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_TYPES[kind](value) for kind in allowed):
            raise ParameterError(field, f"must be {' or '.join(_NAMES[kind] for kind in allowed)}, got {_show(value)}")
    if "const" in schema and value != schema["const"]:
        raise ParameterError(field, f"must be {_show(schema['const'])}, got {_show(value)}")
    if "enum" in schema and value not in schema["enum"]:
        raise ParameterError(field, f"must be one of {', '.join(map(_show, schema['enum']))}, got {_show(value)}")


def _check_number(value: float, schema: Mapping[str, Any], field: str) -> None:
    if not math.isfinite(value):
        raise ParameterError(field, f"must be finite, got {value}")
    if "minimum" in schema and not value >= schema["minimum"]:
        raise ParameterError(field, f"must be >= {schema['minimum']}, got {value}")
    if "maximum" in schema and not value <= schema["maximum"]:
        raise ParameterError(field, f"must be <= {schema['maximum']}, got {value}")
    if "exclusiveMinimum" in schema and not value > schema["exclusiveMinimum"]:
        raise ParameterError(field, f"must be > {schema['exclusiveMinimum']}, got {value}")
    if "exclusiveMaximum" in schema and not value < schema["exclusiveMaximum"]:
        raise ParameterError(field, f"must be < {schema['exclusiveMaximum']}, got {value}")


def _check_string(value: str, schema: Mapping[str, Any], field: str) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        raise ParameterError(field, f"must have at least {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        raise ParameterError(field, f"must have at most {schema['maxLength']} characters")
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        raise ParameterError(field, f"must match {schema['pattern']}, got {_show(value)}")


def _check_array(value: list[Any], schema: Mapping[str, Any], field: str, definitions: Mapping[str, Any]) -> None:
    if "minItems" in schema and len(value) < schema["minItems"]:
        raise ParameterError(field, f"must have at least {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        raise ParameterError(field, f"must have at most {schema['maxItems']} items")
    if schema.get("uniqueItems"):
        seen: set[str] = set()
        for i, item in enumerate(value):
            key = json.dumps(item, sort_keys=True)
            if key in seen:
                raise ParameterError(_child(field, i), f"repeats an earlier item, {_show(item)}")
            seen.add(key)
    if "items" in schema:
        for i, item in enumerate(value):
            check(item, schema["items"], _child(field, i), definitions)


def _check_object(
    value: dict[str, Any], schema: Mapping[str, Any], field: str, definitions: Mapping[str, Any]
) -> None:
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        raise ParameterError(field, f"must have at least {schema['minProperties']} fields")
    for name in schema.get("required", ()):
        if name not in value:
            raise ParameterError(_child(field, name), "is required")
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for name in sorted(value):
        if name in properties:
            check(value[name], properties[name], _child(field, name), definitions)
        elif extra is False:
            raise ParameterError(_child(field, name), "is not a known field")
        elif isinstance(extra, Mapping):
            check(value[name], extra, _child(field, name), definitions)
