"""Exact integer samplers: published integers never come from floating-point noise.

Integer arithmetic and exact Bernoulli(exp(-gamma)) trials for rational
``gamma`` (the construction of Canonne, Kamath and Steinke, "The Discrete
Gaussian for Differential Privacy", 2020, Algorithms 1-2), fed with exact
uniform integers cut from the injected :class:`~protocol.rng.RandomSource`.
The same file holds the exact Bernoulli sampler of the simulation paths
(:func:`bernoulli_choose`): random bytes compared with the binary expansion
of the probability, so the bits' probability is the stated rational exactly.
Used by the central mechanisms (:mod:`protocol.central`: AGeo, the
two-sided geometric, and ALap, Laplace and SALap on a power-of-two output
grid, :func:`default_grid`) and Mechanism A (:mod:`protocol.multianalyst`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from types import ModuleType

import numpy as np
import numpy.typing as npt

from .errors import ParameterError
from .kernels import loaded as loaded_kernels
from .kernels import pcg64_state
from .rng import RandomSource, SeededRandom, as_rng
from .validation import check_int, check_number

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

__all__ = [
    "GRID_BITS",
    "MAX_GRID_VALUE",
    "MAX_RATE",
    "MAX_RATE_DENOMINATOR",
    "MAX_UNIFORM_BOUND",
    "WORD_BITS",
    "bernoulli_choose",
    "bernoulli_exact",
    "bernoulli_exp",
    "check_grid",
    "default_grid",
    "exact_probability",
    "exact_rate",
    "exact_uniform_words",
    "geometric_exact",
    "grid_epsilon",
    "grid_step_rate",
    "two_sided_geometric_exact",
    "uniform_below",
]


WORD_BITS = 48
"""Bits cut from one uniform: ``floor(u * 2**48)``.

Exact whenever ``rng.uniform`` is uniform on a dyadic grid of at least
``2**48`` cells (``SecureRandom``/``KeyedRandom``: ``(k + 1/2) / 2**52``;
``SeededRandom``: NumPy's ``j / 2**53``): every cell of width ``2**-48``
then holds the same number of grid points.
"""
_WIDE_BITS = 62  # two words: (a << 14) | (b >> 34)
MAX_UNIFORM_BOUND = 2**_WIDE_BITS
MAX_RATE_DENOMINATOR = 2**56
MAX_RATE = float(2**20)


def exact_uniform_words(rng: RandomSource, size: int) -> IntArray:
    """``size`` exact uniform integers in ``[0, 2**48)``, one uniform each.

    Raises:
        ParameterError: ``rng`` produced a value outside (0, 1).
    """
    u = np.asarray(rng.uniform(size), dtype=np.float64)
    if u.size and not (u.min() > 0.0 and u.max() < 1.0):
        raise ParameterError("rng", "uniform() must return values strictly inside (0, 1)")
    return (u * float(2**WORD_BITS)).astype(np.int64)  # truncation is the floor: u * 2**48 > 0


def _random_bits(rng: RandomSource, size: int, bits: int) -> IntArray:
    if bits <= WORD_BITS:
        return exact_uniform_words(rng, size) >> (WORD_BITS - bits)
    high = exact_uniform_words(rng, size)
    low = exact_uniform_words(rng, size)
    return (high << (_WIDE_BITS - WORD_BITS)) | (low >> (2 * WORD_BITS - _WIDE_BITS))


def uniform_below(rng: RandomSource, n: int, size: int) -> IntArray:
    """Exact uniform integers in ``[0, n)`` by rejection, ``1 <= n <= 2**62``.

    Draws ``b``-bit words (``b = 48`` or ``62``) and keeps those below the
    largest multiple of ``n`` that fits, returning them modulo ``n``. The
    acceptance rate is above 1/2; powers of two are never rejected.
    """
    n = check_int("n", n, low=1, high=MAX_UNIFORM_BOUND)
    out = np.zeros(size, dtype=np.int64)
    if n == 1 or size == 0:
        return out
    bits = WORD_BITS if n <= 2**WORD_BITS else _WIDE_BITS
    if n & (n - 1) == 0:  # a power of two: no word is rejected, and w % n is w's low bits
        return _random_bits(rng, size, bits) & (n - 1)
    limit = (1 << bits) - (1 << bits) % n
    filled = 0
    while filled < size:
        need = size - filled
        words = _random_bits(rng, need, bits)
        kept = (words if int(words.max()) < limit else words[words < limit][:need]) % n
        out[filled : filled + kept.size] = kept
        filled += kept.size
    return out


def _bernoulli_exp_unit(rng: RandomSource, num: IntArray, den: int) -> BoolArray:
    """Exact ``Bernoulli(exp(-num/den))`` per element, ``0 <= num <= den``.

    Canonne-Kamath-Steinke Algorithm 1: with ``g = num/den``, draw
    ``A_k ~ Bernoulli(g / k)`` for ``k = 1, 2, ...`` until the first 0 at
    ``K``; ``P(K > k) = g^k / k!`` so ``P(K odd) = exp(-g)``. Each trial is
    ``[R < num] and [W == 0]`` with ``R`` uniform below ``den`` and ``W``
    uniform below ``k``: probability ``(num/den)(1/k)``. Vectorized by rounds
    (every still-running element is at the same ``k``).
    """
    odd = np.zeros(num.size, dtype=bool)  # stopped at an odd k
    active = np.arange(num.size)
    k = 1
    while active.size:
        a = num[active]
        hit = (uniform_below(rng, den, active.size) < a) if den > 1 else a > 0
        if k > 1:
            hit &= uniform_below(rng, k, active.size) == 0
        if k % 2:
            odd[active[~hit]] = True
        active = active[hit]
        k += 1
    return odd


# ==========================================================================
# Exact Bernoulli bits from random bytes
# ==========================================================================

BERNOULLI_CHUNK = 1 << 20
"""Elements per pass of :func:`bernoulli_choose`: memory stays flat whatever the size (part of the stream)."""

_BLOCK = 1 << 17
"""Elements per block of a chunk's first-byte comparison: a block's arrays stay in cache (not part of the stream)."""


def exact_probability(p: float | Fraction) -> Fraction:
    """``p`` as the exact rational in ``[0, 1]`` that is sampled (a double is a dyadic rational).

    Raises:
        ParameterError: (field ``p``) not a number in ``[0, 1]``.
    """
    value = p if isinstance(p, Fraction) else Fraction(check_number("p", p))
    if not 0 <= value <= 1:
        raise ParameterError("p", f"must be in [0, 1], got {p}")
    return value


def _expansion_digit(p: Fraction, depth: int) -> int:
    """Byte ``depth`` (0 = first) of the base-256 expansion of ``p``; ``1 = 0.FFFF...``."""
    if p == 1:
        return 255
    return (p.numerator << (8 * (depth + 1))) // p.denominator % 256


def _digits(probabilities: Sequence[Fraction], depth: int) -> npt.NDArray[np.uint8]:
    return np.array([_expansion_digit(p, depth) for p in probabilities], dtype=np.uint8)


class _Expansion:
    """The base-256 digits of a table of probabilities, by depth, each depth computed once per call."""

    def __init__(self, probabilities: Sequence[Fraction]) -> None:
        self.probabilities = probabilities
        self._rows: list[npt.NDArray[np.uint8]] = []

    def digits(self, depth: int) -> npt.NDArray[np.uint8]:
        while len(self._rows) <= depth:
            self._rows.append(_digits(self.probabilities, len(self._rows)))
        return self._rows[depth]

    def table(self, depths: int) -> npt.NDArray[np.uint8]:
        """Depths ``0 .. depths - 1`` as one ``(depths, len)`` array (the rows :meth:`digits` gives).

        The missing depths come from one integer division per probability:
        ``floor(p 256**D)`` holds digits ``0 .. D - 1`` (digit ``d`` is
        ``floor(p 256**(d + 1)) mod 256``, the same floor of a floor).
        """
        have = len(self._rows)
        if have < depths:
            shift = 8 * depths
            words = [
                (1 << shift) - 1 if p == 1 else (p.numerator << shift) // p.denominator
                for p in self.probabilities
            ]
            for depth in range(have, depths):
                at = 8 * (depths - 1 - depth)
                self._rows.append(np.array([(w >> at) & 255 for w in words], dtype=np.uint8))
        return np.stack(self._rows[:depths])


def _select(
    digits: npt.NDArray[np.uint8], choice: npt.NDArray[np.uint8] | None
) -> npt.NDArray[np.uint8] | np.uint8:
    """``digits[choice]``, with wrapping uint8 arithmetic for up to 4 digits (a gather costs 2-10x more).

    Two digits: ``d0 + choice * (d1 - d0)`` mod 256; three or four: that
    select on the low bit of ``choice`` within each pair, then on the high
    bit between the pairs. More: a gather.
    """
    if choice is None:
        return digits[0]
    d = [int(x) for x in digits]
    if len(d) == 2:
        # uint8 arithmetic wraps mod 256
        return choice * np.uint8((d[1] - d[0]) % 256) + np.uint8(d[0])
    if len(d) > 4:
        return np.take(digits, choice)
    d += [0] * (4 - len(d))  # padding is never chosen
    low_bit = choice & np.uint8(1)
    pair0 = low_bit * np.uint8((d[1] - d[0]) % 256)
    pair0 += np.uint8(d[0])
    pair1 = low_bit * np.uint8((d[3] - d[2]) % 256)
    pair1 += np.uint8(d[2])
    pair1 -= pair0
    pair1 *= choice >> np.uint8(1)  # choice < 4: the high bit
    pair1 += pair0
    return pair1


def _cuts(
    digits: npt.NDArray[np.uint8],
    choice: npt.NDArray[np.uint8] | None,
    upper: npt.NDArray[np.uint8] | None,
) -> npt.NDArray[np.uint8] | np.uint8:
    """Each element's digit of its probability, ``digits[choice + upper * half]`` (one depth's digits)."""
    if upper is None:
        return _select(digits, choice)
    half = digits.size // 2
    if half in (3, 4) and choice is not None:
        # 8 digits T[x + 2y + 4z] (x, y the bits of choice < 4, z = upper) as the multilinear polynomial
        # A(x) + y B(x) + z (C(x) + y D(x)) mod 256, each of A..D affine in x: 16 uint8 operations.
        t = (
            [int(d) for d in digits[:half]]
            + [0] * (4 - half)
            + [int(d) for d in digits[half:]]
            + [0] * (4 - half)
        )
        x, y = choice & np.uint8(1), choice >> np.uint8(1)
        terms = []
        for base, slope in (
            (t[0], t[1] - t[0]),
            (t[2] - t[0], t[3] - t[2] - t[1] + t[0]),
            (t[4] - t[0], t[5] - t[4] - t[1] + t[0]),
            (t[6] - t[4] - t[2] + t[0], t[7] - t[6] - t[5] + t[4] - t[3] + t[2] + t[1] - t[0]),
        ):
            term = x * np.uint8(slope % 256)
            term += np.uint8(base % 256)
            terms.append(term)
        a, b, c, d = terms
        d *= y
        c += d
        c *= upper
        b *= y
        a += b
        a += c
        return a
    low = _select(digits[:half], choice if half > 1 else None)
    high = _select(digits[half:], choice if half > 1 else None)
    if isinstance(high, np.ndarray):
        high -= low  # uint8 arithmetic wraps mod 256
        high *= upper
        high += low
        return high
    return upper * np.uint8((int(high) - int(low)) % 256) + low


def _bernoulli_pass(
    rng: RandomSource,
    expansion: _Expansion,
    choice: npt.NDArray[np.uint8] | None,
    upper: npt.NDArray[np.uint8] | None,
    out: BoolArray,
) -> None:
    """One chunk: ``out[i] = [X_i < p]`` with ``X_i = 0.U_1 U_2 ...`` in bytes, read lazily.

    The first byte decides unless it equals ``p``'s first digit (probability
    1/256); only the ties draw a next byte, and so on. Digits of ``p`` past a
    dyadic's end are 0, so a tie there never turns into a 1.
    """
    u = rng.random_bytes(out.size)
    cuts = _cuts(expansion.digits(0), choice, upper)
    np.less(u, cuts, out=out)
    _resolve_ties(rng, expansion, choice, upper, out, np.flatnonzero(u == cuts))


def _bernoulli_pass_blocked(
    rng: RandomSource,
    expansion: _Expansion,
    choice: npt.NDArray[np.uint8] | None,
    upper: npt.NDArray[np.uint8] | None,
    out: BoolArray,
    tie: BoolArray,
) -> None:
    """:func:`_bernoulli_pass` for a large chunk: the same bits from the same bytes, fewer trips to memory.

    The same one request for the chunk's first bytes, then compared block by
    block (:data:`_BLOCK`: the cuts and both comparisons of a block stay in
    cache) with the ties marked in ``tie`` (a buffer of at least
    ``out.size`` rounded up to 64) and found by :func:`_sparse_positions`:
    the same tied elements in the same order, so the same later requests.
    """
    n = out.size
    u = rng.random_bytes(n)
    first = expansion.digits(0)
    # The common case, a table per true bit: _select's d0 + choice * (d1 - d0) mod 256 into one buffer.
    pair = choice if upper is None and first.size == 2 else None
    low, step = first[0], np.uint8((int(first[-1]) - int(first[0])) % 256)
    buffer = np.empty(min(n, _BLOCK), dtype=np.uint8)
    for start in range(0, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        cuts: npt.NDArray[np.uint8] | np.uint8
        if pair is not None:
            cuts = np.multiply(pair[start:stop], step, out=buffer[: stop - start])
            cuts += low
        else:
            cuts = _cuts(
                first,
                None if choice is None else choice[start:stop],
                None if upper is None else upper[start:stop],
            )
        np.less(u[start:stop], cuts, out=out[start:stop])
        np.equal(u[start:stop], cuts, out=tie[start:stop])
    padded = -(-n // 64) * 64
    tie[n:padded] = False
    _resolve_ties(rng, expansion, choice, upper, out, _sparse_positions(tie[:padded]))


def _sparse_positions(mask: BoolArray) -> IntArray:
    """``np.flatnonzero(mask)`` for a sparse mask (ties: 1/256) whose size is a multiple of 64.

    Two coarser masks first, one flag per 8 and per 64 elements (uint64
    views): only the 64-element groups holding a True are scanned, then
    only their 8-element words (NumPy's nonzero costs per element scanned).
    """
    words = mask.view(np.uint64) != 0
    groups = np.flatnonzero(words.view(np.uint64) != 0)
    hits = np.flatnonzero(words.view(np.uint64)[groups].view(np.bool_))
    word_index = groups[hits >> 3] * 8 + (hits & 7)
    hits = np.flatnonzero(mask.view(np.uint64)[word_index].view(np.bool_))
    return word_index[hits >> 3] * 8 + (hits & 7)


def _resolve_ties(
    rng: RandomSource,
    expansion: _Expansion,
    choice: npt.NDArray[np.uint8] | None,
    upper: npt.NDArray[np.uint8] | None,
    out: BoolArray,
    tied: IntArray,
) -> None:
    """The elements ``tied`` (ascending) on their first byte read one byte each at the next depth, until none ties."""
    depth = 0
    while tied.size:
        depth += 1
        u = rng.random_bytes(tied.size)
        cuts = _cuts(
            expansion.digits(depth),
            None if choice is None else choice[tied],
            None if upper is None else upper[tied],
        )
        out[tied] = u < cuts
        tied = tied[u == cuts]


_KERNEL_DEPTHS = 4
"""Depths of digits the compiled kernel resolves on its own (a tie lasts past them with probability 256**-4)."""

_NO_INDEX = np.zeros(0, dtype=np.uint8)


def _requested(rng: RandomSource, n: int) -> npt.NDArray[np.uint8]:
    """``rng.random_bytes(n)`` as the kernel reads it: ``n`` contiguous ``uint8`` (a strided view is copied)."""
    u = np.asarray(rng.random_bytes(n))
    if u.shape != (n,) or u.dtype != np.uint8:
        raise ParameterError("rng", f"random_bytes({n}) must return {n} bytes as a uint8 array")
    return np.ascontiguousarray(u)


def _choose_compiled(
    kernel: ModuleType,
    rng: RandomSource,
    expansion: _Expansion,
    choice: npt.NDArray[np.uint8] | None,
    upper: npt.NDArray[np.uint8] | None,
    out: npt.NDArray[np.uint8],
) -> None:
    """The chunks of :func:`bernoulli_choose` in the compiled kernel (:mod:`protocol.kernels`): the same bits.

    A seeded PCG64 stream is computed inside the kernel, its words in
    ``random_raw``'s order: each chunk's first bytes, then its ties' bytes
    depth by depth, chunk after chunk. Any other source's bytes are requested
    exactly as the NumPy passes request them and compared in one pass per
    chunk. Ties that outlast the kernel's digits (:data:`_KERNEL_DEPTHS`) go
    on here, one request per depth, before the next chunk. The cut mode names
    the digit each element is compared with (``protocol/_numba_kernels.py``).
    """
    size = len(expansion.probabilities)
    selector = choice if choice is not None else upper
    mode, mult, sel, sel2 = 0, 0, _NO_INDEX, _NO_INDEX  # one probability
    if choice is not None and upper is not None:
        mode, mult, sel, sel2 = 2, size // 2, choice, upper
    elif selector is not None:  # a 0/1 selector of two digits, or an index into the table
        mode, sel, sel2 = (1 if size == 2 else 2), selector, selector
    n = out.size
    ties = np.empty(min(n, BERNOULLI_CHUNK), dtype=np.int64)  # untouched pages are never mapped
    bit_generator = rng.generator.bit_generator if type(rng) is SeededRandom else None
    start = 0
    while start < n:
        lo, hi = 0, n  # the positions in ties are relative to lo
        with pcg64_state(bit_generator) as pcg:
            if pcg is not None:
                digits = expansion.table(_KERNEL_DEPTHS)
                start, count, depth = kernel.pcg_chunks(
                    *pcg, start, BERNOULLI_CHUNK, mode, mult, sel, sel2, digits, out, ties
                )
        if pcg is None:
            lo, hi = start, min(start + BERNOULLI_CHUNK, n)
            count = kernel.first_pass(
                _requested(rng, hi - lo),
                mode,
                mult,
                sel[lo:hi],
                sel2[lo:hi],
                expansion.table(1),
                out[lo:hi],
                ties,
            )
            start, depth = hi, 0
        while count:
            depth += 1
            count = kernel.resolve(
                _requested(rng, count),
                ties,
                count,
                mode,
                mult,
                sel[lo:hi],
                sel2[lo:hi],
                expansion.table(depth + 1),
                depth,
                out[lo:hi],
            )


def bernoulli_choose(
    rng: RandomSource | None,
    probabilities: Sequence[float | Fraction],
    choice: npt.ArrayLike,
    *,
    upper: npt.ArrayLike | None = None,
) -> BoolArray:
    """Independent bits, bit ``i`` True with probability ``probabilities[choice[i]]`` *exactly*.

    A uniform ``X`` in [0, 1) is read byte by byte and compared with the base-256
    expansion of ``p`` (exact: a double or any rational), ``[X < p]``: one byte
    per bit with probability 255/256, ``256/255`` on average. Irrational or
    non-dyadic ``p`` (a ratio of doubles) just has an infinite expansion, read
    as far as a tie lasts. Works in chunks of :data:`BERNOULLI_CHUNK` elements
    (each compared in cache-sized blocks; the blocks do not change the bits).

    Args:
        rng: the source of bytes (:meth:`~protocol.rng.RandomSource.random_bytes`);
            ``None`` is the secure default.
        probabilities: at most 256 probabilities in [0, 1] (doubles or Fractions).
        choice: integers (or booleans) indexing ``probabilities``; the output has its shape.
        upper: booleans of ``choice``'s shape, or ``None``: the probability is
            then ``probabilities[choice + upper * len(probabilities) // 2]`` (an
            even number of probabilities, ``choice`` indexing the first half):
            one table per true bit, selected without an index array (cheaper).
    """
    probs = [exact_probability(p) for p in probabilities]
    if not 1 <= len(probs) <= 256:
        raise ParameterError("probabilities", f"must hold 1 to 256 values, got {len(probs)}")
    which = np.asarray(choice)
    half = len(probs)
    high = None
    if upper is not None:
        high = np.ascontiguousarray(np.asarray(upper, dtype=bool)).reshape(-1).view(np.uint8)
        if len(probs) % 2 or high.size != which.size:
            raise ParameterError(
                "upper", "needs an even number of probabilities and the shape of choice"
            )
        half = len(probs) // 2
    in_range = which.dtype == np.bool_ and half >= 2  # checked for free
    # an unsigned index is checked chunk by chunk, while in cache (all at once before the kernel)
    unsigned = which.dtype.kind == "u"
    if which.size and not in_range and not unsigned and (which.min() < 0 or which.max() >= half):
        raise ParameterError("choice", f"must index the {half} probabilities")
    source = as_rng(rng)
    raw = np.ascontiguousarray(which).reshape(-1)
    flat = raw.view(np.uint8) if raw.dtype == np.bool_ else raw.astype(np.uint8, copy=False)
    out = np.empty(flat.size, dtype=bool)
    expansion = _Expansion(probs)
    kernel = loaded_kernels(flat.size) if flat.size else None
    if kernel is not None:
        if unsigned and not in_range and int(raw.max()) >= half:
            raise ParameterError("choice", f"must index the {half} probabilities")
        _choose_compiled(
            kernel, source, expansion, flat if half > 1 else None, high, out.view(np.uint8)
        )
        return out.reshape(which.shape)
    tie = np.empty(-(-min(flat.size, BERNOULLI_CHUNK) // 64) * 64, dtype=bool)
    for start in range(0, flat.size, BERNOULLI_CHUNK):
        stop = min(start + BERNOULLI_CHUNK, flat.size)
        if unsigned and not in_range and int(raw[start:stop].max()) >= half:
            raise ParameterError("choice", f"must index the {half} probabilities")
        index = flat[start:stop] if half > 1 else None
        upper_part = None if high is None else high[start:stop]
        if stop - start >= _BLOCK:
            _bernoulli_pass_blocked(source, expansion, index, upper_part, out[start:stop], tie)
        else:
            _bernoulli_pass(source, expansion, index, upper_part, out[start:stop])
    return out.reshape(which.shape)


def bernoulli_exact(
    rng: RandomSource | None, p: float | Fraction, shape: int | tuple[int, ...]
) -> BoolArray:
    """Independent bits True with probability ``p`` exactly (:func:`bernoulli_choose` with one ``p``)."""
    return bernoulli_choose(rng, [p], np.zeros(shape, dtype=np.uint8))


def exact_rate(rate: float | Fraction) -> Fraction:
    """The rational rate the exact samplers use for ``rate`` (never above it).

    A float is a dyadic rational; it is used exactly when its denominator is
    at most ``2**56`` (every float >= 1/16), otherwise rounded *down* to a
    multiple of ``2**-56`` (relative change below ``2**-56 / rate``; more
    noise, so the privacy claim still holds).
    """
    if not isinstance(rate, Fraction):
        rate = check_number("rate", rate)
    if not 0 < rate <= MAX_RATE:
        raise ParameterError("rate", f"must be in (0, 2**20] for the exact samplers, got {rate}")
    exact = Fraction(rate)
    if exact.denominator > MAX_RATE_DENOMINATOR:
        exact = Fraction(math.floor(exact * MAX_RATE_DENOMINATOR), MAX_RATE_DENOMINATOR)
    if exact == 0:
        raise ParameterError("rate", f"must be >= 2**-56, got {rate}")
    return exact


def bernoulli_exp(rng: RandomSource, gamma: float | Fraction, size: int) -> BoolArray:
    """Exact ``Bernoulli(exp(-gamma))`` for a rational ``gamma >= 0``.

    ``exp(-gamma) = exp(-1)^floor(gamma) * exp(-(gamma - floor(gamma)))``:
    ``floor(gamma)`` unit trials and one fractional trial, all must succeed.
    """
    g = Fraction(gamma)
    if g < 0:
        raise ParameterError("gamma", f"must be >= 0, got {gamma}")
    whole = math.floor(g)
    frac = g - whole
    result = _bernoulli_exp_unit(
        rng, np.full(size, frac.numerator, dtype=np.int64), frac.denominator
    )
    for _ in range(whole):
        result &= _bernoulli_exp_unit(rng, np.ones(size, dtype=np.int64), 1)
    return result


def _accepted_offsets(rng: RandomSource, t: int, size: int) -> IntArray:
    """``U`` uniform on ``{0..t-1}`` kept with probability ``exp(-U/t)`` (rejection)."""
    out = np.zeros(size, dtype=np.int64)
    if t == 1:
        return out
    pending = np.arange(size)
    while pending.size:
        cand = uniform_below(rng, t, pending.size)
        keep = _bernoulli_exp_unit(rng, cand, t)
        out[pending[keep]] = cand[keep]
        pending = pending[~keep]
    return out


def _geometric_unit(rng: RandomSource, size: int) -> IntArray:
    """``V`` with ``P(V >= v) = exp(-v)``: count successes of Bernoulli(exp(-1))."""
    v = np.zeros(size, dtype=np.int64)
    active = np.arange(size)
    while active.size:
        more = _bernoulli_exp_unit(rng, np.ones(active.size, dtype=np.int64), 1)
        active = active[more]
        v[active] += 1
    return v


def geometric_exact(
    rng: RandomSource | None, rate: float | Fraction, shape: int | tuple[int, ...]
) -> IntArray:
    """Exact one-sided geometric on ``{0, 1, ...}``: ``P(G >= k) = exp(-rate k)``.

    With ``rate = s/t`` (see :func:`exact_rate`): ``X = U + t V`` where ``U``
    is uniform on ``{0..t-1}`` accepted w.p. ``exp(-U/t)`` and
    ``P(V >= v) = exp(-v)``, so ``P(X = x)`` is proportional to
    ``exp(-x/t)``; then ``G = floor(X / s)`` has ``P(G >= k) = P(X >= ks) =
    exp(-k s/t)`` (Canonne-Kamath-Steinke, Algorithm 2). Integer arithmetic
    only; the number of uniforms drawn is random.
    """
    source = as_rng(rng)
    exact = exact_rate(rate)
    s, t = exact.numerator, exact.denominator
    size = int(np.prod(shape)) if isinstance(shape, tuple) else int(shape)
    u = _accepted_offsets(source, t, size)
    v = _geometric_unit(source, size)
    if int(v.max(initial=0)) < (2**62) // t:
        g = (u + t * v) // s
    else:  # astronomically rare: exact big-integer arithmetic
        g = np.array(
            [(int(a) + t * int(b)) // s for a, b in zip(u, v, strict=True)], dtype=np.int64
        )
    return g.reshape(shape)


def two_sided_geometric_exact(
    rng: RandomSource | None, rate: float | Fraction, shape: int | tuple[int, ...]
) -> IntArray:
    """Exact two-sided geometric (discrete Laplace): ``P(Z = z) = (1-q)/(1+q) q^|z|``, ``q = exp(-rate)``.

    The difference of two independent one-sided geometrics with ratio ``q``.
    """
    source = as_rng(rng)
    return geometric_exact(source, rate, shape) - geometric_exact(source, rate, shape)


# ==========================================================================
# The output grid of the central mechanisms (docs/central.md, "The grid")
# ==========================================================================

GRID_BITS = 10
"""The grid is at most ``scale / 2**10``: about a thousand grid points per noise scale."""
MIN_GRID_EXPONENT = -20
MAX_GRID_VALUE = 2.0**32
"""Counts and noise stay below this in magnitude: ``c + k g`` is then an exact double for ``g >= 2**-20``."""


def default_grid(scale: float, sensitivity: float = 1.0) -> float:
    """The output grid ``g = 2**k`` for noise of scale ``b = D / eps`` (public: parameters only).

    The largest power of two with ``g <= b / 2**10``, ``g <= D`` and
    ``g <= 1``, but at least ``2**-20``. Integer counts lie on every such
    grid, and a shift by ``D`` covers at least one grid step.
    """
    exponent = 0
    for bound in (scale / 2**GRID_BITS, sensitivity):
        if 0 < bound < math.inf:
            exponent = min(exponent, math.frexp(bound)[1] - 1)  # floor(log2(bound))
    return math.ldexp(1.0, max(exponent, MIN_GRID_EXPONENT))


def check_grid(value: object) -> float:
    """A grid: a power of two in ``[2**-20, 1]``.

    Raises:
        ParameterError: (field ``grid``) anything else.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ParameterError("grid", f"must be a power of two in [2**-20, 1], got {value!r}")
    mantissa, exponent = math.frexp(value)
    if mantissa != 0.5 or not MIN_GRID_EXPONENT <= exponent - 1 <= 0:
        raise ParameterError("grid", f"must be a power of two in [2**-20, 1], got {value!r}")
    return float(value)


def grid_step_rate(epsilon: float, sensitivity: float | Fraction, grid: float) -> Fraction:
    """``r = eps g / D`` per grid step, as the exact sampler uses it (:func:`exact_rate`: never above)."""
    return exact_rate(Fraction(epsilon) * Fraction(grid) / Fraction(sensitivity))


def grid_epsilon(rate: Fraction, sensitivity: float | Fraction, grid: float) -> float:
    """The exact loss ``r floor(D / g)`` of a shift by at most ``D``, as the double at or above it.

    Counts on the grid move by whole grid steps, at most ``floor(D / g)`` of
    them; each step multiplies a geometric's probabilities by exactly
    ``exp(r)`` on the shared support (``= eps`` when ``D / g`` is an integer).
    """
    exact = rate * math.floor(Fraction(sensitivity) / Fraction(grid))
    value = float(exact)
    return value if Fraction(value) >= exact else math.nextafter(value, math.inf)
