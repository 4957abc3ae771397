"""Lazy Markov steps that relax (or tighten) memoized noise.

Relaxing replaces noise ``V1`` drawn at level ``e1`` with ``V2`` drawn
*conditionally on* ``V1`` so that ``V2`` has exactly the one-shot law at the
looser level ``e2 > e1`` and the pair ``(V1, V2)`` reveals no more than
``V2`` alone (gradual-release paper, Sec. 3). Tightening goes the other way
to make a more private copy for a less trusted party (eq. 28).

Every function takes arrays and returns arrays of the same shape, draws a
fixed number of uniform arrays from ``rng`` (so keyed streams are portable),
and uses the secure default source when ``rng`` is ``None``.

Levels are rates: the Laplace rate ``eps`` (scale ``1/eps``), the
exponential rate ``L``, the geometric rate with ``P(G >= n) = exp(-eps n)``.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from .errors import ParameterError, TighteningRefused
from .exact import bernoulli_choose, bernoulli_exact
from .laplace_chain import laplace_permanent_probabilities, sequence_pattern_probabilities
from .rng import FloatArray, RandomSource, as_rng
from .validation import check_integer_array, check_number

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
PatternArray = npt.NDArray[np.uint8]

MAX_BIT_CHAIN_LEVELS = 3
"""Longest symmetric chain :func:`relax_laplace_bits` samples (the exact accounting's quadrature limit)."""


def _check_levels(low: float, high: float, low_name: str, high_name: str) -> None:
    """Two rates ``0 < low <= high`` (``high`` may be ``inf``: the truth); ``high < low`` is a tightening."""
    check_number(low_name, low, positive=True)
    check_number(high_name, high, positive=True, finite=False)
    if high < low:
        raise TighteningRefused(current=low, requested=high)


def relax_laplace(
    noise: npt.ArrayLike, level_from: float, level_to: float, rng: RandomSource | None = None
) -> FloatArray:
    """RelaxPrivacy (Algorithm 1 of the gradual-release paper), vectorized.

    Given ``x = V1 ~ Laplace(1/e1)``, returns ``V2`` with law (25):
    ``V2 = x`` w.p. ``(e1/e2) exp(-(e2-e1)|x|)``; otherwise ``sgn(x) z`` with
    ``z`` from one of three exponential pieces (below 0, on ``[0,|x|]``,
    beyond ``|x|``). ``V2 ~ Laplace(1/e2)`` and ``corr(V1, V2) = e1/e2``.
    ``level_to = inf`` returns zeros (the truth). Two uniforms per element.
    """
    x = np.asarray(noise, dtype=np.float64)
    _check_levels(level_from, level_to, "level_from", "level_to")
    source = as_rng(rng)
    u_case = source.uniform(x.shape)
    u_draw = source.uniform(x.shape)
    if math.isinf(level_to):
        return np.zeros_like(x)
    if level_to == level_from:
        return x.copy()
    e1, e2 = float(level_from), float(level_to)
    ax = np.abs(x)
    r, s = e2 - e1, e1 + e2
    # The cuts t1 <= t2 <= t3 of u_case, computed in place (the same doubles as the formulas):
    # case 0 below t1 (stay, y = x), 1 in [t1, t2), 2 in [t2, t3), 3 from t3 on.
    decay = np.multiply(ax, -r)
    np.exp(decay, out=decay)  # exp(-r |x|)
    cut = np.multiply(decay, e1 / e2)  # t1 = (e1/e2) decay
    case = np.greater_equal(u_case, cut).view(np.int8)
    cut += r / (2 * e2)  # t2 = t1 + r/(2 e2): the other side of 0
    case += u_case >= cut
    np.subtract(1.0, decay, out=decay)
    decay *= s / (2 * e2)
    cut += decay  # t3 = t2 + s/(2 e2) (1 - decay): between 0 and |x|; beyond: case 3, beyond |x|
    case += u_case >= cut
    del cut, decay
    out = x.copy()
    # Each case's formula is evaluated only where it is chosen (same values, less work).
    flip = case == 1  # z <= 0 with density ~ exp(s z): z = log(u)/s
    out[flip] = np.log(u_draw[flip]) / s
    inner = case == 2  # z in [0, |x|], density ~ exp(-r z): stable inverse CDF
    out[inner] = -np.log1p(u_draw[inner] * np.expm1(-r * ax[inner])) / r
    outer = case == 3  # z >= |x| with density ~ exp(-s z): |x| + Exp(s)
    out[outer] = ax[outer] - np.log(u_draw[outer]) / s
    np.negative(out, out=out, where=(case > 0) & (x < 0))  # y = sgn(x) z (sgn(0) taken as +1)
    return out


def tighten_laplace(
    noise: npt.ArrayLike, level_from: float, level_to: float, rng: RandomSource | None = None
) -> FloatArray:
    """A more private copy (eq. 28): from ``V2`` at ``level_from`` to ``V1`` at ``level_to < level_from``.

    ``V1 = V2`` w.p. ``(e1/e2)^2``, else ``V2 + Laplace(1/e1)``. Two uniforms per element.
    """
    y = np.asarray(noise, dtype=np.float64)
    _check_levels(level_to, level_from, "level_to", "level_from")
    source = as_rng(rng)
    u_case = source.uniform(y.shape)
    extra = source.laplace(level_to, y.shape)
    if math.isinf(level_from):
        return y + extra
    keep = u_case < (level_to / level_from) ** 2
    return np.where(keep, y, y + extra)


def relax_exponential(
    noise: npt.ArrayLike, level_from: float, level_to: float, rng: RandomSource | None = None
) -> FloatArray:
    """``V2 = min(V1, E)`` with ``E ~ Exp(level_to - level_from)``: ``V2 ~ Exp(level_to)``.

    The minimum of independent exponentials is exponential with the summed
    rate; ``P(V2 = V1) = level_from / level_to``. Conversely ``V1 = V2 + W``
    with ``W`` independent of ``V2`` (see :func:`tighten_exponential`), so
    the pair is a post-processing of ``V2``: releasing both costs the last
    level only. One uniform per element.
    """
    x = np.asarray(noise, dtype=np.float64)
    _check_levels(level_from, level_to, "level_from", "level_to")
    source = as_rng(rng)
    u = source.uniform(x.shape)
    if math.isinf(level_to):
        return np.zeros_like(x)
    if level_to == level_from:
        return x.copy()
    fresh = np.log(u, out=u)  # in place: the same doubles as -log(u) / (level_to - level_from)
    np.negative(fresh, out=fresh)
    fresh /= level_to - level_from
    return np.minimum(x, fresh, out=fresh)


def exponential_keep_probability(level_from: float, level_to: float) -> Fraction:
    """``q_to / q_from``, ``q = exp(-level/2)`` as the doubles the randomizer states (0 at ``inf``): the exact
    chance that a permanent 1 which came from the asymmetric noise survives the lazy step."""
    q_from = Fraction(math.exp(-level_from / 2.0))
    q_to = Fraction(0) if math.isinf(level_to) else Fraction(math.exp(-level_to / 2.0))
    return q_to / q_from


def relax_exponential_bits(
    bits: npt.ArrayLike, permanent: npt.ArrayLike, level_from: float, level_to: float, rng: RandomSource | None = None
) -> BoolArray:
    """The asymmetric randomizer's permanent bits ``[b + V > 1/2]`` relaxed, without the noise.

    With ``V2 = min(V1, E)`` (:func:`relax_exponential`), for ``b = 0``:
    ``[V2 > 1/2] = [V1 > 1/2] and [E > 1/2]``; for ``b = 1`` the bit stays 1.
    So a 1 that came from the noise is kept with probability
    ``q_to / q_from``, ``q = exp(-level/2)`` as the doubles the randomizer
    states, sampled exactly (:func:`~protocol.exact.bernoulli_exact` on the
    rational ratio): bits drawn at exactly ``q_from`` come out at exactly
    ``q_to``, the pair with the law of the noise chain's, and the chain
    stays Markov (steps compose). About one random byte per bit.
    """
    b = np.asarray(bits, dtype=bool)
    perm = np.asarray(permanent, dtype=bool)
    if b.shape != perm.shape:
        raise ParameterError("permanent", f"must have the shape of bits {b.shape}, got {perm.shape}")
    _check_levels(level_from, level_to, "level_from", "level_to")
    keep = bernoulli_exact(rng, exponential_keep_probability(level_from, level_to), b.shape)  # every bit: no scatter
    out: BoolArray = perm & (b | keep)
    return out


# --------------------------------------------------------------------------
# The symmetric (Laplace) chain's permanent bits, without the noise
# --------------------------------------------------------------------------


def _stated_permanent(level: float) -> tuple[Fraction, Fraction]:
    """The symmetric randomizer's ``permanent_probabilities()`` at ``level`` as exact rationals."""
    p0, p1 = laplace_permanent_probabilities(level)
    return Fraction(p0), Fraction(p1)


def _check_chain(levels: tuple[float, ...]) -> tuple[float, ...]:
    seq = tuple(float(v) for v in levels)
    if not 1 <= len(seq) <= MAX_BIT_CHAIN_LEVELS:
        raise ParameterError("levels", f"must hold 1 to {MAX_BIT_CHAIN_LEVELS} levels, got {len(seq)}")
    for i, lv in enumerate(seq):
        check_number(f"levels[{i}]", lv, positive=True)
    if any(b <= a for a, b in zip(seq, seq[1:], strict=False)):
        raise ParameterError("levels", f"must be strictly increasing, got {list(seq)}")
    return seq


@functools.lru_cache(maxsize=128)
def laplace_bit_law(levels: tuple[float, ...]) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]]:
    """The exact law :func:`relax_laplace_bits` samples: ``law[b][h]``, the probability of pattern ``h``.

    A pattern of a bit released at ``levels`` is the integer
    ``h = sum_i y_i 2**i`` (``y_i`` the permanent bit at ``levels[i]``).
    The first release is the stated one-shot law (``sample_permanent``);
    each later one is :func:`laplace_bit_conditionals`. Every marginal is
    the stated ``permanent_probabilities()`` at its level, exactly.
    """
    seq = _check_chain(levels)
    if len(seq) == 1:
        p0, p1 = _stated_permanent(seq[0])
        return (1 - p0, p0), (1 - p1, p1)
    prev = laplace_bit_law(seq[:-1])
    cond = laplace_bit_conditionals(seq)
    out = tuple(
        tuple(q * (1 - c) for q, c in zip(prev[b], cond[b], strict=True))
        + tuple(q * c for q, c in zip(prev[b], cond[b], strict=True))
        for b in (0, 1)
    )
    return out[0], out[1]


@functools.lru_cache(maxsize=128)
def laplace_bit_conditionals(levels: tuple[float, ...]) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]]:
    """``cond[b][h] = P(y = 1 | b, pattern h at levels[:-1])`` for the release at ``levels[-1]``, exact rationals.

    From the Laplace chain's joint pattern law
    (:func:`protocol.laplace_chain.sequence_pattern_probabilities`, quadrature,
    ``P(y | 1) = P0(not y)``), each conditional rounded to a double, except
    one per ``b``: the history of the largest probability, whose conditional
    is solved in exact rationals so that the mixture over the histories'
    sampled law (:func:`laplace_bit_law`) is the stated marginal at
    ``levels[-1]`` exactly. That correction is of the order of the
    quadrature error (docs/simulation.md measures it).

    Raises:
        ParameterError: (field ``levels``) fewer than 2 or more than
            :data:`MAX_BIT_CHAIN_LEVELS` levels, not strictly increasing.
    """
    seq = _check_chain(levels)
    if len(seq) < 2:
        raise ParameterError("levels", "a relaxation needs at least 2 levels")
    k = len(seq) - 1
    joint = sequence_pattern_probabilities(seq)
    prev = laplace_bit_law(seq[:-1])
    target = _stated_permanent(seq[-1])
    tables = []
    for b in (0, 1):
        cond = []
        for h in range(1 << k):
            # b = 1 mirrors b = 0: P(y | 1) = P0(not y)
            pattern = tuple(((h >> i) & 1) ^ b for i in range(k))
            one, zero = joint[(*pattern, 1 - b)], joint[(*pattern, b)]
            cond.append(Fraction(one / (one + zero)))
        law = prev[b]
        star = max(range(1 << k), key=law.__getitem__)
        rest = sum((law[h] * cond[h] for h in range(1 << k) if h != star), Fraction(0))
        cond[star] = (target[b] - rest) / law[star]
        if not 0 < cond[star] < 1:
            raise ParameterError("levels", f"the chain at {list(seq)} cannot be matched to its marginal")
        tables.append(tuple(cond))
    return tables[0], tables[1]


def relax_laplace_bits(
    bits: npt.ArrayLike,
    history: npt.ArrayLike,
    levels: tuple[float, ...] | list[float],
    level_to: float,
    rng: RandomSource | None = None,
) -> BoolArray:
    """The symmetric randomizer's permanent bits relaxed to ``level_to``, without the noise.

    The thresholded Laplace chain's bits are not Markov by themselves, but
    the next bit's law given the true bit and *every* earlier release is
    fixed: ``history`` carries, per bit, the pattern ``h = sum_i y_i 2**i``
    of its releases at ``levels`` (for one earlier level, the permanent bits
    themselves; :func:`extend_pattern` appends a release). The new bit is
    drawn exactly at :func:`laplace_bit_conditionals` (``bernoulli_choose``
    on ``(b, h)``, about one random byte per bit): the chain's joint law up
    to the quadrature of its pattern probabilities, each level's marginal
    exactly the stated ``permanent_probabilities()``. At most
    :data:`MAX_BIT_CHAIN_LEVELS` levels in all; longer chains relax the
    noise (:func:`relax_laplace`).

    Returns:
        the permanent bits at ``level_to`` (``level_to = inf``: the true bits).

    Raises:
        ParameterError: ``history`` not of the shape of ``bits`` or not below
            ``2**len(levels)``; bad ``levels`` (field ``levels``).
        TighteningRefused: ``level_to`` below the last level.
    """
    b = np.asarray(bits, dtype=bool)
    seq = _check_chain(tuple(levels))
    k = len(seq)
    h = _pattern_array(history, b.shape, k)
    _check_levels(seq[-1], level_to, f"levels[{k - 1}]", "level_to")
    if math.isinf(level_to):
        return b.copy()
    if level_to == seq[-1]:
        last: BoolArray = ((h >> np.uint8(k - 1)) & np.uint8(1)).view(np.bool_)
        return last
    cond = laplace_bit_conditionals((*seq, float(level_to)))
    return bernoulli_choose(rng, cond[0] + cond[1], h, upper=b)


def extend_pattern(history: npt.ArrayLike, permanent: npt.ArrayLike, releases: int) -> PatternArray:
    """The pattern of ``releases`` earlier releases with one more: ``history | permanent << releases``."""
    new = np.asarray(permanent, dtype=bool)
    h = _pattern_array(history, new.shape, releases)
    pattern: PatternArray = new.view(np.uint8) << np.uint8(releases)
    pattern |= h
    return pattern


def _pattern_array(history: npt.ArrayLike, shape: tuple[int, ...], k: int) -> PatternArray:
    """``history`` as uint8 patterns of ``k`` bits (booleans are viewed, not copied)."""
    h = np.asarray(history)
    if h.shape != shape:
        raise ParameterError("history", f"must have the shape of bits {shape}, got {h.shape}")
    if not 1 <= k < 8:
        raise ParameterError("levels", f"a pattern holds 1 to 7 releases, got {k}")
    if h.dtype == np.bool_:
        return h.view(np.uint8)
    if h.dtype.kind not in "iu":
        raise ParameterError("history", f"must hold integer patterns, got {h.dtype}")
    if h.size and ((h.dtype.kind != "u" and h.min() < 0) or h.max() >= 1 << k):
        raise ParameterError("history", f"must hold patterns of {k} bits (0 to {(1 << k) - 1})")
    out: PatternArray = h.astype(np.uint8, copy=False)
    return out


def tighten_exponential(
    noise: npt.ArrayLike, level_from: float, level_to: float, rng: RandomSource | None = None
) -> FloatArray:
    """From ``V2 ~ Exp(level_from)`` to ``V1 = V2 + W ~ Exp(level_to)``, ``level_to < level_from``.

    ``W = 0`` w.p. ``level_to / level_from``, else ``W ~ Exp(level_to)``. Two uniforms per element.
    """
    y = np.asarray(noise, dtype=np.float64)
    _check_levels(level_to, level_from, "level_to", "level_from")
    source = as_rng(rng)
    u_case = source.uniform(y.shape)
    extra = source.exponential(level_to, y.shape)
    keep = u_case < (0.0 if math.isinf(level_from) else level_to / level_from)
    return np.where(keep, y, y + extra)


def relax_geometric(
    noise: npt.ArrayLike, level_from: float, level_to: float, rng: RandomSource | None = None
) -> IntArray:
    """``G2 = min(G1, H)`` with ``P(H >= n) = exp(-(e2 - e1) n)``: ``P(G2 >= n) = exp(-e2 n)``.

    The discrete analogue of :func:`relax_exponential`. One uniform per element.
    """
    g = check_integer_array("noise", noise)
    _check_levels(level_from, level_to, "level_from", "level_to")
    source = as_rng(rng)
    u = source.uniform(g.shape)
    if math.isinf(level_to):
        return np.zeros_like(g)
    if level_to == level_from:
        return g.copy()
    fresh = np.floor(-np.log(u) / (level_to - level_from)).astype(np.int64)
    return np.minimum(g, fresh)


def tighten_geometric(
    noise: npt.ArrayLike, level_from: float, level_to: float, rng: RandomSource | None = None
) -> IntArray:
    """From ``G2`` at ``level_from`` to ``G1 = G2 + W`` at ``level_to < level_from``.

    With ``a = exp(-e1)``, ``b = exp(-e2)``: ``W = 0`` w.p. ``b(1-a) / (a(1-b))``,
    else ``W`` is geometric at ``e1`` (PGF check: the product is the ``e1`` law).
    Two uniforms per element.
    """
    g = check_integer_array("noise", noise)
    _check_levels(level_to, level_from, "level_to", "level_from")
    source = as_rng(rng)
    u_case = source.uniform(g.shape)
    extra = source.geometric(level_to, g.shape)
    a = math.exp(-level_to)
    b = 0.0 if math.isinf(level_from) else math.exp(-level_from)
    p_keep = b * (1 - a) / (a * (1 - b))
    return np.where(u_case < p_keep, g, g + extra)
