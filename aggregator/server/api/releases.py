"""Central releases to analysts (docs/central.md 7): create, read, relax, budget.

* ``POST /v1/releases`` (analyst): a release of a trusted direct metric's
  exact per-place counts of one window, 201 with the public view; with
  ``analysts`` (admin only) correlated releases, one per analyst.
* ``GET /v1/releases`` and ``GET /v1/releases/<id>``: an analyst sees its
  own releases only (another's answers 404); an admin sees all.
* ``POST /v1/releases/<id>/relax``: the lazy step to a higher ``epsilon``;
  the budget then counts the release at that level, not the sum.
* ``GET /v1/releases/budget?metric=&window=``: limit, spent, remaining.

Answers never contain exact counts or noise (only ``Release.public_dict``).
Every answer is a multiple of the release's ``grid`` (a power of two; 1 for
the integer mechanisms) and the ``guarantee`` names its neighbour: one
person's report in the window, at most ``max_items`` items.
A passed budget is 409 ``budget_exceeded`` (field ``epsilon``, or
``analysts.<name>``) with ``requested`` and ``remaining``; a lower level
than the current one is 409 ``tightening_refused`` (field ``epsilon``)
with ``current`` and ``requested``. Nothing is stored in either case.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request

from aggregator.server.api.common import ROW_ID_SCHEMA, int_arg, json_body, use_row_ids
from aggregator.server.auth import ANALYST, current_token, require_role
from aggregator.server.context import app_state
from aggregator.server.errors import Forbidden
from aggregator.server.services.releases import (
    MAX_NUMBER,
    MAX_WINDOW,
    ReleaseRequest,
    ReleaseService,
    StoredRelease,
    analyst_budget,
)
from protocol.central import mechanism_names
from protocol.errors import BudgetExceeded, ParameterError, TighteningRefused
from protocol.exact import MAX_RATE

blueprint = Blueprint("releases", __name__)
use_row_ids(blueprint)


def _service() -> ReleaseService:
    return ReleaseService(app_state().storage, budget=analyst_budget())


@blueprint.errorhandler(BudgetExceeded)
def _budget_exceeded(exc: BudgetExceeded) -> tuple[Response, int]:
    body = {"error": exc.code, "field": exc.field, "detail": str(exc),
            "requested": exc.requested, "remaining": exc.remaining}
    return jsonify(body), 409


@blueprint.errorhandler(TighteningRefused)
def _tightening_refused(exc: TighteningRefused) -> tuple[Response, int]:
    body = {"error": exc.code, "field": "epsilon", "detail": f"{exc}; released answers cannot be revoked",
            "current": exc.current, "requested": exc.requested}
    return jsonify(body), 409


def _view(service: ReleaseService, stored: StoredRelease) -> dict[str, Any]:
    body = stored.public_view()
    body["budget"] = service.budget_status(stored.analyst, stored.metric, stored.window)
    return body


@blueprint.post("/v1/releases")
@require_role(*ANALYST)
def create_release() -> tuple[dict[str, Any], int]:
    release_request = ReleaseRequest.from_dict(json_body())
    service = _service()
    made = service.create(release_request, caller=current_token())
    if release_request.analysts is None:
        return _view(service, made[0]), 201
    return {"releases": [_view(service, r) for r in made]}, 201


def _analyst_arg() -> str:
    """``?analyst=`` (admins: anyone; analysts: themselves only), default the caller."""
    caller = current_token()
    name = request.args.get("analyst") or caller.name
    if name != caller.name and caller.role != "admin":
        raise Forbidden("analyst", "an analyst may only read its own releases and budget")
    return name


@blueprint.get("/v1/releases")
@require_role(*ANALYST)
def list_releases() -> dict[str, Any]:
    everyone = current_token().role == "admin" and not request.args.get("analyst")
    analyst = None if everyone else _analyst_arg()
    found = _service().releases_of(analyst, request.args.get("metric") or None, int_arg("window"))
    return {"releases": [r.public_view() for r in found]}


@blueprint.get("/v1/releases/budget")
@require_role(*ANALYST)
def get_budget() -> dict[str, Any]:
    metric = request.args.get("metric")
    if not metric:
        raise ParameterError("metric", "is required")
    window = int_arg("window")
    if window is None:
        raise ParameterError("window", "is required")
    storage = app_state().storage
    storage.require_metric(metric)
    return _service().budget_status(_analyst_arg(), metric, window)


@blueprint.get("/v1/releases/<id:release_id>")
@require_role(*ANALYST)
def get_release(release_id: int) -> dict[str, Any]:
    return _service().get(release_id, caller=current_token()).public_view()


@blueprint.post("/v1/releases/<id:release_id>/relax")
@require_role(*ANALYST)
def relax(release_id: int) -> dict[str, Any]:
    body = json_body()  # {"epsilon": <new level>} and nothing else (the document's schema)
    service = _service()
    return _view(service, service.relax(release_id, body["epsilon"], caller=current_token()))


# ==========================================================================
# OpenAPI
# ==========================================================================

_JSON = "application/json"
_ID = {"name": "release_id", "in": "path", "required": True, "schema": ROW_ID_SCHEMA}
_ERROR = {_JSON: {"schema": {"$ref": "#/components/schemas/Error"}}}
_BUDGET_ERROR = {_JSON: {"schema": {"$ref": "#/components/schemas/ReleaseRefused"}}}
_VIEW = {_JSON: {"schema": {"$ref": "#/components/schemas/Release"}}}
_COMMON_ERRORS = {
    "400": {"$ref": "#/components/responses/BadRequest"},
    "401": {"$ref": "#/components/responses/Unauthorized"},
}


_WINDOW = {"type": "integer", "minimum": 0, "maximum": MAX_WINDOW - 1}
_EPSILON = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_RATE}


def _query(name: str, required: bool, description: str) -> dict[str, Any]:
    schema = _WINDOW if name == "window" else {"type": "string", "minLength": 1} if required else {"type": "string"}
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


OPENAPI_PATHS: dict[str, Any] = {
    "/v1/releases": {
        "post": {
            "summary": "Release noisy per-place counts of a trusted direct metric's window",
            "description": "Checked in code, across fields and against the stored metric: it is trusted "
                           "with the direct encoding (field metric); exactly one of epsilon and analysts; analysts "
                           "only with a correlated mechanism; sensitivity an integer for ageo and geometric "
                           "and at least the metric's max_items; places in the metric's domain.",
            "operationId": "createRelease",
            "x-roles": list(ANALYST),
            "x-state-dependent": ["403", "404", "409"],
            "x-checked-in-code": ["metric", "epsilon", "analysts", "mechanism", "sensitivity", "places"],
            "requestBody": {
                "required": True, "content": {_JSON: {"schema": {"$ref": "#/components/schemas/ReleaseRequest"}}},
            },
            "responses": {
                "201": {"description": "the release (one analyst), or {releases: [...]} (analysts)", "content": {
                    _JSON: {"schema": {"oneOf": [
                        {"$ref": "#/components/schemas/Release"},
                        {"type": "object", "required": ["releases"], "properties": {
                            "releases": {"type": "array", "items": {"$ref": "#/components/schemas/Release"}}}},
                    ]}}}},
                **_COMMON_ERRORS,
                "403": {"description": "analysts without an admin token", "content": _ERROR},
                "404": {"description": "unknown metric, or no reports in the window", "content": _ERROR},
                "409": {"description": "budget_exceeded; nothing stored", "content": _BUDGET_ERROR},
            },
        },
        "get": {
            "summary": "Releases of the caller (an admin: all, or ?analyst=)",
            "operationId": "listReleases",
            "x-roles": list(ANALYST),
            "parameters": [_query("metric", False, "only this metric"), _query("window", False, "only this window"),
                           _query("analyst", False, "admins: only this analyst")],
            "responses": {
                "200": {"description": "public views", "content": {_JSON: {"schema": {
                    "type": "object", "properties": {
                        "releases": {"type": "array", "items": {"$ref": "#/components/schemas/Release"}}}}}}},
                **_COMMON_ERRORS,
                "403": {"$ref": "#/components/responses/Forbidden"},
            },
        },
    },
    "/v1/releases/budget": {
        "get": {
            "summary": "An analyst's budget on one metric and window: limit, spent, remaining",
            "operationId": "getReleaseBudget",
            "x-roles": list(ANALYST),
            "x-state-dependent": ["404"],
            "parameters": [_query("metric", True, "the metric"), _query("window", True, "the window start"),
                           _query("analyst", False, "admins: another analyst")],
            "responses": {
                "200": {"description": "the budget", "content": {_JSON: {"schema": {
                    "$ref": "#/components/schemas/ReleaseBudget"}}}},
                **_COMMON_ERRORS,
                "403": {"$ref": "#/components/responses/Forbidden"},
                "404": {"$ref": "#/components/responses/NotFound"},
            },
        }
    },
    "/v1/releases/{release_id}": {
        "get": {
            "summary": "One release (public view); analysts see only their own",
            "operationId": "getRelease",
            "x-roles": list(ANALYST),
            "x-state-dependent": ["404"],
            "parameters": [_ID],
            "responses": {
                "200": {"description": "the release", "content": _VIEW},
                "401": {"$ref": "#/components/responses/Unauthorized"},
                "404": {"description": "no such release of the caller's", "content": _ERROR},
            },
        }
    },
    "/v1/releases/{release_id}/relax": {
        "post": {
            "summary": "Refine a release to a higher epsilon (lazy step; the budget counts the final level)",
            "operationId": "relaxRelease",
            "x-roles": list(ANALYST),
            "x-state-dependent": ["404", "409"],
            "parameters": [_ID],
            "requestBody": {"required": True, "content": {_JSON: {"schema": {
                "type": "object", "required": ["epsilon"], "additionalProperties": False,
                "properties": {"epsilon": _EPSILON}}}}},
            "responses": {
                "200": {"description": "the refined release", "content": _VIEW},
                **_COMMON_ERRORS,
                "404": {"description": "no such release of the caller's", "content": _ERROR},
                "409": {"description": "budget_exceeded, tightening_refused or correlated_release; "
                                       "nothing changed", "content": _BUDGET_ERROR},
            },
        }
    },
}

OPENAPI_SCHEMAS: dict[str, Any] = {
    "ReleaseRequest": {
        "type": "object",
        "required": ["metric", "window", "mechanism", "threshold"],
        "additionalProperties": False,
        "properties": {
            "metric": {"type": "string", "minLength": 1, "description": "a trusted metric with the direct encoding"},
            "window": {**_WINDOW, "description": "window start (Unix seconds)"},
            "places": {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True,
                       "description": "candidate places (default: the whole domain)"},
            "mechanism": {"enum": list(mechanism_names())},
            "epsilon": {**_EPSILON, "description": "exclusive with analysts"},
            "threshold": {"type": "number", "minimum": -MAX_NUMBER, "maximum": MAX_NUMBER, "description": "t of 'is count <= t?'; alap, ageo, salap: safe means "
                                                           "answer < floor(t) + 1 (never wrong); laplace, geometric: "
                                                           "answer <= t (an estimate)"},
            "sensitivity": {"type": "number", "minimum": 1, "maximum": MAX_NUMBER,
                            "description": "optional, to protect more: at least the metric's max_items "
                                           "(salap: 1), which is the default"},
            "analysts": {"type": "object", "minProperties": 1, "additionalProperties": _EPSILON,
                         "description": "admin only: correlated releases, analyst name -> epsilon"},
        },
    },
    "Release": {
        "type": "object",
        "required": ["id", "analyst", "metric", "window", "mechanism", "epsilon", "levels", "threshold",
                     "guarantee", "answers"],
        "properties": {
            "id": {"type": "integer"},
            "analyst": {"type": "string"},
            "metric": {"type": "string"},
            "window": {"type": "integer"},
            "mechanism": {"type": "string"},
            "epsilon": {"type": "number", "description": "the current level, which the budget counts"},
            "levels": {"type": "array", "items": {"type": "number"}},
            "threshold": {"type": "number"},
            "sensitivity": {"type": "number", "description": "L1 change of the counts one person's report makes"},
            "max_items": {"type": "integer", "minimum": 1,
                          "description": "the metric's contribution bound (ones kept per report)"},
            "grid": {"type": "number", "description": "every answer is a multiple of this power of two"},
            "n_max": {"type": ["integer", "null"], "description": "ageo: the largest answer (reports in window)"},
            "group": {"type": ["string", "null"], "description": "correlated release group"},
            "guarantee": {"type": "object"},
            "certificate": {"type": "string", "description": "what safe means for this release, in words"},
            "answers": {"type": "array", "items": {"type": "object", "required": ["place", "answer", "safe"],
                                                   "properties": {
                                                       "place": {"type": "string"},
                                                       "answer": {"type": ["number", "null"]},
                                                       "safe": {"type": ["boolean", "null"]}}}},
            "budget": {"$ref": "#/components/schemas/ReleaseBudget"},
            "created_at": {"type": "integer"},
            "updated_at": {"type": "integer"},
        },
    },
    "ReleaseBudget": {
        "type": "object",
        "required": ["analyst", "metric", "window", "limit", "spent", "remaining"],
        "properties": {
            "analyst": {"type": "string"}, "metric": {"type": "string"}, "window": {"type": "integer"},
            "limit": {"type": "number"}, "spent": {"type": "number"}, "remaining": {"type": "number"},
        },
    },
    "ReleaseRefused": {
        "type": "object",
        "required": ["error", "field", "detail"],
        "properties": {
            "error": {"enum": ["budget_exceeded", "tightening_refused", "correlated_release"]},
            "field": {"type": "string"},
            "detail": {"type": "string"},
            "requested": {"type": "number"},
            "remaining": {"type": "number"},
            "current": {"type": "number"},
        },
    },
}
