"""Memoized noise without a per-value table (docs/privacy.md).

The noise behind a report's permanent bits is never stored: it is re-derived
from the client secret, keyed on the metric, the *window* and the value
(:func:`noise_key`). Within a window the same value always gives the same
permanent bits, and a round relaxes them lazily (RAPPOR's permanent
randomized response, made relaxable); different windows and different values
get independent noise. Keying on the value alone, as RAPPOR does, would send
identical bits on every day with an equal value: the equality of two days
then leaks which days differ (an infinite loss without IRR; docs/privacy.md).

* Step 0: ``V_0 = randomizer(l_0).draw_noise(m, KeyedRandom(secret, metric, key, 0))``.
* Step ``s >= 1`` (a relaxation from ``l_{s-1}`` to ``l_s``, gradual-release
  paper Sec. 3, Algorithm 1; the exponential step for the asymmetric mode):
  ``V_s = randomizer(l_{s-1}).relax_noise(V_{s-1}, l_s, KeyedRandom(..., s))``.
  Jumping several levels at once is one step (Markov property), so the chain
  follows the list of levels the client actually used.
* Permanent bits: ``[b + V_s > 1/2]``; the IRR on top is fresh per report.
* ``key = noise_key(window, canonical_value(value))``; ``levels`` is the
  chain of the window's releases (``levels[0]`` the window's first report).

One report, two code paths, one definition. :func:`permanent_bits` (numpy)
is the definition; :func:`report_mask` (also behind :func:`report_bits`)
and :class:`ReportPlan` (what :meth:`client_sdk.Client.report` runs) compute
the same bits as Python integers for one report, without numpy round trips
on 16-128 element arrays:

* a fresh draw (a window's first report) reads the keyed stream once and
  compares each 52-bit stream index ``k = w >> 12`` with an integer cut.
  The cut is not a formula of its own: :func:`fresh_cuts` finds it by
  running the vectorized path (``draw_noise`` then ``permanent``) on grid
  uniforms, so ``[b + V(u_k) > 1/2]`` and the cut test agree on every
  ``k`` (``V`` is monotone in ``u``: sampling by inversion). The test runs
  on all words at once (:class:`CutTable`: the words' top bytes through
  ``bytes.translate``, the whole word where the top byte ties);
* a relaxed chain (a round's re-send) takes the vectorized noise as is;
* a round that relaxes the IRR draws its re-send from the window's last
  report instead of a fresh IRR (:meth:`ReportPlan.relaxed_payload`,
  :func:`protocol.irr_relaxation.relax_instantaneous`);
* the IRR compares uniforms with ``irr_p`` / ``irr_q`` exactly as
  :meth:`~protocol.randomizers.Randomizer.instantaneous` does, one uniform
  per bit, as two masks (:func:`irr_masks`, :func:`apply_irr`); the client
  compares its reports' uniforms ahead of time, in blocks
  (:class:`client_sdk.pools.IrrPool`).

A plan holds what does not depend on the value (the encoding's indexer,
the secret's HMAC key schedule with the metric's part of the noise seed's
message hashed, the level's cut tables, the payload header): the seed is
``noise_seed`` itself (:class:`~protocol.rng.KeyedHmac`), so which stream a
bit's noise comes from is unchanged (``tests/vectors/noise.json``).

``tests/test_client_fast.py`` checks the paths bit for bit.

Nothing in this module leaves the device; none of it is logged.
"""

from __future__ import annotations

import copy
import functools
import hmac
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from protocol.chain import distinct_levels
from protocol.encodings import Value, as_members, canonical_value
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.randomizers import Randomizer
from protocol.rng import (
    FloatArray,
    KeyedHmac,
    KeyedRandom,
    RandomSource,
    Shape,
    keyed_stream,
    noise_prefix,
    noise_seed,
    noise_suffix,
    words_to_uniforms,
)
from protocol.validation import check_int
from protocol.wire import payload_header

BoolArray = npt.NDArray[np.bool_]

SECRET_BYTES = 32
GRID = 1 << 52  # keyed uniforms are u_k = (k + 1/2) / 2^52 with k = w >> 12 (protocol.rng.words_to_uniforms)


def check_secret(secret: bytes) -> None:
    """The client secret is exactly 32 bytes."""
    if not isinstance(secret, bytes) or len(secret) != SECRET_BYTES:
        raise ParameterError("secret", f"must be {SECRET_BYTES} bytes")


_WINDOW = struct.Struct(">Q")
_WINDOW_END = 2**64  # windows are unsigned 64-bit seconds


def _check_levels(levels: Sequence[float]) -> None:
    if not levels:
        raise ParameterError("levels", "must hold at least the initial level")
    for i in range(1, len(levels)):
        if not levels[i] > levels[i - 1]:
            raise ParameterError("levels", f"must be strictly increasing, got {list(levels)}")


def noise_key(window: int, value_key: bytes) -> bytes:
    """The memoization key of a value in a window: ``b"W" || uint64_be(window) || value_key``.

    Args:
        window: the window's start in seconds (:func:`protocol.wire.window_start`).
        value_key: :func:`protocol.encodings.canonical_value` of the value or set.
    """
    if type(window) is not int or not 0 <= window < _WINDOW_END:  # report()'s path: one test when valid
        window = check_int("window", window, low=0, high=_WINDOW_END - 1)
    return b"W" + _WINDOW.pack(window) + value_key


def memoized_noise(
    secret: bytes, params: MetricParams, value_key: bytes, levels: Sequence[float]
) -> FloatArray:
    """The memoized noise ``V_s`` of one value after the relaxations in ``levels``.

    Args:
        secret: the client's 32-byte secret.
        params: the metric.
        value_key: :func:`noise_key` of the window and the value or set.
        levels: the window's chain of levels, ``levels[0]`` the first draw.

    Returns:
        ``num_bits`` noise values at ``levels[-1]`` (zeros in the trusted mode).
    """
    check_secret(secret)
    _check_levels(levels)
    shape = params.num_bits
    noise = params.randomizer(levels[0]).draw_noise(
        shape, KeyedRandom.for_value(secret, params.name, value_key, 0)
    )
    for step in range(1, len(levels)):
        stream = KeyedRandom.for_value(secret, params.name, value_key, step)
        noise = params.randomizer(levels[step - 1]).relax_noise(noise, levels[step], stream)
    return noise


def permanent_bits(
    secret: bytes, params: MetricParams, bits: npt.ArrayLike, value_key: bytes, levels: Sequence[float]
) -> BoolArray:
    """The memoized bits ``[b + V_s > 1/2]`` of a value's encoded ``bits``: never sent as they are.

    Args:
        secret: the client's 32-byte secret.
        params: the metric.
        bits: ``params.encode(value_or_set, cohort)``.
        value_key: :func:`noise_key` of the window and the same value or set.
        levels: the window's chain of levels.
    """
    noise = memoized_noise(secret, params, value_key, levels)
    return params.randomizer(levels[-1]).permanent(bits, noise)


def report_bits(
    secret: bytes,
    params: MetricParams,
    value_or_set: Value | Iterable[Value],
    *,
    cohort: int,
    window: int,
    levels: Sequence[float],
    rng: RandomSource,
) -> BoolArray:
    """Everything the client does to a value before sealing: encode, memoized noise, fresh IRR.

    The bits of one report of ``value_or_set`` in ``window`` after the
    window's chain ``levels``; ``rng`` feeds the IRR only. The client's
    :meth:`~client_sdk.Client.report` (through :func:`report_mask`) and the
    auditor's client path compute these bits with this one code.
    """
    mask = report_mask(secret, params, value_or_set, cohort=cohort, window=window, levels=levels, rng=rng)
    return bits_of_mask(mask, params.num_bits)


# --- one report with Python integers ----------------------------------------------------------
# Bit j of a report is bit j of an int ("mask"): packing LSB first is int.to_bytes(..., "little").


def mask_of_bits(bits: npt.ArrayLike) -> int:
    """The int whose bit ``j`` is ``bits[j]``."""
    packed = np.packbits(np.asarray(bits, dtype=bool), bitorder="little").tobytes()
    return int.from_bytes(packed, "little")


def bits_of_mask(mask: int, num_bits: int) -> BoolArray:
    """The bool vector of ``num_bits`` whose element ``j`` is bit ``j`` of ``mask``."""
    packed = np.frombuffer(mask.to_bytes((num_bits + 7) // 8, "little"), dtype=np.uint8)
    return np.unpackbits(packed, count=num_bits, bitorder="little").astype(bool)


def _members_mask(params: MetricParams, indices: Callable[[bytes], list[int]],
                  value_or_set: Value | Iterable[Value]) -> int:
    """The encoded mask given the encoding's ``indices`` of one member (cohort already checked)."""
    mask = 0
    if isinstance(value_or_set, str | bytes):  # one value: the members' loop without building a list
        if params.none_value is not None and params.is_none(value_or_set):
            return 0
        for index in indices(value_or_set.encode("utf-8") if isinstance(value_or_set, str) else value_or_set):
            mask |= 1 << index
        return mask
    for member in as_members(value_or_set):
        for index in indices(member):
            mask |= 1 << index
    return mask


def encoded_mask(params: MetricParams, value_or_set: Value | Iterable[Value], cohort: int) -> int:
    """``params.encode(value_or_set, cohort)`` as a mask (the members' indices OR'ed; ``none_value`` is 0)."""
    return _members_mask(params, params.encoding.indexer(cohort), value_or_set)


@dataclass(frozen=True)
class FreshCut:
    """The permanent bit of a fresh draw as a test on the stream index ``k``: ``(k >= cut) == rising``."""

    cut: int
    rising: bool

    def bit(self, k: int) -> bool:
        return (k >= self.cut) == self.rising


class CutTable:
    """:meth:`FreshCut.bit` of every word of a keyed stream at once, on bytes.

    ``k = w >> 12 >= cut`` is ``w >= cut << 12`` for the 64-bit word ``w``.
    The top byte of ``w`` (byte 7, little-endian) decides it unless it equals
    the top byte of ``cut << 12`` (a tie, probability 1/256 a word), when the
    whole word is compared. The words' top bytes, last word first
    (``stream[::-8]``), are mapped to ``"0"`` or ``"1"`` with
    ``bytes.translate`` and read as a binary number (bit ``j`` is word ``j``),
    so no Python loop runs over the bits.
    """

    __slots__ = ("constant", "rising", "table", "threshold", "tie")

    def __init__(self, cut: FreshCut) -> None:
        self.rising = cut.rising
        self.threshold = cut.cut << 12
        self.constant: bool | None = None
        if cut.cut <= 0:
            self.constant = cut.rising  # every k >= 0
        elif cut.cut >= GRID:
            self.constant = not cut.rising  # no k reaches it
        self.tie = min(self.threshold >> 56, 255)
        above, below = (b"1", b"0") if cut.rising else (b"0", b"1")
        self.table = b"".join(above if b > self.tie else b"0" if b == self.tie else below for b in range(256))

    def mask(self, tops: bytes, stream: bytes) -> int:
        """The mask whose bit ``j`` is :meth:`FreshCut.bit` of word ``j`` (``tops`` is ``stream[::-8]``)."""
        if self.constant is not None:
            return (1 << len(tops)) - 1 if self.constant else 0
        out = int(tops.translate(self.table), 2)
        last = len(tops) - 1
        i = tops.find(self.tie)
        while i >= 0:  # word last - i
            j = last - i
            if (int.from_bytes(stream[8 * j : 8 * j + 8], "little") >= self.threshold) == self.rising:
                out |= 1 << j
            i = tops.find(self.tie, i + 1)
        return out


def fresh_mask(stream: bytes, mask: int, zero: CutTable, one: CutTable) -> int:
    """The permanent bits of a fresh draw: bit ``j`` is ``one`` or ``zero``'s test of word ``j`` as ``mask`` says.

    ``stream`` is the keyed stream's first ``num_bits`` words (:func:`protocol.rng.keyed_stream`).
    """
    tops = stream[::-8]
    return (one.mask(tops, stream) & mask) | (zero.mask(tops, stream) & ~mask)


class _GivenUniforms(RandomSource):
    """A source that returns the uniforms it was given (to run the vectorized path on chosen points)."""

    def __init__(self, uniforms: FloatArray) -> None:
        self._uniforms = uniforms

    def uniform(self, shape: Shape) -> FloatArray:
        return self._uniforms.reshape(shape)


def _fresh_permanent(randomizer: Randomizer, true_bit: bool, ks: npt.NDArray[np.uint64]) -> BoolArray:
    """The vectorized path's permanent bit of a fresh draw at stream indices ``ks``."""
    uniforms = words_to_uniforms(ks << np.uint64(12))
    noise = randomizer.draw_noise(len(ks), _GivenUniforms(uniforms))
    return randomizer.permanent(np.full(len(ks), true_bit), noise)


@functools.lru_cache(maxsize=256)
def fresh_cuts(randomizer: Randomizer) -> tuple[FreshCut, FreshCut]:
    """The cuts for a true 0 and a true 1 at ``randomizer``'s level, found on the vectorized path.

    The noise of a fresh draw is a monotone function of its uniform (inversion),
    so each bit is one side of a cut on the grid ``k = 0 .. 2^52 - 1``. The
    cut is located exactly by evaluating :meth:`Randomizer.draw_noise` and
    :meth:`Randomizer.permanent` on the grid: 1024 points a round, about six
    rounds, once per level (cached).
    """
    cuts = []
    for true_bit in (False, True):
        ends = _fresh_permanent(randomizer, true_bit, np.array([0, GRID - 1], dtype=np.uint64))
        first, last = bool(ends[0]), bool(ends[1])
        if first == last:  # one side everywhere (trusted, or a bit that cannot change)
            cuts.append(FreshCut(cut=0 if first else GRID, rising=True))
            continue
        low, high = 0, GRID - 1  # bit(low) == first, bit(high) != first
        while high - low > 1:
            points = np.unique(np.linspace(low, high, num=min(1026, high - low + 1), dtype=np.uint64))[1:-1]
            flipped = np.flatnonzero(_fresh_permanent(randomizer, true_bit, points) != first)
            if len(flipped):
                high = int(points[flipped[0]])
                low = int(points[flipped[0] - 1]) if flipped[0] else low
            else:
                low = int(points[-1])
        cuts.append(FreshCut(cut=high, rising=not first))
    return cuts[0], cuts[1]


@functools.lru_cache(maxsize=256)
def fresh_tables(randomizer: Randomizer) -> tuple[CutTable, CutTable]:
    """:func:`fresh_cuts` as :class:`CutTable` (true 0, true 1), once per level."""
    zero, one = fresh_cuts(randomizer)
    return CutTable(zero), CutTable(one)


def prepare_level(params: MetricParams, level: float) -> None:
    """Find (and keep) the cuts of a fresh draw at ``level`` ahead of the first report there (~1 ms)."""
    fresh_tables(params.randomizer(level))


def keyed_words(secret: bytes, metric: str, value_key: bytes, step: int, count: int) -> tuple[int, ...]:
    """The first ``count`` 64-bit words of the keyed stream (docs/wire.md 3), read in one go.

    The same words :class:`~protocol.rng.KeyedRandom` turns into uniforms.
    """
    return struct.unpack(f"<{count}Q", keyed_stream(noise_seed(secret, metric, value_key, step), count))


def permanent_mask(
    secret: bytes, params: MetricParams, mask: int, value_key: bytes, levels: Sequence[float]
) -> int:
    """:func:`permanent_bits` of the encoded ``mask``, as a mask (never sent as it is).

    A window's first draw (one level) reads the keyed stream once and tests
    each word against the level's cuts (:func:`fresh_mask`); a relaxed chain
    takes the vectorized noise.
    """
    m = params.num_bits
    if len(levels) != 1:
        return mask_of_bits(permanent_bits(secret, params, bits_of_mask(mask, m), value_key, levels))
    check_secret(secret)
    if not params.local_mechanism.randomized:
        return mask
    stream = keyed_stream(noise_seed(secret, params.name, value_key, 0), m)
    return fresh_mask(stream, mask, *fresh_tables(params.randomizer(levels[0])))


# The IRR of one report as two masks of the uniforms it draws: ``below_p`` (u < irr_p) and ``below_q``
# (u < irr_q). Randomizer.instantaneous is then ``perm | below_q`` (asymmetric) and
# ``below_p | (perm & below_q)`` (symmetric), bit by bit the same comparisons.

IrrMasks = tuple[int, int]


def _row_masks(bits: BoolArray) -> list[int]:
    """Each row of a 2-D bool array as a mask."""
    packed = np.packbits(bits, axis=1, bitorder="little")
    width = packed.shape[1]
    data = packed.tobytes()
    return [int.from_bytes(data[i : i + width], "little") for i in range(0, len(data), width)]


def irr_masks(randomizer: Randomizer, uniforms: FloatArray) -> list[IrrMasks]:
    """The IRR masks of reports drawing the rows of ``uniforms`` (one row of ``num_bits`` per report)."""
    rows = len(uniforms)
    if randomizer.irr_q is None:
        return [(0, 0)] * rows
    below_q = _row_masks(uniforms < float(randomizer.irr_q))
    if randomizer.irr_p is None:  # a one-sided IRR: 1 stays 1, no cut for 0 -> 1 beyond q
        return [(0, q) for q in below_q]
    return list(zip(_row_masks(uniforms < float(randomizer.irr_p)), below_q, strict=True))


def apply_irr(randomizer: Randomizer, permanent: int, masks: IrrMasks) -> int:
    """:meth:`Randomizer.instantaneous` of a permanent mask, given the report's :func:`irr_masks`."""
    if not randomizer.has_irr:
        return permanent
    below_p, below_q = masks
    return randomizer.mechanism.apply_irr(permanent, below_p, below_q)


def instantaneous_mask(randomizer: Randomizer, permanent: int, num_bits: int, rng: RandomSource) -> int:
    """:meth:`Randomizer.instantaneous` of a permanent mask: one uniform per bit from ``rng``, in one call."""
    if not randomizer.has_irr:
        return permanent
    (masks,) = irr_masks(randomizer, rng.uniform(num_bits).reshape(1, num_bits))
    return apply_irr(randomizer, permanent, masks)


def report_mask(
    secret: bytes,
    params: MetricParams,
    value_or_set: Value | Iterable[Value],
    *,
    cohort: int,
    window: int,
    levels: Sequence[float],
    rng: RandomSource,
    value_key: bytes | None = None,
) -> int:
    """:func:`report_bits` as a mask: what the client seals (bit ``j`` of the int is bit ``j``).

    Args:
        value_key: ``canonical_value(value_or_set)`` when the caller has it already.
    """
    mask = encoded_mask(params, value_or_set, cohort)
    key = noise_key(window, canonical_value(value_or_set) if value_key is None else value_key)
    permanent = permanent_mask(secret, params, mask, key, levels)
    return instantaneous_mask(params.randomizer(levels[-1]), permanent, params.num_bits, rng)


class _PrefixedHmac:
    """``KeyedHmac(key, prefix).digest`` in one call, without keeping a key schedule (a key used once or twice)."""

    __slots__ = ("_key", "_prefix")

    def __init__(self, key: bytes, prefix: bytes) -> None:
        self._key = key
        self._prefix = prefix

    def digest(self, message: bytes) -> bytes:
        return hmac.digest(self._key, self._prefix + message, "sha256")


class ReportPlan:
    """A client's reports of one metric in its cohort at one level: everything that does not depend on the value.

    The one report pipeline of the client (``client_sdk.reporting``) and of
    simulated clients, one plan per secret (:meth:`for_secret`):
    encode, permanent (memoized) noise, fresh IRR, packed payload. Made once
    (per metric, cohort and level) and reused by every report: the
    encoding's indexer, the HMAC key schedule of the secret with the
    metric's part of the noise seed's message already hashed
    (:class:`~protocol.rng.KeyedHmac`: the same HMAC), the level's cut
    tables and the payload header. :meth:`payload` is :func:`report_mask`,
    packed: the same functions (:func:`fresh_mask`, :func:`permanent_mask`,
    :func:`apply_irr`), bit for bit.
    """

    def __init__(self, secret: bytes, params: MetricParams, cohort: int, level: float) -> None:
        check_secret(secret)
        self.params = params
        self.cohort = cohort
        self.level = level
        self.num_bits = params.num_bits
        self.randomizer = params.randomizer(level)
        self._secret = secret
        self._indices = params.encoding.indexer(cohort)
        self._noise: KeyedHmac | _PrefixedHmac = KeyedHmac(secret, noise_prefix(params.name))
        self._tables = fresh_tables(self.randomizer) if self.randomizer.mechanism.randomized else None
        self._header = payload_header(cohort, level)
        self._payload_bytes = (self.num_bits + 7) // 8

    def for_secret(self, secret: bytes) -> ReportPlan:
        """The same metric, cohort and level for another client's ``secret``.

        Shares what does not depend on the secret (the indexer, the cut
        tables, the header). For code that sends the reports of many clients
        (simulated clients, a report or two each), so that each still takes
        this one pipeline: the noise seed is the same HMAC, computed in one
        call instead of through a kept key schedule, which pays off only
        over many reports of one secret.
        """
        check_secret(secret)
        plan = copy.copy(self)  # shares the indexer, the cut tables and the header
        plan._secret = secret
        plan._noise = _PrefixedHmac(secret, noise_prefix(self.params.name))
        return plan

    def encode(self, value_or_set: Value | Iterable[Value]) -> int:
        """:func:`encoded_mask` in the plan's cohort."""
        return _members_mask(self.params, self._indices, value_or_set)

    def permanent(self, mask: int, key: bytes, chain: Sequence[float] | None = None) -> int:
        """:func:`permanent_mask` of ``mask`` (``key`` is :func:`noise_key`).

        ``chain``: the window's levels, oldest first, when rounds relaxed
        its first draw (the lazy steps of :func:`memoized_noise`); its last
        level is the plan's. ``None`` or one level: the window's first draw,
        through the plan's cut tables. A level repeated (a round that relaxed
        the IRR only) is no step.
        """
        chain = None if chain is None else distinct_levels(chain)
        if chain is not None and len(chain) > 1:
            if chain[-1] != self.level:
                raise ValueError(f"a chain must end at the plan's level {self.level}, got {chain[-1]}")
            return permanent_mask(self._secret, self.params, mask, key, chain)
        if self._tables is None:
            return mask
        stream = keyed_stream(self._noise.digest(noise_suffix(key, 0)), self.num_bits)
        return fresh_mask(stream, mask, *self._tables)

    def payload(
        self, value_or_set: Value | Iterable[Value], key: bytes, irr: IrrMasks, *,
        chain: Sequence[float] | None = None,
    ) -> bytes:
        """The packed payload of ``value_or_set`` with the IRR drawn as ``irr``.

        ``apply_irr(permanent(encode(value_or_set), key, chain), irr)`` after the header.
        """
        bits = _members_mask(self.params, self._indices, value_or_set)
        chain = None if chain is None else distinct_levels(chain)
        if chain is not None and len(chain) > 1:
            bits = self.permanent(bits, key, chain)
        elif self._tables is not None:  # a window's first draw, inline: the client's hot path
            stream = keyed_stream(self._noise.digest(noise_suffix(key, 0)), self.num_bits)
            bits = fresh_mask(stream, bits, *self._tables)
        return self._header + apply_irr(self.randomizer, bits, irr).to_bytes(self._payload_bytes, "little")

    def relaxed_payload(
        self, value_or_set: Value | Iterable[Value], key: bytes, chain: Sequence[float], sent: int,
        before: Randomizer, rng: RandomSource | None,
    ) -> bytes:
        """The packed payload of a round's re-send whose IRR continues the window's last report.

        Args:
            chain: the window's levels through this round's (the last is the plan's); the last
                report was made from the memoized bits of ``chain[:-1]``.
            sent: the last report's bits (a mask, as it was packed).
            before: the randomizer the last report was made with (its IRR is the one relaxed).
            rng: the source of the step's randomness.

        The bits are :func:`~protocol.irr_relaxation.relax_instantaneous` of the
        memoized bits now, from ``sent`` (a bit whose memoized value the round
        changed gets a fresh IRR at the plan's level): exactly the plan's IRR in
        law, and the window's reports cost one report at the last IRR level
        while the memoized bits are kept.
        """
        from protocol.irr_relaxation import relax_instantaneous

        if len(chain) < 2:
            raise ValueError("a relaxed re-send follows a report: the chain needs two levels")
        bits = _members_mask(self.params, self._indices, value_or_set)
        m = self.num_bits
        now = self.permanent(bits, key, chain)
        earlier = distinct_levels(chain[:-1])
        previous = now if earlier == distinct_levels(chain) else (
            permanent_mask(self._secret, self.params, bits, key, earlier))
        drawn = relax_instantaneous(bits_of_mask(now, m), bits_of_mask(sent, m), before, self.randomizer, rng,
                                    previous_permanent=bits_of_mask(previous, m))
        return self._header + mask_of_bits(drawn).to_bytes(self._payload_bytes, "little")


__all__ = [
    "CutTable",
    "FreshCut",
    "IrrMasks",
    "ReportPlan",
    "apply_irr",
    "bits_of_mask",
    "check_secret",
    "encoded_mask",
    "fresh_cuts",
    "fresh_mask",
    "fresh_tables",
    "instantaneous_mask",
    "irr_masks",
    "keyed_words",
    "mask_of_bits",
    "memoized_noise",
    "noise_key",
    "permanent_bits",
    "permanent_mask",
    "prepare_level",
    "report_bits",
    "report_mask",
]
