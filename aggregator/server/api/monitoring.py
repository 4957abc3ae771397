"""``GET /metrics``: Prometheus metrics (outside ``/v1``; see :mod:`aggregator.server.monitoring`).

Public like ``/v1/health``: the counters say how the service runs, nothing
about any report's content; block the path at the reverse proxy if the
scraper has its own network.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response

from aggregator.server.monitoring import exposition

blueprint = Blueprint("monitoring", __name__)


@blueprint.get("/metrics")
def metrics() -> Response:
    text, content_type = exposition()
    return Response(text, content_type=content_type)


OPENAPI_PATHS: dict[str, Any] = {}  # not part of the /v1 API
