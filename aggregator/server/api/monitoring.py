"""``GET /metrics``: Prometheus metrics (outside ``/v1``; see :mod:`aggregator.server.monitoring`).

Public like ``/v1/health``: the counters say how the service runs, nothing
about any report's content; block the path at the reverse proxy if the
scraper has its own network.
"""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Iterator
from typing import Any

from flask import Blueprint, Flask, Response, current_app
from prometheus_client.core import GaugeMetricFamily, Metric

from aggregator.server.context import EXTENSION_KEY, AppState
from aggregator.server.monitoring import exposition

blueprint = Blueprint("monitoring", __name__)


class LiveMetrics:
    """What the answering process knows at scrape time: its dependencies, its connection pool, the build."""

    def __init__(self, app: Flask) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        build = GaugeMetricFamily("onesided_build_info", "The running build (always 1)", labels=["version", "python"])
        build.add_metric([_version(), platform.python_version()], 1)
        yield build
        up = GaugeMetricFamily("onesided_dependency_up", "1 while the dependency answers", labels=["dependency"])
        state = self.app.extensions.get(EXTENSION_KEY)
        built = isinstance(state, AppState)
        up.add_metric(["keys"], int(built))
        up.add_metric(["database"], int(isinstance(state, AppState) and _database_up(state)))
        yield up
        if isinstance(state, AppState):
            pool = GaugeMetricFamily("onesided_db_pool_connections", "Database connections of this process",
                                     labels=["state"])
            checked_out, idle = _pool_sizes(state)
            pool.add_metric(["checked_out"], checked_out)
            pool.add_metric(["idle"], idle)
            yield pool


def _version() -> str:
    try:
        return importlib.metadata.version("onesided")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _database_up(state: AppState) -> bool:
    try:
        state.storage.check_file()
        state.storage.schema_version()
    except Exception:  # noqa: BLE001 - any failure means "not up" here; the requests say why
        return False
    return True


def _pool_sizes(state: AppState) -> tuple[int, int]:
    pool = state.storage.engine.pool
    checked_out = getattr(pool, "checkedout", None)
    idle = getattr(pool, "checkedin", None)
    return (checked_out() if callable(checked_out) else 0), (idle() if callable(idle) else 0)


@blueprint.get("/metrics")
def metrics() -> Response:
    text, content_type = exposition(LiveMetrics(current_app))
    return Response(text, content_type=content_type)


OPENAPI_PATHS: dict[str, Any] = {}  # not part of the /v1 API
