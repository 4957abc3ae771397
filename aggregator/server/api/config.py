"""``GET /v1/config``: the signed configuration clients pin and read (docs/wire.md 8.2).

The payload lists every metric with its parameters, digest and current
round and level, the aggregator's public keys, and the open rounds' signed
announcements; the whole is signed with the aggregator's Ed25519 key.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from aggregator.server.context import app_state
from aggregator.server.services.rounds import current_level
from aggregator.server.storage import MetricRecord, RoundRecord
from protocol.wire import MetricEntry, build_config_payload

blueprint = Blueprint("config", __name__)


def metric_entry(metric: MetricRecord, rounds: list[RoundRecord]) -> MetricEntry:
    """The metric's entry: its latest round (open or closed) and the level that round set."""
    round_id, level = current_level(metric, rounds)
    if round_id == 0:
        return MetricEntry.of(metric.params)
    return MetricEntry.of(metric.params, current_round=round_id, current_level=level)


def signed_config() -> dict[str, Any]:
    """The signed config document as of now."""
    state = app_state()
    now = state.now()
    rounds = state.storage.list_rounds()
    entries = [metric_entry(m, rounds) for m in state.storage.list_metrics()]
    payload = build_config_payload(
        issued_at=int(now),
        aggregator=state.keyring.public_info() if state.keyring is not None else state.keys.public_info(),
        metrics=entries,
        rounds=[r.announcement for r in rounds if r.is_open(now)],
        sync_interval=state.settings.sync_interval,
    )
    return state.keys.sign(payload)


@blueprint.get("/v1/config")
def config() -> dict[str, Any]:
    return signed_config()


OPENAPI_PATHS: dict[str, Any] = {
    "/v1/config": {
        "get": {
            "summary": "Signed configuration: metrics, parameters, public keys, open rounds",
            "operationId": "getConfig",
            "security": [],
            "responses": {
                "200": {
                    "description": "an Ed25519-signed document (docs/wire.md 8.1, 8.2)",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SignedDocument"}}},
                }
            },
        }
    }
}

OPENAPI_SCHEMAS: dict[str, Any] = {
    "SignedDocument": {
        "type": "object",
        "required": ["payload", "key_id", "signature"],
        "additionalProperties": False,
        "properties": {
            "payload": {"type": "object"},
            "key_id": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
            "signature": {"type": "string", "description": "base64url Ed25519 signature (64 bytes)"},
        },
    }
}
