"""The sender: batches, uploads, backoff answers, the background thread (posthog's ``Consumer``).

:class:`~client_sdk.Client` only queues; its :class:`Sender` takes what is
queued, seals it (with the key objects kept since ``report()``, or the
queued bytes after a restart), uploads it in batches, and removes from the
queue what the aggregator answered for. Nothing here raises into the host
app: every error goes to the client's ``on_error`` and is returned in the
:class:`FlushResult`.
"""

from __future__ import annotations

import itertools
import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from protocol.errors import ReportRejected
from protocol.wire import (
    STATUS_ACCEPTED,
    STATUS_OUTDATED_CONFIG,
    STATUS_REPLAYED,
    ReportEnvelope,
    ReportResult,
)

from .queue import ReportQueue, envelope_of
from .transport import Transport, TransportError

log = logging.getLogger("onesided.client")

# Whole-batch answers after which resending the same batch cannot help: the batch is dropped.
_POISON_STATUSES = frozenset({400, 415, 422})
_DELIVERED = frozenset({STATUS_ACCEPTED, STATUS_REPLAYED})


@dataclass(frozen=True, kw_only=True)
class FlushResult:
    """What one :meth:`Client.flush` did.

    Attributes:
        delivered: reports the aggregator stored (``accepted``) or already had (``replayed``).
        rejected: reports with a final non-delivered status (dropped; see ``on_error``).
        dropped: reports discarded because their whole batch was refused.
        remaining: reports still queued.
        deferred: nothing was tried: the server's ``Retry-After`` has not passed,
            or another flush was still running at the deadline.
        error: the error that stopped sending early, if any (a passed
            deadline is a :class:`TransportError` with field ``deadline``).
    """

    delivered: int = 0
    rejected: int = 0
    dropped: int = 0
    remaining: int = 0
    deferred: bool = False
    error: Exception | None = None


MAX_SYNC_BACKOFF = 3600.0  # the wait between failed background syncs grows to this
FIRST_SYNC_BACKOFF = 15.0


class SyncSchedule:
    """When the background sender syncs next: at once, then every ``interval`` seconds (or the config's
    own ``sync_interval``), sooner after an ``outdated_config`` answer, with jittered backoff after a
    failure (15 s doubling, at most ``interval`` and an hour). Wall-clock seconds."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.next_at = 0.0  # 0: now
        self.failures = 0

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def synced(self, now: float, announced: int | None) -> None:
        self.failures = 0
        self.next_at = now + (announced or self.interval)

    def failed(self, now: float, jitter: float) -> None:
        """A failed sync; ``jitter`` uniform in [0, 1) spreads clients that failed together."""
        self.failures += 1
        wait = min(MAX_SYNC_BACKOFF, self.interval, FIRST_SYNC_BACKOFF * 2 ** min(self.failures, 16))
        self.next_at = now + wait * (0.5 + 0.5 * jitter)

    def now(self) -> None:
        """Sync at the next turn (the aggregator's config changed)."""
        self.next_at = 0.0


class HeldKeysLike(Protocol):
    def get(self, report_id: str) -> X25519PrivateKey | None: ...
    def forget(self, report_ids: Iterable[str]) -> None: ...


class SenderHost(Protocol):
    """What the sender uses of its client: the queue and its lock, the keys held, the ledger's bookkeeping."""

    _lock: threading.RLock
    _held: HeldKeysLike

    @property
    def _queue(self) -> ReportQueue: ...

    def save(self) -> None: ...
    def _config_outdated(self) -> None: ...
    def _drop(self, ids: Sequence[str], why: str, notice: str, *, oldest: bool = False) -> int: ...
    def _notify(self, error: Exception) -> None: ...


class Sender:
    """Uploads a client's queue: :meth:`flush` on demand, and a background thread (:meth:`start`).

    Args:
        host: the client (:class:`SenderHost`).
        transport: its HTTP transport.
        batch_size: reports per upload (halved on a ``413``).
        clock: wall time (``Retry-After``); monotonic: deadlines.
    """

    def __init__(self, host: SenderHost, transport: Transport, *, batch_size: int,
                 clock: Callable[[], float], monotonic: Callable[[], float]) -> None:
        # A proxy, not a reference: no cycle with the client, so a client the app drops is freed at
        # once (and its state lock with it), as a process's end would free it.
        self._host: SenderHost = cast(SenderHost, weakref.proxy(host))
        self._transport = transport
        self.batch_size = batch_size
        self._clock = clock
        self._monotonic = monotonic
        self._sending = threading.Lock()  # one flush at a time
        self._not_before = 0.0
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def flush(self, until: float | None, *, wait: bool) -> FlushResult:
        """Send the queue by the monotonic instant ``until``; ``wait=False``: skip if a flush is running.

        Never raises: an error ends the flush, goes to the host's ``_notify`` and is returned.
        """
        if not len(self._host._queue):
            return FlushResult()
        if self._clock() < self._not_before:
            return FlushResult(remaining=len(self._host._queue), deferred=True)
        timeout = -1.0 if until is None else max(0.0, until - self._monotonic())
        if not self._sending.acquire(timeout=timeout if wait else 0):
            return FlushResult(remaining=len(self._host._queue), deferred=True)
        delivered = rejected = dropped = 0
        error: Exception | None = None
        try:
            with self._host._lock:
                self._host.save()
                pending = set(self._host._queue.ids())
            while batch := self._next_batch(pending):
                try:
                    results = self._transport.upload(batch, deadline=until)
                except TransportError as exc:
                    dropped += self._after_batch_error(batch, exc)
                    if exc.retryable:
                        raise
                    continue
                ok, bad = self._after_results(results)
                delivered, rejected = delivered + ok, rejected + bad
        except Exception as exc:  # background sending never raises into the app
            error = exc
            self._host._notify(exc)
        finally:
            self._sending.release()
        return FlushResult(
            delivered=delivered, rejected=rejected, dropped=dropped, remaining=len(self._host._queue), error=error
        )

    def _next_batch(self, pending: set[str]) -> list[ReportEnvelope]:
        """Up to ``batch_size`` of the reports in ``pending``, oldest first, sealed; a malformed one is dropped.

        Sealing happens outside the client's lock, so ``report()`` never waits for it.
        """
        with self._host._lock:
            items = list(itertools.islice((r for r in self._host._queue if r.get("report_id") in pending), self.batch_size))
        batch, malformed = [], []
        for item in items:
            try:
                batch.append(envelope_of(item, self._host._held.get(str(item.get("report_id")))))
            except (ReportRejected, ValueError, KeyError, TypeError):
                malformed.append(str(item.get("report_id")))
        if malformed:
            pending.difference_update(malformed)
            with self._host._lock:
                self._host._drop(malformed, "malformed in the queue", "a queued report is malformed and cannot be sent")
                self._host.save()
        return batch

    def _after_batch_error(self, batch: Sequence[ReportEnvelope], exc: TransportError) -> int:
        """Handle a whole-batch failure; returns how many reports were dropped."""
        if exc.retryable:
            if exc.retry_after is not None:
                self._not_before = self._clock() + exc.retry_after
            return 0
        if exc.status == 413 and len(batch) > 1:
            self.batch_size = max(1, len(batch) // 2)
            log.info("batch too large; batch size now %d", self.batch_size)
            return 0
        if exc.status not in _POISON_STATUSES:
            raise exc
        with self._host._lock:
            count = self._host._drop([r.report_id_text for r in batch], f"batch refused ({exc.error_code})",
                               f"the aggregator refused the batch: {exc}")
            self._host.save()
        return count

    def _after_results(self, results: Sequence[ReportResult]) -> tuple[int, int]:
        failed = [r for r in results if r.status not in _DELIVERED]
        if any(r.status == STATUS_OUTDATED_CONFIG for r in failed):
            self._host._config_outdated()  # the aggregator's config changed: sync again soon
        with self._host._lock:
            self._host._queue.remove([r.report_id for r in results])
            self._host._held.forget(r.report_id for r in results)
            self._host.save()
        log.info("uploaded %d reports: %d delivered, %d rejected", len(results), len(results) - len(failed),
                 len(failed))
        for result in failed:
            self._host._notify(ReportRejected(result.field or "report", result.detail or result.status, code=result.status))
        return len(results) - len(failed), len(failed)

    @property
    def running(self) -> bool:
        thread = self.thread
        return thread is not None and thread.is_alive()

    def start(self, interval: float, tick: Callable[[], object], first: Callable[[], object]) -> None:
        """Run ``first()``, then ``tick()`` every ``interval`` seconds, in a daemon thread, until :meth:`stop`.

        A second call while the thread runs does nothing. ``tick`` and ``first``
        should not raise; if they do, the error is logged and the loop goes on.
        """
        with self._start_lock:
            if self.running:
                return
            self.stopping.clear()
            self._transport.stop_by(None)
            self.thread = threading.Thread(target=self._loop, args=(interval, tick, first),
                                           name="onesided-client", daemon=True)
            self.thread.start()

    def _loop(self, interval: float, tick: Callable[[], object], first: Callable[[], object]) -> None:
        """The background thread: never raises, never waits on a flush the app is running."""
        try:
            first()
        except Exception:  # pragma: no cover - a last guard for the thread
            log.exception("background start failed")
        while not self.stopping.wait(interval):
            try:
                tick()
            except Exception:  # pragma: no cover - the host's tick catches; a last guard for the thread
                log.exception("background flush failed")

    def stop(self, until: float) -> None:
        """Stop the background thread, waiting for it until the monotonic instant ``until``."""
        self.stopping.set()
        thread = self.thread
        if thread is None:
            return
        self._transport.stop_by(until)
        thread.join(timeout=max(0.0, until - self._monotonic()))
        if thread.is_alive():  # its calls stay cut to ``until``
            log.warning("background sender still busy at the deadline; it ends on its own")
        else:
            self.thread = None
            self._transport.stop_by(None)


__all__ = ["FlushResult", "Sender", "SenderHost", "SyncSchedule"]
