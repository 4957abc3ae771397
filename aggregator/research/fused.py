"""One fused pass for the relaxation scenario's draws: Philox words, exact comparisons, per-cohort counts.

``--engine gpu`` runs the relaxation block's four draws per (mode, pair,
repetition) -- the permanent bits (``first``), the round's relaxation
(``relaxed``, the mechanism's ``relaxed_bit_table`` chosen by
``perm + 2 b``), a one-shot collection and an extra one -- in one CUDA kernel,
:data:`KERNEL_SOURCE`: each thread takes one Bloom bit of a run of clients
(rows in cohort order) for one draw, makes one Philox4x32-10 call per client
(four 32-bit words: one per part), compares each word with ``floor(p 2^32)``,
counts the ones in registers and adds them to the per-(draw, part, cohort,
bit) counters with one ``atomicAdd`` each when its cohort ends. No words,
thresholds or bits are written to memory.

**A pure function of (key, counter).** Philox4x32-10 (Salmon et al., SC'11)
is keyed by 64 bits of the block's seed and counted by (client, bit, draw,
0): the counts do not depend on the launch geometry, and
:func:`reference_counts` recomputes them with NumPy, bit for bit.

**Exact in law**, as :func:`aggregator.research.arrays.exact_bits`: a word
``U`` below ``T = floor(p 2^W)`` gives 1, above gives 0; a tie (probability
``2^-W``, ``W = 32``) stops the chain for that (client, bit, draw): the kernel
writes (client, bit, draw, step, permanent bit so far) to a tie buffer and
counts none of its remaining parts. The host finishes each tie exactly
(:func:`finish_ties`): the tied part with the remainder ``p 2^W - T``
(:func:`protocol.exact.bernoulli_choose`), then the later parts afresh. So
every part is 1 with probability ``T 2^-W + 2^-W (p 2^W - T) = p`` given
what came before. A full buffer is never silent: the count of ties is
exact, and the launch is repeated with a buffer of that size (same stream,
same counts) or refused (:class:`~protocol.errors.ParameterError`, field
``tie_capacity``).

**Tested without a GPU.** The same source compiles for the host with g++
(:func:`host_library`: ``__global__`` and ``__device__`` defined away, the
block and thread indices set by two loops, ``atomicAdd`` a plain add; no
shared memory or barriers are used, so the loops are exact), with ``W`` a
macro (``WORD_BITS``): an 8-bit build ties often and exercises the host path.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from aggregator.research.arrays import word_cut
from protocol.errors import ParameterError
from protocol.exact import bernoulli_choose
from protocol.rng import RandomSource

__all__ = ["KERNEL_SOURCE", "DrawLaw", "cut_table", "finish_ties", "fused_counts", "host_library",
           "philox4x32", "reference_counts", "relaxation_counts"]

PARTS = 4  # first, relaxed, one_shot, extra
CUTS = 10  # per draw: first[b], relaxed[perm + 2b], one_shot[b], extra[b]
TIE_FIELDS = 4  # client, bit, draw, step | permanent bit << 2
BLOCK_THREADS = 256
TARGET_THREADS = 1 << 21  # threads per launch the geometry aims at (a few per resident slot of a large GPU)

KERNEL_SOURCE = r"""
#ifndef WORD_BITS
#define WORD_BITS 32
#endif

__device__ __forceinline__ void philox_round(unsigned int c[4], unsigned int k0, unsigned int k1) {
    unsigned long long p0 = (unsigned long long)0xD2511F53u * c[0];
    unsigned long long p1 = (unsigned long long)0xCD9E8D57u * c[2];
    unsigned int hi0 = (unsigned int)(p0 >> 32), lo0 = (unsigned int)p0;
    unsigned int hi1 = (unsigned int)(p1 >> 32), lo1 = (unsigned int)p1;
    unsigned int x0 = hi1 ^ c[1] ^ k0, x2 = hi0 ^ c[3] ^ k1;
    c[0] = x0; c[1] = lo1; c[2] = x2; c[3] = lo0;
}

/* Philox4x32-10: ten rounds, the key bumped by the Weyl constants between them. */
__device__ __forceinline__ void philox4x32_10(unsigned int c[4], unsigned int k0, unsigned int k1) {
    for (int r = 0; r < 10; ++r) {
        philox_round(c, k0, k1);
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
}

__device__ __forceinline__ void flush_counts(unsigned long long* counts, unsigned int ones[4],
                                             unsigned long long draw, unsigned int cohort, unsigned int j,
                                             unsigned int h, unsigned int k) {
    for (int q = 0; q < 4; ++q) {
        if (ones[q] != 0u) {
            atomicAdd(&counts[((draw * 4ull + q) * h + cohort) * k + j], (unsigned long long)ones[q]);
            ones[q] = 0u;
        }
    }
}

/* A tie at `step`: record it (the host finishes it) unless the buffer is full; the count is always kept. */
__device__ __forceinline__ void record_tie(unsigned int* tie_count, unsigned int* ties, unsigned int capacity,
                                           unsigned int i, unsigned int j, unsigned int draw,
                                           unsigned int step, unsigned int perm) {
    unsigned int at = atomicAdd(tie_count, 1u);
    if (at < capacity) {
        ties[4ull * at] = i; ties[4ull * at + 1] = j; ties[4ull * at + 2] = draw;
        ties[4ull * at + 3] = step | (perm << 2);
    }
}

/* Thread t: bit j = t % k of clients [s L, s L + L), s = (t / k) % segments, draw t / (k segments).
   cuts: per draw first[b], relaxed[perm + 2b], one_shot[b], extra[b]; counts: draws x 4 x h x k. */
extern "C" __global__ void relax_fused(const unsigned char* bits, const unsigned int* edges,
                                       const unsigned int* cuts, unsigned long long* counts,
                                       unsigned int* tie_count, unsigned int* ties,
                                       unsigned int n, unsigned int k, unsigned int h, unsigned int draws,
                                       unsigned int per_thread, unsigned int segments,
                                       unsigned int key0, unsigned int key1, unsigned int capacity) {
    unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int j = (unsigned int)(t % k);
    unsigned long long rest = t / k;
    unsigned int seg = (unsigned int)(rest % segments);
    unsigned long long draw = rest / segments;
    if (draw >= draws) return;
    unsigned int start = seg * per_thread;
    if (start >= n) return;
    unsigned int stop = n - start < per_thread ? n : start + per_thread;
    unsigned int lo = 0u, hi = h;  /* the last cohort c with edges[c] <= start (skips empty ones) */
    while (lo < hi) {
        unsigned int mid = (lo + hi + 1u) / 2u;
        if (edges[mid] <= start) lo = mid; else hi = mid - 1u;
    }
    unsigned int cohort = lo, next = edges[lo + 1];
    const unsigned int* cut = cuts + CUT_COUNT * draw;
    unsigned int ones[4] = {0u, 0u, 0u, 0u};
    for (unsigned int i = start; i < stop; ++i) {
        while (i >= next) {
            flush_counts(counts, ones, draw, cohort, j, h, k);
            ++cohort;
            next = edges[cohort + 1];
        }
        unsigned int b = bits[(unsigned long long)i * k + j] ? 1u : 0u;
        unsigned int w[4] = {i, j, (unsigned int)draw, 0u};
        philox4x32_10(w, key0, key1);
#if WORD_BITS < 32
        for (int q = 0; q < 4; ++q) w[q] &= (1u << WORD_BITS) - 1u;
#endif
        unsigned int cap = cut[b];
        if (w[0] == cap) { record_tie(tie_count, ties, capacity, i, j, (unsigned int)draw, 0u, 0u); continue; }
        unsigned int perm = w[0] < cap ? 1u : 0u;
        ones[0] += perm;
        cap = cut[2u + perm + 2u * b];
        if (w[1] == cap) { record_tie(tie_count, ties, capacity, i, j, (unsigned int)draw, 1u, perm); continue; }
        ones[1] += w[1] < cap ? 1u : 0u;
        cap = cut[6u + b];
        if (w[2] == cap) { record_tie(tie_count, ties, capacity, i, j, (unsigned int)draw, 2u, perm); continue; }
        ones[2] += w[2] < cap ? 1u : 0u;
        cap = cut[8u + b];
        if (w[3] == cap) { record_tie(tie_count, ties, capacity, i, j, (unsigned int)draw, 3u, perm); continue; }
        ones[3] += w[3] < cap ? 1u : 0u;
    }
    flush_counts(counts, ones, draw, cohort, j, h, k);
}
""".replace("CUT_COUNT", str(CUTS))

# The host build: the kernel's CUDA words defined away, one loop per grid and block index.
_HOST_HARNESS = r"""
#define __global__
#define __device__
#define __forceinline__ inline
struct HostIndex { unsigned int x, y, z; };
static HostIndex blockIdx, threadIdx, blockDim;
template <typename T> static T atomicAdd(T* at, T value) { T old = *at; *at = old + value; return old; }
KERNEL
extern "C" void host_launch(unsigned int grid, unsigned int block, const unsigned char* bits,
                            const unsigned int* edges, const unsigned int* cuts, unsigned long long* counts,
                            unsigned int* tie_count, unsigned int* ties, unsigned int n, unsigned int k,
                            unsigned int h, unsigned int draws, unsigned int per_thread, unsigned int segments,
                            unsigned int key0, unsigned int key1, unsigned int capacity) {
    blockDim.x = block;
    for (blockIdx.x = 0; blockIdx.x < grid; ++blockIdx.x)
        for (threadIdx.x = 0; threadIdx.x < block; ++threadIdx.x)
            relax_fused(bits, edges, cuts, counts, tie_count, ties, n, k, h, draws, per_thread, segments,
                        key0, key1, capacity);
}
"""


@dataclass(frozen=True)
class DrawLaw:
    """One (mode, pair, repetition)'s four laws: probabilities of a 1, doubles or rationals.

    Attributes:
        first: ``P(perm = 1 | b)`` for ``b = 0, 1``.
        relaxed: ``P(relaxed = 1)`` indexed by ``perm + 2 b``.
        one_shot, extra: ``P(1 | b)`` of the two fresh collections.
    """

    first: Sequence[float | Fraction]
    relaxed: Sequence[float | Fraction]
    one_shot: Sequence[float | Fraction]
    extra: Sequence[float | Fraction]

    def __post_init__(self) -> None:
        for name, size in (("first", 2), ("relaxed", 4), ("one_shot", 2), ("extra", 2)):
            if len(getattr(self, name)) != size:
                raise ParameterError(name, f"needs {size} probabilities, got {len(getattr(self, name))}")

    def flat(self) -> list[float | Fraction]:
        """The ten probabilities in the kernel's order (its ``cuts`` row)."""
        return [*self.first, *self.relaxed, *self.one_shot, *self.extra]


def cut_table(laws: Sequence[DrawLaw], width: int = 32) -> tuple[np.ndarray, list[list[Fraction]]]:
    """The kernel's thresholds (``draws x 10`` uint32) and every entry's exact remainder."""
    rows = [[word_cut(p, width) for p in law.flat()] for law in laws]
    table = np.array([[c for c, _ in row] for row in rows], dtype=np.uint32).reshape(len(laws), CUTS)
    return table, [[r for _, r in row] for row in rows]


def _mix(c: list[np.ndarray], k0: np.uint32, k1: np.uint32) -> list[np.ndarray]:
    p0 = np.uint64(0xD2511F53) * c[0].astype(np.uint64)
    p1 = np.uint64(0xCD9E8D57) * c[2].astype(np.uint64)
    hi0, lo0 = (p0 >> np.uint64(32)).astype(np.uint32), p0.astype(np.uint32)
    hi1, lo1 = (p1 >> np.uint64(32)).astype(np.uint32), p1.astype(np.uint32)
    return [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]


def philox4x32(counter: Sequence[Any], key: Sequence[int] | np.ndarray) -> np.ndarray:
    """Philox4x32-10 of the counters ``counter`` (four uint32 arrays, broadcast) under ``key`` (two uint32).

    Returns ``(..., 4)`` uint32 words: the kernel's ``philox4x32_10``, vectorized (NumPy's own
    ``np.random.Philox`` is the 4x64 variant, hence the rounds written out here).
    """
    shape = np.broadcast_shapes(*(np.shape(c) for c in counter))
    c = [np.broadcast_to(np.asarray(x, dtype=np.uint32), shape).copy() for x in counter]
    k0, k1 = int(key[0]), int(key[1])
    for _ in range(10):
        c = _mix(c, np.uint32(k0), np.uint32(k1))
        k0, k1 = (k0 + 0x9E3779B9) & 0xFFFFFFFF, (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return np.stack(c, axis=-1)


def reference_counts(bits: np.ndarray, edges: Sequence[int], cuts: np.ndarray, key: Sequence[int] | np.ndarray,
                     width: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """What the kernel computes, in NumPy: ``(counts draws x 4 x h x k, ties m x 4 sorted)``.

    For tests and small blocks: it holds every word (16 bytes per client, bit and draw).
    """
    n, k = bits.shape
    draws, h = cuts.shape[0], len(edges) - 1
    i, j = np.meshgrid(np.arange(n, dtype=np.uint32), np.arange(k, dtype=np.uint32), indexing="ij")
    b = (bits != 0).astype(np.int64)
    counts = np.zeros((draws, PARTS, h, k), dtype=np.int64)
    tie_rows = []
    for d in range(draws):
        w = philox4x32((i, j, np.uint32(d), np.uint32(0)), key) & np.uint32((1 << width) - 1)
        alive = np.ones((n, k), dtype=bool)
        perm = np.zeros((n, k), dtype=np.int64)
        for q, entry in enumerate((b, 2 + 2 * b, 6 + b, 8 + b)):
            cap = cuts[d][entry + perm if q == 1 else entry]
            tie = alive & (w[..., q] == cap)
            one = alive & ~tie & (w[..., q] < cap)
            if q == 0:
                perm = one.astype(np.int64)
            for c in range(h):
                counts[d, q, c] = one[edges[c]:edges[c + 1]].sum(axis=0)
            ti, tj = np.nonzero(tie)
            tie_rows.append(np.stack([ti, tj, np.full(ti.size, d), q | (perm[ti, tj] << 2)], axis=1))
            alive &= ~tie
    ties = np.concatenate(tie_rows).astype(np.uint32) if tie_rows else np.zeros((0, TIE_FIELDS), np.uint32)
    return counts, _canonical(ties)


def _canonical(ties: np.ndarray) -> np.ndarray:
    """Ties sorted by (draw, client, bit): the atomic order of a launch does not reach the host's draws."""
    order = np.lexsort((ties[:, 1], ties[:, 0], ties[:, 2]))
    return ties[order]


def finish_ties(counts: np.ndarray, ties: np.ndarray, tie_bits: np.ndarray, edges: Sequence[int],
                laws: Sequence[DrawLaw], rng: RandomSource, width: int = 32) -> None:
    """Add the tied chains' remaining parts to ``counts`` (in place), exactly.

    ``ties``: canonical rows (client, bit, draw, step | perm << 2); ``tie_bits``: each row's Bloom bit.
    The tied part is 1 with its remainder ``p 2^W - T``, each later part with its full probability.
    """
    if ties.shape[0] == 0:
        return
    cohort = np.searchsorted(np.asarray(edges), ties[:, 0].astype(np.int64), side="right") - 1
    _, rests = cut_table(laws, width)
    b = np.asarray(tie_bits, dtype=np.int64)
    step = (ties[:, 3] & 3).astype(np.int64)
    perm = (ties[:, 3] >> 2).astype(np.int64)
    for d in np.unique(ties[:, 2]):
        mine = ties[:, 2] == d
        full, rest = laws[int(d)].flat(), rests[int(d)]
        for q, (lo, size) in enumerate(((0, 2), (2, 4), (6, 2), (8, 2))):
            active = mine & (step <= q)
            if not active.any():
                continue
            entry = (perm + 2 * b if q == 1 else b)[active]
            tied = step[active] == q
            pick = (entry + np.where(tied, size, 0)).astype(np.uint8)  # full laws first, then remainders
            drawn = bernoulli_choose(rng, [*full[lo:lo + size], *rest[lo:lo + size]], pick).astype(np.int64)
            if q == 0:
                perm[active] = drawn
            np.add.at(counts, (int(d), q, cohort[active], ties[active, 1].astype(np.int64)), drawn)


def _geometry(n: int, k: int, draws: int, per_thread: int | None) -> tuple[int, int, int]:
    """``(per_thread, segments, grid)``: clients per thread, runs of clients, blocks of threads."""
    if per_thread is None:
        per_thread = min(4096, max(32, -(-n * k * draws // TARGET_THREADS)))
    segments = -(-n // per_thread)
    grid = -(-segments * k * draws // BLOCK_THREADS)
    if grid >= 1 << 31:
        raise ParameterError("chunk", f"a block of {n:,} clients needs {grid:,} thread blocks (at most 2^31 - 1)")
    return per_thread, segments, grid


def _tie_capacity(n: int, k: int, draws: int, width: int) -> int:
    """A buffer the expected ties fit with room (mean + 8 sd + 1,024): a rerun is rare."""
    mean = PARTS * n * k * draws / 2.0**width
    return int(mean + 8 * math.sqrt(mean) + 1024)


@dataclass(frozen=True)
class _Launch:
    n: int
    k: int
    h: int
    draws: int
    per_thread: int
    segments: int
    grid: int
    key: tuple[int, int]


def _host_launch(launch: _Launch, bits: np.ndarray, edges: np.ndarray, cuts: np.ndarray, capacity: int,
                 width: int) -> tuple[np.ndarray, int, np.ndarray]:
    lib = host_library(width)
    counts = np.zeros((launch.draws, PARTS, launch.h, launch.k), dtype=np.uint64)
    tie_count = np.zeros(1, dtype=np.uint32)
    ties = np.zeros((max(capacity, 1), TIE_FIELDS), dtype=np.uint32)
    bits = np.ascontiguousarray(bits, dtype=np.uint8)
    lib.host_launch(launch.grid, BLOCK_THREADS, bits.ctypes.data, edges.ctypes.data, cuts.ctypes.data,
                    counts.ctypes.data, tie_count.ctypes.data, ties.ctypes.data, launch.n, launch.k, launch.h,
                    launch.draws, launch.per_thread, launch.segments, launch.key[0], launch.key[1], capacity)
    return counts.astype(np.int64), int(tie_count[0]), ties


_DEVICE_KERNELS: dict[tuple[int, int], Any] = {}  # (id of the namespace, word width) -> kernel


def _device_launch(xp: Any, launch: _Launch, bits: Any, edges: np.ndarray, cuts: np.ndarray, capacity: int,
                   width: int) -> tuple[np.ndarray, int, np.ndarray]:
    """The same kernel through ``cupy.RawModule`` (NVRTC), compiled once per word width."""
    kernel = _DEVICE_KERNELS.get((id(xp), width))
    if kernel is None:
        module = xp.RawModule(code=KERNEL_SOURCE, options=(f"-DWORD_BITS={width}",))
        kernel = _DEVICE_KERNELS[id(xp), width] = module.get_function("relax_fused")
    counts = xp.zeros((launch.draws, PARTS, launch.h, launch.k), dtype=xp.uint64)
    tie_count = xp.zeros(1, dtype=xp.uint32)
    ties = xp.zeros((max(capacity, 1), TIE_FIELDS), dtype=xp.uint32)
    u32 = np.uint32
    kernel((launch.grid,), (BLOCK_THREADS,),
           (xp.ascontiguousarray(bits.view(xp.uint8) if bits.dtype == xp.bool_ else bits.astype(xp.uint8)),
            xp.asarray(edges), xp.asarray(cuts), counts, tie_count, ties,
            u32(launch.n), u32(launch.k), u32(launch.h), u32(launch.draws), u32(launch.per_thread),
            u32(launch.segments), u32(launch.key[0]), u32(launch.key[1]), u32(capacity)))
    found = int(xp.asnumpy(tie_count)[0])
    return xp.asnumpy(counts).astype(np.int64), found, xp.asnumpy(ties[: min(found, capacity)])


def fused_counts(xp: Any, bits: Any, edges: Sequence[int], cuts: np.ndarray, key: Sequence[int] | np.ndarray, *,
                 width: int = 32, per_thread: int | None = None, tie_capacity: int | None = None,
                 rerun_on_overflow: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """One launch of the kernel (on CuPy's device, or host-compiled for NumPy): ``(counts, canonical ties)``.

    Args:
        bits: ``n x k`` 0/1 (uint8 or bool), rows in cohort order (cohort ``c``: ``edges[c]..edges[c+1]``).
        cuts: ``draws x 10`` uint32 thresholds (:func:`cut_table`); key: two uint32.
        tie_capacity: tie buffer rows (``None``: the expected ties with room). When more ties come,
            the launch is repeated with a buffer of their exact number (the stream is a function of
            (key, counter): the same ties again), or, with ``rerun_on_overflow=False``, refused.

    Raises:
        ParameterError: (``tie_capacity``) the buffer overflowed and no rerun was allowed;
            (``chunk``) a block of ``2^31`` clients or more; (``edges``) edges not rising from 0 to ``n``.
    """
    n, k = (int(s) for s in bits.shape)
    if n >= 1 << 31:
        raise ParameterError("chunk", f"a block must hold fewer than 2^31 clients, got {n}")
    ends = np.asarray(edges, dtype=np.int64)
    if ends.size < 2 or ends[0] != 0 or ends[-1] != n or (np.diff(ends) < 0).any():
        raise ParameterError("edges", f"must rise from 0 to the {n:,} rows, got {len(edges)} values")
    draws, h = int(cuts.shape[0]), ends.size - 1
    if n == 0 or k == 0 or draws == 0:
        return np.zeros((draws, PARTS, h, k), dtype=np.int64), np.zeros((0, TIE_FIELDS), np.uint32)
    per, segments, grid = _geometry(n, k, draws, per_thread)
    launch = _Launch(n, k, h, draws, per, segments, grid, (int(key[0]), int(key[1])))
    ends32 = ends.astype(np.uint32)
    table = np.ascontiguousarray(cuts, dtype=np.uint32)
    capacity = _tie_capacity(n, k, draws, width) if tie_capacity is None else tie_capacity
    run = (lambda cap: _host_launch(launch, bits, ends32, table, cap, width)) if xp is np else (
        lambda cap: _device_launch(xp, launch, bits, ends32, table, cap, width))
    counts, found, ties = run(capacity)
    if found > capacity:
        if not rerun_on_overflow:
            raise ParameterError("tie_capacity", f"{found:,} ties for a buffer of {capacity:,}: no draw was "
                                 "dropped; rerun with a larger buffer")
        counts, found, ties = run(found)
    return counts, _canonical(np.asarray(ties[:found]))


def relaxation_counts(xp: Any, bits: Any, edges: Sequence[int], laws: Sequence[DrawLaw], key: Sequence[int] | np.ndarray,
                      rng: RandomSource, *, width: int = 32, **launch: Any) -> np.ndarray:
    """Every draw's per-(part, cohort, bit) ones, ``draws x 4 x h x k`` int64: the kernel, then the ties."""
    cuts, _ = cut_table(laws, width)
    counts, ties = fused_counts(xp, bits, edges, cuts, key, width=width, **launch)
    if ties.shape[0]:
        rows, cols = ties[:, 0].astype(np.int64), ties[:, 1].astype(np.int64)
        tie_bits = bits[rows, cols] if xp is np else xp.asnumpy(bits[xp.asarray(rows), xp.asarray(cols)])
        finish_ties(counts, ties, np.asarray(tie_bits).astype(np.int64), edges, laws, rng, width)
    return counts


def host_library(width: int = 32) -> Any:
    """:data:`KERNEL_SOURCE` compiled for the host with g++ (a ``ctypes`` library, cached per source and width).

    Raises:
        ParameterError: (field ``compiler``) no g++ on the PATH, or the build failed.
    """
    import ctypes  # noqa: PLC0415 (the host build only: tests and CPU measurements)
    import hashlib  # noqa: PLC0415
    import shutil  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    if not 1 <= width <= 32:
        raise ParameterError("width", f"must be 1 to 32 bits, got {width}")
    gxx = shutil.which("g++")
    if gxx is None:
        raise ParameterError("compiler", "the host build of the fused kernel needs g++ on the PATH")
    source = _HOST_HARNESS.replace("KERNEL", KERNEL_SOURCE)
    digest = hashlib.sha256(f"{width}\n{source}".encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"onesided-fused-{os.getuid()}" / f"relax_{width}_{digest}.so"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        src = path.with_suffix(f".{os.getpid()}.cpp")
        src.write_text(source)
        partial = path.with_suffix(f".{os.getpid()}.so")
        done = subprocess.run([gxx, "-O2", "-shared", "-fPIC", f"-DWORD_BITS={width}", "-o", str(partial), str(src)],
                              capture_output=True, text=True, check=False)
        src.unlink(missing_ok=True)
        if done.returncode != 0:
            raise ParameterError("compiler", f"g++ could not build the fused kernel: {done.stderr.strip()[:400]}")
        os.replace(partial, path)
    lib = ctypes.CDLL(str(path))
    lib.host_launch.restype = None
    lib.host_launch.argtypes = [ctypes.c_uint, ctypes.c_uint] + [ctypes.c_void_p] * 6 + [ctypes.c_uint] * 9
    return lib
