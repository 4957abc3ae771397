"""The background sender's schedule: when a client syncs, sends and makes work ahead, and its flush at exit.

:class:`Background` drives the client's :class:`~client_sdk.sender.Sender`
thread: at its first turn it syncs (when due), sends what an earlier run
left queued and makes keys and IRR ahead; then, every ``interval`` seconds,
it syncs when the :class:`~client_sdk.sender.SyncSchedule` says so, sends
what is queued and makes work ahead again. Between turns, ``report()``
wakes it (:meth:`Background.written`): it writes the reports made since the
last write in one go (the state, then the queue file: a group commit) and
sends at once when the queue holds ``flush_at`` reports. It also registers
the flush at interpreter exit (``atexit``), within the client's
``exit_deadline``, holding the client weakly: a client the app drops
without ``close()`` is freed, and its state lock with it. Nothing here
raises into the host app.
"""

from __future__ import annotations

import atexit
import functools
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from protocol.rng import RandomSource

from .sender import Sender, SyncSchedule

log = logging.getLogger("onesided.client")


def weak_call(method: Callable[[], Any]) -> Callable[[], Any]:
    """A bound method without arguments called through a weak reference (no cycle with its object).

    Raises:
        ReferenceError: the object is gone (the app dropped its client): the background thread ends.
    """
    ref = weakref.WeakMethod(method)

    def call() -> Any:
        bound = ref()
        if bound is None:
            raise ReferenceError("the client is gone")
        return bound()

    return call


def _flush_if_alive(ref: weakref.ReferenceType[Background]) -> None:
    background = ref()
    if background is not None:
        background.flush_at_exit()


class Background:
    """One client's background turns and exit hook.

    Args:
        sender: the client's sender (its thread and its flushes).
        schedule: when to sync (:class:`~client_sdk.sender.SyncSchedule`, shared with the sender).
        sync, write, release_held, prepare, close, notify: the client's operations a turn runs
            (:func:`weak_call`: held weakly, the exit hook too, so a client the app drops is freed).
        monotonic, rng: the clock of the schedule, and the jitter of a failed sync's backoff.
        flush_at: send at once when the queue holds this many reports.
    """

    def __init__(self, sender: Sender, schedule: SyncSchedule, *, sync: Callable[[], object],
                 write: Callable[[], int], release_held: Callable[[], object], prepare: Callable[[], object],
                 close: Callable[[], object], notify: Callable[[Exception], None],
                 monotonic: Callable[[], float], rng: RandomSource, flush_at: int) -> None:
        self._sender = sender
        self.schedule = schedule
        self._sync, self._write, self._release_held, self._prepare = sync, write, release_held, prepare
        self._close, self._notify = close, notify
        self.flush_at = flush_at
        self._clock = monotonic
        self._rng = rng
        self._guard = threading.Lock()
        self._exit_hook: Callable[[], None] | None = None

    def start(self, interval: float) -> None:
        """Start the sender's thread (:meth:`first`, then :meth:`tick` every ``interval``) and the exit hook."""
        self._sender.start(interval, self.tick, self.first, self.written)
        self.register_exit()

    @property
    def running(self) -> bool:
        return self._sender.running

    def first(self) -> None:
        """The background sender's first turn: the first sync (when due), what an earlier run left
        queued, then keys and IRR ahead: a turn, at once."""
        self.tick()

    def written(self) -> None:
        """``report()`` woke the thread: write what it queued (one write for a burst), send a full queue."""
        if self._write() >= self.flush_at:
            self._sender.flush(None, wait=False)

    def tick(self) -> None:
        """One turn of the background sender: sync when due, report what waited for the server's time,
        send what is queued, make keys and IRR ahead."""
        self.sync_if_due()
        self._release_held()
        self._sender.flush(None, wait=False)
        self._prepare()

    def sync_if_due(self) -> None:
        """Sync when the schedule says so; a failure goes to ``on_error`` and is retried with backoff."""
        if not self.schedule.due(self._clock()):
            return
        try:
            self._sync()
        except Exception as exc:  # background work never raises into the app
            self.schedule.failed(self._clock(), float(self._rng.uniform(1)[0]))
            self._notify(exc)

    def register_exit(self) -> None:
        """Flush at interpreter exit (once, however often asked)."""
        with self._guard:
            if self._exit_hook is None:
                self._exit_hook = functools.partial(_flush_if_alive, weakref.ref(self))
                atexit.register(self._exit_hook)

    def unregister_exit(self) -> None:
        with self._guard:
            if self._exit_hook is not None:
                atexit.unregister(self._exit_hook)
                self._exit_hook = None

    def flush_at_exit(self) -> None:
        """What the exit hook runs: stop the sender, flush, save (:meth:`Client.close`, within
        ``exit_deadline``), never raising; nothing once the app dropped its client."""
        try:
            self._close()
        except ReferenceError:
            return
        except Exception as exc:  # the app is exiting: log, never raise
            self._notify(exc)


__all__ = ["Background", "weak_call"]
