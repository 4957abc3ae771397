"""The sender: batches, uploads, backoff answers, the background thread (posthog's ``Consumer``).

:class:`~client_sdk.Client` only queues; its :class:`Sender` takes what is
queued, seals it (with the key objects kept since ``report()``, or the
queued bytes after a restart), uploads it in batches, and removes from the
queue what the aggregator answered for. Nothing here raises into the host
app: every error goes to the client's ``on_error`` and is returned in the
:class:`FlushResult`.
"""

from __future__ import annotations

import collections
import itertools
import logging
import struct
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from protocol.errors import ReportRejected
from protocol.wire import (
    CLOCK_STATUSES,
    STATUS_ACCEPTED,
    STATUS_OUTDATED_CONFIG,
    STATUS_REPLAYED,
    ReportEnvelope,
    ReportResult,
)

from .outbox import Outbox
from .queue import envelope_of
from .status import ReportsClipped
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
        dropped: reports discarded because the aggregator refused them on their own (a batch
            answered ``400`` is split until the reports it refuses are alone).
        remaining: reports still queued.
        later: reports the aggregator's clock refused for now (``too_early``, or ``expired``
            while it doubts its clock, with a ``retry_after``): kept, resent after that wait.
        deferred: nothing was tried: the server's ``Retry-After`` has not passed,
            or another flush was still running at the deadline.
        error: the error that stopped sending early, if any (a passed
            deadline is a :class:`TransportError` with field ``deadline``).
    """

    delivered: int = 0
    rejected: int = 0
    dropped: int = 0
    remaining: int = 0
    later: int = 0
    deferred: bool = False
    error: Exception | None = None


MAX_SYNC_BACKOFF = 300.0  # the wait between failed background syncs grows to this (5 minutes)
FIRST_SYNC_BACKOFF = 15.0
CLOCK_RETRY_CAP = 3600.0  # the longest wait before a report refused by the server's clock is resent


class SyncSchedule:
    """When the background sender syncs next: at once, then every ``interval`` seconds (or the config's
    own ``sync_interval``), sooner after an ``outdated_config`` answer or once the network is back,
    with jittered backoff after a failure (15 s doubling, at most ``interval`` and 5 minutes).
    Monotonic seconds: a device clock that jumps moves nothing here."""

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
        """Sync at the next turn (the aggregator's config changed, or the network is back)."""
        self.next_at = 0.0

    def reached(self) -> None:
        """A request went through: after failed syncs, sync at the next turn (the network is back)."""
        if self.failures:
            self.next_at = 0.0


class Sender:
    """Uploads a client's queue: :meth:`flush` on demand, and a background thread (:meth:`start`).

    Args:
        outbox: the client's reports waiting to leave.
        transport: its HTTP transport.
        schedule: the sync schedule (an answer may call for a sync, or show the network is back).
        save: writes the state and the queue; returns the ids of the reports on disk (raises:
            nothing leaves before it is on disk).
        notify: where errors go (``on_error`` and the log).
        batch_size: reports per upload (halved on a ``413``).
        monotonic: deadlines and waits (``Retry-After``, resends after a clock refusal).
        clock_retry_cap: the longest wait before a report the server's clock refused is resent.

    ``outbox``, ``save`` and ``notify`` are held weakly (the client owns them: a client the app
    drops is freed at once, and its state lock with it, as a process's end would free it).
    """

    def __init__(self, outbox: Outbox, transport: Transport, *, schedule: SyncSchedule,
                 save: Callable[[], list[str]], notify: Callable[[Exception], None], batch_size: int,
                 monotonic: Callable[[], float], clock_retry_cap: float = CLOCK_RETRY_CAP) -> None:
        self._outbox: Outbox = weakref.proxy(outbox)
        self._schedule = schedule
        self._save = save
        self._notify = notify
        self._transport = transport
        self.batch_size = batch_size
        self._monotonic = monotonic
        self._clock_retry_cap = clock_retry_cap
        self._sending = threading.Lock()  # one flush at a time
        self._not_before: float | None = None  # monotonic; a server's Retry-After
        self._later: dict[str, float] = {}  # report id -> monotonic instant it may be resent
        self.stopping = threading.Event()
        self._wake = threading.Event()
        self.thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def flush(self, until: float | None, *, wait: bool) -> FlushResult:
        """Send the queue by the monotonic instant ``until``; ``wait=False``: skip if a flush is running.

        Never raises: an error ends the flush, goes to ``notify`` and is returned.
        """
        if not len(self._outbox):
            return FlushResult()
        if self._not_before is not None and self._monotonic() < self._not_before:
            return FlushResult(remaining=len(self._outbox), deferred=True)
        timeout = -1.0 if until is None else max(0.0, until - self._monotonic())
        if not self._sending.acquire(timeout=timeout if wait else 0):
            return FlushResult(remaining=len(self._outbox), deferred=True)
        delivered = rejected = dropped = 0
        error: Exception | None = None
        try:
            durable = self._save()  # written first: only what is on disk may leave (oldest first)
            now = self._monotonic()
            if self._later:
                on_disk = set(durable)
                self._later = {i: t for i, t in self._later.items() if i in on_disk}
            order = collections.deque(i for i in durable if self._later.get(i, now) <= now)
            pending = set(order)
            batches: list[list[ReportEnvelope]] = []
            while batches or (batch := self._next_batch(order, pending)):
                batch = batches.pop() if batches else batch
                try:
                    results = self._transport.upload(batch, deadline=until)
                except TransportError as exc:
                    if exc.status in _POISON_STATUSES and len(batch) > 1:
                        half = len(batch) // 2  # isolate the reports it refuses: each half on its own
                        batches += [batch[half:], batch[:half]]
                        continue
                    dropped += self._after_batch_error(batch, exc)
                    if exc.retryable:
                        raise
                    continue
                self._schedule.reached()
                pending.difference_update(r.report_id for r in results)
                ok, bad = self._after_results(results)
                delivered, rejected = delivered + ok, rejected + bad
        except Exception as exc:  # background sending never raises into the app
            error = exc
            self._notify(exc)
        finally:
            self._outbox.uploading(())
            self._sending.release()
        return FlushResult(
            delivered=delivered, rejected=rejected, dropped=dropped, remaining=len(self._outbox),
            later=len(self._later), error=error,
        )

    def _next_batch(self, order: collections.deque[str], pending: set[str]) -> list[ReportEnvelope]:
        """Up to ``batch_size`` of the reports in ``pending``, oldest first (``order``: the flush's reports,
        oldest first; the answered ones are cut from its front), sealed; a malformed one is dropped.

        Sealing happens outside the client's lock, so ``report()`` never waits for it. The batch is
        marked in flight from here to the next batch (:meth:`Outbox.uploading`): a full queue never drops
        a report that its answer may deliver.
        """
        outbox = self._outbox
        with outbox.lock:
            queue = outbox.queue
            while order and (order[0] not in pending or not queue.holds(order[0])):
                order.popleft()  # answered, or no longer queued: each id once
            items = list(itertools.islice(
                ((i, item) for i in order if i in pending and (item := queue.get(i)) is not None), self.batch_size))
            outbox.uploading([i for i, _ in items])  # and its halves, if the aggregator splits it
        batch, malformed = [], []
        held = outbox.held
        for report_id, item in items:
            try:
                batch.append(envelope_of(item, held.get(report_id)))
            except (ReportRejected, ValueError, KeyError, TypeError, IndexError, struct.error):
                malformed.append(report_id)
        if malformed:
            pending.difference_update(malformed)
            outbox.drop(malformed, "malformed in the queue", "a queued report is malformed and cannot be sent")
            self._save()
        return batch

    def _after_batch_error(self, batch: Sequence[ReportEnvelope], exc: TransportError) -> int:
        """Handle a whole-batch failure; returns how many reports were dropped."""
        if exc.retryable:
            if exc.retry_after is not None:  # capped: one odd answer never stops the client for long
                wait = min(exc.retry_after, self._transport.retry.retry_after_cap)
                self._not_before = self._monotonic() + wait
            return 0
        if exc.status == 413 and len(batch) > 1:
            self.batch_size = max(1, len(batch) // 2)
            log.info("batch too large; batch size now %d", self.batch_size)
            return 0
        if exc.status not in _POISON_STATUSES:
            raise exc
        count = self._outbox.drop([r.report_id_text for r in batch], f"batch refused ({exc.error_code})",
                                  f"the aggregator refused the batch: {exc}")
        self._save()
        return count

    def _after_results(self, results: Sequence[ReportResult]) -> tuple[int, int]:
        """Remove what the answer settles; keep, for a later resend, what the server's clock refused."""
        later = [r for r in results if not r.final]
        final = [r for r in results if r.final]
        failed = [r for r in final if r.status not in _DELIVERED]
        if any(r.status == STATUS_OUTDATED_CONFIG for r in failed):
            self._schedule.now()  # the aggregator's config changed: sync again soon
        now = self._monotonic()
        for result in later:  # kept (already charged), the same envelope resent after the wait
            self._later[result.report_id] = now + min(float(result.retry_after or 0), self._clock_retry_cap)
        self._outbox.settle(r.report_id for r in final)
        self._save()  # a removal lost to a crash only means a resend, answered "replayed"
        for result in final:
            self._later.pop(result.report_id, None)
        log.info("uploaded %d reports: %d delivered, %d rejected, %d kept for the server's clock", len(results),
                 len(final) - len(failed), len(failed), len(later))
        if clipped := getattr(results, "clipped", None):  # wire version 3: delivered, some items dropped
            self._notify(ReportsClipped(clipped))
        if later:
            statuses = sorted({r.status for r in later if r.status in CLOCK_STATUSES})
            self._notify(ReportRejected(
                "window", f"{len(later)} report(s) refused by the server's clock for now ({', '.join(statuses)}); "
                "kept and resent later", code="clock_refused"))
        for result in failed:
            self._notify(ReportRejected(result.field or "report", result.detail or result.status, code=result.status))
        return len(final) - len(failed), len(failed)

    @property
    def running(self) -> bool:
        thread = self.thread
        return thread is not None and thread.is_alive()

    def start(self, interval: float, tick: Callable[[], object], first: Callable[[], object],
              nudged: Callable[[], object]) -> None:
        """Run ``first()``, then ``tick()`` every ``interval`` seconds (and ``nudged()`` on :meth:`nudge`),
        in a daemon thread, until :meth:`stop`.

        A second call while the thread runs does nothing. ``tick`` and ``first``
        should not raise; if they do, the error is logged and the loop goes on.
        """
        with self._start_lock:
            if self.running:
                return
            self.stopping.clear()
            self._transport.stop_by(None)
            self.thread = threading.Thread(target=self._loop, args=(interval, tick, first, nudged),
                                           name="onesided-client", daemon=True)
            self.thread.start()

    def nudge(self) -> None:
        """Wake the background thread now (reports to write, or a queue to send)."""
        self._wake.set()

    def _loop(self, interval: float, tick: Callable[[], object], first: Callable[[], object],
              nudged: Callable[[], object]) -> None:
        """The background thread: ``first()``, then ``tick()`` every ``interval`` seconds and ``nudged()``
        whenever :meth:`nudge` wakes it. Never raises, never waits on a flush the app is running; ends
        when the client is gone. Its pace is real time (it waits on an event)."""
        next_tick = time.monotonic()
        try:
            first()
            while not self.stopping.is_set():
                woke = self._wake.wait(max(0.0, next_tick + interval - time.monotonic()))
                if self.stopping.is_set():
                    return
                self._wake.clear()
                try:
                    if woke:
                        nudged()
                    if time.monotonic() >= next_tick + interval:
                        next_tick = time.monotonic()
                        tick()
                except ReferenceError:
                    raise
                except Exception:  # pragma: no cover - the host's turns catch; a last guard for the thread
                    log.exception("background turn failed")
        except ReferenceError:  # the app dropped its client without close(): nothing left to do
            return

    def stop(self, until: float) -> None:
        """Stop the background thread, waiting for it until the monotonic instant ``until``."""
        self.stopping.set()
        self._wake.set()
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


__all__ = ["FlushResult", "Sender", "SyncSchedule"]
