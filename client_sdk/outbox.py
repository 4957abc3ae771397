"""The outbox: the reports waiting to leave, the keys held for them, the lock over both, the drops.

``report()`` puts a report in; the :class:`~client_sdk.sender.Sender` takes
batches out and removes what the aggregator answered for. A report leaves
the queue for good only through :meth:`Outbox.drop` (counted in the state,
a ``dropped`` event, :class:`~client_sdk.storage.ReportsDropped` to
``on_error``) or :meth:`Outbox.settle` (the aggregator answered for it). The
collaborators are handed the outbox, never the client.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

from .pools import HeldKeys
from .queue import Item, ReportQueue
from .storage import ReportsDropped, Storage


class Outbox:
    """One client's reports waiting to leave.

    Args:
        disk: the open state (its queue, its count of dropped reports, its events).
        held: the ephemeral keys kept since ``report()`` (sealing without unpickling them).
        lock: the client's lock, over the queue, the keys and the state.
        max_queue: the most reports queued; the oldest beyond it are dropped.
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

    @property
    def queue(self) -> ReportQueue:
        """The queue of the open state (a new object after the state is read again)."""
        return self._disk.queue

    def __len__(self) -> int:
        return len(self._disk.queue)

    def put(self, item: Item) -> None:
        """Queue in memory (the file gets it at the next write, after the state); the oldest beyond
        ``max_queue`` are dropped."""
        queue = self._disk.queue
        queue.append(item)
        overflow = len(queue) - self.max_queue
        if overflow > 0:
            self.drop(queue.oldest(overflow), f"queue full ({self.max_queue})",
                      f"offline queue full ({self.max_queue}); oldest dropped", oldest=True)

    def drop(self, ids: Sequence[str], why: str, notice: str, *, oldest: bool = False) -> int:
        """Remove queued reports for good: counted, an event, ``ReportsDropped`` to ``on_error``."""
        with self.lock:
            count = self._disk.queue.remove(ids)
            self.held.forget(ids)
            if count:
                self._disk.state.dropped += count
                self._event(f"{count} {'oldest ' if oldest else ''}report(s) dropped: {why}")
        if count:
            self._notify(ReportsDropped(count, notice))
        return count

    def settle(self, delivered: Iterable[str], final: Iterable[str]) -> None:
        """Remove the reports the aggregator answered for for good (``final``, ``delivered`` among them).

        A delivered report no longer queued was dropped from a full queue while its batch was in
        flight: not a drop after all, so the count of dropped reports goes back down.
        """
        final = list(final)
        with self.lock:
            queue = self._disk.queue
            undropped = sum(1 for report_id in delivered if not queue.holds(report_id))
            if undropped:
                self._disk.state.dropped = max(0, self._disk.state.dropped - undropped)
                self._disk.dirty = True
            queue.remove(final)
            self.held.forget(final)


__all__ = ["Outbox"]
