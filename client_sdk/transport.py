"""HTTP transport to the aggregator (``requests``): config fetch and batch upload.

Retries (docs/wire.md 7.4): only network errors, timeouts, ``408``, ``429``
and ``5xx``; any other answer is final. Waits are capped exponential backoff
with full jitter, ``u * min(max_delay, base_delay * 2^attempt)`` with ``u``
uniform in (0, 1), and never shorter than the server's ``Retry-After``
(seconds or an HTTP date). A ``Retry-After`` longer than ``max_retry_after``
is not slept through: the call gives up at once with a
:class:`TransportError` carrying ``retry_after``, and the client waits that
long before its next attempt.

Uploads are idempotent by report id: a retried batch carries the same ids,
so the aggregator answers ``accepted`` or ``replayed`` and counts each report
once. Log lines name paths, statuses, counts and delays, never report bodies.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import requests

from protocol.errors import OnesidedError, ParameterError, ReportRejected
from protocol.rng import RandomSource, as_rng
from protocol.wire import (
    CONTENT_TYPE_BINARY,
    CONTENT_TYPE_JSON,
    ReportEnvelope,
    ReportResult,
    encode_batch_binary,
    encode_batch_json,
    parse_upload_response,
)

log = logging.getLogger("onesided.client")

RETRY_STATUSES = frozenset({408, 429})
BATCH_FORMATS = ("json", "binary")


class TransportError(OnesidedError):
    """A request failed for good (retries spent, or a final error answer).

    Attributes:
        status: the HTTP status of the last answer (``None``: no answer).
        error_code, field: from the ``{"error", "field", "detail"}`` body, if any.
        attempts: how many requests were made.
        retry_after: seconds the server asked to wait, when it asked.
        retryable: whether the same request may succeed later.
    """

    code = "transport_error"

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        error_code: str | None = None,
        field: str | None = None,
        attempts: int = 0,
        retry_after: float | None = None,
        retryable: bool = True,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.error_code = error_code
        self.field = field
        self.attempts = attempts
        self.retry_after = retry_after
        self.retryable = retryable


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How hard to try one request.

    Attributes:
        max_attempts: requests per call, the first included (``>= 1``).
        base_delay: the first backoff cap, seconds.
        max_delay: the largest backoff cap, seconds.
        max_retry_after: the longest ``Retry-After`` slept through, seconds.
        timeout: per-request timeout, seconds.
    """

    max_attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_retry_after: float = 120.0
    timeout: float = 10.0

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ParameterError("max_attempts", f"must be an integer >= 1, got {self.max_attempts!r}")
        for name in ("base_delay", "max_delay", "max_retry_after", "timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise ParameterError(name, f"must be a finite number >= 0, got {value!r}")
        if self.timeout <= 0:
            raise ParameterError("timeout", f"must be > 0, got {self.timeout}")
        if self.max_delay < self.base_delay:
            raise ParameterError("max_delay", f"must be >= base_delay ({self.base_delay}), got {self.max_delay}")

    def backoff(self, attempt: int, uniform: float) -> float:
        """Full jitter after failed attempt ``attempt`` (0-based): ``u * min(max_delay, base_delay * 2^attempt)``."""
        return uniform * min(self.max_delay, self.base_delay * 2.0 ** min(attempt, 62))


def parse_retry_after(value: str | None, now: float) -> float | None:
    """``Retry-After`` as seconds from ``now`` (delta-seconds or an HTTP date); ``None`` if absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


def _retryable(status: int) -> bool:
    return status in RETRY_STATUSES or 500 <= status <= 599


def _error_body(response: requests.Response) -> tuple[str | None, str | None, str]:
    """``(error code, field, detail)`` of a JSON error body, tolerant of anything else."""
    try:
        body = response.json()
    except ValueError:
        return None, None, f"HTTP {response.status_code}"
    if not isinstance(body, dict):
        return None, None, f"HTTP {response.status_code}"
    code, field, detail = body.get("error"), body.get("field"), body.get("detail")
    return (
        code if isinstance(code, str) else None,
        field if isinstance(field, str) else None,
        detail if isinstance(detail, str) else f"HTTP {response.status_code}",
    )


class Transport:
    """Talks to one aggregator.

    Args:
        server_url: e.g. ``http://127.0.0.1:8080`` (``/v1/...`` is appended).
        retry: the retry policy.
        session: a ``requests.Session`` (or anything with its ``request``);
            one is created (and closed by :meth:`close`) when ``None``.
        sleep, clock: injectable for tests (``time.sleep``, ``time.time``).
        rng: the jitter source (:func:`protocol.rng.as_rng`).
        batch_format: ``"json"`` or ``"binary"`` (docs/wire.md 7.1, 7.2).
    """

    def __init__(
        self,
        server_url: str,
        *,
        retry: RetryPolicy | None = None,
        session: Any = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        rng: RandomSource | int | None = None,
        batch_format: str = "json",
    ) -> None:
        if not isinstance(server_url, str) or not server_url.startswith(("http://", "https://")):
            raise ParameterError("server_url", f"must be an http(s) URL, got {server_url!r}")
        if batch_format not in BATCH_FORMATS:
            raise ParameterError("batch_format", f"must be one of {BATCH_FORMATS}, got {batch_format!r}")
        self.base_url = server_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._owns_session = session is None
        self.session = requests.Session() if session is None else session
        self.sleep = sleep
        self.clock = clock
        self.rng = as_rng(rng)
        self.batch_format = batch_format

    def close(self) -> None:
        if self._owns_session:
            self.session.close()

    def fetch_config(self) -> Any:
        """``GET /v1/config``: the signed document, not yet verified.

        Raises:
            TransportError: retries spent, a final error, or a body that is not JSON.
        """
        response = self._request("GET", "/v1/config")
        try:
            return response.json()
        except ValueError:
            raise TransportError("config is not JSON", status=response.status_code, retryable=False) from None

    def upload(self, reports: Sequence[ReportEnvelope]) -> list[ReportResult]:
        """``POST /v1/reports`` with one batch; one result per report, in order.

        Raises:
            TransportError: retries spent, a whole-batch rejection (``status``
                4xx, ``retryable=False``), or a response that does not match the batch.
        """
        if self.batch_format == "binary":
            data = encode_batch_binary(reports)
            content_type = CONTENT_TYPE_BINARY
        else:
            data = json.dumps(encode_batch_json(reports), separators=(",", ":")).encode("utf-8")
            content_type = CONTENT_TYPE_JSON
        response = self._request("POST", "/v1/reports", data=data, headers={"Content-Type": content_type})
        try:
            results = parse_upload_response(response.json())
        except (ValueError, ReportRejected) as exc:
            raise TransportError(f"malformed upload response: {exc}", status=response.status_code) from None
        if [r.report_id for r in results] != [r.report_id_text for r in reports]:
            raise TransportError("upload response does not match the batch", status=response.status_code)
        return results

    def _request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """One call with retries; returns a 2xx response."""
        url = self.base_url + path
        policy = self.retry
        for attempt in range(policy.max_attempts):
            last = attempt + 1 == policy.max_attempts
            try:
                response = self.session.request(method, url, timeout=policy.timeout, **kwargs)
            except (requests.ConnectionError, requests.Timeout) as exc:
                if last:
                    raise TransportError(
                        f"{method} {path}: {type(exc).__name__} after {attempt + 1} attempts", attempts=attempt + 1
                    ) from None
                self._wait(method, path, attempt, type(exc).__name__, None)
                continue
            status = response.status_code
            if 200 <= status <= 299:
                return response
            code, field, detail = _error_body(response)
            if not _retryable(status):
                raise TransportError(
                    f"{method} {path}: HTTP {status} {code or ''}".rstrip() + f": {detail}",
                    status=status, error_code=code, field=field, attempts=attempt + 1, retryable=False,
                )
            retry_after = parse_retry_after(response.headers.get("Retry-After"), self.clock())
            if last or (retry_after is not None and retry_after > policy.max_retry_after):
                raise TransportError(
                    f"{method} {path}: HTTP {status} after {attempt + 1} attempts",
                    status=status, error_code=code, field=field, attempts=attempt + 1, retry_after=retry_after,
                )
            self._wait(method, path, attempt, f"HTTP {status}", retry_after)
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait(self, method: str, path: str, attempt: int, why: str, retry_after: float | None) -> None:
        delay = self.retry.backoff(attempt, float(self.rng.uniform(1)[0]))
        if retry_after is not None:
            delay = max(delay, retry_after)
        log.info(
            "%s %s attempt %d/%d failed (%s); retrying in %.3f s",
            method, path, attempt + 1, self.retry.max_attempts, why, delay,
        )
        self.sleep(delay)


__all__ = ["RetryPolicy", "Transport", "TransportError", "parse_retry_after"]
