"""Certified epsilon of a symmetric relaxed chain: closed forms evaluated in interval arithmetic.

A memoized symmetric bit ``b`` is released at rates ``e_1 < ... < e_n`` as ``y_i = [b + V_i > 1/2]``,
where ``V_1`` is Laplace at rate ``e_1`` and each relaxation is the lazy Markov step from rate ``a``
to rate ``b``: ``V' = V`` with probability ``(a/b) e^{-(b-a)|V|}``, otherwise ``V'`` has density
``c e^{-a|y-V| - b|y| + a|V|}`` with ``c = (b^2 - a^2) / (2b)``. The loss of the whole released
sequence between the inputs 0 and 1 is ``max_y |ln P(y | 1) - ln P(y | 0)|``, and by the symmetry
``V -> -V`` of the process, ``P(y | 1) = P0(not y)`` with ``P0`` the law of ``[V_i > 1/2]``.

**Closed form.** Write ``g_i`` for the sub-density of ``V_i`` on the event that the first ``i``
releases match the pattern, and ``f_i(x) = g_i(x) e^{e_i |x|}``. The kernel gives

    f_{i+1}(y) = 1{y in I_{i+1}} [ (a/b) f_i(y) + c int f_i(x) e^{-a|y-x|} dx ],   a = e_i, b = e_{i+1},

with ``f_1 = e_1 / 2`` on ``I_1`` (``I = (-inf, 1/2]`` for a 0, ``(1/2, inf)`` for a 1). On each of
the three pieces ``(-inf, 0]``, ``(0, 1/2]``, ``(1/2, inf)`` the function ``f_i`` is a finite sum
``sum_k C_k e^{lambda_k x}`` with ``lambda`` in ``{0, +-e_1, ..., +-e_{i-1}}`` (only ``0, +e_j``
left of 0, only ``0, -e_j`` right of 1/2), because the convolution of ``e^{lambda x}`` with
``e^{-a|y-x|}`` is again ``e^{lambda y}`` (factor ``2a / (a^2 - lambda^2)``, never singular: the
rates are distinct) plus ``e^{+-a y}`` with constants from the piece ends. No polynomial factors
ever appear. ``P0(pattern) = int f_n(x) e^{-e_n |x|} dx`` is again a finite sum of closed forms.

Every coefficient is carried as an interval, so each pattern probability and each log-ratio is
enclosed, and so is the maximum. Two arithmetics run the same code (:class:`_Chain`):

* :func:`certified_sequence_epsilon`: ``mpmath.iv`` (outward rounding), precision from 96 bits
  doubling until the enclosure of epsilon is narrower than the requested width (cancellation only
  bites when two rates nearly coincide). mpmath is imported on first use (``onesided[research]``).
* :func:`enclosed_sequence_epsilon`: doubles, each operation stepped one double outward and each
  exponential enclosed in exact integer arithmetic; standard library only, so a device can run it.

The work is the ``2^(n+1)`` steps of the pattern tree, each linear in ``n``: about ``n 2^n``
interval operations (10 levels: well under a second in doubles).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from .errors import ParameterError
from .validation import check_number

if TYPE_CHECKING:
    from mpmath.ctx_iv import MPIntervalContext

__all__ = [
    "CertifiedEpsilon",
    "certified_pattern_probabilities",
    "certified_sequence_epsilon",
    "MAX_ENCLOSED_LAPLACE_LEVELS",
    "enclosed_charge",
    "enclosed_exp",
    "enclosed_fraction",
    "enclosed_log",
    "enclosed_pattern_probabilities",
    "enclosed_sequence_epsilon",
]

# Symmetric chains up to this many levels are charged the enclosure's upper end (10 levels: ~0.1-0.4 s
# once per chain on a loaded 2-core machine, width <= 2.4e-12); longer ones the continuous bound.
MAX_ENCLOSED_LAPLACE_LEVELS = 10
# An enclosure this narrow is reported as the exact epsilon (the charge is its upper end, rounded up).
EXACT_WIDTH = 1e-9

# A term's exponent: 0 for the constant, +j / -j for e^{+e_j x} / e^{-e_j x} (j counts levels from 1).
_Piece = dict[int, Any]  # exponent key -> interval coefficient
_START_PREC = 96
_MAX_PREC = 1536


def _context(prec: int) -> MPIntervalContext:
    try:
        from mpmath.ctx_iv import MPIntervalContext
    except ImportError as exc:  # pragma: no cover - the research and test extras bring it
        raise ImportError("certified chain epsilons need mpmath: pip install 'onesided[research]'") from exc
    ctx = MPIntervalContext()  # a private context: the precision never leaks to other mpmath users
    ctx.prec = prec
    return ctx


def check_sequence(levels: tuple[float, ...]) -> None:
    """A chain's levels: not empty, each positive and finite, strictly increasing (errors name ``levels``)."""
    if not levels:
        raise ParameterError("levels", "must not be empty")
    for i, lv in enumerate(levels):
        check_number(f"levels[{i}]", lv, positive=True)
    if any(b <= a for a, b in itertools.pairwise(levels)):
        raise ParameterError("levels", f"must be strictly increasing, got {list(levels)}")


def _check_levels(levels: tuple[float, ...] | list[float]) -> tuple[float, ...]:
    seq = tuple(float(v) for v in levels)
    check_sequence(seq)
    return seq


# --------------------------------------------------------------------------
# Interval arithmetic in doubles (no mpmath: the device can run it). +, -, *, / of doubles are
# correctly rounded (IEEE 754), so stepping each result one double outward encloses the exact
# value. Exponentials are enclosed in integer fixed point (:func:`_exp_enclosure`), never by libm.
# --------------------------------------------------------------------------


def _down(x: float) -> float:
    return math.nextafter(x, -math.inf)


def _up(x: float) -> float:
    return math.nextafter(x, math.inf)


_EXP_BITS = 256  # fixed-point bits of the exponential enclosure
_EXP_TERMS = 16  # Taylor terms at |t| <= 2^-8: remainder < 2 |t|^16 / 16! < 2^-160


def _to_double(num: int, den: int, upward: bool) -> float:
    """A double on the given side of ``num / den`` (``den > 0``)."""
    exact = Fraction(num, den)
    value = float(exact)  # nearest double
    if upward and Fraction(value) < exact:
        return _up(value)
    if not upward and Fraction(value) > exact:
        return _down(value)
    return value


@functools.lru_cache(maxsize=4096)
def _exp_enclosure(x: float) -> tuple[float, float]:
    """Doubles ``lo <= e^x <= hi`` for a double ``x`` with ``|x| <= 700``, in exact integer arithmetic.

    ``e^x = (e^t)^(2^s)`` with ``t = x / 2^s``, ``|t| <= 2^-8``; ``e^t`` is the Taylor sum (exact
    rationals) plus or minus ``2 |t|^16 / 16!``, then squared ``s`` times in ``_EXP_BITS``-bit fixed
    point, rounding the lower end down and the upper end up.
    """
    if not abs(x) <= 700.0:
        raise ParameterError("levels", f"exponent {x} out of the enclosed range (|x| <= 700)")
    t, s = Fraction(x), 0
    while abs(t) > Fraction(1, 256):
        t, s = t / 2, s + 1
    total, term = Fraction(0), Fraction(1)
    for k in range(_EXP_TERMS):
        total += term
        term = term * t / (k + 1)
    remainder = 2 * abs(term)  # |t|^16 / 16! * e^|t| < 2 |t|^16 / 16!
    scale = 1 << _EXP_BITS
    low = math.floor((total - remainder) * scale)
    high = math.ceil((total + remainder) * scale)
    for _ in range(s):
        low, high = (low * low) >> _EXP_BITS, -((-high * high) >> _EXP_BITS)
    return _to_double(low, scale, upward=False), _to_double(high, scale, upward=True)


class _Interval:
    """A closed interval of doubles ``[lo, hi]`` with outward-rounded arithmetic."""

    __slots__ = ("hi", "lo")

    def __init__(self, lo: float, hi: float | None = None) -> None:
        self.lo, self.hi = lo, lo if hi is None else hi

    def __add__(self, other: _Interval) -> _Interval:
        return _Interval(_down(self.lo + other.lo), _up(self.hi + other.hi))

    def __sub__(self, other: _Interval) -> _Interval:
        return _Interval(_down(self.lo - other.hi), _up(self.hi - other.lo))

    def __neg__(self) -> _Interval:
        return _Interval(-self.hi, -self.lo)

    def __mul__(self, other: _Interval | int) -> _Interval:
        if isinstance(other, int):
            other = _Interval(float(other))
        ends = (self.lo * other.lo, self.lo * other.hi, self.hi * other.lo, self.hi * other.hi)
        return _Interval(_down(min(ends)), _up(max(ends)))

    __rmul__ = __mul__

    def __truediv__(self, other: _Interval | int) -> _Interval:
        if isinstance(other, int):
            other = _Interval(float(other))
        if other.lo <= 0.0 <= other.hi:
            raise ZeroDivisionError("interval divisor contains 0")
        ends = (self.lo / other.lo, self.lo / other.hi, self.hi / other.lo, self.hi / other.hi)
        return _Interval(_down(min(ends)), _up(max(ends)))


class _DoubleContext:
    """The two operations :class:`_Chain` needs from a context, for :class:`_Interval`."""

    @staticmethod
    def mpf(value: float) -> _Interval:
        return _Interval(float(value))

    @staticmethod
    def exp(x: _Interval) -> _Interval:
        return _Interval(_exp_enclosure(x.lo)[0], _exp_enclosure(x.hi)[1])


class _Chain:
    """Interval constants of one chain at one precision, and the closed-form step between levels."""

    def __init__(self, ctx: Any, levels: tuple[float, ...]) -> None:
        self.ctx = ctx
        self.rate = [ctx.mpf(v) for v in levels]  # exact: a double is a dyadic rational
        self.half = ctx.mpf(1) / 2
        self._exp_cache: dict[tuple[int, int], Any] = {}

    def lam(self, key: int) -> Any:
        """The exponent of key ``key`` as an interval."""
        return self.ctx.mpf(0) if key == 0 else (self.rate[key - 1] if key > 0 else -self.rate[-key - 1])

    def exp_half(self, key: int, shift: int) -> Any:
        """``e^{(lambda_key + lambda_shift) / 2}``, cached."""
        if (key, shift) not in self._exp_cache:
            self._exp_cache[key, shift] = self.ctx.exp((self.lam(key) + self.lam(shift)) * self.half)
        return self._exp_cache[key, shift]

    def antiderivatives(self, piece: _Piece, j: int) -> tuple[Any, Any, Any, Any]:
        """``F+(0), F+(1/2), F-(0), F-(1/2)`` with ``F+- = sum C e^{(lambda +- a) x} / (lambda +- a)``, a = e_j."""
        zero = self.ctx.mpf(0)
        p0 = p_half = m0 = m_half = zero
        for key, coef in piece.items():
            plus, minus = coef / (self.lam(key) + self.rate[j - 1]), coef / (self.lam(key) - self.rate[j - 1])
            p0, p_half = p0 + plus, p_half + plus * self.exp_half(key, j)
            m0, m_half = m0 + minus, m_half + minus * self.exp_half(key, -j)
        return p0, p_half, m0, m_half

    def step(self, f: tuple[_Piece, _Piece, _Piece], j: int, bit: int) -> tuple[_Piece, _Piece, _Piece]:
        """``f_{j+1}`` from ``f_j`` (rates ``e_j -> e_{j+1}``, 1-based ``j``), kept on the next release's side."""
        a, b = self.rate[j - 1], self.rate[j]
        c = (b * b - a * a) / (2 * b)
        left, middle, right = (self.antiderivatives(piece, j) for piece in f)
        # int over a whole piece of f e^{+a x} (A) and of f e^{-a x} (B); left piece: F+(-inf) = 0,
        # right piece: F-(+inf) = 0 (the exponents make both integrals converge).
        a_left, a_middle = left[0], middle[1] - middle[0]
        b_middle, b_right = middle[3] - middle[2], -right[3]
        if bit:  # y > 1/2: e^{-ay} carries everything left of y, the piece's own terms are rescaled
            return {}, {}, self._rescale(f[2], j, a, b, c, {-j: c * (a_left + a_middle - right[1])})
        out_left = self._rescale(f[0], j, a, b, c, {j: c * (b_middle + b_right + left[2])})
        out_middle = self._rescale(f[1], j, a, b, c, {-j: c * (a_left - middle[0]),
                                                      j: c * (b_right + middle[3])})
        return out_left, out_middle, {}

    def _rescale(self, piece: _Piece, j: int, a: Any, b: Any, c: Any, extra: _Piece) -> _Piece:
        # the atom a/b plus the convolution's e^{lambda y} part: c (1/(lambda+a) - 1/(lambda-a))
        out = dict(extra)
        for key, coef in piece.items():
            lam = self.lam(key)
            out[key] = coef * (a / b + 2 * a * c / ((a - lam) * (a + lam)))  # never 0: rates differ
        return out

    def mass(self, f: tuple[_Piece, _Piece, _Piece], j: int) -> Any:
        """``int f_j(x) e^{-e_j |x|} dx``: the probability of the pattern ending at level ``j``."""
        left, middle, right = (self.antiderivatives(piece, j) for piece in f)
        return left[0] + (middle[3] - middle[2]) - right[3]


def _pattern_intervals(ctx: Any, levels: tuple[float, ...]) -> dict[tuple[int, ...], Any]:
    chain = _Chain(ctx, levels)
    n = len(levels)
    first = chain.rate[0] / 2
    out: dict[tuple[int, ...], Any] = {}
    stack: list[tuple[tuple[int, ...], tuple[_Piece, _Piece, _Piece]]] = [
        ((1,), ({}, {}, {0: first})), ((0,), ({0: first}, {0: first}, {})),
    ]
    while stack:
        prefix, f = stack.pop()
        i = len(prefix)
        if i == n:
            out[prefix] = chain.mass(f, n)
            continue
        for bit in (1, 0):
            stack.append(((*prefix, bit), chain.step(f, i, bit)))
    return dict(sorted(out.items()))


def certified_pattern_probabilities(levels: tuple[float, ...] | list[float], prec: int = _START_PREC) -> dict[
        tuple[int, ...], Any]:
    """``P0(pattern)`` for every pattern, each as an ``mpmath.iv`` interval that contains it.

    ``prec`` is the working precision in bits. ``P(pattern | 1) = P0(not pattern)``.
    """
    seq = _check_levels(levels)
    check_number("prec", prec, positive=True)
    return _pattern_intervals(_context(int(prec)), seq)


@dataclass(frozen=True)
class CertifiedEpsilon:
    """An enclosure ``lo <= epsilon <= hi`` of a chain's exact epsilon (both are doubles, rounded outward)."""

    levels: tuple[float, ...]
    lo: float
    hi: float
    prec: int  # the working precision (bits) that reached the width

    @property
    def width(self) -> float:
        return self.hi - self.lo


def _float_bounds(x: Any) -> tuple[float, float]:
    """Doubles ``lo <= x.a`` and ``hi >= x.b`` around an interval (directed rounding of its ends)."""
    from mpmath.libmp import round_ceiling, round_floor, to_float

    low, high = x._mpi_
    return to_float(low, rnd=round_floor), to_float(high, rnd=round_ceiling)


def _enclose(ctx: MPIntervalContext, levels: tuple[float, ...]) -> tuple[float, float]:
    probs = _pattern_intervals(ctx, levels)
    lo = hi = 0.0
    for pattern, p0 in probs.items():
        if pattern[0] == 1:  # the complement pair gives the same |log ratio|
            continue
        p1 = probs[tuple(1 - b for b in pattern)]
        if not (_float_bounds(p0)[0] > 0.0 and _float_bounds(p1)[0] > 0.0):
            return 0.0, math.inf  # an enclosure of a probability reached 0: precision too low
        ratio_lo, ratio_hi = _float_bounds(ctx.log(p1) - ctx.log(p0))
        low = 0.0 if ratio_lo <= 0.0 <= ratio_hi else min(abs(ratio_lo), abs(ratio_hi))
        lo, hi = max(lo, low), max(hi, abs(ratio_lo), abs(ratio_hi))
    return lo, hi


def enclosed_sequence_epsilon(levels: tuple[float, ...] | list[float]) -> tuple[float, float]:
    """``(lo, hi)`` with ``lo <= epsilon <= hi`` for a symmetric bit released at ``levels``, in doubles.

    The same closed forms as :func:`certified_sequence_epsilon` in double interval arithmetic
    (every operation rounded outward, exponentials enclosed in exact integer arithmetic), so the
    enclosure is proven and needs nothing beyond the standard library. It is as wide as the
    cancellation makes it (about 1e-15 relative for rates apart by 1e-3 or more; check ``hi - lo``):
    ``hi`` is a valid charge whatever the width. ``epsilon = ln max_y P0(not y) / P0(y)`` (the
    patterns come in complementary pairs), and ``ln`` is enclosed by checking ``e^lo <= ratio``
    and ``e^hi >= ratio`` with :func:`_exp_enclosure`.
    """
    seq = _check_levels(levels)
    try:
        probs = _pattern_intervals(_DoubleContext(), seq)
    except ZeroDivisionError:  # rates within a few doubles of each other: no bound from doubles
        return 0.0, math.inf
    ratio_lo = ratio_hi = 1.0
    for pattern, p0 in probs.items():
        p1 = probs[tuple(1 - b for b in pattern)]
        if not (p0.lo > 0.0 and p1.lo > 0.0):
            return 0.0, math.inf  # a probability's enclosure reached 0: no bound from doubles
        ratio = p1 / p0
        ratio_lo, ratio_hi = max(ratio_lo, ratio.lo), max(ratio_hi, ratio.hi)
    lo, hi = math.log(ratio_lo), math.log(ratio_hi)
    while lo > 0.0 and _exp_enclosure(lo)[1] > ratio_lo:
        lo = max(_down(lo), 0.0)
    while _exp_enclosure(hi)[0] < ratio_hi:
        hi = _up(hi)
    return lo, hi


@functools.lru_cache(maxsize=1024)
def enclosed_charge(levels: tuple[float, ...]) -> tuple[float, bool]:
    """``(hi, exact)``: the upper end of :func:`enclosed_sequence_epsilon` and whether the enclosure is
    within :data:`EXACT_WIDTH` (cached: a client or a simulation asks for the same chain many times)."""
    lo, hi = enclosed_sequence_epsilon(levels)
    return hi, hi - lo <= EXACT_WIDTH


def certified_sequence_epsilon(levels: tuple[float, ...] | list[float], width: float = 1e-12) -> CertifiedEpsilon:
    """The exact epsilon of a symmetric bit released at ``levels``, enclosed in ``[lo, hi]``.

    Raises the working precision (96 bits, doubling) until ``hi - lo <= width`` or the
    precision reaches 1536 bits; the returned enclosure is valid either way (check ``width``).
    One level: ``ln((1 - f/2) / (f/2))`` with ``f = e^{-e/2}``.

    >>> import math
    >>> r = certified_sequence_epsilon([2 * math.log(2)])  # f = 1/2: RAPPOR's ln 3
    >>> r.lo <= math.log(3) <= r.hi and r.width < 1e-12
    True
    """
    seq = _check_levels(levels)
    check_number("width", width, positive=True)
    prec = _START_PREC
    while True:
        lo, hi = _enclose(_context(prec), seq)
        if hi - lo <= width or prec >= _MAX_PREC:
            return CertifiedEpsilon(levels=seq, lo=lo, hi=hi, prec=prec)
        prec *= 2


# --------------------------------------------------------------------------
# Building blocks for other enclosures in doubles (the report chains of protocol.irr_relaxation)
# --------------------------------------------------------------------------


def enclosed_pattern_probabilities(levels: tuple[float, ...] | list[float]) -> dict[
        tuple[int, ...], tuple[float, float]] | None:
    """``P0(pattern)`` for every pattern as doubles ``(lo, hi)`` around it, ``0 <= lo``: standard library only.

    The double interval arithmetic of :func:`enclosed_sequence_epsilon`; ``P(pattern | 1) = P0(not
    pattern)``. Every pattern has a positive probability (the noise has a positive density everywhere).
    ``None`` where doubles give no bound (rates within a few doubles of each other, or an exponent
    beyond the enclosed range).
    """
    seq = _check_levels(levels)
    try:
        probs = _pattern_intervals(_DoubleContext(), seq)
    except (ZeroDivisionError, ParameterError):
        return None
    return {pattern: (max(p.lo, 0.0), p.hi) for pattern, p in probs.items()}


def enclosed_exp(x: float) -> tuple[float, float]:
    """Doubles ``lo <= e^x <= hi`` for a double ``|x| <= 700`` (exact integer arithmetic, never libm)."""
    return _exp_enclosure(float(x))


def enclosed_fraction(value: Fraction) -> tuple[float, float]:
    """The doubles ``lo <= value <= hi`` next to a rational (both equal when it is a double)."""
    return (_to_double(value.numerator, value.denominator, upward=False),
            _to_double(value.numerator, value.denominator, upward=True))


def enclosed_log(low: float, high: float) -> tuple[float, float]:
    """Doubles around ``ln x`` for every ``x`` in ``[low, high]``, ``1 <= low <= high`` (``high`` may be ``inf``).

    ``math.log`` gives the candidates; each is stepped outward until :func:`_exp_enclosure` proves
    ``e^lo <= low`` and ``e^hi >= high``. Above ``e^700`` (outside the enclosed exponentials) the
    upper end is ``inf`` and the lower end 700.
    """
    if not 1.0 <= low <= high:
        raise ParameterError("ratio", f"must satisfy 1 <= low <= high, got [{low}, {high}]")
    lo = min(math.log(low), 700.0)
    while lo > 0.0 and _exp_enclosure(lo)[1] > low:
        lo = max(_down(lo), 0.0)
    if math.isinf(high) or math.log(high) >= 699.0:
        return lo, math.inf
    hi = math.log(high)
    while _exp_enclosure(hi)[0] < high:
        hi = _up(hi)
    return lo, hi
