"""A small pool of helper processes for the server's CPU-bound work that holds Python's GIL.

Opening sealed envelopes (:mod:`aggregator.server.opener`) and analysts'
fits (:mod:`aggregator.server.services.offload`) both hand their work to
``N`` helper processes so that a worker's request threads keep answering.
The pool is the same for both: at most :data:`MAX_PROCESSES` helpers,
started with ``forkserver`` on first use (none when ``N = 0``: the caller
works in place), and when a helper dies the pool is shut down, the work in
hand is done in place by the caller's fallback and the next use starts new
helpers. :meth:`HelperPool.close` stops the helpers without waiting for
them; a helper whose worker died (even by SIGKILL) exits within half a
second on its own.

>>> pool = HelperPool("decode_processes", 0)
>>> pool.processes, pool.enabled
(0, False)
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from protocol.validation import check_int

log = logging.getLogger(__name__)
MAX_PROCESSES = 64
T = TypeVar("T")


OWNER_POLL_SECONDS = 0.5  # how often a helper checks that the worker that started it still runs


def _start_helper(owner: int, initializer: Callable[..., None] | None, initargs: tuple[Any, ...]) -> None:
    """In each helper: exit when ``owner`` (the worker process) is gone, then run ``initializer``.

    A helper's parent is multiprocessing's fork server, not the worker, and
    a worker killed with SIGKILL cannot stop its pool: without this watch its
    helpers (each holding memory and, for the opener, the private key) were
    left running for ever.
    """
    threading.Thread(target=_watch_owner, args=(owner,), name="onesided-owner-watch", daemon=True).start()
    if initializer is not None:
        initializer(*initargs)


def _watch_owner(owner: int) -> None:
    while True:
        time.sleep(OWNER_POLL_SECONDS)
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            os._exit(0)
        except PermissionError:  # pragma: no cover - the pid now belongs to another user: ours is gone
            os._exit(0)


class HelperPool:
    """``processes`` helper processes, started when first used.

    Args:
        field: the setting that chose ``processes`` (named by a bad value's error).
        processes: helpers, ``0`` to ``MAX_PROCESSES`` (0: none, the caller works in place).
        initializer, initargs: run once in each helper as it starts (e.g. to load a key).
    """

    def __init__(self, field: str, processes: int, *, initializer: Callable[..., None] | None = None,
                 initargs: tuple[Any, ...] = ()) -> None:
        self.processes = check_int(field, processes, low=0, high=MAX_PROCESSES)
        self._initializer = initializer
        self._initargs = initargs
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Whether there are helpers to hand work to."""
        return self.processes > 0

    def executor(self) -> ProcessPoolExecutor:
        """The running pool, started now if it is not (only when :attr:`enabled`)."""
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=self.processes, mp_context=multiprocessing.get_context("forkserver"),
                    initializer=_start_helper, initargs=(os.getpid(), self._initializer, self._initargs),
                )
            return self._pool

    def run(self, work: Callable[[ProcessPoolExecutor], T], fallback: Callable[[], T], *, lost: str) -> T:
        """``work(executor)``; if a helper died, ``fallback()`` in place after a warning saying ``lost``.

        The pool is shut down then, so the next call starts new helpers.
        """
        try:
            return work(self.executor())
        except BrokenProcessPool:
            log.warning("a helper process died; restarting the helpers, %s", lost)
            self.close()
            return fallback()

    def close(self) -> None:
        """Stop the helper processes (if any were started), without waiting for them."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
