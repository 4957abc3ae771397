"""Decoded estimates and one-sided certificates for analysts (docs/decoding.md 7).

* ``GET /v1/metrics/<name>/estimates?window=&round=&candidates=a,b&alpha=&correction=&format=``:
  per-candidate counts with standard errors, intervals and detections.
* ``GET /v1/metrics/<name>/certificates?threshold=&alpha=&window=&round=&candidates=``:
  each candidate ``safe`` (certified ``count <= threshold``) or ``obscure``,
  with its one-sided ``upper_bound``; symmetric metrics are refused
  (400, field ``mode``).
* ``POST`` on both paths takes the same fields as a JSON object, for
  candidate lists too long for a URL or holding commas.

``candidates`` is comma-separated and may be repeated; it is required for
Bloom and prefix metrics and defaults to the whole domain of a direct metric.
A prefix metric's candidates are decoded on the cohorts that hold them whole
(shorter than the longest prefix, else 400 ``candidates``; discovery itself is
``/discovered``; docs/decoding.md 8). Window
and round default as :mod:`aggregator.server.services.estimates` says. Below the metric's
``min_batch_size`` the answer is 200 with ``rows`` ``null`` and a
``reason``: never a number.
``format=csv`` answers the rows as ``text/csv``; the header fields then
travel as ``X-Onesided-*`` response headers.
``display=nonnegative`` (estimates only) answers ``max(0, x)`` of each
estimate, its bounds and its proportion, for showing to people; the default,
``display=unbiased``, keeps the unbiased values, which sums and averages
need. The answer's ``display`` field says which it holds.

Exact counts of a *trusted* metric go to analysts only through central
releases (``/v1/releases``: noise and a budget); here they are for admins
(403 ``forbidden``, field ``metric``, for an analyst token).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flask import Blueprint, Response, request

from aggregator.analysis.tables import (
    CERTIFICATE_COLUMNS,
    ESTIMATE_COLUMNS,
    certificates_csv,
    display_rows,
    estimates_csv,
)
from aggregator.server.api.common import json_body
from aggregator.server.auth import ANALYST, current_token, require_role
from aggregator.server.context import app_state
from aggregator.server.errors import Forbidden
from aggregator.server.services.estimates import (
    CERTIFICATE_FIELDS,
    ESTIMATE_FIELDS,
    MAX_CANDIDATES,
    MAX_INTEGER,
    CertifyRequest,
    DecodeRequest,
    DecodingService,
)
from aggregator.server.storage import MetricRecord
from protocol.errors import ParameterError

blueprint = Blueprint("estimates", __name__)

FORMATS = ("json", "csv")
DISPLAYS = ("unbiased", "nonnegative")
CSV_HEADERS = ("metric", "window", "round", "level", "reports", "reason", "display")


def _service() -> DecodingService:
    state = app_state()
    return DecodingService(
        state.storage, now=state.now(), max_cells=state.settings.max_decode_cells, offloader=state.offloader
    )


def _query_fields(allowed: Sequence[str]) -> dict[str, Any]:
    """The query string as a mapping; ``candidates`` split on commas; unknown names refused."""
    args = request.args
    fields: dict[str, Any] = {}
    for name in args:
        values = args.getlist(name)
        if name == "candidates":
            fields[name] = [piece for value in values for piece in value.split(",") if piece]
        elif name == "format":
            continue
        elif name not in allowed:
            raise ParameterError(name, f"is not a known parameter (known: {', '.join(allowed)}, format)")
        elif len(values) > 1:
            raise ParameterError(name, "is given more than once")
        else:
            fields[name] = values[0] or None
    return fields


def _request_fields(allowed: Sequence[str]) -> tuple[dict[str, Any], str]:
    """The request's fields (query string for GET, JSON object for POST) and the answer format."""
    if request.method == "POST":
        body = json_body()
        if not isinstance(body, dict):
            raise ParameterError("body", "must be a JSON object")
        answer_format = body.pop("format", None) or request.args.get("format") or "json"
        fields = body
    else:
        fields = _query_fields(allowed)
        answer_format = request.args.get("format") or "json"
    if answer_format not in FORMATS:
        raise ParameterError("format", f"must be one of {', '.join(FORMATS)}, got {answer_format!r}")
    return fields, answer_format


def _metric_for_caller(name: str) -> MetricRecord:
    """The metric; an analyst may not read a trusted metric's exact counts here."""
    metric = app_state().storage.require_metric(name)
    if not metric.params.local_mechanism.randomized and current_token().role != "admin":
        raise Forbidden(
            "metric",
            f"{name!r} is trusted: its exact counts reach analysts only as central releases "
            "(POST /v1/releases, with noise and a budget)",
        )
    return metric


def _answer(body: dict[str, Any], answer_format: str, to_csv: Callable[[dict[str, Any]], str]) -> Any:
    if answer_format == "json":
        return body
    headers = {f"X-Onesided-{key.title()}": str(body[key]) for key in CSV_HEADERS if body.get(key) is not None}
    return Response(to_csv(body), mimetype="text/csv", headers=headers)


@blueprint.route("/v1/metrics/<name>/estimates", methods=["GET", "POST"])
@require_role(*ANALYST)
def estimates(name: str) -> Any:
    fields, answer_format = _request_fields((*ESTIMATE_FIELDS, "display"))
    display = fields.pop("display", None) or "unbiased"
    if display not in DISPLAYS:
        raise ParameterError("display", f"must be one of {', '.join(DISPLAYS)}, got {display!r}")
    body = _service().estimates(_metric_for_caller(name), DecodeRequest.from_mapping(fields))
    body = {**body, "display": display}  # a copy: the service's answer may be cached
    if display == "nonnegative" and body["rows"] is not None:
        body["rows"] = display_rows(body["rows"])
    return _answer(body, answer_format, estimates_csv)


@blueprint.route("/v1/metrics/<name>/certificates", methods=["GET", "POST"])
@require_role(*ANALYST)
def certificates(name: str) -> Any:
    fields, answer_format = _request_fields(CERTIFICATE_FIELDS)
    body = _service().certificates(_metric_for_caller(name), CertifyRequest.from_mapping(fields))
    return _answer(body, answer_format, certificates_csv)


# ==========================================================================
# OpenAPI
# ==========================================================================

_JSON = "application/json"
_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}


def _query(name: str, schema: dict[str, Any], description: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


_COLLECTION_QUERY = [
    _query("window", {"type": "integer", "minimum": 0, "exclusiveMaximum": MAX_INTEGER},
           "window start; default: the latest window with a decodable collection"),
    _query("round", {"type": "integer", "minimum": 0, "exclusiveMaximum": MAX_INTEGER},
           "0 (base collection) or a round id; default: the latest finished round with enough reports, else 0"),
    _query("candidates", {"type": "array", "minItems": 1, "maxItems": MAX_CANDIDATES,
                          "items": {"type": "string", "pattern": "^[^,]+$"}},
           "comma-separated or repeated; required for Bloom and prefix metrics (a prefix metric's: shorter than "
           "its longest prefix, decoded on the cohorts holding them whole), default the whole domain of a direct one"),
    _query("format", {"enum": list(FORMATS)}, "json (default) or csv"),
]
_ERRORS = {
    "400": {"$ref": "#/components/responses/BadRequest"},
    "401": {"$ref": "#/components/responses/Unauthorized"},
    "403": {"$ref": "#/components/responses/Forbidden"},
    "404": {"$ref": "#/components/responses/NotFound"},
    "422": {"description": "too_costly: candidates x (cohort, bit) rows over the setting max_decode_cells",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
}


def _operation(kind: str, method: str, extra: list[dict[str, Any]], columns: Sequence[str]) -> dict[str, Any]:
    schema = f"#/components/schemas/{kind.title()}"
    operation: dict[str, Any] = {
        "summary": {
            "estimates": "Decoded counts of candidates, with standard errors and detections",
            "certificates": "One-sided certificates: each candidate safe (count <= threshold) or obscure",
        }[kind] + (" (fields in a JSON body)" if method == "post" else ""),
        "operationId": f"{method}{kind.title()}",
        "description": "Checked in code, against the stored metric: window is a multiple of its "
                       "time_precision; candidates are required for Bloom and prefix metrics and must be in a "
                       "direct metric's domain (or decodable for a prefix one); too many rows is 422.",
        "x-roles": list(ANALYST),
        "x-state-dependent": ["403", "422"],
        "x-checked-in-code": ["window", "candidates"],
        "parameters": [_NAME] if method == "post" else [_NAME, *_COLLECTION_QUERY, *extra],
        "responses": {
            "200": {
                "description": "the decoding, or a reason and no numbers below min_batch_size",
                "content": {
                    _JSON: {"schema": {"$ref": schema}},
                    "text/csv": {"schema": {"type": "string", "description": "header: " + ",".join(columns)}},
                },
            },
            **_ERRORS,
        },
    }
    if method == "post":
        request_schema = {"$ref": f"#/components/schemas/{kind.title()}Request"}
        operation["requestBody"] = {"required": True, "content": {_JSON: {"schema": request_schema}}}
    return operation


_OPEN_PROBABILITY = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}
_CERTIFICATE_ALPHA = {"type": "number", "minimum": 0, "exclusiveMaximum": 1}
_ESTIMATE_QUERY = [
    _query("alpha", _OPEN_PROBABILITY, "family level (default 0.05)"),
    _query("correction", {"enum": ["bonferroni", "bh"]}, "multiple-testing correction (default bonferroni)"),
    _query("confidence", _OPEN_PROBABILITY, "level of the intervals (default 0.95)"),
    _query("method", {"enum": ["auto", "ols", "nnls", "lasso"]}, "Bloom fit (default auto)"),
    _query("display", {"enum": list(DISPLAYS)},
           "unbiased (default): the unbiased estimates, some negative; nonnegative: max(0, x) of each estimate, "
           "its bounds and proportion, for showing to people (biased upwards: not for sums or averages)"),
]
_CERTIFICATE_QUERY = [
    _query("threshold", {"type": "integer", "minimum": 0, "exclusiveMaximum": MAX_INTEGER}, "safe means count <= threshold", required=True),
    _query("alpha", _CERTIFICATE_ALPHA,
           "P(safe and count > threshold) <= alpha per candidate; 0: never wrong", required=True),
]

OPENAPI_PATHS: dict[str, Any] = {
    "/v1/metrics/{name}/estimates": {
        "get": _operation("estimates", "get", _ESTIMATE_QUERY, ESTIMATE_COLUMNS),
        "post": _operation("estimates", "post", [], ESTIMATE_COLUMNS),
    },
    "/v1/metrics/{name}/certificates": {
        "get": _operation("certificates", "get", _CERTIFICATE_QUERY, CERTIFICATE_COLUMNS),
        "post": _operation("certificates", "post", [], CERTIFICATE_COLUMNS),
    },
}

_HEADER_PROPERTIES: dict[str, Any] = {
    "metric": {"type": "string"},
    "mode": {"enum": ["symmetric", "asymmetric", "trusted"]},
    "encoding": {"enum": ["bloom", "direct"]},
    "window": {"type": ["integer", "null"], "description": "null: the metric has no reports"},
    "round": {"type": "integer"},
    "level": {"type": ["number", "null"], "description": "the level decoded with; null: trusted (exact)"},
    "reports": {"type": "integer"},
    "min_batch_size": {"type": "integer"},
    "reason": {"type": ["string", "null"], "description": "why no number is released; null when decoded"},
    "candidates": {"type": "integer", "description": "how many candidates were asked for"},
}
_COLLECTION_BODY: dict[str, Any] = {
    "window": {"type": ["integer", "null"], "minimum": 0, "exclusiveMaximum": MAX_INTEGER},
    "round": {"type": ["integer", "null"], "minimum": 0, "exclusiveMaximum": MAX_INTEGER},
    "candidates": {"type": ["array", "null"], "minItems": 1, "maxItems": MAX_CANDIDATES, "uniqueItems": True,
                   "items": {"type": "string", "minLength": 1}},
    "format": {"enum": list(FORMATS)},
}
_NUMBER_OR_NULL = {"type": ["number", "null"]}

OPENAPI_SCHEMAS: dict[str, Any] = {
    "Estimates": {
        "type": "object",
        "required": [*_HEADER_PROPERTIES, "rows"],
        "properties": {
            **_HEADER_PROPERTIES,
            "method": {"type": ["string", "null"]},
            "correction": {"enum": ["bonferroni", "bh"]},
            "alpha": {"type": "number"},
            "confidence": {"type": "number"},
            "detected": {"type": ["integer", "null"]},
            "display": {"enum": list(DISPLAYS),
                        "description": "nonnegative: rows hold max(0, x) of estimate, lower, upper, proportion"},
            "rows": {"type": ["array", "null"], "items": {"type": "object", "properties": {
                "candidate": {"type": "string"},
                "estimate": {"type": "number"},
                "std_error": _NUMBER_OR_NULL,
                "lower": _NUMBER_OR_NULL,
                "upper": _NUMBER_OR_NULL,
                "proportion": {"type": "number"},
                "p_value": {"type": "number"},
                "detected": {"type": "boolean"},
                "selected": {"type": "boolean"},
            }}},
        },
    },
    "Certificates": {
        "type": "object",
        "required": [*_HEADER_PROPERTIES, "rows"],
        "properties": {
            **_HEADER_PROPERTIES,
            "threshold": {"type": "integer"},
            "alpha": {"type": "number"},
            "safe": {"type": ["integer", "null"], "description": "how many candidates are certified safe"},
            "rows": {"type": ["array", "null"], "items": {"type": "object", "properties": {
                "candidate": {"type": "string"},
                "upper_bound": {"type": "integer"},
                "safe": {"type": "boolean"},
                "verdict": {"enum": ["safe", "obscure"]},
            }}},
        },
    },
    "EstimatesRequest": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            **_COLLECTION_BODY,
            "alpha": _OPEN_PROBABILITY,
            "correction": {"enum": ["bonferroni", "bh"]},
            "confidence": _OPEN_PROBABILITY,
            "method": {"enum": ["auto", "ols", "nnls", "lasso"]},
            "display": {"enum": list(DISPLAYS)},
        },
    },
    "CertificatesRequest": {
        "type": "object",
        "additionalProperties": False,
        "required": ["threshold", "alpha"],
        "properties": {**_COLLECTION_BODY, "threshold": {"type": "integer", "minimum": 0, "exclusiveMaximum": MAX_INTEGER}, "alpha": _CERTIFICATE_ALPHA},
    },
}
