"""Memoized noise without a per-value table (DESIGN 4 and 5, docs/privacy.md).

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
is the definition; :func:`report_mask` (what the client sends, also behind
:func:`report_bits`) computes the same bits as Python integers for one
report, without numpy round trips on 16-128 element arrays:

* a fresh draw (a window's first report) reads the keyed stream once and
  compares each 52-bit stream index ``k = w >> 12`` with an integer cut.
  The cut is not a formula of its own: :func:`fresh_cuts` finds it by
  running the vectorized path (``draw_noise`` then ``permanent``) on grid
  uniforms, so ``[b + V(u_k) > 1/2]`` and the cut test agree on every
  ``k`` (``V`` is monotone in ``u``: sampling by inversion);
* a relaxed chain (a round's re-send) takes the vectorized noise as is;
* the IRR compares the injected source's uniforms with ``irr_p`` / ``irr_q``
  exactly as :meth:`~protocol.randomizers.Randomizer.instantaneous` does,
  one uniform per bit, drawn in one call.

``tests/test_client_fast.py`` checks the two paths bit for bit.

Nothing in this module leaves the device; none of it is logged.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from protocol.encodings import Value, as_members, canonical_value
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.randomizers import Randomizer
from protocol.rng import FloatArray, KeyedRandom, RandomSource, Shape, noise_seed, words_to_uniforms
from protocol.validation import check_int

BoolArray = npt.NDArray[np.bool_]

FINGERPRINT_LABEL = b"onesided/fingerprint/v1"
SECRET_BYTES = 32
GRID = 1 << 52  # keyed uniforms are u_k = (k + 1/2) / 2^52 with k = w >> 12 (protocol.rng.words_to_uniforms)
SCALAR_MAX_BITS = 512  # above this many bits numpy is faster than a loop over Python integers


def check_secret(secret: bytes) -> None:
    """The client secret is exactly 32 bytes."""
    if not isinstance(secret, bytes) or len(secret) != SECRET_BYTES:
        raise ParameterError("secret", f"must be {SECRET_BYTES} bytes")


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
    check_int("window", window, low=0, high=2**64 - 1)
    return b"W" + struct.pack(">Q", window) + value_key


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


def encoded_mask(params: MetricParams, value_or_set: Value | Iterable[Value], cohort: int) -> int:
    """``params.encode(value_or_set, cohort)`` as a mask (the members' indices OR'ed; ``none_value`` is 0)."""
    if isinstance(value_or_set, str | bytes) and params.is_none(value_or_set):
        params.encoding.check_cohort(cohort)
        return 0
    mask = 0
    for member in as_members(value_or_set):
        for index in params.encoding.bits_of(member, cohort):
            mask |= 1 << index
    return mask


@dataclass(frozen=True)
class FreshCut:
    """The permanent bit of a fresh draw as a test on the stream index ``k``: ``(k >= cut) == rising``."""

    cut: int
    rising: bool

    def bit(self, k: int) -> bool:
        return (k >= self.cut) == self.rising


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
def _at_level(params: MetricParams, level: float) -> tuple[Randomizer, FreshCut, FreshCut]:
    """The randomizer at ``level`` and its cuts, looked up once per report."""
    randomizer = params.randomizer(level)
    return (randomizer, *fresh_cuts(randomizer))


def prepare_level(params: MetricParams, level: float) -> None:
    """Find (and keep) the cuts of a fresh draw at ``level`` ahead of the first report there (~1 ms)."""
    _at_level(params, level)


def keyed_words(secret: bytes, metric: str, value_key: bytes, step: int, count: int) -> tuple[int, ...]:
    """The first ``count`` 64-bit words of the keyed stream (docs/wire.md 3), read in one go.

    The same words :class:`~protocol.rng.KeyedRandom` turns into uniforms.
    """
    seed = noise_seed(secret, metric, value_key, step)
    return struct.unpack(f"<{count}Q", hashlib.shake_256(seed).digest(8 * count))


def permanent_mask(
    secret: bytes, params: MetricParams, mask: int, value_key: bytes, levels: Sequence[float]
) -> int:
    """:func:`permanent_bits` of the encoded ``mask``, as a mask (never sent as it is)."""
    m = params.num_bits
    if len(levels) != 1 or m > SCALAR_MAX_BITS:
        return mask_of_bits(permanent_bits(secret, params, bits_of_mask(mask, m), value_key, levels))
    check_secret(secret)
    if params.mode == "trusted":
        return mask
    _, zero, one = _at_level(params, levels[0])
    cut0, rising0, cut1, rising1 = zero.cut, zero.rising, one.cut, one.rising
    out = 0
    for j, word in enumerate(keyed_words(secret, params.name, value_key, 0, m)):  # FreshCut.bit, inlined
        if ((word >> 12 >= cut1) == rising1) if mask >> j & 1 else ((word >> 12 >= cut0) == rising0):
            out |= 1 << j
    return out


def instantaneous_mask(randomizer: Randomizer, permanent: int, num_bits: int, rng: RandomSource) -> int:
    """:meth:`Randomizer.instantaneous` of a permanent mask: one uniform per bit from ``rng``, in one call."""
    if not randomizer.has_irr:
        return permanent
    q = float(randomizer.irr_q)  # type: ignore[arg-type]
    out = 0
    if randomizer.mode == "asymmetric":  # 1 stays 1; 0 -> 1 when u < q
        for j, u in enumerate(rng.uniform(num_bits).tolist()):
            if permanent >> j & 1 or u < q:
                out |= 1 << j
        return out
    p = float(randomizer.irr_p)  # type: ignore[arg-type]
    for j, u in enumerate(rng.uniform(num_bits).tolist()):  # 1 when u < p, or when permanent and u < q
        if u < p or (permanent >> j & 1 and u < q):
            out |= 1 << j
    return out


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
    return instantaneous_mask(_at_level(params, levels[-1])[0], permanent, params.num_bits, rng)


def value_fingerprint(secret: bytes, metric: str, value_key: bytes) -> str:
    """A keyed fingerprint to count distinct values without storing them.

    ``hex(HMAC-SHA256(secret, "onesided/fingerprint/v1" || len32(metric) ||
    metric || len32(value_key) || value_key)[:16])``. Without the secret it
    tells nothing about the value; it stays in the encrypted state.
    """
    check_secret(secret)
    name = metric.encode("utf-8")
    msg = FINGERPRINT_LABEL + struct.pack(">I", len(name)) + name + struct.pack(">I", len(value_key)) + value_key
    return hmac.digest(secret, msg, "sha256")[:16].hex()


__all__ = [
    "FreshCut",
    "bits_of_mask",
    "check_secret",
    "encoded_mask",
    "fresh_cuts",
    "instantaneous_mask",
    "keyed_words",
    "mask_of_bits",
    "memoized_noise",
    "noise_key",
    "permanent_bits",
    "permanent_mask",
    "prepare_level",
    "report_bits",
    "report_mask",
    "value_fingerprint",
]
