"""Prometheus metrics of the aggregator, safe with several gunicorn workers.

Exposed at ``GET /metrics`` (text format 0.0.4) by :mod:`aggregator.server.api.monitoring`:

* ``onesided_reports_total{status}``: reports answered per status
  (``accepted``, ``replayed``, ``decrypt_error``, ``expired``...);
* ``onesided_reports_clipped_total``: accepted reports of trusted set metrics
  that held more than ``max_items`` items and kept ``max_items`` of them
  (their result's ``detail`` says ``clipped``);
* ``onesided_batches_rejected_total{reason}``: whole batches refused (400,
  413, 415, 408 by error code);
* ``onesided_request_seconds{endpoint,method,status}``: request latency (histogram);
  ``endpoint`` is the route's rule and ``method`` one of :data:`METHODS`, both
  ``other`` for anything else, so made-up paths and methods cannot grow
  ``/metrics`` (every label takes a bounded set of values);
* ``onesided_requests_in_flight``: requests being handled (the backlog inside
  the workers; summed over processes);
* ``onesided_decode_pending``: analysts' fits waiting for or running in a
  decode helper;
* ``onesided_clock_suspect``: 1 while most reports are refused by the
  server's clock (:mod:`aggregator.server.clock_watch`);
* at scrape time, from the answering process: ``onesided_dependency_up{dependency}``
  (``database``, ``keys``: 1 up, 0 away), ``onesided_db_pool_connections{state}``
  (``checked_out``, ``idle``), ``onesided_build_info{version,python}`` (always 1)
  and prometheus_client's ``process_*`` (CPU, memory, open files).

With ``PROMETHEUS_MULTIPROC_DIR`` set (an empty folder, before the server
starts; ``onesided serve`` passes it to its workers), each process writes
its values to files there and ``/metrics`` sums them (prometheus_client's
multiprocess mode); ``onesided serve`` marks a dead worker's files. Without
it, one process's own registry is served.
"""

from __future__ import annotations

import os
import time
from typing import Any

from flask import Flask, Response, g, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
    multiprocess,
)
from prometheus_client.registry import Collector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER = "other"

REPORTS = Counter("onesided_reports", "Reports answered, by per-report status", ["status"])
CLIPPED = Counter("onesided_reports_clipped", "Accepted trusted reports that kept max_items of more items")
BATCHES_REJECTED = Counter("onesided_batches_rejected", "Whole batches refused, by error code", ["reason"])
LATENCY = Histogram(
    "onesided_request_seconds", "Request latency", ["endpoint", "method", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
IN_FLIGHT = Gauge("onesided_requests_in_flight", "Requests being handled", multiprocess_mode="livesum")
CLOCK_SUSPECT = Gauge("onesided_clock_suspect", "1 while most reports are refused by the server's clock",
                      multiprocess_mode="livemax")
DECODE_PENDING = Gauge("onesided_decode_pending", "Analysts' fits queued or running", multiprocess_mode="livesum")


def count_statuses(statuses: list[str]) -> None:
    """Add one batch's per-report statuses."""
    for status in set(statuses):
        REPORTS.labels(status=status).inc(statuses.count(status))


def count_clipped(details: list[str | None]) -> int:
    """Add and return the accepted reports clipped to their metric's ``max_items`` (detail ``clipped: ...``)."""
    clipped = sum(1 for detail in details if detail is not None and detail.startswith("clipped:"))
    if clipped:
        CLIPPED.inc(clipped)
    return clipped


def _before() -> None:
    g.onesided_started = time.perf_counter()
    IN_FLIGHT.inc()


def _after(response: Response) -> Response:
    started = g.pop("onesided_started", None)
    if started is None:
        return response
    IN_FLIGHT.dec()
    endpoint = request.url_rule.rule if request.url_rule is not None else OTHER
    method = request.method if request.method in METHODS else OTHER
    status = response.status_code if 100 <= response.status_code <= 599 else OTHER
    LATENCY.labels(endpoint=endpoint, method=method, status=str(status)).observe(time.perf_counter() - started)
    if endpoint == "/v1/reports" and response.status_code >= 400 and response.is_json:
        body: Any = response.get_json(silent=True)
        reason = body.get("error") if isinstance(body, dict) else None
        BATCHES_REJECTED.labels(reason=str(reason or response.status_code)).inc()
    return response


def instrument(app: Flask) -> None:
    """Time every request of ``app`` and count it in flight."""
    app.before_request(_before)
    app.after_request(_after)


def exposition(live: Collector | None = None) -> tuple[bytes, str]:
    """The metrics text (all processes' in multiprocess mode) and its content type.

    ``live``: metrics computed at scrape time by the answering process
    (dependencies, connection pool, build), appended. In multiprocess mode
    the ``process_*`` metrics are those of the process that answered.
    """
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        ProcessCollector(registry=registry)
        text = generate_latest(registry)
    else:
        text = generate_latest(REGISTRY)
    if live is not None:
        extra = CollectorRegistry(auto_describe=False)
        extra.register(live)
        text += generate_latest(extra)
    return text, CONTENT_TYPE_LATEST


def worker_exited(pid: int) -> None:
    """gunicorn's ``child_exit`` hook: drop the live gauges of a dead worker."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(pid)
