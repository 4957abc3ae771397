"""``POST /v1/reports``: batch upload with per-report results (docs/wire.md 7).

JSON (``application/json``) or binary (``application/vnd.onesided.batch``).
A malformed batch is refused whole (400, or 413 ``too_many_reports``, 415
for another content type, 413 ``payload_too_large`` over the size limit)
and nothing is stored; otherwise 200 with one result per report.
Public: reports are anonymous by design.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request
from werkzeug.exceptions import UnsupportedMediaType

from aggregator.server.api.common import body_bytes, json_body
from aggregator.server.context import app_state
from aggregator.server.ingest import Ingestor
from aggregator.server.monitoring import count_statuses
from protocol.wire import (
    CONTENT_TYPE_BINARY,
    CONTENT_TYPE_JSON,
    STATUSES,
    ReportEnvelope,
    parse_batch_binary,
    parse_batch_json,
    upload_response,
)

blueprint = Blueprint("reports", __name__)


def parse_request_batch(max_reports: int) -> list[ReportEnvelope]:
    """The request's batch in either form.

    Raises:
        UnsupportedMediaType: neither content type.
        ReportRejected: a malformed batch (field by path).
    """
    if request.mimetype == CONTENT_TYPE_BINARY:
        return parse_batch_binary(body_bytes(), max_reports=max_reports)
    if request.mimetype == CONTENT_TYPE_JSON:
        return parse_batch_json(json_body(), max_reports=max_reports)
    raise UnsupportedMediaType(f"send a batch as {CONTENT_TYPE_JSON} or {CONTENT_TYPE_BINARY}")


@blueprint.post("/v1/reports")
def upload_reports() -> dict[str, Any]:
    state = app_state()
    envelopes = parse_request_batch(state.settings.max_reports)
    ingestor = Ingestor(storage=state.storage, opener=state.opener, settings=state.settings)
    results = ingestor.ingest(envelopes, now=state.now())
    count_statuses([r.status for r in results])
    return upload_response(results)


_BAD = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}

OPENAPI_PATHS: dict[str, Any] = {
    "/v1/reports": {
        "post": {
            "summary": "Upload a batch of sealed reports",
            "operationId": "uploadReports",
            "security": [],
            "requestBody": {
                "required": True,
                "content": {
                    CONTENT_TYPE_JSON: {"schema": {"$ref": "#/components/schemas/ReportBatch"}},
                    CONTENT_TYPE_BINARY: {
                        "schema": {"type": "string", "format": "binary"},
                        "description": "docs/wire.md 7.2",
                    },
                },
            },
            "responses": {
                "200": {
                    "description": "one result per report, in batch order",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/UploadResponse"}}},
                },
                "400": {"description": "malformed batch; nothing stored", "content": _BAD},
                "413": {"description": "body or report count over the limit; nothing stored", "content": _BAD},
                "415": {"description": "unsupported content type", "content": _BAD},
            },
        }
    }
}

OPENAPI_SCHEMAS: dict[str, Any] = {
    "Report": {
        "type": "object",
        "required": ["report_id", "metric", "round", "window", "params_digest"],
        "additionalProperties": False,
        "properties": {
            "report_id": {"type": "string", "description": "base64url, 16 bytes"},
            "metric": {"type": "string"},
            "round": {"type": "integer", "minimum": 0},
            "window": {"type": "integer", "minimum": 0},
            "params_digest": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "sealed": {"type": "string", "description": "base64url envelope (docs/wire.md 6)"},
            "plain": {"type": "string", "description": "base64url payload; only if the operator allows it"},
        },
    },
    "ReportBatch": {
        "type": "object",
        "required": ["version", "reports"],
        "additionalProperties": False,
        "properties": {
            "version": {"const": 1},
            "reports": {"type": "array", "minItems": 1, "items": {"$ref": "#/components/schemas/Report"}},
        },
    },
    "ReportResult": {
        "type": "object",
        "required": ["report_id", "status", "field", "detail"],
        "properties": {
            "report_id": {"type": "string"},
            "status": {"enum": list(STATUSES)},
            "field": {"type": ["string", "null"]},
            "detail": {"type": ["string", "null"]},
        },
    },
    "UploadResponse": {
        "type": "object",
        "required": ["results", "accepted"],
        "properties": {
            "results": {"type": "array", "items": {"$ref": "#/components/schemas/ReportResult"}},
            "accepted": {"type": "integer"},
        },
    },
}
