"""HTTP transport to the aggregator (``requests``): config fetch and batch upload.

Retries (docs/wire.md 7.4): only network errors, timeouts, ``408``, ``429``
and ``5xx``; any other answer is final. Waits are capped exponential backoff
with full jitter, ``u * min(max_delay, base_delay * 2^attempt)`` with ``u``
uniform in (0, 1), and never shorter than the server's ``Retry-After``
(seconds or an HTTP date). A ``Retry-After`` longer than ``max_retry_after``
is not slept through: the call gives up at once with a
:class:`TransportError` carrying ``retry_after``, and the client waits that
long before its next attempt.

Deadlines: :meth:`Transport.fetch_config` and :meth:`Transport.upload` take
an overall ``deadline`` (a :func:`time.monotonic` instant): no request
starts after it, each request's timeout is capped by the time left, a
backoff that would end past it is not slept (the call gives up at once with
a retryable :class:`TransportError`, field ``deadline``), and
:meth:`Transport.stop_by` moves every running call's deadline earlier (the
client's shutdown). The default ``sleep`` is interruptible by it.

Bounded reads: responses are read with ``stream=True`` and refused past a
limit (``max_config_bytes`` for the config, ``max_response_bytes`` for
upload answers; error bodies past :data:`MAX_ERROR_BODY` are ignored): a
non-retryable :class:`TransportError` naming the limit (field).

Uploads are idempotent by report id: a retried batch carries the same ids,
so the aggregator answers ``accepted`` or ``replayed`` and counts each report
once. Log lines name paths, statuses, counts and delays, never report bodies.
"""

from __future__ import annotations

import email.utils
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import requests

from protocol.errors import OnesidedError, ParameterError, ReportRejected
from protocol.rng import RandomSource, as_rng
from protocol.validation import check_int, check_number
from protocol.wire import (
    ANSWER_VERSION,
    CONTENT_TYPE_BINARY,
    CONTENT_TYPE_JSON,
    WIRE_HEADER,
    ReportEnvelope,
    UploadResults,
    encode_batch_binary,
    encode_batch_json,
    parse_upload_response,
)

from .servertime import http_date

log = logging.getLogger("onesided.client")

RETRY_STATUSES = frozenset({408, 429})
BATCH_FORMATS = ("json", "binary")
MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_RESPONSE_BYTES = 1024 * 1024  # an upload answer: about 100 bytes per report of the batch
MAX_ERROR_BODY = 64 * 1024
_CHUNK = 64 * 1024


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
        retry_after_cap: the longest a server's ``Retry-After`` may stop a client from
            sending, seconds (a longer one is read as this; default 5 minutes).
        timeout: per-request timeout, seconds.
    """

    max_attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_retry_after: float = 120.0
    retry_after_cap: float = 300.0
    timeout: float = 10.0

    def __post_init__(self) -> None:
        check_int("max_attempts", self.max_attempts, low=1)
        for name in ("base_delay", "max_delay", "max_retry_after", "retry_after_cap", "timeout"):
            value = getattr(self, name)
            check_number(name, value, nonnegative=True)
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
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if seconds >= 0 else None  # NaN compares False: None

    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


def _retryable(status: int) -> bool:
    return status in RETRY_STATUSES or 500 <= status <= 599


def _error_body(status: int, body: bytes | None) -> tuple[str | None, str | None, str]:
    """``(error code, field, detail)`` of a JSON error body, tolerant of anything else."""
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        return None, None, f"HTTP {status}"
    code, field, detail = parsed.get("error"), parsed.get("field"), parsed.get("detail")
    return (
        code if isinstance(code, str) else None,
        field if isinstance(field, str) else None,
        detail if isinstance(detail, str) else f"HTTP {status}",
    )


def _check_limit(name: str, value: Any) -> int:
    return check_int(name, value, low=1)


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
        max_config_bytes: the largest config accepted (default 4 MiB).
        max_response_bytes: the largest upload answer accepted (default 1 MiB).
        monotonic: the clock of deadlines (``time.monotonic``).
        server_time: called with the server's clock (Unix seconds) read from an upload answer
            that matched its batch (its ``server_time``, else its ``Date``); a config's ``Date``
            is in :attr:`last_date`, for the caller to trust once the config verifies. Error
            answers (a proxy's, a captive portal's) teach nothing.

    ``sleep=None`` waits on an event that :meth:`stop_by` sets, so a
    shutdown cuts a backoff short.
    """

    def __init__(
        self,
        server_url: str,
        *,
        retry: RetryPolicy | None = None,
        session: Any = None,
        sleep: Callable[[float], object] | None = None,
        clock: Callable[[], float] = time.time,
        rng: RandomSource | int | None = None,
        batch_format: str = "json",
        max_config_bytes: int = MAX_CONFIG_BYTES,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        monotonic: Callable[[], float] = time.monotonic,
        server_time: Callable[[float], None] | None = None,
    ) -> None:
        if not isinstance(server_url, str) or not server_url.startswith(("http://", "https://")):
            raise ParameterError("server_url", f"must be an http(s) URL, got {server_url!r}")
        if batch_format not in BATCH_FORMATS:
            raise ParameterError("batch_format", f"must be one of {BATCH_FORMATS}, got {batch_format!r}")
        self.base_url = server_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._owns_session = session is None
        self.session = requests.Session() if session is None else session
        self._wake = threading.Event()
        self.sleep: Callable[[float], object] = self._interruptible_sleep if sleep is None else sleep
        self.clock = clock
        self.monotonic = monotonic
        self.rng = as_rng(rng)
        self.batch_format = batch_format
        self.max_config_bytes = _check_limit("max_config_bytes", max_config_bytes)
        self.max_response_bytes = _check_limit("max_response_bytes", max_response_bytes)
        self._cutoff: float | None = None
        self._server_time = server_time
        self.last_date: float | None = None  # the Date of the last 2xx answer (the config's: trusted once verified)

    def close(self) -> None:
        if self._owns_session:
            self.session.close()

    def stop_by(self, when: float | None) -> None:
        """Every call, running or later, ends by ``when`` (monotonic; ``None``: no cutoff).

        A default sleep already running is cut short (its loop then re-checks
        the time left); later sleeps are shorter than the time left anyway.
        """
        self._cutoff = when
        woken, self._wake = self._wake, threading.Event()
        woken.set()

    def _interruptible_sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)

    def fetch_config(self, *, deadline: float | None = None) -> Any:
        """``GET /v1/config``: the signed document, not yet verified.

        Raises:
            TransportError: retries spent, the deadline passed, a final error,
                a body over ``max_config_bytes`` or one that is not JSON.
        """
        status, body = self._request("GET", "/v1/config", limit=("max_config_bytes", self.max_config_bytes),
                                     deadline=deadline)
        try:
            return json.loads(body)
        except ValueError:
            raise TransportError("config is not JSON", status=status, retryable=False) from None

    def upload(self, reports: Sequence[ReportEnvelope], *, deadline: float | None = None) -> UploadResults:
        """``POST /v1/reports`` with one batch; one result per report, in order.

        Raises:
            TransportError: retries spent, the deadline passed, a whole-batch
                rejection (``status`` 4xx, ``retryable=False``), an answer over
                ``max_response_bytes``, or one that does not match the batch.
        """
        if self.batch_format == "binary":
            data = encode_batch_binary(reports)
            content_type = CONTENT_TYPE_BINARY
        else:
            data = json.dumps(encode_batch_json(reports), separators=(",", ":")).encode("utf-8")
            content_type = CONTENT_TYPE_JSON
        status, body = self._request(
            "POST", "/v1/reports", limit=("max_response_bytes", self.max_response_bytes), deadline=deadline,
            data=data, headers={"Content-Type": content_type, WIRE_HEADER: ANSWER_VERSION},
        )
        try:
            answer = json.loads(body)
            results = parse_upload_response(answer)
        except (ValueError, ReportRejected) as exc:
            raise TransportError(f"malformed upload response: {exc}", status=status) from None
        if [r.report_id for r in results] != [r.report_id_text for r in reports]:
            raise TransportError("upload response does not match the batch", status=status)
        # the answer matched the batch: it is the aggregator's, not a proxy's or a portal's
        learned = float(results.server_time) if results.server_time is not None else self.last_date
        if learned is not None and self._server_time is not None:
            self._server_time(learned)
        return results

    def _time_left(self, deadline: float | None) -> float | None:
        """Seconds until the earlier of ``deadline`` and the cutoff (``None``: no limit)."""
        ends = [t for t in (deadline, self._cutoff) if t is not None]
        return None if not ends else min(ends) - self.monotonic()

    def _request(
        self, method: str, path: str, *, limit: tuple[str, int], deadline: float | None, **kwargs: Any
    ) -> tuple[int, bytes]:
        """One call with retries; returns the status and body of a 2xx answer."""
        url = self.base_url + path
        policy = self.retry
        for attempt in range(policy.max_attempts):
            last = attempt + 1 == policy.max_attempts
            timeout = self._timeout(method, path, attempt, deadline)
            try:
                response = self.session.request(method, url, timeout=timeout, stream=True, **kwargs)
                status = response.status_code
                ok = 200 <= status <= 299
                body = self._read(response, f"{method} {path}", limit if ok else ("error body", MAX_ERROR_BODY),
                                  deadline, strict=ok)
            except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
                if last:
                    raise TransportError(
                        f"{method} {path}: {type(exc).__name__} after {attempt + 1} attempts", attempts=attempt + 1
                    ) from None
                self._wait(method, path, attempt, type(exc).__name__, None, deadline)
                continue
            if ok:
                self.last_date = self._date(response)
                return status, body or b""
            code, field, detail = _error_body(status, body)
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
            self._wait(method, path, attempt, f"HTTP {status}", retry_after, deadline)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _date(response: Any) -> float | None:
        """The answer's ``Date`` (the server's clock), ``None`` when absent or unreadable."""
        headers = getattr(response, "headers", None)
        return http_date(headers.get("Date")) if headers is not None else None

    def _timeout(self, method: str, path: str, attempt: int, deadline: float | None) -> float:
        """The next request's timeout: the policy's, capped by the time left; none left raises."""
        left = self._time_left(deadline)
        if left is None:
            return self.retry.timeout
        if left <= 0:
            raise TransportError(f"{method} {path}: deadline passed after {attempt} attempts", field="deadline",
                                 attempts=attempt)
        return min(self.retry.timeout, left)

    def _read(
        self, response: Any, what: str, limit: tuple[str, int], deadline: float | None, *, strict: bool
    ) -> bytes | None:
        """The body, read in chunks up to ``limit``; past it: an error (``strict``) or ``None``.

        The deadline is checked between chunks (a slow-drip answer cannot hold the call).
        """
        name, most = limit
        try:
            declared = response.headers.get("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > most:
                return self._too_large(what, name, most) if strict else None
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_content(chunk_size=_CHUNK):
                size += len(chunk)
                if size > most:
                    return self._too_large(what, name, most) if strict else None
                chunks.append(chunk)
                left = self._time_left(deadline)
                if left is not None and left <= 0:
                    raise requests.Timeout("deadline passed while reading the answer")
            return b"".join(chunks)
        finally:
            response.close()

    @staticmethod
    def _too_large(what: str, name: str, most: int) -> bytes:
        raise TransportError(f"{what}: answer larger than {name} ({most} bytes); refused", field=name,
                             retryable=False)

    def _wait(
        self, method: str, path: str, attempt: int, why: str, retry_after: float | None, deadline: float | None
    ) -> None:
        delay = self.retry.backoff(attempt, float(self.rng.uniform(1)[0]))
        if retry_after is not None:
            delay = max(delay, retry_after)
        left = self._time_left(deadline)
        if left is not None and delay >= left:
            raise TransportError(
                f"{method} {path}: attempt {attempt + 1} failed ({why}); the next try ({delay:.3f} s) "
                "would pass the deadline", field="deadline", attempts=attempt + 1, retry_after=retry_after,
            )
        log.info(
            "%s %s attempt %d/%d failed (%s); retrying in %.3f s",
            method, path, attempt + 1, self.retry.max_attempts, why, delay,
        )
        self.sleep(delay)


__all__ = ["RetryPolicy", "Transport", "TransportError", "parse_retry_after"]
