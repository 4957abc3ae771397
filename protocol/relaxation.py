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

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from .errors import ParameterError, TighteningRefused
from .exact import bernoulli_exact
from .rng import FloatArray, RandomSource, as_rng
from .validation import check_integer_array, check_number

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


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
    decay = np.exp(-r * ax)
    t1 = (e1 / e2) * decay  # case 1: stay, y = x
    t2 = t1 + r / (2 * e2)  # case 2: the other side of 0
    t3 = t2 + s / (2 * e2) * (1.0 - decay)  # case 3: between 0 and |x|; else case 4: beyond |x|
    out = x.copy()
    # Each case's formula is evaluated only where it is chosen (same values, less work).
    flip = (u_case >= t1) & (u_case < t2)  # z <= 0 with density ~ exp(s z): z = log(u)/s
    out[flip] = np.log(u_draw[flip]) / s
    inner = (u_case >= t2) & (u_case < t3)  # z in [0, |x|], density ~ exp(-r z): stable inverse CDF
    out[inner] = -np.log1p(u_draw[inner] * np.expm1(-r * ax[inner])) / r
    outer = u_case >= t3  # z >= |x| with density ~ exp(-s z): |x| + Exp(s)
    out[outer] = ax[outer] - np.log(u_draw[outer]) / s
    moved = ~(u_case < t1)
    out[moved & (x < 0)] *= -1.0  # y = sgn(x) z (sgn(0) taken as +1)
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
    fresh = -np.log(u) / (level_to - level_from)
    return np.minimum(x, fresh)


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
    q_from = Fraction(math.exp(-level_from / 2.0))
    q_to = Fraction(0) if math.isinf(level_to) else Fraction(math.exp(-level_to / 2.0))
    keep = bernoulli_exact(rng, q_to / q_from, b.shape)  # drawn for every bit: cheaper than a scatter
    out: BoolArray = perm & (b | keep)
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
