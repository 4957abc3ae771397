"""Request rate limits per client address and per bearer token: 429 ``too_many_requests`` with ``Retry-After``.

A token bucket per key (the client's address, after ``trusted_proxies``;
the SHA-256 of the bearer token, never the token): ``rate`` requests a
second on average, bursts of ``2 x rate``. Each worker process keeps its
own buckets (the limits hold per process: with ``N`` workers a client may
reach ``N`` times the rate). At most :data:`MAX_KEYS` keys are tracked per
limit; the least recently seen are forgotten first (a forgotten key starts
with a full bucket). ``/v1/livez``, ``/v1/readyz``, ``/v1/health`` and
``/metrics`` are not limited (probes and scrapers). A rate of 0 turns a
limit off (the default: set them for an open deployment, docs/operations.md).

>>> bucket = TokenBuckets(rate=1.0, now=lambda: 0.0)
>>> bucket.wait("a"), bucket.wait("a"), bucket.wait("a")
(0.0, 0.0, 1.0)
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from flask import Flask, request

from aggregator.server.auth import bearer_token
from aggregator.server.errors import ApiError

MAX_KEYS = 100_000
BURST = 2.0  # a bucket holds this many seconds' worth of requests
UNLIMITED_PATHS = frozenset({"/v1/livez", "/v1/readyz", "/v1/health", "/metrics"})


class TooManyRequests(ApiError):
    """A client or token over its request rate (429 with ``Retry-After``)."""

    status = 429
    code = "too_many_requests"

    def __init__(self, field: str, detail: str, retry_after: int) -> None:
        super().__init__(field, detail)
        self.retry_after = retry_after


class TokenBuckets:
    """Token buckets by key; thread-safe; ``now`` in monotonic seconds (injectable)."""

    def __init__(self, rate: float, now: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate * BURST)
        self._now = now
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, when)
        self._lock = threading.Lock()

    def wait(self, key: str) -> float:
        """Take one request from ``key``'s bucket: 0.0 if allowed, else the seconds until it would be."""
        now = self._now()
        with self._lock:
            tokens, when = self._buckets.pop(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - when) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                wait = 0.0
            else:
                self._buckets[key] = (tokens, now)
                wait = (1.0 - tokens) / self.rate
            while len(self._buckets) > MAX_KEYS:
                self._buckets.popitem(last=False)
        return wait


def install_rate_limits(app: Flask, per_address: float, per_token: float) -> None:
    """Refuse requests over ``per_address`` / ``per_token`` a second (0: that limit is off) with 429."""
    limits: list[tuple[str, TokenBuckets, Callable[[], str | None]]] = []
    if per_address > 0:
        limits.append(("address", TokenBuckets(per_address), lambda: request.remote_addr))
    if per_token > 0:
        limits.append(("authorization", TokenBuckets(per_token), _token_key))
    if not limits:
        return

    def check() -> None:
        if request.path in UNLIMITED_PATHS:
            return
        for field, buckets, key_of in limits:
            key = key_of()
            if key is None:
                continue
            wait = buckets.wait(key)
            if wait > 0:
                raise TooManyRequests(field, f"more than {buckets.rate:g} requests a second from this "
                                             f"{'address' if field == 'address' else 'token'}; retry later",
                                      retry_after=max(1, math.ceil(wait)))

    app.before_request(check)


def _token_key() -> str | None:
    token = bearer_token()
    return None if token is None else hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()
