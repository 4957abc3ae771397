"""Joint distributions of pair metrics and strings discovered by prefix metrics (docs/decoding.md 8-9).

* ``GET /v1/metrics/<name>/association?values_a=a,b&values_b=x,y&window=&round=&method=``:
  the joint of a pair metric (its values are :func:`~aggregator.analysis.association.pair_value`
  strings) over ``values_a x values_b``: shares on the simplex, per-cell unbiased counts with
  standard errors, the marginals.
* ``GET /v1/metrics/<name>/discovered?window=&round=&min_share=&alphabet=&max_prefixes=&alpha=``:
  the frequent strings of a prefix metric, each with the candidate decoder's count and
  standard error.
* ``POST`` on both paths takes the same fields as a JSON object.

Window and round default as for estimates; below ``min_batch_size`` the answer is 200 with
``reason`` and no numbers. Trusted metrics are for admins (403, field ``metric``).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request

from aggregator.analysis.association import JOINT_METHODS, MAX_CELLS
from aggregator.analysis.discovery import MAX_PREFIXES
from aggregator.server.api.common import json_body
from aggregator.server.auth import ANALYST, current_token, require_role
from aggregator.server.context import app_state
from aggregator.server.errors import Forbidden
from aggregator.server.services.discovery import (
    ASSOCIATION_FIELDS,
    DISCOVERY_FIELDS,
    AssociationRequest,
    DiscoveryRequest,
    PairService,
)
from aggregator.server.storage import MetricRecord
from protocol.errors import ParameterError

blueprint = Blueprint("association", __name__)
_LISTS = ("values_a", "values_b")


def _fields(allowed: tuple[str, ...]) -> dict[str, Any]:
    """The query string (lists split on commas) or the JSON body; unknown names refused."""
    if request.method == "POST":
        body = json_body()
        if not isinstance(body, dict):
            raise ParameterError("body", "must be a JSON object")
        fields = body
    else:
        fields = {}
        for name in request.args:
            values = request.args.getlist(name)
            if name in _LISTS:
                fields[name] = [piece for value in values for piece in value.split(",") if piece]
            elif len(values) > 1:
                raise ParameterError(name, "is given more than once")
            else:
                fields[name] = values[0]
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise ParameterError(unknown[0], f"is not a known field (known: {', '.join(allowed)})")
    return fields


def _metric(name: str) -> MetricRecord:
    metric = app_state().storage.require_metric(name)
    if not metric.params.local_mechanism.randomized and current_token().role != "admin":
        raise Forbidden("metric", f"{name!r} is trusted: its exact counts reach analysts only as central releases")
    return metric


def _service() -> PairService:
    state = app_state()
    return PairService(state.storage, now=state.now())


@blueprint.route("/v1/metrics/<name>/association", methods=["GET", "POST"])
@require_role(*ANALYST)
def association(name: str) -> Any:
    request_ = AssociationRequest.from_mapping(_fields(ASSOCIATION_FIELDS))
    return _service().association(_metric(name), request_)


@blueprint.route("/v1/metrics/<name>/discovered", methods=["GET", "POST"])
@require_role(*ANALYST)
def discovered(name: str) -> Any:
    request_ = DiscoveryRequest.from_mapping(_fields(DISCOVERY_FIELDS))
    return _service().discovered(_metric(name), request_)


# ==========================================================================
# OpenAPI
# ==========================================================================

_JSON = "application/json"
_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_ERRORS = {code: {"$ref": f"#/components/responses/{ref}"} for code, ref in
           (("400", "BadRequest"), ("401", "Unauthorized"), ("403", "Forbidden"), ("404", "NotFound"))}


def _query(name: str, schema: dict[str, Any], description: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


_INDEX = {"type": "integer", "minimum": 0, "maximum": 2**62 - 1}
# a query list is also split on commas: its items cannot hold one
_VALUES_BODY = {"type": "array", "minItems": 1, "maxItems": MAX_CELLS, "items": {"type": "string", "minLength": 1}}
_VALUES = {**_VALUES_BODY, "items": {"type": "string", "pattern": "^[^,]+$"}}
_COLLECTION = [
    _query("window", _INDEX, "window start; default: the latest decodable window"),
    _query("round", _INDEX, "0 or a round id; default as for estimates"),
]
_ASSOCIATION_QUERY = [
    _query("values_a", _VALUES, "candidates of the first variable", required=True),
    _query("values_b", _VALUES, "candidates of the second variable", required=True),
    _query("method", {"enum": list(JOINT_METHODS)}, "how the joint is put on the simplex (default projection)"),
]
_DISCOVERY_QUERY = [
    _query("min_share", {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
           "report strings at least this frequent (default 0.01)"),
    _query("alphabet", {"type": "string", "pattern": "^[\\x01-\\x7f]+$"},
           "distinct ASCII symbols tried at each position (default a-z0-9)"),
    _query("max_prefixes", {"type": "integer", "minimum": 1, "maximum": MAX_PREFIXES},
           "prefixes kept per level (default 64)"),
    _query("alpha", {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
           "family level of the tests (default 0.05)"),
]
_CHECKED_IN_CODE = {
    "association": ("values_b: at most {cells} cells (values_a x values_b); the metric must be a pair metric "
                    "(field metric); window a multiple of its time_precision", ["values_b", "metric", "window"]),
    "discovered": ("alphabet: no symbol twice; the metric must be a prefix metric (field metric); window a "
                   "multiple of its time_precision", ["alphabet", "metric", "window"]),
}


def _body_schema(query: list[dict[str, Any]]) -> dict[str, Any]:
    """The POST body: the GET's query parameters as one JSON object (lists as arrays)."""
    required = [q["name"] for q in query if q["required"]]
    return {"type": "object", "additionalProperties": False, "required": required,
            "properties": {q["name"]: _VALUES_BODY if q["schema"] is _VALUES else q["schema"] for q in query}}


def _operation(kind: str, method: str, query: list[dict[str, Any]]) -> dict[str, Any]:
    schema = {"type": "object", "description": "the header (metric, window, round, level, reports, reason) "
              "and, unless reason is set, the result"}
    operation: dict[str, Any] = {
        "summary": {"association": "Joint distribution of a pair metric's two variables",
                    "discovered": "Frequent strings of a prefix metric, found without candidates"}[kind],
        "operationId": f"{method}{kind.title()}",
        "description": "Checked in code, across fields or against the stored metric: "
                       + _CHECKED_IN_CODE[kind][0].format(cells=MAX_CELLS) + ".",
        "x-roles": list(ANALYST),
        "x-state-dependent": ["403"],
        "x-checked-in-code": _CHECKED_IN_CODE[kind][1],
        "parameters": [_NAME] if method == "post" else [_NAME, *_COLLECTION, *query],
        "responses": {"200": {"description": "the result, or a reason and no numbers",
                              "content": {_JSON: {"schema": schema}}}, **_ERRORS},
    }
    if method == "post":
        body = _body_schema([*_COLLECTION, *query])
        operation["requestBody"] = {"required": True, "content": {_JSON: {"schema": body}}}
    return operation


OPENAPI_PATHS: dict[str, Any] = {
    "/v1/metrics/{name}/association": {
        "get": _operation("association", "get", _ASSOCIATION_QUERY),
        "post": _operation("association", "post", _ASSOCIATION_QUERY),
    },
    "/v1/metrics/{name}/discovered": {
        "get": _operation("discovered", "get", _DISCOVERY_QUERY),
        "post": _operation("discovered", "post", _DISCOVERY_QUERY),
    },
}
