"""Metric registration (admin) and listing (analysts).

``POST /v1/metrics`` takes ``MetricParams.to_dict()``: 201 when created,
200 when the same parameters are posted again or new parameters replace
those of a metric without data, 409 ``metric_immutable`` when it has data,
400 naming the field for invalid parameters.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from aggregator.server.api.common import json_body
from aggregator.server.auth import ADMIN, ANALYST, require_role
from aggregator.server.context import app_state
from aggregator.server.storage import MetricRecord
from protocol.params import MetricParams
from protocol.randomizers import MAX_LEVEL, MIN_LEVEL

blueprint = Blueprint("metrics", __name__)


def metric_view(record: MetricRecord, reports: int) -> dict[str, Any]:
    """A metric as the API shows it."""
    return {
        "name": record.name,
        "params": record.params.to_dict(),
        "digest": record.digest,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "reports": reports,
    }


@blueprint.post("/v1/metrics")
@require_role(*ADMIN)
def create_metric() -> tuple[dict[str, Any], int]:
    params = MetricParams.from_dict(json_body())
    storage = app_state().storage
    record, outcome = storage.put_metric(params)
    body = metric_view(record, storage.reports_per_metric().get(record.name, 0))
    body["outcome"] = outcome
    return body, 201 if outcome == "created" else 200


@blueprint.get("/v1/metrics")
@require_role(*ANALYST)
def list_metrics() -> dict[str, Any]:
    storage = app_state().storage
    counts = storage.reports_per_metric()
    return {"metrics": [metric_view(m, counts.get(m.name, 0)) for m in storage.list_metrics()]}


@blueprint.get("/v1/metrics/<name>")
@require_role(*ANALYST)
def get_metric(name: str) -> dict[str, Any]:
    storage = app_state().storage
    record = storage.require_metric(name)
    body = metric_view(record, storage.reports_per_metric().get(name, 0))
    body["collections"] = [c.to_dict() for c in storage.collections(name)]
    return body


_METRIC_RESPONSE = {"application/json": {"schema": {"$ref": "#/components/schemas/Metric"}}}
_NAME_PARAMETER = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}

OPENAPI_PATHS: dict[str, Any] = {
    "/v1/metrics": {
        "post": {
            "summary": "Register a metric (idempotent; parameters immutable once data exist)",
            "operationId": "createMetric",
            "x-roles": list(ADMIN),
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/MetricParams"}}},
            },
            "responses": {
                "201": {"description": "created", "content": _METRIC_RESPONSE},
                "200": {"description": "unchanged, or updated (no data yet)", "content": _METRIC_RESPONSE},
                "400": {"$ref": "#/components/responses/BadRequest"},
                "401": {"$ref": "#/components/responses/Unauthorized"},
                "403": {"$ref": "#/components/responses/Forbidden"},
                "409": {"$ref": "#/components/responses/Conflict"},
            },
        },
        "get": {
            "summary": "List metrics with their report counts",
            "operationId": "listMetrics",
            "x-roles": list(ANALYST),
            "responses": {
                "200": {
                    "description": "all metrics",
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "metrics": {"type": "array", "items": {"$ref": "#/components/schemas/Metric"}}
                                },
                            }
                        }
                    },
                },
                "401": {"$ref": "#/components/responses/Unauthorized"},
            },
        },
    },
    "/v1/metrics/{name}": {
        "get": {
            "summary": "One metric with its collections (window, round, reports)",
            "operationId": "getMetric",
            "x-roles": list(ANALYST),
            "parameters": [_NAME_PARAMETER],
            "responses": {
                "200": {"description": "the metric", "content": _METRIC_RESPONSE},
                "401": {"$ref": "#/components/responses/Unauthorized"},
                "404": {"$ref": "#/components/responses/NotFound"},
            },
        }
    },
}

OPENAPI_SCHEMAS: dict[str, Any] = {
    "MetricParams": {
        "type": "object",
        "description": "protocol.params.MetricParams.to_dict() (docs/wire.md 8.2)",
        "required": ["name", "encoding", "mode"],
        "properties": {
            "version": {"const": 1},
            "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_.-]{0,63}$"},
            "encoding": {"type": "object"},
            "mode": {"enum": ["symmetric", "asymmetric", "trusted"]},
            "level": {"type": ["number", "null"], "minimum": MIN_LEVEL, "maximum": MAX_LEVEL},
            "irr_p": {"type": ["number", "null"]},
            "irr_q": {"type": ["number", "null"]},
            "value_kind": {"enum": ["set", "categorical"]},
            "none_value": {"type": ["string", "null"]},
            "time_precision": {"type": "integer", "minimum": 1},
            "min_batch_size": {"type": "integer", "minimum": 1},
            "max_items": {"type": "integer", "minimum": 1, "default": 1,
                          "description": "trusted set metrics: at most this many ones of a report are kept "
                                         "(chosen at random) and releases protect a person with this many "
                                         "items; at most num_bits"},
        },
    },
    "Metric": {
        "type": "object",
        "required": ["name", "params", "digest", "created_at", "updated_at", "reports"],
        "properties": {
            "name": {"type": "string"},
            "params": {"$ref": "#/components/schemas/MetricParams"},
            "digest": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "created_at": {"type": "integer"},
            "updated_at": {"type": "integer"},
            "reports": {"type": "integer"},
            "outcome": {"enum": ["created", "unchanged", "updated"]},
            "collections": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "window": {"type": "integer"},
                        "round": {"type": "integer"},
                        "reports": {"type": "integer"},
                    },
                },
            },
        },
    },
}
