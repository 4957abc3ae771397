"""An in-memory stand-in for the aggregator's client endpoints, for tests.

:class:`FakeAggregator` answers ``GET /v1/config`` (signed) and
``POST /v1/reports`` (opened, validated, stored once per report id) like
the real server does on the wire (docs/wire.md 7 and 8), and can be told to
fail: ``fail_next(n, status=503)`` makes the next ``n`` requests fail, after
storing the batch or not. Pass it as the client's ``session``. It keeps the
opened payloads so a test can compare what was sent with what was counted.

Given a ``clock`` (the server's, Unix seconds), it also answers like the
server's clock would: a ``Date`` header on every answer, ``too_early`` for a
report whose window starts after its time (with ``retry_after`` and
``server_time`` for a client that sends ``Onesided-Wire: 2`` or later, docs/wire.md
7.4).

It is not the aggregator: no database, no decoding, no rounds logic beyond
serving signed announcements.
"""

from __future__ import annotations

import email.utils
import json
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt
import requests

from protocol.crypto import AggregatorKeys, b64e
from protocol.errors import ReportRejected
from protocol.params import MetricParams
from protocol.wire import (
    MAX_RETRY_AFTER,
    STATUS_ACCEPTED,
    STATUS_OUTDATED_CONFIG,
    STATUS_REPLAYED,
    STATUS_TOO_EARLY,
    STATUS_UNKNOWN_METRIC,
    WIRE_HEADER,
    MetricEntry,
    ReportEnvelope,
    ReportPayload,
    ReportResult,
    RoundAnnouncement,
    answer_version,
    build_config_payload,
    open_report,
    parse_batch_binary,
    parse_batch_json,
    upload_response,
)


@dataclass
class FakeResponse:
    """The part of ``requests.Response`` the transport reads.

    Attributes:
        status_code, headers: as in ``requests``.
        body: a JSON value, served as its compact JSON text (``None``: no body).
        chunks: the raw body instead of ``body`` (any iterable of bytes, e.g.
            a generator of a huge answer, read only as far as the reader goes).
        read_bytes: how many body bytes the reader took.
        closed: whether the reader closed the response.
    """

    status_code: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    chunks: Iterable[bytes] | None = None
    read_bytes: int = 0
    closed: bool = False

    def json(self) -> Any:
        if self.body is None:
            raise ValueError("no JSON body")
        return self.body

    def iter_content(self, chunk_size: int = 1) -> Iterator[bytes]:
        """The body in pieces of at most ``chunk_size`` bytes (``requests``' streaming read)."""
        pieces: Iterable[bytes] = self.chunks if self.chunks is not None else (
            [] if self.body is None else [json.dumps(self.body, separators=(",", ":")).encode("utf-8")]
        )
        for piece in pieces:
            for start in range(0, len(piece), chunk_size):
                part = piece[start:start + chunk_size]
                self.read_bytes += len(part)
                yield part

    def close(self) -> None:
        self.closed = True


@dataclass
class _Failure:
    status: int | None
    retry_after: str | None
    store_first: bool


class FakeAggregator:
    """Config and report endpoints in memory, with scripted failures.

    Args:
        metrics: the metrics it serves.
        keys: its keys (fresh ones when ``None``).
        max_reports: the batch limit (``413 too_many_reports`` beyond).
    """

    def __init__(
        self, metrics: Sequence[MetricParams], *, keys: AggregatorKeys | None = None, max_reports: int = 1000
    ) -> None:
        self.keys = keys or AggregatorKeys.generate()
        self.entries = {m.name: MetricEntry.of(m) for m in metrics}
        self.max_reports = max_reports
        self.rounds: list[dict[str, Any]] = []
        self.stored: dict[tuple[str, str], tuple[ReportEnvelope, ReportPayload]] = {}
        self.requests: list[tuple[str, str]] = []
        self.timeouts: list[float | None] = []
        self._failures: deque[_Failure] = deque()
        self.signer = self.keys
        self.issued_at = 0  # the config's serial (tests move it to replay an older config)
        self.replayed = 0  # reports sent again after they were stored (answered replayed)
        self.sync_interval: int | None = None  # the re-sync schedule the config announces (None: none)
        self.clock: Callable[[], float] | None = None  # the server's clock (None: no clock answers)

    @property
    def sign_public(self) -> str:
        """The Ed25519 key a client pins (base64url)."""
        return b64e(self.keys.sign_public_raw)

    def fail_next(
        self, count: int, *, status: int | None = 503, retry_after: str | None = None, store_first: bool = False
    ) -> None:
        """The next ``count`` requests fail: HTTP ``status``, or a connection error when ``None``.

        ``store_first``: a report batch is stored before the failure (the answer is lost).
        """
        self._failures.extend(_Failure(status, retry_after, store_first) for _ in range(count))

    def open_round(self, announcement: RoundAnnouncement) -> None:
        self.rounds.append(self.keys.sign(announcement.to_payload()))

    def config_document(self) -> dict[str, Any]:
        payload = build_config_payload(
            issued_at=self.issued_at, aggregator=self.keys.public_info(), metrics=list(self.entries.values()),
            rounds=self.rounds, sync_interval=self.sync_interval,
        )
        return self.signer.sign(payload)

    # --- the session interface ------------------------------------------------

    def request(self, method: str, url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None,
                timeout: float | None = None, stream: bool = False) -> FakeResponse:
        path = urlsplit(url).path
        self.requests.append((method, path))
        self.timeouts.append(timeout)
        failure = self._failures.popleft() if self._failures else None
        if failure is not None and not failure.store_first:
            return self._fail(failure)
        if (method, path) == ("GET", "/v1/config"):
            response = FakeResponse(200, self.config_document())
        elif (method, path) == ("POST", "/v1/reports"):
            version = answer_version((headers or {}).get(WIRE_HEADER))
            response = self._upload(data or b"", (headers or {}).get("Content-Type", ""), version)
        else:
            response = FakeResponse(404, {"error": "not_found", "field": None, "detail": path})
        response = self._fail(failure) if failure is not None else response
        if self.clock is not None:
            response.headers["Date"] = email.utils.formatdate(self.clock(), usegmt=True)
        return response

    def close(self) -> None:
        """Nothing to close (the session interface)."""

    def _fail(self, failure: _Failure) -> FakeResponse:
        if failure.status is None:
            raise requests.ConnectionError("scripted connection failure")
        headers = {} if failure.retry_after is None else {"Retry-After": failure.retry_after}
        return FakeResponse(failure.status, {"error": "unavailable", "field": None, "detail": "scripted"}, headers)

    def _upload(self, data: bytes, content_type: str, version: int = 1) -> FakeResponse:
        try:
            if content_type.startswith("application/vnd.onesided.batch"):
                batch = parse_batch_binary(data, max_reports=self.max_reports)
            else:
                batch = parse_batch_json(json.loads(data), max_reports=self.max_reports)
        except ReportRejected as exc:
            status = 413 if exc.code == "too_many_reports" else 400
            return FakeResponse(status, {"error": exc.code, "field": exc.field, "detail": exc.reason})
        results = [self._store(r, version >= 2) for r in batch]
        server_time = None if self.clock is None or version < 2 else int(self.clock())
        clipped = 0 if version >= 3 else None  # it keeps every item: nothing is ever clipped here
        return FakeResponse(200, upload_response(results, server_time=server_time, clipped=clipped))

    def _store(self, report: ReportEnvelope, wire2: bool = False) -> ReportResult:
        rid = report.report_id_text
        if self.clock is not None and report.window > self.clock():
            wait = min(MAX_RETRY_AFTER, max(1, math.ceil(report.window - self.clock())))
            return ReportResult(report_id=rid, status=STATUS_TOO_EARLY, field="window", detail="starts in the future",
                                retry_after=wait if wire2 else None)
        entry = self.entries.get(report.metric)
        if entry is None:
            return ReportResult(report_id=rid, status=STATUS_UNKNOWN_METRIC, field="metric")
        if report.params_digest != entry.digest:
            return ReportResult(report_id=rid, status=STATUS_OUTDATED_CONFIG, field="params_digest")
        if (report.metric, rid) in self.stored:
            self.replayed += 1
            return ReportResult(report_id=rid, status=STATUS_REPLAYED)
        try:
            payload = open_report(
                report, seal_private=self.keys.seal_private, num_bits=entry.params.num_bits,
                num_cohorts=entry.params.num_cohorts, allow_plain=False,
            )
        except ReportRejected as exc:
            return ReportResult.from_error(report.report_id, exc)
        self.stored[(report.metric, rid)] = (report, payload)
        return ReportResult(report_id=rid, status=STATUS_ACCEPTED)

    def reset(self) -> None:
        """Forget every client and round (stored reports, requests, scripted failures): a fresh server.

        The keys and metrics stay, so one aggregator can serve many clients
        in turn (the auditor runs each of its clients against a reset one).
        """
        self.rounds.clear()
        self.stored.clear()
        self.requests.clear()
        self.timeouts.clear()
        self._failures.clear()
        self.replayed = 0

    # --- what a test checks --------------------------------------------------------

    def payloads(self, metric: str) -> list[ReportPayload]:
        return [p for (m, _), (_, p) in self.stored.items() if m == metric]

    def bit_counts(self, metric: str) -> npt.NDArray[np.int64]:
        """Ones per (cohort, bit) over the stored reports of ``metric``."""
        params = self.entries[metric].params
        counts = np.zeros((params.num_cohorts, params.num_bits), dtype=np.int64)
        for payload in self.payloads(metric):
            counts[payload.cohort] += payload.bits
        return counts


def simulate_crash(client: Any) -> None:
    """What the death of its process does to a :class:`~client_sdk.Client`, for restart tests.

    Nothing is saved, sent or closed; the background sender is told to stop
    and the operating system's part is done: the state file's lock is
    released (the kernel releases it when a process dies), so a new client
    can open the same state, as the next launch of the app would. The
    crashed object must not be used again.
    """
    client._sender.stopping.set()
    client._background.unregister_exit()
    client._file_lock.abandon()  # close the descriptor: the lock goes with it


__all__ = ["FakeAggregator", "FakeResponse", "simulate_crash"]
