"""The outbox: the reports waiting to leave, the keys held for them, the lock over both, the drops.

``report()`` puts a report in; the :class:`~client_sdk.sender.Sender` takes
batches out and removes what the aggregator answered for. A report leaves
the queue for good only through :meth:`Outbox.drop` (counted in the state,
a ``dropped`` event, :class:`~client_sdk.storage.ReportsDropped` to
``on_error``) or :meth:`Outbox.settle` (the aggregator answered for it),
never both: a full queue drops the oldest reports that are not in an
upload under way (:meth:`Outbox.uploading`), so the count of dropped reports
is exact (delivered + dropped + queued = reported). The collaborators are
handed the outbox, never the client.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Sequence

from .pools import HeldKeys
from .queue import Item, ReportQueue
from .storage import ReportsDropped, Storage


class Outbox:
    """One client's reports waiting to leave.

    Args:
        disk: the open state (its queue, its count of dropped reports, its events).
        held: the ephemeral keys kept since ``report()`` (sealing without unpickling them).
        lock: the client's lock, over the queue, the keys and the state.
        max_queue: the most reports queued; the oldest beyond it are dropped (the reports of an upload
            under way are left to its answer and not counted meanwhile: the queue may hold one batch more).
        event: records a ``dropped`` ledger event with this detail and tells the app.
        notify: tells the app of an error it does not see raised.
    """

    def __init__(self, disk: Storage, held: HeldKeys, lock: threading.RLock, *, max_queue: int,
                 event: Callable[[str], None], notify: Callable[[Exception], None]) -> None:
        self._disk = disk
        self.held = held
        self.lock = lock
        self.max_queue = max_queue
        self._event = event
        self._notify = notify
        self._in_flight: frozenset[str] = frozenset()  # the ids of the batch being uploaded
        self._flying = 0  # how many of them are still queued

    @property
    def queue(self) -> ReportQueue:
        """The queue of the open state (a new object after the state is read again)."""
        return self._disk.queue

    def __len__(self) -> int:
        return len(self._disk.queue)

    def put(self, item: Item, report_id: str) -> None:
        """Queue in memory (the file gets it at the next write, after the state); the oldest beyond
        ``max_queue`` are dropped."""
        queue = self._disk.queue
        queue.append(item, report_id)
        overflow = len(queue) - self.max_queue
        overflow -= self._flying  # left to their answer, and not counted against the bound meanwhile
        if overflow > 0:
            self.drop(queue.oldest(overflow, skip=self._in_flight), f"queue full ({self.max_queue})",
                      f"offline queue full ({self.max_queue}); oldest dropped", oldest=True)

    def uploading(self, ids: Collection[str]) -> None:
        """The batch ``ids`` is being sealed and uploaded (``()``: none is): a full queue drops other
        reports, never these (their answer settles them: delivered, refused, or kept for a resend).
        Call it under :attr:`lock`, where the batch is taken from the queue."""
        with self.lock:
            self._in_flight = frozenset(ids)
            self._flying = sum(1 for report_id in self._in_flight if self._disk.queue.holds(report_id))

    def drop(self, ids: Sequence[str], why: str, notice: str, *, oldest: bool = False) -> int:
        """Remove queued reports for good: counted, an event, ``ReportsDropped`` to ``on_error``."""
        with self.lock:
            count = self._disk.queue.remove(ids)
            self.held.forget(ids)
            self._landed()
            if count:
                self._disk.state.dropped += count
                self._event(f"{count} {'oldest ' if oldest else ''}report(s) dropped: {why}")
        if count:
            self._notify(ReportsDropped(count, notice))
        return count

    def settle(self, final: Iterable[str]) -> None:
        """Remove the reports the aggregator answered for for good (delivered, or finally refused).

        None of them was dropped meanwhile (:meth:`uploading`), so nothing here changes the count of
        dropped reports.
        """
        final = list(final)
        with self.lock:
            self._disk.queue.remove(final)
            self.held.forget(final)
            self._landed()

    def _landed(self) -> None:
        """Reports of the upload under way left the queue: they no longer count as in flight."""
        if self._flying:
            self._flying = sum(1 for report_id in self._in_flight if self._disk.queue.holds(report_id))


__all__ = ["Outbox"]
