"""Per-client blocks written once against an array namespace: NumPy on the CPU, CuPy on a GPU.

``--engine gpu`` runs a scenario's per-client blocks through
:class:`ArrayEngine` with CuPy; the same functions run with NumPy (what CI
tests, having no GPU). Only functions of the namespace's common subset are
used (``zeros``, ``searchsorted``, ``cumsum``, comparisons, fancy indexing,
``default_rng(...).random`` and ``.integers``), so one block serves both.

**Exact in law.** A bit is 1 with probability ``p`` *exactly* (``p`` a
double or a rational, as :func:`protocol.exact.bernoulli_choose` gives on
the CPU): a uniform 32-bit word ``U`` is compared with
``T = floor(p 2^32)``; ``U < T`` gives 1, ``U > T`` gives 0, and the rare
tie ``U = T`` (probability ``2^-32`` per bit, a few hundred bits in 10^11)
gives 1 with the remainder ``p 2^32 - T``, drawn on the host by
``bernoulli_choose``. So ``P(1) = T / 2^32 + 2^-32 (p 2^32 - T) = p``. Blocks therefore sample the
same laws as the CPU path (:mod:`aggregator.research.populations`), from
another stream: figures agree in law, not digit by digit
(tests/test_arrays.py: chi-square against the exact probabilities and
against the local engine's figures).

Where a scenario also registers a fused block (relaxation: its draws in one
CUDA kernel, :mod:`aggregator.research.fused`), :class:`ArrayEngine` runs that
one on CuPy; the array block stays the reference path (``fused=False``).

A GPU run needs CuPy and a CUDA device (extra ``[gpu]``); without them
``--engine gpu`` stops with one line saying why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from aggregator.research.engine import BlockCounts, BlockFunction, add_counts, retain_freed_memory
from protocol.errors import ParameterError
from protocol.exact import bernoulli_choose
from protocol.rng import SeededRandom
from protocol.validation import check_int

__all__ = ["ArrayEngine", "array_block", "cohort_sums", "exact_bits", "namespace", "register_array_block"]

_WORD = 1 << 32
# fn(xp, setup, block index, block seed) -> counts (host integers)
ArrayBlockFunction = Callable[[Any, Any, int, np.random.SeedSequence], BlockCounts]
_ARRAY_BLOCKS: dict[BlockFunction, ArrayBlockFunction] = {}
_FUSED_BLOCKS: dict[BlockFunction, ArrayBlockFunction] = {}


def namespace(name: str) -> Any:
    """The array module ``name`` (``"numpy"`` or ``"cupy"``).

    Raises:
        ParameterError: (field ``engine``) an unknown name, or CuPy missing or without a usable CUDA device.
    """
    if name == "numpy":
        return np
    if name != "cupy":
        raise ParameterError("engine", f"array namespace must be numpy or cupy, got {name!r}")
    try:
        import cupy  # the optional [gpu] extra
    except ImportError as exc:
        raise ParameterError("engine", f"--engine gpu needs CuPy: pip install 'onesided[gpu]' ({exc})") from None
    try:
        devices = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDA driver missing or broken: a one-line reason, not a traceback
        raise ParameterError("engine", f"--engine gpu found no usable CUDA device ({type(exc).__name__}: {exc})") from None
    if devices < 1:
        raise ParameterError("engine", "--engine gpu found no CUDA device")
    return cupy


def to_host(xp: Any, array: Any) -> np.ndarray:
    """A host NumPy copy of ``array`` (no copy for NumPy)."""
    return np.asarray(array) if xp is np else xp.asnumpy(array)


def _words(xp: Any, gen: Any, shape: tuple[int, ...]) -> Any:
    """Uniform 32-bit words (``integers`` with ``int64`` is in both namespaces)."""
    return gen.integers(0, _WORD, size=shape, dtype=xp.int64)


def word_cut(p: float | Fraction, width: int = 32) -> tuple[int, Fraction]:
    """``(T, remainder)`` with ``T = min(floor(p 2^W), 2^W - 1)`` and ``remainder = p 2^W - T`` in [0, 1].

    A uniform ``W``-bit word below ``T`` gives 1, a tie gives 1 with the remainder: ``P(1) = p`` exactly.
    """
    exact = Fraction(p)
    if not 0 <= exact <= 1:
        raise ParameterError("probabilities", f"must be in [0, 1], got {float(exact)!r}")
    scaled = exact * (1 << width)
    cut = min(math.floor(scaled), (1 << width) - 1)
    return cut, scaled - cut


def cohort_sums(xp: Any, reports: Any, edges: Sequence[int]) -> np.ndarray:
    """Per-cohort column sums of 0/1 ``reports`` whose rows are in cohort order (cohort ``c``: rows ``edges[c]..edges[c+1]``).

    On a device, one scan and one gather (``int32``: exact below 2^31 rows), then to the host as
    ``int64``; on NumPy, one column sum per cohort (NumPy's scan of booleans is ~100x slower).
    """
    ends = np.asarray(edges, dtype=np.int64)
    if int(ends[-1]) >= 1 << 31:
        raise ParameterError("chunk", f"a block must hold fewer than 2^31 clients, got {int(ends[-1])}")
    if xp is np:
        rows = np.asarray(reports)
        return np.stack([rows[a:b].sum(axis=0, dtype=np.int64) for a, b in zip(ends[:-1], ends[1:], strict=True)])
    return scan_sums(xp, reports, ends)


def scan_sums(xp: Any, reports: Any, ends: np.ndarray) -> np.ndarray:
    """:func:`cohort_sums` by one scan and one gather (the device path)."""
    running = reports.cumsum(axis=0, dtype=xp.int32)
    at = running[xp.asarray(np.maximum(ends - 1, 0))] * xp.asarray(ends > 0)[:, None]
    return to_host(xp, at[1:] - at[:-1]).astype(np.int64)


def exact_bits(xp: Any, gen: Any, probabilities: Sequence[float | Fraction], choice: Any,
               tie_seed: np.random.SeedSequence) -> Any:
    """Bits, bit ``i`` 1 with probability ``probabilities[choice[i]]`` exactly (module docstring).

    Args:
        xp: the namespace; ``gen``: its ``default_rng``; ``choice``: integer array of ``xp``.
        tie_seed: seeds the host draws of the (rare) ties.
    """
    cuts = [word_cut(p) for p in probabilities]
    table = xp.asarray(np.array([c for c, _ in cuts], dtype=np.int64))
    word = _words(xp, gen, tuple(choice.shape))
    threshold = table[choice]
    out = word < threshold
    tied = word == threshold
    if bool(tied.any()):
        where = xp.nonzero(tied)
        picks = to_host(xp, choice[where]).astype(np.int64)
        remainders = [r for _, r in cuts]
        resolved = bernoulli_choose(SeededRandom(tie_seed), remainders, picks)
        out[where] = xp.asarray(resolved)
    return out


def register_array_block(cpu: BlockFunction, array: ArrayBlockFunction, fused: ArrayBlockFunction | None = None) -> None:
    """Declare ``array`` the namespace version of the CPU block ``cpu`` (same keys, same laws).

    ``fused``: the same block with its draws in one kernel (:mod:`aggregator.research.fused`), if any.
    """
    _ARRAY_BLOCKS[cpu] = array
    if fused is not None:
        _FUSED_BLOCKS[cpu] = fused


def array_block(cpu: BlockFunction, fused: bool | None = False) -> ArrayBlockFunction:
    """The namespace version of ``cpu``; with ``fused`` its fused-kernel version (``None``: that one if any).

    Raises:
        ParameterError: (field ``engine``) the scenario has none (or no fused one, ``fused=True``).
    """
    found = _ARRAY_BLOCKS.get(cpu)
    name = cpu.__module__.rsplit(".", 1)[-1]
    if found is None:
        names = ", ".join(sorted(f.__module__.rsplit(".", 1)[-1] for f in _ARRAY_BLOCKS)) or "none"
        raise ParameterError("engine", f"{name} has no GPU blocks (scenarios with them: {names})")
    if fused is False:
        return found
    kernel = _FUSED_BLOCKS.get(cpu)
    if kernel is None and fused:
        raise ParameterError("engine", f"{name} has no fused-kernel block")
    return kernel or found


@dataclass(frozen=True)
class ArrayEngine:
    """Every block in this process with the namespace version of the scenario's block function.

    Attributes:
        module: ``"cupy"`` (``--engine gpu``) or ``"numpy"`` (the same code on the CPU: tests).
        fused: run the scenario's fused-kernel block where it has one
            (:mod:`aggregator.research.fused`: one pass draws, compares and counts); ``False``
            keeps the array block (the reference path); ``None`` (default): fused on CuPy, the
            array block on NumPy. With NumPy the fused block runs the kernel compiled for the
            host with g++ (slow, for tests).
        block_clients: clients per block for scenarios that take it (``None``: the setup's
            ``chunk``). A device wants large blocks: fewer kernel launches per client. At 128 bits
            a block of 2,000,000 clients holds about 4 GB at its peak on the array block (bits,
            one int64 word per bit, the int32 scan); the fused block holds the bits and the city's
            draws (the words never reach memory).
    """

    module: str = "cupy"
    block_clients: int | None = None
    fused: bool | None = None

    def __post_init__(self) -> None:
        if self.block_clients is not None:
            check_int("block_clients", self.block_clients, low=1)

    @property
    def uses_fused(self) -> bool | None:
        """``array_block``'s ``fused``: ``None`` (the fused block where there is one) on CuPy by default."""
        if self.fused is None:
            return None if self.module == "cupy" else False
        return self.fused

    @property
    def name(self) -> str:
        if self.module == "cupy":
            return "gpu-array" if self.fused is False else "gpu"
        return f"fused-{self.module}" if self.fused else f"array-{self.module}"

    def run(self, fn: BlockFunction, setup: Any, seeds: list[np.random.SeedSequence],
            progress: Callable[[str], None]) -> BlockCounts:
        xp = namespace(self.module)
        block = array_block(fn, self.uses_fused)
        retain_freed_memory()  # the host's temporaries, block after block
        total: BlockCounts | None = None
        for index, seed in enumerate(seeds):
            total = add_counts(total, block(xp, setup, index, seed))
            if (index + 1) % max(1, len(seeds) // 10) == 0:
                progress(f"{self.name} engine: {index + 1}/{len(seeds)} blocks")
        if total is None:
            raise ParameterError("blocks", "need at least one block")
        return total
