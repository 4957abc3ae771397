"""The symmetric (Laplace) chain: exact law of one bit released at several relaxed levels.

A bit ``b`` whose memoized Laplace noise is relaxed lazily (:func:`protocol.relaxation.relax_laplace`)
and released at rates ``e_1 < ... < e_n`` reads the pattern ``y_i = [b + V_i > 1/2]``. This module
integrates the joint law of those patterns (nested quadrature up to 3 levels, a forward recursion
beyond) in floating point: the law the bit-level relaxation samples. The chain's epsilon is charged
from the proven enclosure of :mod:`protocol.laplace_chain_rigorous`; :func:`laplace_sequence_epsilon`
here is the floating-point value, a reference for tests and research. It depends on nothing but numpy and the
validation helpers, so the accounting, the randomizers and the bit-level relaxation can all use it
without importing one another.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .laplace_chain_rigorous import check_sequence

__all__ = [
    "MAX_EXACT_LAPLACE_LEVELS",
    "MAX_NESTED_LAPLACE_LEVELS",
    "check_sequence",
    "laplace_permanent_probabilities",
    "laplace_sequence_epsilon",
    "sequence_pattern_probabilities",
]

# The floating-point pattern law: up to 3 levels by nested quadrature, 4 to this many by the forward
# recursion (:func:`_forward_pattern_probabilities`), whose grid grows with the ratio of the rates
# (pieces times the 2^(n+1) steps of the pattern tree, about 30 us each on a loaded 2-core machine).
MAX_EXACT_LAPLACE_LEVELS = 6
MAX_NESTED_LAPLACE_LEVELS = 3
_THRESHOLD = 0.5


def laplace_permanent_probabilities(level: float) -> tuple[float, float]:
    """``(P(B'=1 | b=0), P(B'=1 | b=1)) = (f/2, 1 - f/2)`` of a bit memoized with Laplace noise at ``level``.

    ``f = exp(-level/2)`` (RAPPOR's ``f``): the one definition the symmetric randomizer samples and
    the bit-level chain matches.
    """
    half_f = math.exp(-level / 2.0) / 2.0
    return (half_f, 1.0 - half_f)


# --------------------------------------------------------------------------
# Exact epsilon of a sequence of thresholded releases of relaxed noise.
#
# Bit b is released at levels e_1 < ... < e_n as y_i = [b + V_i > 1/2], with
# (V_i) the lazy Markov process. The outcome space {0,1}^n is finite, so
# epsilon = max over patterns y of |ln P(y | b=1) - ln P(y | b=0)|.
# The process is symmetric (V -> -V has the same law), so
# P(y | b=1) = P0(not y), where P0 is the law of the pattern [V_i > 1/2].
# --------------------------------------------------------------------------


FloatArray = npt.NDArray[np.float64]


def _tail_given(x: FloatArray, e1: float, e2: float, t: float) -> FloatArray:
    """``P(V2 > t | V1 = x)`` for one Laplace relaxation step, ``t >= 0`` (closed form of (25))."""
    r, s = e2 - e1, e1 + e2
    c = (e2 * e2 - e1 * e1) / (2.0 * e2)
    below = c * np.exp(np.minimum(e1 * (x + np.abs(x)) - s * t, 0.0)) / s
    far = np.maximum(x, t)  # the branch x > t, evaluated where it is used
    above = c * ((math.exp(-r * t) - np.exp(-r * far)) / r + np.exp(-r * far) / s) + (e1 / e2) * np.exp(-r * far)
    out: FloatArray = np.where(x <= t, below, above)
    return out


def _kernel_density(x: float, y: FloatArray, e1: float, e2: float) -> FloatArray:
    """Continuous part of (25): ``(e2^2-e1^2)/(2 e2) exp(-e1|y-x| - e2|y| + e1|x|)``."""
    c = (e2 * e2 - e1 * e1) / (2.0 * e2)
    out: FloatArray = c * np.exp(-e1 * np.abs(y - x) - e2 * np.abs(y) + e1 * abs(x))
    return out


# Gauss-Legendre nodes for the piecewise quadrature below (numpy only: the device has no scipy).
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(48)
# Infinite ends are cut where every integrand here is below exp(-_TAIL_RATE_SPAN) of its peak
# (the densities decay at least at the first level's rate): a relative 1e-26.
_TAIL_RATE_SPAN = 60.0


def _pieces(low: float, high: float, span: float) -> list[tuple[float, float]]:
    """[low, high] cut into pieces of doubling length (an infinite end: up to ``span`` from the other)."""
    if math.isfinite(low) and math.isfinite(high):
        return [(low, high)]
    start, sign = (low, 1.0) if math.isfinite(low) else (high, -1.0)
    edges, step = [0.0], 0.25
    while edges[-1] < span:
        edges.append(min(edges[-1] + step, span))
        step *= 2.0
    out = [(start + sign * a, start + sign * b) for a, b in itertools.pairwise(edges)]
    return out if sign > 0 else [(b, a) for a, b in reversed(out)]


def _quad(func: Callable[[FloatArray], FloatArray], low: float, high: float, points: list[float], span: float) -> float:
    """Integrate a piecewise-smooth ``func`` (vectorized) over [low, high], split at its kinks ``points``.

    Composite 48-point Gauss-Legendre on each smooth piece, whose integrands here are sums of
    exponentials: the error is at the level of double rounding (the test pins the values to the
    adaptive quadrature of scipy within 1e-12). Infinite ends are cut ``span`` past the last kink.
    """
    cuts = sorted({p for p in points if low < p < high})
    edges = [low, *cuts, high]
    pieces = [piece for a, b in itertools.pairwise(edges) for piece in _pieces(a, b, span)]
    a = np.array([p[0] for p in pieces])[:, None]
    b = np.array([p[1] for p in pieces])[:, None]
    nodes = (a + b) / 2.0 + (b - a) / 2.0 * _GL_NODES[None, :]
    values = func(nodes.ravel()).reshape(nodes.shape)
    return math.fsum(((b - a)[:, 0] / 2.0) * (values @ _GL_WEIGHTS))


def _interval(bit: int) -> tuple[float, float]:
    return (_THRESHOLD, math.inf) if bit else (-math.inf, _THRESHOLD)


def _pattern_probability(levels: tuple[float, ...], pattern: tuple[int, ...]) -> float:
    """``P0(pattern)``: probability that ``[V_i > 1/2] = pattern_i`` for all ``i``."""
    n = len(levels)
    span = _TAIL_RATE_SPAN / levels[0] + 1.0

    def conditional(i: int, x: FloatArray) -> FloatArray:
        # P(pattern_{i+1..n-1} | V_i = x), for 0-based i (V_i already inside its interval).
        if i == n - 1:
            return np.ones_like(x)
        e1, e2 = levels[i], levels[i + 1]
        if i == n - 2:
            tail = _tail_given(x, e1, e2, _THRESHOLD)
            return tail if pattern[i + 1] else 1.0 - tail
        lo, hi = _interval(pattern[i + 1])
        inside = (x > lo) & (x <= hi)
        out = np.where(inside, (e1 / e2) * np.exp(-(e2 - e1) * np.abs(x)) * conditional(i + 1, x), 0.0)
        for j, xj in enumerate(x.tolist()):
            out[j] += _quad(
                lambda y, xj=xj: _kernel_density(xj, y, e1, e2) * conditional(i + 1, y),  # type: ignore[misc]
                lo, hi, [0.0, xj, _THRESHOLD], span,
            )
        return out

    e_first = levels[0]
    lo, hi = _interval(pattern[0])
    return _quad(
        lambda x: 0.5 * e_first * np.exp(-e_first * np.abs(x)) * conditional(0, x),
        lo, hi, [0.0, _THRESHOLD], span,
    )


# --------------------------------------------------------------------------
# The forward recursion (4 or more levels): the sub-density of V_i on the event that the first i
# releases match the pattern, carried level to level through the Markov kernel of (25):
#
#   g_{i+1}(y) = 1{y in I_{i+1}} [ g_i(y) (a/b) e^{-(b-a)|y|}
#                + c e^{-b|y|} ( int_{x<y} g_i(x) e^{a|x|} e^{-a(y-x)} dx + int_{x>y} ... e^{-a(x-y)} dx ) ]
#
# with a = e_i, b = e_{i+1}, c = (b^2 - a^2) / (2b), and P0(pattern) = int g_n. The line is cut at 0
# and 1/2 (every kink and jump) into pieces of length <= 4 / max(levels) carrying 48 Gauss-Legendre
# nodes each; the two one-sided integrals are a running sum over whole pieces (each piece's
# contribution decays by e^{-a L} per piece) plus, inside a piece, the spectral integration matrix of
# the Legendre interpolant (:func:`_cumulative_matrix`, made on first use), whose integrands are sums of exponentials of
# rate <= 2 max(levels) over a piece: 48-point interpolation is exact to double rounding there. At
# 2 and 3 levels it agrees with the nested quadrature to 5e-15 relative, and at 4-6 levels with Monte
# Carlo of the sampler (tests/test_relaxation_chains.py).
# --------------------------------------------------------------------------


@functools.cache
def _cumulative_matrix() -> FloatArray:
    """``S[j, k] = int_{-1}^{t_j} l_k(t) dt``: the Legendre interpolant's integral up to each node."""
    vander = np.polynomial.legendre.legvander(_GL_NODES, _GL_NODES.size - 1)
    coefficients = np.polynomial.legendre.legint(np.linalg.inv(vander), lbnd=-1, axis=0)
    out = np.polynomial.legendre.legvander(_GL_NODES, _GL_NODES.size) @ coefficients
    return np.asarray(out, dtype=np.float64)



@dataclass(frozen=True)
class _Grid:
    """Pieces ``[lo, hi]`` of the line (cut at 0 and 1/2) with 48 nodes ``x`` and weights ``w`` each."""

    lo: FloatArray
    hi: FloatArray
    x: FloatArray
    w: FloatArray
    above: FloatArray  # 1.0 on the pieces above the threshold 1/2, else 0.0 (per node)

    @classmethod
    def of(cls, levels: tuple[float, ...]) -> _Grid:
        span = _TAIL_RATE_SPAN / min(levels) + 1.0
        step = min(1.0, 4.0 / max(levels))
        below = -np.arange(0.0, span + step, step)[::-1]
        above = _THRESHOLD + np.arange(step, span + step, step)
        edges = np.unique(np.concatenate([below, [0.0, _THRESHOLD], above]))
        lo, hi = edges[:-1], edges[1:]
        half = (hi - lo) / 2.0
        x = ((lo + hi) / 2.0)[:, None] + half[:, None] * _GL_NODES[None, :]
        w = half[:, None] * _GL_WEIGHTS[None, :]
        side = (((lo + hi) / 2.0) > _THRESHOLD).astype(np.float64)[:, None] * np.ones_like(x)
        return cls(lo=lo, hi=hi, x=x, w=w, above=side)

    def within(self, f: FloatArray) -> FloatArray:
        """``int_{lo}^{x_j} f`` at every node (``f`` smooth on each piece)."""
        half = (self.hi - self.lo)[:, None] / 2.0
        out: FloatArray = half * np.einsum("pk,jk->pj", f, _cumulative_matrix())  # einsum: no BLAS threads
        return out


def _running(decay: list[float], amounts: list[float]) -> list[float]:
    """``out[k] = sum_{j<k} amounts[j] prod_{j<m<k} decay[m]``: what earlier pieces carry to piece ``k``."""
    out, acc = [], 0.0
    for d, amount in zip(decay, amounts, strict=True):
        out.append(acc)
        acc = acc * d + amount
    return out


def _forward_step(grid: _Grid, g: FloatArray, a: float, b: float, keep: FloatArray) -> FloatArray:
    """``g_{i+1}`` at the nodes from ``g_i`` (rates ``a -> b``), times the next release's indicator ``keep``."""
    x, w, lo, hi = grid.x, grid.w, grid.lo[:, None], grid.hi[:, None]
    # g <= the density of V_i, Laplace at rate a: past _TAIL_RATE_SPAN / a it holds < e^-60 of the mass
    reach = _TAIL_RATE_SPAN / a + 1.0
    far = np.abs(x) > reach
    f = np.where(far, 0.0, g * np.exp(a * np.minimum(np.abs(x), reach)))
    decay = np.exp(-a * (grid.hi - grid.lo)).tolist()
    # int_{x<y} f(x) e^{-a(y-x)} dx: earlier pieces, carried, plus this piece up to y
    to_end = (w * f * np.exp(-a * (hi - x))).sum(axis=1).tolist()
    carried = np.array(_running(decay, to_end))[:, None]
    rising = f * np.exp(a * (x - lo))
    left = np.exp(-a * (x - lo)) * (carried + grid.within(rising))
    # int_{x>y} f(x) e^{-a(x-y)} dx: later pieces, carried backwards, plus this piece from y
    from_start = (w * f * np.exp(-a * (x - lo))).sum(axis=1).tolist()
    carried_back = np.array(_running(decay[::-1], from_start[::-1])[::-1])[:, None]
    falling = f * np.exp(-a * (x - hi))
    whole = (w * falling).sum(axis=1)[:, None]
    right = np.exp(a * (x - hi)) * (carried_back + whole - grid.within(falling))
    c = (b * b - a * a) / (2.0 * b)
    atom = g * (a / b) * np.exp(-(b - a) * np.abs(x))
    out: FloatArray = (atom + c * np.exp(-b * np.abs(x)) * (left + right)) * keep
    return out


def _forward_pattern_probabilities(levels: tuple[float, ...]) -> dict[tuple[int, ...], float]:
    """``P0`` of every pattern by the forward recursion (any work: callers on a device check it first)."""
    grid = _Grid.of(levels)
    keeps = (1.0 - grid.above, grid.above)
    first = 0.5 * levels[0] * np.exp(-levels[0] * np.abs(grid.x))
    out: dict[tuple[int, ...], float] = {}
    stack: list[tuple[tuple[int, ...], FloatArray]] = [((bit,), first * keeps[bit]) for bit in (1, 0)]
    while stack:
        prefix, g = stack.pop()
        i = len(prefix)
        if i == len(levels):
            out[prefix] = math.fsum((grid.w * g).ravel().tolist())
            continue
        for bit in (1, 0):
            stack.append(((*prefix, bit), _forward_step(grid, g, levels[i - 1], levels[i], keeps[bit])))
    return dict(sorted(out.items()))


@functools.lru_cache(maxsize=256)
def sequence_pattern_probabilities(levels: tuple[float, ...]) -> dict[tuple[int, ...], float]:
    """``P0(y)`` for every pattern of a Laplace-thresholded bit (b = 0) released at ``levels``.

    Up to :data:`MAX_NESTED_LAPLACE_LEVELS` levels by nested quadrature; more by the forward
    recursion, whatever its work.
    """
    check_sequence(levels)
    if len(levels) > MAX_NESTED_LAPLACE_LEVELS:
        return _forward_pattern_probabilities(levels)
    return {
        pattern: _pattern_probability(levels, pattern)
        for pattern in itertools.product((0, 1), repeat=len(levels))
    }


def laplace_sequence_epsilon(levels: tuple[float, ...]) -> float:
    """The exact (unrounded) epsilon of one bit released at ``levels``: the worst pattern's log-ratio."""
    probs = sequence_pattern_probabilities(levels)
    worst = 0.0
    for pattern, p0 in probs.items():
        p1 = probs[tuple(1 - b for b in pattern)]
        worst = max(worst, abs(math.log(p1) - math.log(p0)))
    return worst
