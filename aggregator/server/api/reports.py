"""``POST /v1/reports``: batch upload with per-report results (docs/wire.md 7).

JSON (``application/json``) or binary (``application/vnd.onesided.batch``).
A malformed batch is refused whole (400, or 413 ``too_many_reports``, 415
for another content type, 413 ``payload_too_large`` over the size limit)
and nothing is stored; otherwise 200 with one result per report.
Public: reports are anonymous by design.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, request
from werkzeug.exceptions import UnsupportedMediaType

from aggregator.server.api.common import body_bytes, json_body
from aggregator.server.clock_watch import clock_answers
from aggregator.server.context import app_state
from aggregator.server.ingest import Ingestor, ingest_turn
from aggregator.server.monitoring import count_clipped, count_statuses
from protocol.params import NAME_PATTERN
from protocol.wire import (
    ANSWER_VERSION,
    CLIPPED_ANSWERS_VERSION,
    CLOCK_ANSWERS_VERSION,
    CONTENT_TYPE_BINARY,
    CONTENT_TYPE_JSON,
    MAX_BODY_BYTES,
    MAX_RETRY_AFTER,
    MAX_ROUND,
    MAX_WINDOW,
    REPORT_ID_BYTES,
    STATUS_ACCEPTED,
    STATUSES,
    WIRE_HEADER,
    ReportEnvelope,
    answer_version,
    parse_batch_binary,
    parse_batch_json,
    upload_response,
)

blueprint = Blueprint("reports", __name__)


def read_request_batch() -> Callable[[int], list[ReportEnvelope]]:
    """The request's batch in either form, read (the body whole) now and parsed by the function returned.

    Reading comes first, outside the batch's :func:`~aggregator.server.ingest.ingest_turn`: a body still
    arriving (a server that hands a thread a connection before its body) must not hold the turn.

    Raises:
        UnsupportedMediaType: neither content type.
        (the function returned) ReportRejected: a malformed batch (field by path).
    """
    if request.mimetype == CONTENT_TYPE_BINARY:
        data = body_bytes()
        return lambda max_reports: parse_batch_binary(data, max_reports=max_reports)
    if request.mimetype == CONTENT_TYPE_JSON:
        # the wire parser is this body's validator (per-report answers); the document mirrors its limits
        document = json_body(documented=False)
        return lambda max_reports: parse_batch_json(document, max_reports=max_reports)
    raise UnsupportedMediaType(f"send a batch as {CONTENT_TYPE_JSON} or {CONTENT_TYPE_BINARY}")


@blueprint.post("/v1/reports")
def upload_reports() -> dict[str, Any]:
    state = app_state()
    parse = read_request_batch()
    with ingest_turn(state.opener, state.storage):
        envelopes = parse(state.settings.max_reports)
        ingestor = Ingestor(storage=state.storage, opener=state.opener, settings=state.settings)
        now = state.now()
        results = ingestor.ingest(envelopes, now=now)
    statuses = [r.status for r in results]
    count_statuses(statuses)
    clipped = count_clipped([r.detail for r in results if r.status == STATUS_ACCEPTED])
    state.clock_watch.observe(statuses)
    version = answer_version(request.headers.get(WIRE_HEADER))
    if version < 2:
        return upload_response(results)  # a client before wire version 2 rejects keys it does not know
    suspect = state.clock_watch.suspicion() is not None
    answered = clock_answers(results, envelopes, now=now, clock_skew_seconds=state.settings.clock_skew_seconds,
                             suspect=suspect)
    return upload_response(answered, server_time=int(now), clipped=clipped if version >= 3 else None)


_BAD = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}

OPENAPI_PATHS: dict[str, Any] = {
    "/v1/reports": {
        "post": {
            "summary": "Upload a batch of sealed reports",
            "operationId": "uploadReports",
            "description": "Checked in code, across fields: a sealed report's report_id is derived from its "
                           "envelope's ephemeral key (docs/wire.md 5); a mismatch refuses the batch. What the "
                           "server knows (metric, parameters, window, round, duplicates) is answered per "
                           "report in the results.",
            "security": [],
            "x-checked-in-code": ["reports[].report_id"],
            "parameters": [{"name": WIRE_HEADER, "in": "header", "required": False,
                            "schema": {"type": "string"},
                            "description": f"the newest answer version the client reads (absent: 1; a "
                                           f"newer one than {ANSWER_VERSION} is answered as {ANSWER_VERSION}): "
                                           f"{CLOCK_ANSWERS_VERSION} adds server_time and retry_after, "
                                           f"{CLIPPED_ANSWERS_VERSION} adds clipped (docs/wire.md 7.4)"}],
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

# canonical unpadded base64url: the unused low bits of the last symbol are zero
_SYMBOL, _LAST_OF_TWO, _LAST_OF_ONE = "[A-Za-z0-9_-]", "[AEIMQUYcgkosw048]", "[AQgw]"
_BASE64URL = f"^(?:{_SYMBOL}{{4}})*(?:{_SYMBOL}{{2}}{_LAST_OF_TWO}|{_SYMBOL}{_LAST_OF_ONE})?$"


def _fixed_base64url(size: int) -> str:
    """The pattern of canonical unpadded base64url text of exactly ``size`` bytes."""
    quads, rest = divmod(size, 3)
    last = ("", _LAST_OF_ONE, _LAST_OF_TWO)[rest]
    return f"^{_SYMBOL}{{{4 * quads + rest}}}{last}$"


def _base64url(low: int, high: int, description: str) -> dict[str, Any]:
    """Canonical unpadded base64url text of ``low`` to ``high`` bytes."""
    return {"type": "string", "pattern": _BASE64URL, "minLength": (4 * low + 2) // 3,
            "maxLength": (4 * high + 2) // 3, "description": description}


OPENAPI_SCHEMAS: dict[str, Any] = {
    "Report": {
        "type": "object",
        "required": ["report_id", "metric", "round", "window", "params_digest"],
        "oneOf": [{"required": ["sealed"]}, {"required": ["plain"]}],
        "additionalProperties": False,
        "properties": {
            "report_id": {"type": "string", "pattern": _fixed_base64url(REPORT_ID_BYTES),
                          "description": f"base64url, {REPORT_ID_BYTES} bytes"},
            "metric": {"type": "string", "pattern": NAME_PATTERN.pattern},
            "round": {"type": "integer", "minimum": 0, "maximum": MAX_ROUND},
            "window": {"type": "integer", "minimum": 0, "maximum": MAX_WINDOW},
            "params_digest": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "sealed": _base64url(1, MAX_BODY_BYTES, "base64url envelope (docs/wire.md 6)"),
            "plain": _base64url(1, MAX_BODY_BYTES, "base64url payload; only if the operator allows it"),
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
            "retry_after": {"type": "integer", "minimum": 1, "maximum": MAX_RETRY_AFTER,
                            "description": f"only with the request header {WIRE_HEADER}: "
                                           f"{CLOCK_ANSWERS_VERSION}, on too_early / expired: not final, keep "
                                           "the report and resend it no sooner (docs/wire.md 7.4)"},
        },
    },
    "UploadResponse": {
        "type": "object",
        "required": ["results", "accepted"],
        "properties": {
            "results": {"type": "array", "items": {"$ref": "#/components/schemas/ReportResult"}},
            "accepted": {"type": "integer"},
            "server_time": {"type": "integer", "description": f"only with the request header {WIRE_HEADER}: "
                                                              f"{CLOCK_ANSWERS_VERSION}: the server's clock, "
                                                              "Unix seconds"},
            "clipped": {"type": "integer", "minimum": 0,
                        "description": f"only with the request header {WIRE_HEADER}: {CLIPPED_ANSWERS_VERSION} "
                                       "or later, always then: how many accepted reports of the batch kept only "
                                       "their metric's max_items items (docs/wire.md 7.4)"},
        },
    },
}
