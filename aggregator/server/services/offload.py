"""Analysts' CPU-bound decoding, run in a helper process so the request threads keep the GIL.

A large Bloom fit spends seconds in LAPACK and scipy calls that hold
Python's GIL (measured: a 2,000-candidate OLS on 4,096 rows kept
``/v1/health`` waiting 1.3 s in the same worker). ``decode_processes = N``
runs the fits (``fit_candidates``, ``certify``) in ``N`` helper processes
(``forkserver``; requests beyond ``N`` queue), so the worker's threads go on
answering; 0 runs them in place. The work per request is bounded separately
(``max_decode_cells``).

Errors the fit raises on purpose (``ParameterError``) come back as the same
type with the same field and detail (exceptions with keyword-only state do
not pickle as they are).

>>> offloader = Offloader(processes=0)
>>> offloader.run(divmod, 7, 2)
(3, 1)
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from aggregator.server.monitoring import DECODE_PENDING
from protocol.errors import ParameterError

log = logging.getLogger(__name__)
T = TypeVar("T")


def _call_in_helper(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Runs in a helper: ``("ok", result)`` or ``("parameter", field, detail)``."""
    try:
        return ("ok", function(*args, **kwargs))
    except ParameterError as exc:
        return ("parameter", exc.field, exc.detail)


class Offloader:
    """Runs functions in a small pool of helper processes (or in place with ``processes=0``).

    Args:
        processes: helper processes (0: call in place).
    """

    def __init__(self, *, processes: int = 1) -> None:
        if isinstance(processes, bool) or not isinstance(processes, int) or not 0 <= processes <= 64:
            raise ParameterError("decode_processes", f"must be an integer in [0, 64], got {processes!r}")
        self.processes = processes
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=self.processes, mp_context=multiprocessing.get_context("forkserver")
                )
            return self._pool

    def run(self, function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``function(*args, **kwargs)``, in a helper when there are helpers (picklable arguments).

        Raises:
            ParameterError: as ``function`` raised it.
        """
        if self.processes == 0:
            return function(*args, **kwargs)
        DECODE_PENDING.inc()
        try:
            outcome = self._executor().submit(_call_in_helper, function, args, kwargs).result()
        except BrokenProcessPool:
            log.warning("a decode helper process died; restarting the helpers, this fit runs in place")
            self.close()
            return function(*args, **kwargs)
        finally:
            DECODE_PENDING.dec()
        if outcome[0] == "parameter":
            raise ParameterError(outcome[1], outcome[2])
        result: T = outcome[1]
        return result

    def close(self) -> None:
        """Stop the helper processes (if any were started)."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
