"""A client's files, open: the state and its queue, read under the state's lock, recovered, saved in order.

:class:`Storage` opens the encrypted state (:mod:`client_sdk.state`) and
the queue of reports (:mod:`client_sdk.queue`) under the state file's
exclusive lock (:mod:`client_sdk.lock`), applies the ``on_corrupt`` policy
to a state that does not open, counts what of the queue could not be read,
and saves in the one order that keeps the ledger ahead of what can leave
the device: the state first, then the queue's changes.

Not thread-safe by itself: the client calls it under its lock. One write
runs outside that lock (:meth:`Storage.write_behind`, the background
sender's group commit), so ``report()`` never waits for a disk; every
other save waits for it to end first, so writes keep their order.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Callable
from typing import TypeVar

from protocol.errors import OnesidedError

from .highwater import HighWaterFile, iso_date, lost_record, mark_of
from .ledger import Ceiling, LedgerEvent
from .lock import StateLock
from .queue import QueueDamage, ReportQueue
from .state import ClientState, StateCorrupted, StateStore, remove_temporary_files

log = logging.getLogger("onesided.client")
T = TypeVar("T")


class ReportsDropped(OnesidedError):
    """Queued reports were discarded (queue full, or a batch the aggregator refuses as a whole)."""

    code = "reports_dropped"

    def __init__(self, count: int, reason: str) -> None:
        super().__init__(f"{count} queued report(s) dropped: {reason}")
        self.count = count
        self.reason = reason


def weak_callback(method: Callable[[T], None]) -> Callable[[T], None]:
    """A bound method called through a weak reference: no cycle with its object, which the app may drop."""
    ref = weakref.WeakMethod(method)

    def call(arg: T) -> None:
        bound = ref()
        if bound is not None:
            bound(arg)

    return call


class Storage:
    """The open state and queue of one client.

    Args:
        store: the state file (:class:`~client_sdk.state.StateStore`).
        on_corrupt: ``"raise"`` or ``"reset"`` (docs/client.md).
        ceiling: the budget policy in force (charged to a lost state's period when no high-water mark survives).
        clock: wall time (events, the period a lost state is charged to).
        notify: where errors go (the client's ``on_error`` and log).
        lock: the client's lock (the write behind it waits on it).

    Attributes:
        state, queue: what :meth:`open` read (absent before).
        dirty: the state changed since it was last written.
    """

    def __init__(self, store: StateStore, *, on_corrupt: str, ceiling: Ceiling, clock: Callable[[], float],
                 notify: Callable[[Exception], None], lock: threading.RLock) -> None:
        self.store = store
        self.lock = StateLock(store.path)
        self._on_corrupt = on_corrupt
        self._ceiling = ceiling
        self._clock = clock
        self._notify = notify
        self.dirty = False
        self._lock = lock
        self._written = threading.Condition(lock)
        self._writing = False  # a write behind the lock is running
        self.state: ClientState
        self.queue: ReportQueue
        self.marks = HighWaterFile(store.path)

    def open(self) -> None:
        """Take the state file's lock, then read the state and its queue.

        Raises:
            StateLocked: another client holds the state file.
            StateCorrupted: the state does not open and ``on_corrupt="raise"``.
        """
        self.lock.acquire()
        try:
            remove_temporary_files(self.marks.path)
            self.queue = ReportQueue(self.store.queue_path, self.store.key)
            self.state = self._load()
            now = self._clock()
            for record in self.state.metrics.values():  # the budget policy may have changed since
                self.dirty = record.follow_period(self._ceiling.period, now) or self.dirty
        except BaseException:
            self.lock.release()
            raise

    def _load(self) -> ClientState:
        try:
            state = self.store.load()
        except StateCorrupted as exc:
            if self._on_corrupt == "raise":
                raise
            return self._reset_after_loss(exc)
        if state is None:  # first run: written (with its key file) on the first change
            self.queue.discard()  # a queue without its state is charged by no ledger: never sent
            state = ClientState.fresh()
            state.queue = self.queue
            self.dirty = True
            return state
        state.queue = self.queue
        for damage in self.queue.load(state.generation):
            self._report_damage(state, damage)
        return state

    def _report_damage(self, state: ClientState, damage: QueueDamage) -> None:
        """A part of the queue file that could not be read: counted, in the ledger events, to ``on_error``."""
        state.dropped += damage.dropped
        state.record_event(LedgerEvent(at=self._clock(), kind="dropped", metric=None, detail=damage.detail))
        self.dirty = True
        self._notify(ReportsDropped(damage.dropped, damage.detail))

    def _reset_after_loss(self, error: StateCorrupted) -> ClientState:
        """The ``reset`` policy: keep the bad file, start over, charge what the lost state spent.

        The new secret's noise is independent of the old one, so every metric
        starts with the lost state's total as ``prior``: from its high-water
        mark when one survives, else unknown (:mod:`client_sdk.highwater`).
        """
        now = self._clock()
        key = None
        with contextlib.suppress(OnesidedError):  # a missing or bad key file: no mark can be verified
            key = self.store.key()
        mark = self.marks.read(key, None if self.store.generations is None else self.store.generations.read())
        moved = self.store.quarantine(f"{int(now)}")
        self.queue.discard()
        state = ClientState.fresh()
        state.queue = self.queue
        state.lost.append(lost_record(now, error.reason, self._ceiling, mark))
        charged = "its high-water mark charged" if mark is not None else f"total unknown since {iso_date(now)}"
        state.record_event(LedgerEvent(
            at=now, kind="state_lost", metric=None,
            detail=f"{error.reason}; {'kept as ' + str(moved) if moved else 'no file kept'}; {charged}",
        ))
        self._save_state(state)
        log.warning("client state lost (%s); started a new state, %s", error.reason, charged)
        self._notify(error)
        return state

    def save(self) -> None:
        """Write the state if it changed (atomic, fsync'ed), then append the queue's changes.

        In this order: a report reaches the queue file only once a state
        charging it is on disk.
        """
        with self._lock:
            while self._writing:
                self._written.wait()
            if self.dirty:
                self._save_state(self.state)
                self.dirty = False
            self.queue.persist(self.state.generation)

    def write_behind(self) -> list[str]:
        """:meth:`save`, with the disk written outside the client's lock (the background sender's
        group commit: every report queued since the last write in one state write and one append).

        The state and the queue's changes are taken under the lock, written
        without it; a failed write puts them back (nothing is lost from
        memory, nothing may be sent before it is on disk) and raises.

        Returns:
            The ids of the reports queued when the write began: on disk, charged, free to send.
        """
        with self._lock:
            while self._writing:
                self._written.wait()
            durable = self.queue.ids()
            if self.queue.dirty and self.queue.compaction_due:
                self.save()  # rare: the queue file is rewritten, under the lock
                return durable
            sealed = self.store.seal(self.state) if self.dirty else None
            mark = None if sealed is None else mark_of(self.state.metrics, self.state.lost, sealed[1])
            taken = self.queue.take_append(self.state.generation)
            if sealed is None and taken is None:
                return durable
            self.dirty = False
            self._writing = True
        try:
            if sealed is not None:
                self.store.write(*sealed)
            if mark is not None:  # the mark of the state just written, before any report it charges
                self.marks.write(self.store.key(), mark)
            if taken is not None:
                self.queue.append_taken(taken[1])
        except BaseException:
            with self._lock:
                self.dirty = self.dirty or sealed is not None
                if taken is not None:
                    self.queue.give_back(taken[0])
            raise
        finally:
            with self._lock:
                self._writing = False
                self._written.notify_all()
        return durable

    def _save_state(self, state: ClientState) -> None:
        """Write the state, then its high-water mark (before any report it charges reaches the queue)."""
        self.store.save(state)
        self.marks.write(self.store.key(), mark_of(state.metrics, state.lost, state.generation))

    def event(self, kind: str, metric: str | None, detail: str) -> None:
        """Record a ledger event (the state is then to be saved)."""
        self.state.record_event(LedgerEvent(at=self._clock(), kind=kind, metric=metric, detail=detail))
        self.dirty = True


__all__ = ["ReportsDropped", "Storage", "weak_callback"]
