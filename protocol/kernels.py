"""Optional compiled kernels: the exact Bernoulli sampler and bit counting in one pass each, same results.

With numba installed (``pip install 'onesided[fast]'``, part of ``[all]``),
:func:`protocol.exact.bernoulli_choose` (hence ``Randomizer.simulate`` and the
other simulation samplers) and ``BitCounts.from_reports`` run compiled loops
instead of several NumPy passes: each random byte is compared with its digit
in registers, the ties are flagged there, and a seeded stream's words are
computed inside the loop (NumPy's PCG64: the words ``random_raw`` gives);
counting sums rows into byte counters, per cohort without sorting. The
results are identical bit for bit: the same bytes in the same order against
the same digits, the ties resolved in the same order, the same integer
counts (``tests/test_kernels.py`` checks it against the NumPy path).

Without numba, or with ``ONESIDED_KERNELS=numpy`` in the environment, or
inside :func:`numpy_only`, the NumPy code runs. numba is imported, and the
kernels compiled (or loaded from numba's on-disk cache), only once a process
has done :data:`LOAD_AFTER` elements of such work on the NumPy path (or
calls :func:`loaded` itself): importing numba takes about a second (it
imports SciPy too), more than a small fit, a decode or a test ever saves, so
those never pay it, while a long simulation switches after its first
fraction of a second of sampling. The results do not depend on when the
switch happens. Importing :mod:`protocol` or the device SDK never loads
numba, and the device paths do not use these kernels.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

import numpy as np
import numpy.typing as npt

__all__ = [
    "ENVIRONMENT",
    "active",
    "cohort_sums",
    "column_sums",
    "loaded",
    "numpy_only",
    "pcg64_state",
]

ENVIRONMENT = "ONESIDED_KERNELS"
"""Set to ``numpy`` to run the NumPy code even where numba is installed (same results)."""

LOAD_AFTER = 1 << 28
"""Elements (random bits drawn, report bits counted) a process handles on the NumPy path before the
kernels are loaded: about 0.3-1 s of NumPy work, so importing numba (about a second) is paid only by
work that outlasts it."""
_work = 0  # elements done on the NumPy path while the kernels were not loaded (a sum across threads; approximate)

_lock = threading.Lock()
_module: ModuleType | None = None
_failed = False
_forced = threading.local()


def _wanted() -> bool:
    # the tie masks' bit order and the words' bytes assume a little-endian machine
    if getattr(_forced, "numpy", False) or sys.byteorder != "little":
        return False
    return os.environ.get(ENVIRONMENT, "").strip().lower() not in ("numpy", "off", "0")


def active() -> bool:
    """Whether the compiled kernels would run here (numba importable and not switched off)."""
    if not _wanted() or _failed:
        return False
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):  # a module entry of None or without a spec: not importable
        return False


def loaded(work: int | None = None) -> ModuleType | None:
    """The compiled kernels, or ``None`` when they are off or numba cannot be imported (then NumPy runs).

    ``work``: the elements the caller is about to handle; while the kernels are not loaded, they are
    loaded only once the work asked about adds up to :data:`LOAD_AFTER` (``None``: load them now).
    """
    global _module, _failed, _work
    if not _wanted() or _failed:
        return None
    if _module is None and work is not None:
        _work += work
        if _work < LOAD_AFTER:
            return None
    if _module is None:
        with _lock:
            if _module is None and not _failed:
                try:
                    _module = importlib.import_module(f"{__package__}._numba_kernels")
                except Exception:  # numba missing or broken: the NumPy code gives the same results
                    _failed = True
                    return None
    return _module


@contextmanager
def numpy_only() -> Iterator[None]:
    """Run the NumPy code in this thread within the block (comparisons, tests)."""
    before = getattr(_forced, "numpy", False)
    _forced.numpy = True
    try:
        yield
    finally:
        _forced.numpy = before


_MULTIPLIER = (2549297995355413924 << 64) + 4865540595714422341  # PCG64's 128-bit LCG multiplier
_MASK64 = (1 << 64) - 1


@functools.lru_cache(maxsize=64)
def _pcg64_steps(increment: int) -> npt.NDArray[np.uint64]:
    """The kernel's step constants for a PCG64 increment: M, M**4 and inc (1 + M + M**2 + M**3), mod 2**128."""
    m = _MULTIPLIER
    m4 = pow(m, 4, 1 << 128)
    c4 = increment * (1 + m + m * m + m * m * m) % (1 << 128)
    steps = np.array(
        [m >> 64, m & _MASK64, m4 >> 64, m4 & _MASK64, c4 >> 64, c4 & _MASK64], dtype=np.uint64
    )
    steps.setflags(write=False)
    return steps


@contextmanager
def pcg64_state(
    bit_generator: object,
) -> Iterator[tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]] | None]:
    """A NumPy ``PCG64``'s state as the kernel's words, written back on exit (under the generator's lock).

    Yields ``(state, steps)`` (see ``_numba_kernels._pcg_fill``), or ``None``
    for any other bit generator or a big-endian machine (then the bytes come
    from ``random_bytes`` as on the NumPy path).
    """
    if type(bit_generator) is not np.random.PCG64 or sys.byteorder != "little":
        yield None  # (the kernel reads its words' bytes in memory order; the stream's are little-endian)
        return
    with bit_generator.lock:
        saved = bit_generator.state
        lcg = saved["state"]
        state = np.array(
            [lcg["state"] >> 64, lcg["state"] & _MASK64, lcg["inc"] >> 64, lcg["inc"] & _MASK64],
            dtype=np.uint64,
        )
        try:
            yield state, _pcg64_steps(int(lcg["inc"]))
        finally:
            lcg["state"] = (int(state[0]) << 64) | int(state[1])
            bit_generator.state = saved


def column_sums(rows: npt.NDArray[np.uint8], out: npt.NDArray[np.int64]) -> bool:
    """``out += rows.sum(0)`` for 0/1 bytes in the compiled loop; False (nothing done) where it does not run."""
    module = loaded(rows.size)
    if (
        module is None
        or not rows.flags.c_contiguous
        or not out.flags.c_contiguous
        or out.dtype != np.int64
    ):
        return False
    if rows.ndim == 2 and rows.shape[1] % 8 == 0 and rows.ctypes.data % 8 == 0:
        module.column_words(rows.view(np.uint64), out)  # whole words a row: one stream of word additions
    else:
        module.column_sums(rows, out)
    return True


_COHORT_COUNTERS = 1 << 24
"""The most ``uint8`` counters (cohorts x bits) :func:`cohort_sums` keeps; more: the NumPy code."""


def cohort_sums(
    rows: npt.NDArray[np.uint8], cohorts: npt.NDArray[np.integer], out: npt.NDArray[np.int64]
) -> bool:
    """``out[c] += `` the column sums of cohort ``c``'s rows (cohorts in ``[0, len(out))``, any order).

    In the compiled loop, without sorting; False (nothing done) where it does not run.
    """
    module = loaded(rows.size)
    if module is None or out.size > _COHORT_COUNTERS or not rows.flags.c_contiguous:
        return False
    if not out.flags.c_contiguous or out.dtype != np.int64:
        return False
    module.cohort_sums(rows, np.ascontiguousarray(cohorts, dtype=np.int64), out)
    return True
