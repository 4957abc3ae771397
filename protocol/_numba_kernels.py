"""The compiled kernels behind :mod:`protocol.kernels` (numba; imported only when a kernel is first used).

Nothing here decides a bit differently from the NumPy code it replaces: the
same bytes are compared with the same digits, the ties are listed in
ascending order and resolved in that order, one byte each per depth, and the
generator's words are taken in the order ``random_raw`` hands them out. Each
function is compiled once for one signature (read-only inputs accept writable
arrays too) and cached on disk (``cache=True``).

Cut modes (the digit an element is compared with, at depth ``d`` of a table
``digits[d]``): 0, one probability: ``digits[d, 0]``; 1, two probabilities
selected by a 0/1 byte ``sel``: ``digits[d, 0] + sel (digits[d, 1] -
digits[d, 0])`` mod 256 (no gather); 2, any table: ``digits[d, sel + mult
sel2]``.
"""

# mypy: ignore-errors
# (numba code: its types are numba's, checked when the kernels are compiled)
from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_GROUP = 64  # bytes compared per equality mask (one 64-bit mask)
_WORDS = 512  # generator words per block: 4 KiB, in L1 with their cuts

_ro8 = types.Array(types.uint8, 1, "C", readonly=True)
_rw8 = types.Array(types.uint8, 1, "C")
_ro8x2 = types.Array(types.uint8, 2, "C", readonly=True)
_i64 = types.Array(types.int64, 1, "C")
_cut_args = (types.int64, types.int64, _ro8, _ro8, _ro8x2)  # mode, mult, sel, sel2, digits


@intrinsic
def _equal_mask(typingctx: Any, a: Any, b: Any, offset: Any) -> Any:
    """Bit ``k`` of the result is ``a[offset + k] == b[offset + k]``, ``k < 64`` (one vector compare)."""
    sig = types.uint64(a, b, types.intp)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        vector = ir.VectorType(ir.IntType(8), _GROUP)
        loaded = []
        for array_type, value in zip(signature.args[:2], args[:2], strict=True):
            data = context.make_array(array_type)(context, builder, value).data
            pointer = builder.bitcast(builder.gep(data, [args[2]]), vector.as_pointer())
            loaded.append(builder.load(pointer, align=1))
        return builder.bitcast(builder.icmp_unsigned("==", loaded[0], loaded[1]), ir.IntType(64))

    return sig, codegen


@intrinsic
def _select_compare(
    typingctx: Any, u: Any, start: Any, sel: Any, out: Any, offset: Any, low: Any, high: Any
) -> Any:
    """Cut mode 1 on 64 elements in registers: ``out[offset + k] = u[start + k] < cut_k``; the mask of the ties.

    ``cut_k`` is ``high`` where ``sel[offset + k]`` is 1 and ``low`` where it
    is 0 (``low + sel (high - low)`` mod 256 for a 0/1 ``sel``); bit ``k`` of
    the result is ``u[start + k] == cut_k``.
    """
    sig = types.uint64(u, types.intp, sel, out, types.intp, types.uint8, types.uint8)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        byte = ir.IntType(8)
        vector = ir.VectorType(byte, _GROUP)

        def at(index: int, offset: Any) -> Any:
            data = context.make_array(signature.args[index])(context, builder, args[index]).data
            return builder.bitcast(builder.gep(data, [offset]), vector.as_pointer())

        bytes_ = builder.load(at(0, args[1]), align=1)
        chosen = builder.icmp_unsigned(
            "!=", builder.load(at(2, args[4]), align=1), ir.Constant(vector, [0] * _GROUP)
        )

        def splat(value: Any) -> Any:
            undefined = ir.Constant(vector, ir.Undefined)
            lane = builder.insert_element(undefined, value, ir.Constant(ir.IntType(32), 0))
            return builder.shuffle_vector(
                lane, undefined, ir.Constant(ir.VectorType(ir.IntType(32), _GROUP), [0] * _GROUP)
            )

        cuts = builder.select(chosen, splat(args[6]), splat(args[5]))
        below = builder.zext(builder.icmp_unsigned("<", bytes_, cuts), vector)
        builder.store(below, at(3, args[4]), align=1)
        return builder.bitcast(builder.icmp_unsigned("==", bytes_, cuts), ir.IntType(64))

    return sig, codegen


@intrinsic
def _trailing_zeros(typingctx: Any, word: Any) -> Any:
    """The index of the lowest set bit of a nonzero ``uint64``."""
    sig = types.uint64(types.uint64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))

    return sig, codegen


@intrinsic
def _high_product(typingctx: Any, a: Any, b: Any) -> Any:
    """The high 64 bits of the 128-bit product of two ``uint64`` (one ``mul`` on x86-64)."""
    sig = types.uint64(types.uint64, types.uint64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        wide = ir.IntType(128)
        product = builder.mul(builder.zext(args[0], wide), builder.zext(args[1], wide))
        return builder.trunc(builder.lshr(product, ir.Constant(wide, 64)), ir.IntType(64))

    return sig, codegen


@njit(inline="always")
def _pcg_step(high, low, mult_high, mult_low, add_high, add_low):
    """``state * mult + add`` mod 2**128 on (high, low) words: PCG64's LCG step (or several at once)."""
    product_low = low * mult_low
    product_high = _high_product(low, mult_low) + high * mult_low + low * mult_high
    new_low = product_low + add_low
    carry = np.uint64(1) if new_low < product_low else np.uint64(0)
    return product_high + add_high + carry, new_low


@njit(inline="always")
def _pcg_output(high, low):
    """PCG64's XSL-RR output: ``(high ^ low)`` rotated right by ``high >> 58``."""
    x = high ^ low
    r = high >> np.uint64(58)
    return (x >> r) | (x << ((np.uint64(64) - r) & np.uint64(63)))


@njit(inline="always")
def _pcg_fill(state, steps, words, count):
    """``words[:count]`` = the next ``count`` outputs of NumPy's PCG64 (``random_raw``'s), ``state`` advanced.

    ``state``: ``[high, low, increment high, increment low]``; ``steps``:
    ``[M high, M low, M**4 high, M**4 low, C4 high, C4 low]`` with ``M`` the
    multiplier and ``C4 = inc (1 + M + M**2 + M**3)``: four interleaved
    lanes, each four steps at a time (independent chains, the same words).
    """
    high, low, add_high, add_low = state[0], state[1], state[2], state[3]
    mult_high, mult_low = steps[0], steps[1]
    k = 0
    if count >= 4:
        h0, l0 = _pcg_step(high, low, mult_high, mult_low, add_high, add_low)
        h1, l1 = _pcg_step(h0, l0, mult_high, mult_low, add_high, add_low)
        h2, l2 = _pcg_step(h1, l1, mult_high, mult_low, add_high, add_low)
        h3, l3 = _pcg_step(h2, l2, mult_high, mult_low, add_high, add_low)
        while True:
            words[k] = _pcg_output(h0, l0)
            words[k + 1] = _pcg_output(h1, l1)
            words[k + 2] = _pcg_output(h2, l2)
            words[k + 3] = _pcg_output(h3, l3)
            k += 4
            if k + 4 > count:
                break
            h0, l0 = _pcg_step(h0, l0, steps[2], steps[3], steps[4], steps[5])
            h1, l1 = _pcg_step(h1, l1, steps[2], steps[3], steps[4], steps[5])
            h2, l2 = _pcg_step(h2, l2, steps[2], steps[3], steps[4], steps[5])
            h3, l3 = _pcg_step(h3, l3, steps[2], steps[3], steps[4], steps[5])
        high, low = h3, l3
    while k < count:
        high, low = _pcg_step(high, low, mult_high, mult_low, add_high, add_low)
        words[k] = _pcg_output(high, low)
        k += 1
    state[0] = high
    state[1] = low


@njit(inline="always")
def _fill_cuts(mode, mult, sel, sel2, row, m, cuts):
    """``cuts[k]`` = the digit of element ``k`` in ``row`` (one depth's digits), ``k < m``.

    ``sel`` and ``sel2`` are the block's views: indices from 0 are known
    non-negative, so no wraparound check keeps the loops from vectorizing.
    """
    if mode == 0:
        low = row[0]
        for k in range(m):
            cuts[k] = low
    elif mode == 1:
        low, step = row[0], np.uint8(row[1] - row[0])
        for k in range(m):
            cuts[k] = np.uint8(low + sel[k] * step)
    else:
        for k in range(m):
            cuts[k] = row[sel[k] + mult * sel2[k]]


@njit(inline="always")
def _cut_at(mode, mult, sel, sel2, row, i):
    if mode == 0:
        return row[0]
    if mode == 1:
        return np.uint8(row[0] + sel[i] * np.uint8(row[1] - row[0]))
    return row[sel[i] + mult * sel2[i]]


@njit(inline="always")
def _compare_block(u, cuts, m, out, base, ties, count):
    """``out[k] = u[k] < cuts[k]`` (``out``: the block's view); ``base + k`` appended to ``ties`` where equal."""
    for k in range(m):
        out[k] = u[k] < cuts[k]
    full = m - m % _GROUP
    for g in range(0, full, _GROUP):
        mask = _equal_mask(u, cuts, g)
        while mask:
            ties[count] = base + g + np.int64(_trailing_zeros(mask))
            count += 1
            mask &= mask - np.uint64(1)
    for k in range(full, m):
        if u[k] == cuts[k]:
            ties[count] = base + k
            count += 1
    return count


@njit(inline="always")
def _block(u, mode, mult, sel, sel2, row, out, base, m, cuts, ties, count):
    """Elements ``base .. base + m - 1`` against ``row``, their bytes ``u[0 .. m - 1]``; the ties appended."""
    full = m - m % _GROUP if mode == 1 else 0
    if full:  # two probabilities: the cuts selected in registers, 64 elements at a time
        low, high = row[0], row[1]
        for g in range(0, full, _GROUP):
            mask = _select_compare(u, g, sel, out, base + g, low, high)
            while mask:
                ties[count] = base + g + np.int64(_trailing_zeros(mask))
                count += 1
                mask &= mask - np.uint64(1)
    if full < m:
        rest = m - full
        _fill_cuts(
            mode, mult, sel[base + full : base + m], sel2[base + full : base + m], row, rest, cuts
        )
        count = _compare_block(
            u[full:m], cuts, rest, out[base + full : base + m], base + full, ties, count
        )
    return count


@njit(types.int64(_ro8, *_cut_args, _rw8, _i64), cache=True, nogil=True)
def first_pass(u, mode, mult, sel, sel2, digits, out, ties):
    """A chunk's first bytes ``u`` against its depth-0 digits: ``out`` set, the tied positions in ``ties``; their count."""
    n = u.size
    cuts = np.empty(_WORDS * 8, np.uint8)
    row = digits[0]
    count = 0
    for base in range(0, n, cuts.size):
        m = min(cuts.size, n - base)
        count = _block(
            u[base : base + m], mode, mult, sel, sel2, row, out, base, m, cuts, ties, count
        )
    return count


@njit(types.int64(_ro8, _i64, types.int64, *_cut_args, types.int64, _rw8), cache=True, nogil=True)
def resolve(u, ties, count, mode, mult, sel, sel2, digits, depth, out):
    """The ``count`` tied positions ``ties`` at ``depth``, byte ``u[j]`` each: ``out`` set, the still tied kept in order."""
    row = digits[depth]
    kept = 0
    for j in range(count):
        i = ties[j]
        cut = _cut_at(mode, mult, sel, sel2, row, i)
        out[i] = u[j] < cut
        if u[j] == cut:
            ties[kept] = i
            kept += 1
    return kept


_u64 = types.Array(types.uint64, 1, "C")
_ro64 = types.Array(types.uint64, 1, "C", readonly=True)


@njit(
    types.UniTuple(types.int64, 3)(_u64, _ro64, types.int64, types.int64, *_cut_args, _rw8, _i64),
    cache=True,
    nogil=True,
)
def pcg_chunks(state, steps, start, chunk, mode, mult, sel, sel2, digits, out, ties):
    """The chunks from ``start`` on, from a PCG64 stream computed here: what ``first_pass`` and ``resolve`` give.

    Per chunk of ``chunk`` elements: its ``ceil(size / 8)`` words (the
    request ``random_bytes(size)``), then per depth below
    ``digits.shape[0]`` the ``ceil(ties / 8)`` words of that depth's request,
    each word's bytes little-endian, a request's unused last bytes dropped as
    ``random_bytes`` drops them. ``state`` is advanced (:func:`_pcg_fill`).
    Stops after a chunk whose ties outlast the digits; returns where the next
    chunk starts, the ties left (in ``ties``, positions in the whole arrays)
    and the depth reached.
    """
    n = out.size
    block = np.empty(_WORDS, np.uint64)
    u = block.view(np.uint8)
    cuts = np.empty(_WORDS * 8, np.uint8)
    row = digits[0]
    for first in range(start, n, chunk):
        stop = min(first + chunk, n)
        count = 0
        for base in range(first, stop, u.size):
            m = min(u.size, stop - base)
            _pcg_fill(state, steps, block, (m + 7) // 8)
            count = _block(u, mode, mult, sel, sel2, row, out, base, m, cuts, ties, count)
        depth = 0
        while count and depth + 1 < digits.shape[0]:
            depth += 1
            words = np.empty((count + 7) // 8, np.uint64)
            _pcg_fill(state, steps, words, words.size)
            count = resolve(
                words.view(np.uint8), ties, count, mode, mult, sel, sel2, digits, depth, out
            )
        if count:
            return stop, count, depth
    return n, 0, 0


@njit(types.void(_u64, _ro64, _u64), cache=True, nogil=True)
def pcg_words(state, steps, words):
    """``words`` filled with the stream's next outputs (``random_raw(words.size)``'s), ``state`` advanced."""
    _pcg_fill(state, steps, words, words.size)


_rows = types.Array(types.uint8, 2, "C", readonly=True)
_i64x2 = types.Array(types.int64, 2, "C")


@njit(types.void(_rows, _i64), cache=True, nogil=True)
def column_sums(rows, out):
    """``out += rows.sum(0)`` for 0/1 bytes: runs of 255 rows summed in ``uint8`` four rows at a time, then widened."""
    n, m = rows.shape
    partial = np.empty(m, np.uint8)
    for start in range(0, n, 255):
        stop = min(start + 255, n)
        partial[:] = 0
        r = start
        while r + 4 <= stop:
            a, b, c, d = rows[r], rows[r + 1], rows[r + 2], rows[r + 3]
            for j in range(m):
                partial[j] += np.uint8(np.uint8(a[j] + b[j]) + np.uint8(c[j] + d[j]))
            r += 4
        while r < stop:
            a = rows[r]
            for j in range(m):
                partial[j] += a[j]
            r += 1
        for j in range(m):
            out[j] += partial[j]


_words = types.Array(types.uint64, 2, "C", readonly=True)


@njit(types.void(_words, _i64), cache=True, nogil=True)
def column_words(words, out):
    """:func:`column_sums` of rows whose bytes are viewed as ``uint64`` words (``8 * words.shape[1]`` columns).

    One row at a time, added word by word into per-column byte lanes: a lane holds at most 255 rows of
    0/1 bytes, so no addition carries into the next lane; the lanes are widened into ``out`` after each
    255 rows. One sequential stream, no read of four rows at once (which ran at a third of a streaming
    read on some machines).
    """
    n, m = words.shape
    partial = np.empty(m, np.uint64)
    lanes = partial.view(np.uint8)
    for start in range(0, n, 255):
        stop = min(start + 255, n)
        partial[:] = 0
        for r in range(start, stop):
            row = words[r]
            for j in range(m):
                partial[j] += row[j]
        for j in range(8 * m):
            out[j] += lanes[j]


@njit(
    types.void(_rows, types.Array(types.int64, 1, "C", readonly=True), _i64x2),
    cache=True,
    nogil=True,
)
def cohort_sums(rows, cohorts, out):
    """``out[c] += `` the sum of the rows of cohort ``c``, rows in any order (no sort).

    Each cohort has ``uint8`` counters that a row adds to in place; a
    cohort's counters are widened into ``out[c]`` after its 255th row
    since the last time (exact), and at the end.
    """
    n, m = rows.shape
    h = out.shape[0]
    partial = np.zeros((h, m), np.uint8)
    rows_in = np.zeros(h, np.int64)
    for r in range(n):
        c = cohorts[r]
        counters = partial[c]
        row = rows[r]
        for j in range(m):
            counters[j] += row[j]
        rows_in[c] += 1
        if rows_in[c] == 255:
            total = out[c]
            for j in range(m):
                total[j] += counters[j]
                counters[j] = 0
            rows_in[c] = 0
    for c in range(h):
        if rows_in[c]:
            total = out[c]
            counters = partial[c]
            for j in range(m):
                total[j] += counters[j]
