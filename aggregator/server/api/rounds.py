"""Coordinated relaxation rounds (gradual-release paper, Sec. 3-4.1).

* ``POST /v1/metrics/<name>/rounds`` (admin) opens a round: the metric's
  level goes from its current value (the latest round's ``level_to``, or the
  base level) to a strictly higher ``level_to``, optionally for a subset of
  cohorts, until ``expires_at``. The announcement is signed (Ed25519) and
  served in ``GET /v1/config``. Opening a round closes the metric's earlier
  open rounds (clients jump straight to the latest level: one lazy step is
  valid by the Markov property).
* ``GET /v1/metrics/<name>/rounds`` (analyst) lists the metric's rounds.
* ``GET /v1/rounds/<id>`` shows the round, its participation per cohort (its
  reports against the base collection's) and its current decoding.
* ``POST /v1/rounds/<id>/close`` (admin) stops accepting its reports.

Levels only increase: a lowering or repeated level is refused (409
``level_not_increasing``, field ``level_to``), except that a round relaxing
the IRR (``irr_p``, ``irr_q``: the IRR after the round, docs/irr-relaxation.md)
may keep the level. An IRR that is not a relaxation of the current one is
refused (400, field ``irr``). A trusted metric has no noise to relax (400,
field ``metric``).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from aggregator.server.api.common import ROW_ID_SCHEMA, json_body, use_row_ids
from aggregator.server.auth import ADMIN, ANALYST, require_role
from aggregator.server.context import app_state
from aggregator.server.errors import NotFound
from aggregator.server.services import rounds as round_rules
from aggregator.server.services.estimates import DecodingService
from aggregator.server.services.rounds import DEFAULT_ROUND_SECONDS, MAX_ROUND_SECONDS, RoundRequest
from aggregator.server.storage import RoundRecord
from protocol.errors import ParameterError
from protocol.randomizers import MAX_LEVEL, MIN_LEVEL
from protocol.validation import check_int, check_number

blueprint = Blueprint("rounds", __name__)
use_row_ids(blueprint)


def _number(body: dict[str, Any], field: str) -> float:
    value = body.get(field)
    return check_number(field, value, positive=True)


def _cohorts(body: dict[str, Any], num_cohorts: int) -> tuple[int, ...] | None:
    cohorts = body.get("cohorts")
    if cohorts is None:
        return None
    if not isinstance(cohorts, list) or not cohorts:
        raise ParameterError("cohorts", "must be null or a non-empty list of cohort numbers")
    for i, c in enumerate(cohorts):
        check_int(f"cohorts[{i}]", c, low=0, high=num_cohorts - 1)
    if len(set(cohorts)) != len(cohorts):
        raise ParameterError("cohorts", "must not repeat a cohort")
    return tuple(sorted(cohorts))


def _irr(body: dict[str, Any]) -> tuple[float | None, float | None] | None:
    """``(irr_p, irr_q)`` of the body, or ``None`` (both left out: the round keeps the IRR)."""
    irr_p, irr_q = body.get("irr_p"), body.get("irr_q")
    if irr_q is None:
        if irr_p is not None:
            raise ParameterError("irr_q", "is required with irr_p (the symmetric IRR is the pair)")
        return None
    return (None if irr_p is None else check_number("irr_p", irr_p, nonnegative=True, high=1.0),
            check_number("irr_q", irr_q, nonnegative=True, high=1.0))


def _expiry(body: dict[str, Any], now: int) -> int:
    seconds = body.get("expires_in", DEFAULT_ROUND_SECONDS)
    return now + check_int("expires_in", seconds, low=1, high=MAX_ROUND_SECONDS)


@blueprint.post("/v1/metrics/<name>/rounds")
@require_role(*ADMIN)
def open_round(name: str) -> tuple[dict[str, Any], int]:
    state = app_state()
    body = json_body()  # an object of level_to, cohorts, expires_in, irr_p, irr_q (the document's schema)
    metric = state.storage.require_metric(name)  # the round rules are checked once, by open_round
    now = int(state.now())
    request = RoundRequest(
        metric=name, level_to=_number(body, "level_to"), cohorts=_cohorts(body, metric.params.num_cohorts),
        expires_at=_expiry(body, now), irr=_irr(body),
    )
    record = round_rules.open_round(state.storage, request, sign=state.keys.sign, now=now)
    return round_view(record), 201


def _require_round(round_id: int) -> RoundRecord:
    record = app_state().storage.get_round(round_id)
    if record is None:
        raise NotFound("round", f"no round {round_id}")
    return record


def round_view(record: RoundRecord) -> dict[str, Any]:
    """A round as the API shows it."""
    state = app_state()
    view = record.to_dict(state.now())
    view["participation"] = round_rules.participation(state.storage, record)
    view["reports"] = sum(row["reports"] for row in view["participation"])
    return view


@blueprint.get("/v1/metrics/<name>/rounds")
@require_role(*ANALYST)
def list_rounds(name: str) -> dict[str, Any]:
    storage = app_state().storage
    storage.require_metric(name)
    return {"rounds": [round_view(record) for record in storage.list_rounds(name)]}


@blueprint.get("/v1/rounds/<id:round_id>")
@require_role(*ANALYST)
def get_round(round_id: int) -> dict[str, Any]:
    record = _require_round(round_id)
    view = round_view(record)
    state = app_state()
    metric = state.storage.require_metric(record.metric)
    # all the round's decodable windows pooled
    decoding = DecodingService(state.storage, now=state.now()).round_summary(metric, record)
    if decoding is not None:
        view["decoding"] = decoding
    return view


@blueprint.post("/v1/rounds/<id:round_id>/close")
@require_role(*ADMIN)
def close_round(round_id: int) -> dict[str, Any]:
    state = app_state()
    return round_view(state.storage.close_round(round_id, now=int(state.now())))  # NotFound / Conflict


_ROUND_RESPONSE = {"application/json": {"schema": {"$ref": "#/components/schemas/Round"}}}
_ROUND_ID = {"name": "round_id", "in": "path", "required": True, "schema": ROW_ID_SCHEMA}
_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}

OPENAPI_PATHS: dict[str, Any] = {
    "/v1/metrics/{name}/rounds": {
        "post": {
            "summary": "Open a relaxation round (levels only increase)",
            "operationId": "openRound",
            "description": "Checked in code, against the stored metric: it is not trusted (field metric); "
                           "cohorts are below its num_cohorts and not repeated; level_to is above its current "
                           "level (409 level_not_increasing), or equal to it when the round relaxes the IRR; "
                           "irr_p and irr_q (the IRR after the round; irr_p only with irr_q, and only in the "
                           "symmetric mode, below irr_q; the asymmetric IRR has irr_q < 1 only) make an IRR of "
                           "the metric's mode that relaxes its current one (field irr).",
            "x-roles": list(ADMIN),
            "x-state-dependent": ["409"],
            "x-checked-in-code": ["metric", "cohorts", "cohorts[]", "irr", "irr_p", "irr_q"],
            "parameters": [_NAME],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {
                    "type": "object",
                    "required": ["level_to"],
                    "additionalProperties": False,
                    "properties": {
                        "level_to": {"type": "number", "minimum": MIN_LEVEL, "maximum": MAX_LEVEL},
                        "cohorts": {"type": ["array", "null"], "minItems": 1, "uniqueItems": True,
                                    "items": {"type": "integer", "minimum": 0}},
                        "expires_in": {"type": "integer", "minimum": 1, "maximum": MAX_ROUND_SECONDS},
                        "irr_p": {"type": "number", "minimum": 0, "maximum": 1},
                        "irr_q": {"type": "number", "minimum": 0, "maximum": 1},
                    },
                }}},
            },
            "responses": {
                "201": {"description": "the round, with its signed announcement", "content": _ROUND_RESPONSE},
                "400": {"$ref": "#/components/responses/BadRequest"},
                "401": {"$ref": "#/components/responses/Unauthorized"},
                "403": {"$ref": "#/components/responses/Forbidden"},
                "404": {"$ref": "#/components/responses/NotFound"},
                "409": {"$ref": "#/components/responses/Conflict"},
            },
        },
        "get": {
            "summary": "The metric's rounds, oldest first, each with its participation",
            "operationId": "listRounds",
            "x-roles": list(ANALYST),
            "parameters": [_NAME],
            "responses": {
                "200": {"description": "the rounds", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["rounds"],
                    "properties": {"rounds": {"type": "array", "items": {"$ref": "#/components/schemas/Round"}}},
                }}}},
                "401": {"$ref": "#/components/responses/Unauthorized"},
                "404": {"$ref": "#/components/responses/NotFound"},
            },
        },
    },
    "/v1/rounds/{round_id}": {
        "get": {
            "summary": "A round: participation per cohort and its current decoding",
            "operationId": "getRound",
            "x-roles": list(ANALYST),
            "parameters": [_ROUND_ID],
            "responses": {
                "200": {"description": "the round", "content": _ROUND_RESPONSE},
                "401": {"$ref": "#/components/responses/Unauthorized"},
                "404": {"$ref": "#/components/responses/NotFound"},
            },
        }
    },
    "/v1/rounds/{round_id}/close": {
        "post": {
            "summary": "Close a round: no client joins it any more; its reports are still counted",
            "operationId": "closeRound",
            "x-roles": list(ADMIN),
            "parameters": [_ROUND_ID],
            "responses": {
                "200": {"description": "the closed round", "content": _ROUND_RESPONSE},
                "401": {"$ref": "#/components/responses/Unauthorized"},
                "403": {"$ref": "#/components/responses/Forbidden"},
                "404": {"$ref": "#/components/responses/NotFound"},
                "409": {"$ref": "#/components/responses/Conflict"},
            },
        }
    },
}

OPENAPI_SCHEMAS: dict[str, Any] = {
    "Round": {
        "type": "object",
        "required": ["id", "metric", "level_from", "level_to", "opened_at", "expires_at", "open", "announcement"],
        "properties": {
            "id": {"type": "integer"},
            "metric": {"type": "string"},
            "level_from": {"type": "number"},
            "level_to": {"type": "number"},
            "cohorts": {"type": ["array", "null"], "items": {"type": "integer"}},
            "opened_at": {"type": "integer"},
            "expires_at": {"type": "integer"},
            "closed_at": {"type": ["integer", "null"]},
            "irr_p": {"type": ["number", "null"]},
            "irr_q": {"type": ["number", "null"]},
            "open": {"type": "boolean"},
            "announcement": {"$ref": "#/components/schemas/SignedDocument"},
            "reports": {"type": "integer"},
            "participation": {"type": "array", "items": {"type": "object", "properties": {
                "cohort": {"type": "integer"},
                "reports": {"type": "integer"},
                "base_reports": {"type": "integer"},
                "participation": {"type": ["number", "null"]},
            }}},
            "decoding": {"type": "object"},
        },
    }
}
