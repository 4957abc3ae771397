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
from protocol.encodings import HASHINGS
from protocol.params import NAME_PATTERN, PARAMS_VERSION, VALUE_KINDS, MetricParams
from protocol.randomizers import MAX_LEVEL, MIN_LEVEL, MODES

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
            "description": "Checked in code, across fields: level is required unless the mode is trusted; "
                           "irr_p and irr_q as the mode allows (symmetric: both or neither, irr_p < irr_q; "
                           "asymmetric: irr_q only, < 1; trusted: neither); none_value only for categorical "
                           "metrics and in a direct domain; an asymmetric categorical metric needs a "
                           "none_value (field mode); max_items and num_hashes at most num_bits (num_hashes "
                           "at most 16 with rappor-md5).",
            "x-roles": list(ADMIN),
            "x-state-dependent": ["409"],
            "x-checked-in-code": ["level", "irr_p", "irr_q", "none_value", "mode", "max_items", "num_hashes",
                                  "encoding.num_hashes"],
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

_MAX_BITS = 4096  # bloom and prefix num_bits, direct domain size (protocol/encodings.py)
_BITS = {"num_bits": {"type": "integer", "minimum": 1, "maximum": _MAX_BITS},
         "num_hashes": {"type": "integer", "minimum": 1, "maximum": 64}}

OPENAPI_SCHEMAS: dict[str, Any] = {
    "BloomEncoding": {
        "type": "object",
        "required": ["kind", "num_bits", "num_hashes", "num_cohorts"],
        "additionalProperties": False,
        "properties": {"kind": {"const": "bloom"}, **_BITS,
                       "num_cohorts": {"type": "integer", "minimum": 1, "maximum": 2**16},
                       "hashing": {"enum": list(HASHINGS)}},
    },
    "DirectEncoding": {
        "type": "object",
        "required": ["kind", "domain"],
        "properties": {"kind": {"const": "direct"},
                       "domain": {"type": "array", "minItems": 1, "maxItems": _MAX_BITS, "uniqueItems": True,
                                  "items": {"type": "string"}}},
    },
    "PrefixEncoding": {
        "type": "object",
        "required": ["kind", "num_bits", "num_hashes", "lengths"],
        "additionalProperties": False,
        "properties": {"kind": {"const": "prefix"}, **_BITS,
                       "lengths": {"type": "array", "minItems": 1, "maxItems": 2**16,
                                   "items": {"type": "integer", "minimum": 1, "maximum": 1024}}},
    },
    "MetricParams": {
        "type": "object",
        "description": "protocol.params.MetricParams.to_dict() (docs/wire.md 8.2)",
        "required": ["name", "encoding", "mode"],
        "additionalProperties": False,
        "properties": {
            "version": {"const": PARAMS_VERSION},
            "name": {"type": "string", "pattern": NAME_PATTERN.pattern},
            "encoding": {"oneOf": [
                {"$ref": "#/components/schemas/BloomEncoding"},
                {"$ref": "#/components/schemas/DirectEncoding"},
                {"$ref": "#/components/schemas/PrefixEncoding"},
            ]},
            "mode": {"enum": list(MODES)},
            "level": {"type": ["number", "null"], "minimum": MIN_LEVEL, "maximum": MAX_LEVEL},
            "irr_p": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
            "irr_q": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
            "value_kind": {"enum": list(VALUE_KINDS)},
            "none_value": {"type": ["string", "null"], "minLength": 1},
            "time_precision": {"type": "integer", "minimum": 1, "maximum": 10**9},
            "min_batch_size": {"type": "integer", "minimum": 1, "maximum": 10**9},
            "max_items": {"type": "integer", "minimum": 1, "maximum": _MAX_BITS, "default": 1,
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
