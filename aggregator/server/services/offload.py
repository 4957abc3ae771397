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

from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

from aggregator.server.helper_pool import HelperPool
from aggregator.server.monitoring import DECODE_PENDING
from protocol.errors import ParameterError

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
        self.pool = HelperPool("decode_processes", processes)
        self.processes = self.pool.processes

    def run(self, function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``function(*args, **kwargs)``, in a helper when there are helpers (picklable arguments).

        Raises:
            ParameterError: as ``function`` raised it.
        """
        if not self.pool.enabled:
            return function(*args, **kwargs)

        def in_helper(executor: ProcessPoolExecutor) -> T:
            outcome = executor.submit(_call_in_helper, function, args, kwargs).result()
            if outcome[0] == "parameter":
                raise ParameterError(outcome[1], outcome[2])
            result: T = outcome[1]
            return result

        DECODE_PENDING.inc()
        try:
            return self.pool.run(in_helper, lambda: function(*args, **kwargs), lost="this fit runs in place")
        finally:
            DECODE_PENDING.dec()

    def close(self) -> None:
        """Stop the helper processes (if any were started)."""
        self.pool.close()
