"""Central (aggregator-side) release mechanisms with one-sided error (DESIGN 7).

The aggregator holds exact counts ``c`` (one per place, say) and publishes
noisy answers. The query "is place ``i`` safe, ``c_i <= t``?" is answered
by the sanitizer ``answer_i <= t``.

* **ALap** (ADP paper, Def. V.3): one-sided exponential noise of scale
  ``D_p / eps``. For the policy "not having visited is non-sensitive" the
  count's p-sensitivity is *monotonically decreasing* (a protected change
  only removes a visit), the noise is ``>= 0`` and a "safe" answer is never
  wrong: ``P(safe | c) = 1 - exp(-eps (t - c) / D_p)`` for ``c <= t``, 0 above.
  Laplace when the p-sensitivity is not monotonic.
* **AGeo** (Def. VIII.1): the discrete, optimal version for counts in
  ``{0..n_max}``: ``min(c + G, n_max)`` with ``P(G >= k) = exp(-eps k)``.
  ``P(safe | c) = 1 - exp(-eps (t - c + 1))`` for ``c <= t < n_max``.
* **SALap** (Algorithm 1): threshold queries answered in sequence with the
  whole budget ``eps`` each, until the first "above threshold" answer.
* Competitors: eps-DP Laplace and two-sided geometric, and the virtual
  (eps, delta)-DP sanitizer that meets the necessary condition (7) with
  equality (Sec. III, VI-A).

Every published value comes from the exact integer samplers of
:mod:`protocol.exact`: integer arithmetic and exact Bernoulli(exp(-gamma))
trials for rational ``gamma`` (the construction of Canonne, Kamath and
Steinke, "The Discrete Gaussian for Differential Privacy", 2020, Algorithms
1-2), fed with exact uniform integers cut from the injected
:class:`RandomSource`. AGeo and the two-sided geometric publish integers;
ALap, Laplace and SALap publish multiples of a power-of-two grid ``g``
(:func:`~protocol.exact.default_grid`, about ``D / (1024 eps)``, recorded in
the release): the noise is ``g`` times an exact geometric (one-sided) or a
difference of two (discrete Laplace), never floating-point inversion, whose
holes make some outputs impossible under a neighbour (Mironov 2012). The
claimed epsilon is the exact loss of what is sampled, ``r floor(D / g)`` with
``r = eps g / D`` per grid step as the sampler uses it, rounded up.

Gradual release (gradual-release paper, Sec. 3): a published answer is
refined by a lazy Markov step on the noise kept server-side
(:func:`relax_release`); the budget charged is the final level, not the sum.
A :class:`Release` is the JSON-serialisable record a store persists.

>>> mech = ALapMechanism(epsilon=1.0)
>>> mech.step, float(mech.step_rate)  # grid 2**-10, rate eps g / D per grid step
(0.0009765625, 0.0009765625)
>>> mech.safe_probability(count=2, threshold=5) == 1 - math.exp(-float(mech.step_rate) * (3 / mech.step + 1))
True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from .accounting import round_up
from .errors import BudgetExceeded, ParameterError, TighteningRefused
from .exact import (
    MAX_GRID_VALUE,
    bernoulli_exp,
    check_grid,
    default_grid,
    exact_rate,
    exact_uniform_words,
    geometric_exact,
    grid_epsilon,
    grid_step_rate,
    two_sided_geometric_exact,
    uniform_below,
)
from .rng import FloatArray, RandomSource, as_rng

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Monotonicity = Literal["decreasing", "increasing", "none"]
MONOTONICITIES: tuple[str, ...] = ("decreasing", "increasing", "none")
MechanismName = Literal["alap", "ageo", "salap", "laplace", "geometric"]
MECHANISMS: tuple[str, ...] = ("alap", "ageo", "salap", "laplace", "geometric")

__all__ = [
    "AGeoMechanism",
    "ALapMechanism",
    "CentralGuarantee",
    "GeometricMechanism",
    "LaplaceMechanism",
    "PSensitivity",
    "Release",
    "SALapMechanism",
    "adp_epsilon_lower_bound",
    "ageo",
    "alap",
    "approx_dp_delta_lower_bound",
    "bernoulli_exp",
    "check_grid",
    "default_grid",
    "dp_beta_upper_bound",
    "dp_epsilon_lower_bound",
    "exact_rate",
    "exact_uniform_words",
    "geometric_exact",
    "geometric_mechanism",
    "laplace_mechanism",
    "make_release",
    "on_grid",
    "relax_noise",
    "relax_release",
    "salap",
    "sign_p",
    "two_sided_geometric_exact",
    "uniform_below",
    "virtual_dp_sanitizer",
]


# ==========================================================================
# Validation helpers
# ==========================================================================


def _check_epsilon(field: str, value: Any, *, allow_inf: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ParameterError(field, f"must be a number, got {value!r}")
    if not value > 0:
        raise ParameterError(field, f"must be > 0, got {value}")
    if math.isinf(value) and not allow_inf:
        raise ParameterError(field, f"must be finite, got {value}")
    return float(value)


def _check_monotonicity(value: Any) -> None:
    if value not in MONOTONICITIES:
        raise ParameterError("monotonicity", f"must be one of {MONOTONICITIES}, got {value!r}")


def _as_counts(counts: npt.ArrayLike, *, integer: bool) -> npt.NDArray[Any]:
    arr = np.asarray(counts)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise ParameterError("counts", f"must be numbers, got dtype {arr.dtype}")
    if integer:
        if not np.issubdtype(arr.dtype, np.integer):
            if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
                raise ParameterError("counts", "must be integers for an integer mechanism")
        return arr.astype(np.int64)
    if not np.all(np.isfinite(arr)):
        raise ParameterError("counts", "must be finite")
    return arr.astype(np.float64)


# ==========================================================================
# p-sensitivity and guarantees
# ==========================================================================


def sign_p(monotonicity: Monotonicity) -> int:
    """``Sign_p`` of Def. V.2: +1 increasing, -1 decreasing, 0 when not monotonic.

    The ALap/AGeo noise points *against* ``Sign_p``: a decreasing
    p-sensitivity (a protected change can only lower the count) gets noise
    ``>= 0``, so that ``M(X)`` and ``M(X')`` with ``f(X') <= f(X)`` have
    nested supports. (Def. V.3 as printed puts the decreasing case's noise
    on ``lambda <= 0``, which contradicts Def. VIII.1 and the proof of
    Theorem V.4; see docs/central.md.)
    """
    _check_monotonicity(monotonicity)
    return {"increasing": 1, "decreasing": -1, "none": 0}[monotonicity]


@dataclass(frozen=True, kw_only=True)
class PSensitivity:
    """``D_p`` (Def. V.1) and its monotonicity (Def. V.2) for a query.

    Attributes:
        value: ``sup ||f(X') - f(X)||_1`` over p-neighbours ``X ~p X'``.
        monotonicity: ``decreasing`` when ``f(X') <= f(X)`` coordinate-wise
            for every p-neighbour pair, ``increasing`` when ``>=``, else ``none``.
    """

    value: float
    monotonicity: Monotonicity

    def __post_init__(self) -> None:
        _check_epsilon("value", self.value, allow_inf=False)
        _check_monotonicity(self.monotonicity)

    @classmethod
    def from_differences(cls, differences: npt.ArrayLike) -> PSensitivity:
        """From observed ``f(X') - f(X)`` over p-neighbour pairs (rows; columns are coordinates).

        A common sign across all coordinates gives a monotonic p-sensitivity;
        mixed signs give ``none`` (Laplace is then used, valid for any sign).
        """
        diffs = np.atleast_2d(np.asarray(differences, dtype=np.float64))
        if diffs.size == 0 or not np.all(np.isfinite(diffs)):
            raise ParameterError("differences", "must be a non-empty finite array")
        value = float(np.abs(diffs).sum(axis=1).max())
        mono: Monotonicity = "decreasing" if np.all(diffs <= 0) else "increasing" if np.all(diffs >= 0) else "none"
        return cls(value=value, monotonicity=mono)


@dataclass(frozen=True, kw_only=True)
class CentralGuarantee:
    """What a central release promises.

    Attributes:
        mechanism: ``alap``, ``ageo``, ``salap``, ``laplace``, ``geometric``, ...
        epsilon: the privacy parameter, rounded up (6 decimals).
        delta: 0 for every mechanism here.
        definition: ``(eps, p)-ADP`` or ``eps-DP``.
        neighbour: the change of the data the epsilon is about.
        protects / reveals: the policy in words.
        one_sided: which answers are never wrong (``None`` if none is).
    """

    mechanism: str
    epsilon: float
    delta: float
    definition: str
    neighbour: str
    protects: str
    reveals: str
    one_sided: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "definition": self.definition,
            "neighbour": self.neighbour,
            "protects": self.protects,
            "reveals": self.reveals,
            "one_sided": self.one_sided,
        }


_ADP_TEXT: dict[str, tuple[str, str, str | None]] = {
    "decreasing": (
        "that a person IS counted (e.g. visited the place): removing a contribution changes "
        "no output probability by more than e^eps",
        "that a person is NOT counted may be revealed (the policy declares it non-sensitive)",
        "answer <= t certifies count <= t (never wrong)",
    ),
    "increasing": (
        "that a person is NOT counted: adding a contribution changes no output probability by more than e^eps",
        "that a person IS counted may be revealed (the policy declares it non-sensitive)",
        "answer >= t certifies count >= t (never wrong)",
    ),
    "none": ("both presence and absence (two-sided noise)", "nothing beyond the epsilon", None),
}


def _adp_guarantee(mechanism: str, epsilon: float, monotonicity: Monotonicity, scale: str) -> CentralGuarantee:
    protects, reveals, one_sided = _ADP_TEXT[monotonicity]
    if monotonicity == "none":
        return _dp_guarantee(mechanism, epsilon, scale)
    return CentralGuarantee(
        mechanism=mechanism,
        epsilon=round_up(epsilon),
        delta=0.0,
        definition="(eps, p)-ADP",
        neighbour=f"X ~p X': one record changed as the policy allows ({scale})",
        protects=protects,
        reveals=reveals,
        one_sided=one_sided,
    )


def _dp_guarantee(mechanism: str, epsilon: float, scale: str) -> CentralGuarantee:
    return CentralGuarantee(
        mechanism=mechanism,
        epsilon=round_up(epsilon),
        delta=0.0,
        definition="eps-DP",
        neighbour=f"one record changed ({scale})",
        protects="both presence and absence (two-sided noise)",
        reveals="nothing beyond the epsilon",
        one_sided=None,
    )


def _max_log_ratio(log_p: FloatArray, log_q: FloatArray) -> float:
    """``max_z ln(p(z)/q(z))`` over ``p(z) > 0`` (``inf`` where ``q(z) = 0``)."""
    support = np.isfinite(log_p)
    if not np.any(support):
        return -math.inf
    diff = np.where(np.isfinite(log_q[support]), log_p[support] - log_q[support], math.inf)
    return float(diff.max())


# ==========================================================================
# Noise on a power-of-two grid (docs/central.md, "The grid")
# ==========================================================================


def on_grid(values: npt.ArrayLike, grid: float, field: str = "counts") -> FloatArray:
    """``values`` as doubles, each a multiple of ``grid`` below ``2**32`` in magnitude.

    Integer counts lie on every grid (``grid <= 1``). Outputs ``c + k g`` of
    such counts are exact doubles, so no answer ever leaves the grid.

    Raises:
        ParameterError: (field ``field``) a value off the grid or too large.
    """
    arr = _as_counts(values, integer=False)
    if arr.size and (np.any(np.abs(arr) >= MAX_GRID_VALUE) or np.any(arr / grid != np.floor(arr / grid))):
        raise ParameterError(field, f"must be multiples of the grid {grid:g} below 2**32 (integer counts always are)")
    return arr


def grid_steps(values: npt.ArrayLike, grid: float, field: str = "noise") -> IntArray:
    """Stored noise in whole grid steps (``values / grid``, exact)."""
    return (on_grid(values, grid, field=field) / grid).astype(np.int64)


def _geometric_parts(
    monotonicity: Monotonicity, rate: Fraction, shape: int | tuple[int, ...], rng: RandomSource
) -> tuple[IntArray, IntArray]:
    """``(up, down)`` in grid steps, noise ``g (up - down)``, from the exact geometric sampler.

    decreasing: ``up = G``, ``down = 0`` (noise ``>= 0``, against ``Sign_p``); increasing: the
    mirror image; none: two independent geometrics, the discrete Laplace ``G1 - G2``.
    """
    zeros = np.zeros(shape, dtype=np.int64)
    if monotonicity == "decreasing":
        return geometric_exact(rng, rate, shape), zeros
    if monotonicity == "increasing":
        return zeros, geometric_exact(rng, rate, shape)
    up = geometric_exact(rng, rate, shape)
    return up, geometric_exact(rng, rate, shape)


def _grid_safe_probability(monotonicity: Monotonicity, rate: float, steps: float) -> float:
    """``P(noise <= steps grid steps)`` for the noise of :func:`_geometric_parts` at ``rate`` per step."""
    k = math.floor(steps)
    if monotonicity == "decreasing":
        return -math.expm1(-rate * (k + 1)) if k >= 0 else 0.0
    if monotonicity == "increasing":
        return 1.0 if k >= 0 else math.exp(rate * math.ceil(steps))
    q = math.exp(-rate)
    return 1.0 - q ** (k + 1) / (1 + q) if k >= 0 else q ** (-k) / (1 + q)


# ==========================================================================
# ALap (Def. V.3) and the eps-DP Laplace competitor, on the grid
# ==========================================================================


@dataclass(frozen=True, kw_only=True)
class ALapMechanism:
    """Asymmetric Laplace mechanism (ADP paper, Def. V.3, Theorem V.4), discretized exactly.

    ``ALap(X)_i = f(X)_i + g G_i`` on the power-of-two grid ``g``
    (:func:`~protocol.exact.default_grid` of ``D_p / eps``): ``G_i >= 0`` with
    ``P(G >= k) = exp(-r k)``, ``r = eps g / D_p``, from the exact sampler,
    pointing against ``Sign_p`` (the discrete analogue of ``Exp(eps / D_p)``);
    the discrete Laplace ``g (G1 - G2)`` when not monotonic. Floating-point
    inversion would leave holes in the output set (Mironov 2012); every
    output here is possible under every neighbour in the protected direction.
    ``E|noise| = g q / (1 - q) ~ D_p / eps - g / 2`` (Corollary V.5, discretized).

    Attributes:
        epsilon: > 0; ``inf`` releases the counts.
        sensitivity: ``D_p(f)`` (L1 over the coordinates), > 0.
        monotonicity: of the p-sensitivity; ``decreasing`` by default.
        grid: the output grid; ``None``: :func:`~protocol.exact.default_grid`.
    """

    epsilon: float
    sensitivity: float = 1.0
    monotonicity: Monotonicity = "decreasing"
    grid: float | None = None

    def __post_init__(self) -> None:
        _check_epsilon("epsilon", self.epsilon)
        _check_epsilon("sensitivity", self.sensitivity, allow_inf=False)
        _check_monotonicity(self.monotonicity)
        if self.grid is not None:
            check_grid(self.grid)
        if not math.isinf(self.epsilon):
            self.step_rate  # noqa: B018 -- validates the exact sampler's range

    @property
    def step(self) -> float:
        """The output grid ``g`` (given, or from the scale ``D_p / eps``)."""
        if self.grid is not None:
            return self.grid
        return default_grid(0.0 if math.isinf(self.epsilon) else self.sensitivity / self.epsilon, self.sensitivity)

    @property
    def step_rate(self) -> Fraction:
        """``r = eps g / D_p`` per grid step, exact (rounded down by :func:`exact_rate`)."""
        return grid_step_rate(self.epsilon, self.sensitivity, self.step)

    @property
    def effective_epsilon(self) -> float:
        """The loss of what is sampled: ``r floor(D_p / g)`` (``= eps`` when ``D_p / g`` is an integer)."""
        return math.inf if math.isinf(self.epsilon) else grid_epsilon(self.step_rate, self.sensitivity, self.step)

    def noise_parts(self, shape: int | tuple[int, ...], rng: RandomSource | int | None = None) -> tuple[IntArray, IntArray]:
        """``(up, down)`` in grid steps; the noise is ``g (up - down)`` (both kept for relaxation)."""
        if math.isinf(self.epsilon):
            return np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
        return _geometric_parts(self.monotonicity, self.step_rate, shape, as_rng(rng))

    def noise(self, shape: int | tuple[int, ...], rng: RandomSource | int | None = None) -> FloatArray:
        """Fresh noise, on the grid."""
        up, down = self.noise_parts(shape, rng)
        return (up - down).astype(np.float64) * self.step

    def release(self, counts: npt.ArrayLike, rng: RandomSource | int | None = None) -> FloatArray:
        if math.isinf(self.epsilon):
            return _as_counts(counts, integer=False)
        c = on_grid(counts, self.step)
        return c + self.noise(c.shape, rng)

    def log_pmf(self, outputs: npt.ArrayLike, count: float) -> FloatArray:
        """``ln P(answer = z | count)`` (``-inf`` off the grid or off the support)."""
        k = (np.asarray(outputs, dtype=np.float64) - count) / self.step
        r = float(self.step_rate)
        on = k == np.floor(k)
        if self.monotonicity == "none":
            log_p = math.log(-math.expm1(-r) / (1 + math.exp(-r))) - r * np.abs(k)
        else:
            y = -sign_p(self.monotonicity) * k
            log_p = np.where(y >= 0, math.log(-math.expm1(-r)) - r * y, -math.inf)
        return np.where(on, log_p, -math.inf)

    def safe_probability(self, count: float, threshold: float) -> float:
        """``P(answer <= threshold | count)`` in closed form.

        Decreasing: ``1 - exp(-r (floor((t - c) / g) + 1))`` for ``c <= t``, else 0
        (``-> 1 - exp(-eps (t - c) / D_p)`` as ``g -> 0``).
        """
        return _grid_safe_probability(self.monotonicity, float(self.step_rate), (threshold - count) / self.step)

    def guarantee(self) -> CentralGuarantee:
        # Theorem V.4 on the grid: P(z | c) / P(z | c - m g) = exp(r m) on the whole support of the
        # second, m <= floor(D_p / g): exactly effective_epsilon at the largest shift.
        scale = f"L1 change <= {self.sensitivity:g}; grid {self.step:g}"
        return _adp_guarantee("alap", self.effective_epsilon, self.monotonicity, scale)


@dataclass(frozen=True, kw_only=True)
class LaplaceMechanism:
    """The eps-DP Laplace mechanism (competitor), discretized exactly: ``f(X) + g (G1 - G2)``.

    The discrete Laplace on the grid ``g`` with ``P(g k)`` proportional to
    ``exp(-r |k|)``, ``r = eps g / D`` (see :class:`ALapMechanism`).
    """

    epsilon: float
    sensitivity: float = 1.0
    grid: float | None = None

    def __post_init__(self) -> None:
        self.two_sided  # noqa: B018 -- validates

    @property
    def two_sided(self) -> ALapMechanism:
        return ALapMechanism(epsilon=self.epsilon, sensitivity=self.sensitivity, monotonicity="none", grid=self.grid)

    @property
    def step(self) -> float:
        return self.two_sided.step

    @property
    def step_rate(self) -> Fraction:
        return self.two_sided.step_rate

    @property
    def effective_epsilon(self) -> float:
        return self.two_sided.effective_epsilon

    def noise_parts(self, shape: int | tuple[int, ...], rng: RandomSource | int | None = None) -> tuple[IntArray, IntArray]:
        return self.two_sided.noise_parts(shape, rng)

    def noise(self, shape: int | tuple[int, ...], rng: RandomSource | int | None = None) -> FloatArray:
        return self.two_sided.noise(shape, rng)

    def release(self, counts: npt.ArrayLike, rng: RandomSource | int | None = None) -> FloatArray:
        return self.two_sided.release(counts, rng)

    def guarantee(self) -> CentralGuarantee:
        scale = f"L1 change <= {self.sensitivity:g}; grid {self.step:g}"
        return _dp_guarantee("laplace", self.effective_epsilon, scale)


def alap(
    counts: npt.ArrayLike,
    epsilon: float,
    *,
    sensitivity: float = 1.0,
    monotonicity: Monotonicity = "decreasing",
    rng: RandomSource | int | None = None,
) -> FloatArray:
    """ALap answers (Def. V.3); decreasing p-sensitivity by default, so noise ``>= 0``.

    >>> bool(np.all(alap([3, 0, 7], 1.0, rng=1) >= [3, 0, 7]))
    True
    """
    return ALapMechanism(epsilon=epsilon, sensitivity=sensitivity, monotonicity=monotonicity).release(counts, rng)


def laplace_mechanism(
    counts: npt.ArrayLike, epsilon: float, *, sensitivity: float = 1.0, rng: RandomSource | int | None = None
) -> FloatArray:
    """eps-DP discrete Laplace answers on the grid (competitor)."""
    return LaplaceMechanism(epsilon=epsilon, sensitivity=sensitivity).release(counts, rng)

# ==========================================================================
# AGeo (Def. VIII.1) and the two-sided geometric competitor
# ==========================================================================


@dataclass(frozen=True, kw_only=True)
class AGeoMechanism:
    """Asymmetric geometric mechanism (ADP paper, Def. VIII.1, Theorems VIII.2-3).

    For counts in ``{0..n_max}`` with p-sensitivity ``D`` (L1, an integer).
    With ``q = exp(-eps / D)`` and ``P(G >= k) = q^k`` (exact sampler):

    * decreasing: ``min(c + G, n_max)``: ``P(z) = (1-q) q^(z-c)`` for
      ``c <= z < n_max``, ``P(n_max) = q^(n_max - c)``;
    * increasing: ``max(c - G, 0)``, the mirror image;
    * none: ``c + Z``, ``Z`` two-sided geometric, untruncated as printed.

    Optimal for any loss non-decreasing in ``|z - c|`` (Theorem VIII.3).

    Attributes:
        epsilon: > 0 (at most 2**20); ``inf`` releases the counts.
        n_max: the largest possible count (the ``n`` of the paper), >= 0.
        monotonicity: of the p-sensitivity; ``decreasing`` by default.
        sensitivity: ``D``, the L1 change of the count vector a protected
            change makes (an integer >= 1; the paper's case is 1).
    """

    epsilon: float
    n_max: int
    monotonicity: Monotonicity = "decreasing"
    sensitivity: int = 1

    def __post_init__(self) -> None:
        _check_epsilon("epsilon", self.epsilon)
        if isinstance(self.sensitivity, bool) or not isinstance(self.sensitivity, int | np.integer) or self.sensitivity < 1:
            raise ParameterError("sensitivity", f"must be an integer >= 1 for ageo, got {self.sensitivity!r}")
        if not math.isinf(self.epsilon):
            self.step_rate  # noqa: B018 -- validates the exact sampler's range
        if isinstance(self.n_max, bool) or not isinstance(self.n_max, int | np.integer) or self.n_max < 0:
            raise ParameterError("n_max", f"must be an integer >= 0, got {self.n_max!r}")
        _check_monotonicity(self.monotonicity)

    @property
    def step_rate(self) -> Fraction:
        """``r = eps / D`` per count, as the exact sampler uses it (rounded down by :func:`exact_rate`)."""
        return exact_rate(Fraction(self.epsilon) / int(self.sensitivity))

    @property
    def effective_epsilon(self) -> float:
        """The loss of a shift by ``D``: ``r D`` (equal to ``epsilon`` for every float ``eps / D >= 1/16``)."""
        return math.inf if math.isinf(self.epsilon) else grid_epsilon(self.step_rate, int(self.sensitivity), 1.0)

    def noise(self, shape: int | tuple[int, ...], rng: RandomSource | int | None = None) -> IntArray:
        """The untruncated noise: ``G >= 0`` (monotonic) or two-sided ``Z``; exact."""
        if math.isinf(self.epsilon):
            return np.zeros(shape, dtype=np.int64)
        if self.monotonicity == "none":
            return two_sided_geometric_exact(as_rng(rng), self.step_rate, shape)
        return geometric_exact(as_rng(rng), self.step_rate, shape)

    def publish(self, counts: npt.ArrayLike, noise: npt.ArrayLike) -> IntArray:
        """Answers from counts and stored noise (truncation included)."""
        c = self.check_counts(counts)
        g = np.asarray(noise, dtype=np.int64)
        if self.monotonicity == "decreasing":
            return np.minimum(c + g, self.n_max)
        if self.monotonicity == "increasing":
            return np.maximum(c - g, 0)
        return c + g

    def release(self, counts: npt.ArrayLike, rng: RandomSource | int | None = None) -> IntArray:
        c = self.check_counts(counts)
        return self.publish(c, self.noise(c.shape, rng))

    def check_counts(self, counts: npt.ArrayLike) -> IntArray:
        """Counts as int64, each in ``[0, n_max]``."""
        c = _as_counts(counts, integer=True)
        if c.size and (c.min() < 0 or c.max() > self.n_max):
            raise ParameterError("counts", f"must lie in [0, n_max={self.n_max}]")
        return c

    def log_pmf(self, outputs: npt.ArrayLike, count: int) -> FloatArray:
        """``ln P(answer = z | count)`` for integer ``outputs`` (Def. VIII.1 verbatim)."""
        z = np.asarray(outputs, dtype=np.int64)
        e = math.inf if math.isinf(self.epsilon) else float(self.step_rate)
        log_1mq = math.log(-math.expm1(-e))
        if self.monotonicity == "none":
            return math.log(-math.expm1(-e) / (1 + math.exp(-e))) - e * np.abs(z - count)
        y = z - count if self.monotonicity == "decreasing" else count - z
        end = self.n_max - count if self.monotonicity == "decreasing" else count
        body = np.where(y == end, -e * y, log_1mq - e * y)
        return np.where((y >= 0) & (y <= end), body, -math.inf)

    def privacy_loss(self, *, reverse: bool = False) -> float:
        """Exact ``max ln P(z | X) / P(z | X')`` over p-neighbours ``X ~p X'`` and outputs ``z``.

        A p-neighbour changes the count by ``f(X') - f(X) = -D`` (decreasing),
        ``+D`` (increasing) or either (none), the worst single-count case of an
        L1 change ``D`` (losses add over the counts); counts range over ``[0, n_max]``
        and the outcome space is finite (a window around it when not
        monotonic), so this is a maximum, not a bound. ``reverse=True`` takes
        the changes the policy does *not* protect (``inf``: they are revealed).
        """
        d = int(self.sensitivity)
        steps = {"decreasing": (-d,), "increasing": (d,), "none": (-d, d)}[self.monotonicity]
        if reverse:
            steps = tuple(-s for s in steps)
        n = self.n_max
        outputs = np.arange(-n - 2 * d - 2, 2 * n + 2 * d + 3) if self.monotonicity == "none" else np.arange(n + 1)
        worst = -math.inf
        for c in range(n + 1):
            for s in steps:
                if 0 <= c + s <= n:
                    worst = max(worst, _max_log_ratio(self.log_pmf(outputs, c), self.log_pmf(outputs, c + s)))
        return worst

    def safe_probability(self, count: int, threshold: int) -> float:
        """``P(answer <= t | count)``; decreasing: ``1 - exp(-r (t - c + 1))`` for ``c <= t < n_max``, ``r = eps / D``."""
        e, d = float(self.step_rate), threshold - count
        if self.monotonicity == "decreasing":
            if threshold >= self.n_max:
                return 1.0
            return -math.expm1(-e * (d + 1)) if d >= 0 else 0.0
        if self.monotonicity == "increasing":
            return 1.0 if d >= 0 else (math.exp(e * d) if threshold >= 0 else 0.0)
        q = math.exp(-e)
        return 1.0 - q ** (d + 1) / (1 + q) if d >= 0 else q ** (-d) / (1 + q)

    def guarantee(self) -> CentralGuarantee:
        # Theorem VIII.2 at rate eps / D per count: the ratio for a shift of D is exactly e^(r D)
        # on the whole support (privacy_loss() is tight).
        scale = f"L1 change <= {self.sensitivity}"
        return _adp_guarantee("ageo", self.effective_epsilon, self.monotonicity, scale)


@dataclass(frozen=True, kw_only=True)
class GeometricMechanism:
    """The eps-DP two-sided geometric mechanism (competitor; ADP paper Sec. VIII-A).

    ``c + Z`` with ``P(Z = z)`` proportional to ``exp(-eps |z| / D)``; exact sampler.
    """

    epsilon: float
    sensitivity: int = 1

    def __post_init__(self) -> None:
        _check_epsilon("epsilon", self.epsilon)
        if isinstance(self.sensitivity, bool) or not isinstance(self.sensitivity, int) or self.sensitivity < 1:
            raise ParameterError("sensitivity", f"must be an integer >= 1, got {self.sensitivity!r}")
        if not math.isinf(self.epsilon):
            exact_rate(Fraction(self.epsilon) / self.sensitivity)

    @property
    def rate(self) -> Fraction:
        return exact_rate(Fraction(self.epsilon) / self.sensitivity)

    def noise(self, shape: int | tuple[int, ...], rng: RandomSource | int | None = None) -> IntArray:
        if math.isinf(self.epsilon):
            return np.zeros(shape, dtype=np.int64)
        return two_sided_geometric_exact(as_rng(rng), self.rate, shape)

    def release(self, counts: npt.ArrayLike, rng: RandomSource | int | None = None) -> IntArray:
        c = _as_counts(counts, integer=True)
        return c + self.noise(c.shape, rng)

    def guarantee(self) -> CentralGuarantee:
        eff = math.inf if math.isinf(self.epsilon) else float(self.rate) * self.sensitivity
        return _dp_guarantee("geometric", eff, f"count change <= {self.sensitivity}")


def ageo(
    counts: npt.ArrayLike,
    epsilon: float,
    *,
    n_max: int,
    monotonicity: Monotonicity = "decreasing",
    rng: RandomSource | int | None = None,
) -> IntArray:
    """AGeo answers (Def. VIII.1), exact integers in ``[0, n_max]``.

    >>> a = ageo([3, 0, 7], 1.0, n_max=10, rng=1)
    >>> bool(np.all((a >= [3, 0, 7]) & (a <= 10)))
    True
    """
    return AGeoMechanism(epsilon=epsilon, n_max=n_max, monotonicity=monotonicity).release(counts, rng)


def geometric_mechanism(
    counts: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1, rng: RandomSource | int | None = None
) -> IntArray:
    """eps-DP two-sided geometric answers (competitor), exact integers."""
    return GeometricMechanism(epsilon=epsilon, sensitivity=sensitivity).release(counts, rng)


# ==========================================================================
# SALap (Algorithm 1)
# ==========================================================================


@dataclass(frozen=True, kw_only=True)
class SALapMechanism:
    """Sanitized asymmetric Laplace mechanism (ADP paper, Algorithm 1, Theorem V.7).

    Queries ``f_1..f_d``, each with monotonically decreasing p-sensitivity
    ``<= D`` (per query: the paper's case is 1, and one person's report moves
    each of its place counts by at most 1 however many places it holds), are
    answered in order with ``z_i = f_i(X) + g G_i``, the grid ALap noise of
    :class:`ALapMechanism` (the discrete ``Exp(eps / D)``): output
    ``None`` (the paper's bottom: "below threshold", a certificate that
    ``f_i(X) <= t_i``) while ``z_i <= t_i``; at the first ``z_i > t_i``
    output ``z_i`` and stop; every later answer is NaN. The whole sequence
    is ``(eps, p)``-ADP: a bottom costs nothing, the one value costs eps.
    """

    epsilon: float
    sensitivity: float = 1.0
    grid: float | None = None

    def __post_init__(self) -> None:
        self.one_sided  # noqa: B018 -- validates

    @property
    def one_sided(self) -> ALapMechanism:
        """The ALap each query uses (decreasing p-sensitivity, the per-query bound ``D``)."""
        return ALapMechanism(epsilon=self.epsilon, sensitivity=self.sensitivity, grid=self.grid)

    @property
    def step(self) -> float:
        return self.one_sided.step

    @property
    def effective_epsilon(self) -> float:
        return self.one_sided.effective_epsilon

    def noise_parts(self, size: int, rng: RandomSource | int | None = None) -> tuple[IntArray, IntArray]:
        return self.one_sided.noise_parts(size, rng)

    def noise(self, size: int, rng: RandomSource | int | None = None) -> FloatArray:
        return self.one_sided.noise(size, rng)

    @staticmethod
    def publish(counts: npt.ArrayLike, noise: npt.ArrayLike, thresholds: npt.ArrayLike) -> list[float | None]:
        """The answers from counts, the noise and the thresholds (lines 2-12)."""
        z = np.asarray(counts, dtype=np.float64) + np.asarray(noise, dtype=np.float64)
        above = z > np.broadcast_to(np.asarray(thresholds, dtype=np.float64), z.shape)
        stop = int(np.argmax(above)) if np.any(above) else z.size
        answers: list[float | None] = [None] * stop
        if stop < z.size:
            answers.append(float(z[stop]))
            answers.extend([math.nan] * (z.size - stop - 1))
        return answers

    def release(
        self, counts: npt.ArrayLike, thresholds: npt.ArrayLike, rng: RandomSource | int | None = None
    ) -> list[float | None]:
        c, t = _salap_inputs(counts, thresholds)
        if not math.isinf(self.epsilon):
            c = on_grid(c, self.step)
        return self.publish(c, self.noise(c.size, rng), t)

    def prefix_probability(self, counts: npt.ArrayLike, thresholds: npt.ArrayLike) -> FloatArray:
        """``P(answers 1..j are all None)`` for ``j = 1..d``: the product of ALap's :meth:`~ALapMechanism.safe_probability`."""
        c, t = _salap_inputs(counts, thresholds)
        single = np.array([self.one_sided.safe_probability(a, b) for a, b in zip(c, t, strict=True)])
        return np.cumprod(single)

    def guarantee(self) -> CentralGuarantee:
        # Theorem V.7: bottoms have ratio <= 1 (monotone queries), the one value at most
        # ALap's exact grid loss for a per-query shift <= D.
        scale = f"each query's count change <= {self.sensitivity:g}; grid {self.step:g}"
        return _adp_guarantee("salap", self.effective_epsilon, "decreasing", scale)


def _salap_inputs(counts: npt.ArrayLike, thresholds: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    c = _as_counts(counts, integer=False).ravel()
    t = np.asarray(thresholds, dtype=np.float64)
    if t.ndim > 1 or (t.ndim == 1 and t.size != c.size):
        raise ParameterError("thresholds", f"must be a scalar or have one entry per query ({c.size})")
    if not np.all(np.isfinite(t)):
        raise ParameterError("thresholds", "must be finite")
    return c, np.broadcast_to(t, c.shape).astype(np.float64)


def salap(
    counts: npt.ArrayLike, thresholds: npt.ArrayLike, epsilon: float, *, rng: RandomSource | int | None = None
) -> list[float | None]:
    """SALap answers: ``None`` = "below threshold" (never wrong), the stopping value, then NaN.

    >>> salap([0, 0, 9, 0], 5, float("inf"))
    [None, None, 9.0, nan]
    """
    return SALapMechanism(epsilon=epsilon).release(counts, thresholds, rng)


# ==========================================================================
# Section III: necessary conditions and the (eps, delta)-DP competitor
# ==========================================================================


def _check_probability(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ParameterError(field, f"must be a probability in [0, 1], got {value!r}")
    return float(value)


def _check_steps(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ParameterError("k", f"must be an integer >= 1, got {k!r}")
    return int(k)


def dp_epsilon_lower_bound(*, alpha: float, beta: float, k: int = 1) -> float:
    """Inequality (5): an eps-DP mechanism that is ``(q, alpha, beta)``-one-sided needs ``eps > ln(beta/alpha)/k``.

    ``k`` is the Hamming distance from the data to the nearest data where
    the answer flips. ``alpha = 0`` gives ``inf`` (no finite eps works).
    """
    a, b, k = _check_probability("alpha", alpha), _check_probability("beta", beta), _check_steps(k)
    if b == 0:
        return -math.inf
    return math.inf if a == 0 else math.log(b / a) / k


def approx_dp_delta_lower_bound(*, alpha: float, beta: float, epsilon: float, k: int = 1) -> float:
    """Inequality (7): ``delta > (beta - alpha e^(eps k)) / sum_{i=1..k} e^((i-1) eps)``.

    Returned as printed (a negative value means no constraint on delta).
    """
    a, b, k = _check_probability("alpha", alpha), _check_probability("beta", beta), _check_steps(k)
    e = _check_epsilon("epsilon", epsilon, allow_inf=False)
    return (b - a * math.exp(e * k)) / _geometric_sum(e, k)


def adp_epsilon_lower_bound(*, alpha: float, beta: float, k: int = 1) -> float:
    """Proposition IV.7: an ``(eps, p)``-ADP one-sided mechanism needs ``eps >= ln((1-alpha)/(1-beta))/k``.

    Finite at ``alpha = 0`` (ALap attains it with ``D_p = 1``, Corollary V.6).
    """
    a, b, k = _check_probability("alpha", alpha), _check_probability("beta", beta), _check_steps(k)
    if b == 1:
        return math.inf
    return math.log((1 - a) / (1 - b)) / k


def _geometric_sum(epsilon: float, k: int) -> float:
    """``sum_{i=1..k} e^((i-1) eps)``."""
    return math.fsum(math.exp((i - 1) * epsilon) for i in range(1, k + 1))


def dp_beta_upper_bound(*, alpha: float, epsilon: float, delta: float = 0.0, k: int) -> float:
    """The best ``beta`` any ``(eps, delta)``-DP sanitizer can reach at distance ``k``: (6) with (3).

    ``min(1, alpha e^(eps k) + delta sum_{i=1..k} e^((i-1) eps))``: the
    paper's virtual competitor (Sec. VI-A), an upper bound, not a mechanism.
    """
    a, d, k = _check_probability("alpha", alpha), _check_probability("delta", delta), _check_steps(k)
    e = _check_epsilon("epsilon", epsilon, allow_inf=False)
    # alpha e^(eps k) alone reaches 1 once eps k >= ln(1/alpha): stop before exp overflows
    if a > 0 and e * k >= math.log(1.0 / a):
        return 1.0
    if d > 0 and e * (k - 1) >= math.log(1.0 / d):  # the last term of the sum alone reaches 1
        return 1.0
    first = a * math.exp(e * k) if a > 0 else 0.0
    rest = d * _geometric_sum(e, k) if d > 0 else 0.0
    return min(1.0, first + rest)


def virtual_dp_sanitizer(
    counts: npt.ArrayLike,
    threshold: int,
    epsilon: float,
    *,
    alpha: float,
    delta: float = 0.0,
    rng: RandomSource | int | None = None,
) -> BoolArray:
    """"Safe" decisions of the virtual ``(eps, delta)``-DP competitor, for comparisons.

    A count ``c <= t`` is ``k = t + 1 - c`` record changes from the nearest
    unsafe count, so it is called safe with probability
    :func:`dp_beta_upper_bound`; a count above ``t`` with probability ``alpha``.
    """
    c = _as_counts(counts, integer=True)
    _check_epsilon("epsilon", epsilon, allow_inf=False)
    a = _check_probability("alpha", alpha)
    if isinstance(threshold, bool) or not isinstance(threshold, int | np.integer):
        raise ParameterError("threshold", f"must be an integer, got {threshold!r}")
    values = np.unique(c)
    beta = np.array([
        dp_beta_upper_bound(alpha=a, epsilon=epsilon, delta=delta, k=int(threshold + 1 - x)) if x <= threshold else a
        for x in values
    ])
    return as_rng(rng).uniform(c.shape) < beta[np.searchsorted(values, c)]


# ==========================================================================
# Gradual release of published answers and the Release record
# ==========================================================================

RELEASE_SCHEMA = "onesided.release/v1"
GRID_MECHANISMS: tuple[str, ...] = ("alap", "laplace", "salap")
"""Mechanisms whose noise lives on a power-of-two grid recorded in the release; the others are integers."""


def relax_noise(
    mechanism: MechanismName,
    noise: npt.ArrayLike,
    eps_from: float,
    eps_to: float,
    *,
    sensitivity: float = 1.0,
    monotonicity: Monotonicity = "decreasing",
    grid: float | None = None,
    rng: RandomSource | int | None = None,
) -> npt.NDArray[Any]:
    """The lazy step on stored one-sided noise, from ``eps_from`` to ``eps_to >= eps_from``.

    ``G2 = min(G1, H)`` in whole steps, ``P(H >= k) = exp(-(r2 - r1) k)``
    with the step rates ``r1 < r2`` exact and ``H`` from the exact sampler
    (the discrete analogue of :func:`~protocol.relaxation.relax_exponential`):

    * ``alap`` (monotonic): steps of the grid ``grid`` (default: the grid of
      ``eps_from``), ``r = eps g / D``;
    * ``ageo`` (monotonic): steps of 1, ``r = eps / D``.

    ``G2`` has exactly the one-shot ``eps_to`` law and ``G1 - G2`` is
    independent of ``G2`` (memorylessness), so the pair is a post-processing
    of ``G2``: the release costs ``eps_to``, not the sum. Two-sided grid
    noise needs both of its geometric parts: :func:`relax_release` steps each.

    Raises:
        TighteningRefused: ``eps_to < eps_from``.
        ParameterError: two-sided noise, SALap and the two-sided geometric (field ``mechanism``).
    """
    source = as_rng(rng)
    e1 = _check_epsilon("eps_from", eps_from, allow_inf=False)
    e2 = _check_epsilon("eps_to", eps_to)
    if e2 < e1:
        raise TighteningRefused(current=e1, requested=e2)
    _check_monotonicity(monotonicity)
    if monotonicity == "none" or mechanism not in ("alap", "ageo"):
        raise ParameterError("mechanism", f"{mechanism!r} ({monotonicity}) has no lazy step on a single noise array")
    if mechanism == "ageo":
        d = _integer_sensitivity(sensitivity)
        r1 = exact_rate(Fraction(e1) / d)
        r2 = math.inf if math.isinf(e2) else exact_rate(Fraction(e2) / d)
        return _relax_geometric_exact(noise, r1, r2, source)
    mech = ALapMechanism(epsilon=e1, sensitivity=sensitivity, monotonicity=monotonicity, grid=grid)
    g = mech.step
    r2 = math.inf if math.isinf(e2) else dataclasses.replace(mech, epsilon=e2, grid=g).step_rate
    steps = _relax_geometric_exact(np.abs(grid_steps(noise, g)), mech.step_rate, r2, source)
    return -sign_p(monotonicity) * steps.astype(np.float64) * g


def _relax_geometric_exact(noise: npt.ArrayLike, r1: Fraction, r2: Fraction | float, rng: RandomSource) -> IntArray:
    """``min(G, H)`` with ``P(H >= k) = exp(-(r2 - r1) k)`` (``r2 = inf``: zeros)."""
    g = np.asarray(noise)
    if g.size and not np.issubdtype(g.dtype, np.integer):
        raise ParameterError("noise", "must be integers for the geometric step")
    g = g.astype(np.int64)
    if isinstance(r2, float):
        return np.zeros_like(g)
    gap = r2 - r1
    if gap <= 0:
        return g.copy()
    return np.minimum(g, geometric_exact(rng, exact_rate(gap), g.shape))


def _integer_sensitivity(sensitivity: float) -> int:
    if sensitivity != int(sensitivity) or sensitivity < 1:
        raise ParameterError("sensitivity", f"must be an integer >= 1 for an integer mechanism, got {sensitivity}")
    return int(sensitivity)


def _mechanism_of(
    name: str, epsilon: float, sensitivity: float, monotonicity: Monotonicity, n_max: int | None,
    grid: float | None = None,
) -> Any:
    if name == "alap":
        return ALapMechanism(epsilon=epsilon, sensitivity=sensitivity, monotonicity=monotonicity, grid=grid)
    if name == "laplace":
        return LaplaceMechanism(epsilon=epsilon, sensitivity=sensitivity, grid=grid)
    if name == "ageo":
        if n_max is None:
            raise ParameterError("n_max", "is required for ageo")
        d = _integer_sensitivity(sensitivity)
        return AGeoMechanism(epsilon=epsilon, n_max=n_max, monotonicity=monotonicity, sensitivity=d)
    if name == "geometric":
        return GeometricMechanism(epsilon=epsilon, sensitivity=_integer_sensitivity(sensitivity))
    if name == "salap":
        return SALapMechanism(epsilon=epsilon, sensitivity=sensitivity, grid=grid)
    raise ParameterError("mechanism", f"must be one of {MECHANISMS}, got {name!r}")


@dataclass(frozen=True, kw_only=True)
class Release:
    """A central release as a store persists it (JSON via :meth:`to_json_dict`).

    Attributes:
        mechanism: one of :data:`MECHANISMS`.
        levels: the epsilons released so far, strictly increasing; the
            current answers are at ``levels[-1]``, which is also the budget
            charged (lazy relaxation: the final level, not the sum).
        counts: the exact values (server-side only).
        noise: the noise at ``levels[-1]`` (server-side only; for AGeo the
            untruncated ``G``).
        answers: the published values; for SALap ``None`` is "below
            threshold" and NaN "not answered" (after the stop).
        sensitivity, monotonicity, n_max, thresholds: mechanism parameters.
        grid: the output grid ``g`` (:data:`GRID_MECHANISMS`; 1 for the
            integer mechanisms): every answer is a multiple of it.
        negative_noise: server-side, grid mechanisms: the part ``g G_minus``
            of ``noise = g (G_plus - G_minus)`` (0 for one-sided noise), kept
            so that relaxation can step both geometrics.
    """

    mechanism: MechanismName
    levels: tuple[float, ...]
    counts: tuple[float, ...]
    noise: tuple[float, ...]
    answers: tuple[float | None, ...]
    sensitivity: float = 1.0
    monotonicity: Monotonicity = "decreasing"
    n_max: int | None = None
    thresholds: tuple[float, ...] | None = None
    grid: float = 1.0
    negative_noise: tuple[float, ...] | None = None
    SCHEMA: ClassVar[str] = RELEASE_SCHEMA

    def __post_init__(self) -> None:
        if not self.levels:
            raise ParameterError("levels", "must not be empty")
        for i, lv in enumerate(self.levels):
            _check_epsilon(f"levels[{i}]", lv, allow_inf=False)
        if any(b <= a for a, b in zip(self.levels, self.levels[1:], strict=False)):
            raise ParameterError("levels", f"must be strictly increasing, got {list(self.levels)}")
        check_grid(self.grid)
        if self.mechanism not in GRID_MECHANISMS and self.grid != 1.0:
            raise ParameterError("grid", f"{self.mechanism} releases integers: the grid is 1, got {self.grid}")
        self.mechanism_params()  # validates mechanism, sensitivity, monotonicity, n_max
        n = len(self.counts)
        for name in ("noise", "answers"):
            if len(getattr(self, name)) != n:
                raise ParameterError(name, f"must have one entry per count ({n}), got {len(getattr(self, name))}")
        if self.mechanism in GRID_MECHANISMS and (self.negative_noise is None or len(self.negative_noise) != n):
            raise ParameterError("negative_noise", f"a grid release keeps one negative part per count ({n})")
        if self.mechanism == "salap" and (self.thresholds is None or len(self.thresholds) != n):
            raise ParameterError("thresholds", f"salap needs one threshold per query ({n})")

    @property
    def epsilon(self) -> float:
        """The current level, which is the budget charged."""
        return self.levels[-1]

    def mechanism_params(self, epsilon: float | None = None) -> Any:
        """The mechanism object at ``epsilon`` (default: the current level), on this release's grid."""
        return _mechanism_of(
            self.mechanism, self.epsilon if epsilon is None else epsilon, self.sensitivity, self.monotonicity,
            self.n_max, self.grid if self.mechanism in GRID_MECHANISMS else None,
        )

    def guarantee(self) -> CentralGuarantee:
        return self.mechanism_params().guarantee()

    def public_dict(self) -> dict[str, Any]:
        """What an analyst may see: no counts, no noise."""
        return {
            "schema": self.SCHEMA,
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "levels": list(self.levels),
            "grid": self.grid,
            "answers": _answers_to_json(self),
            "num_answers": len(self.answers),
            "thresholds": None if self.thresholds is None else list(self.thresholds),
            "guarantee": self.guarantee().to_dict(),
        }

    def to_json_dict(self) -> dict[str, Any]:
        """Everything, for the store; ``server`` holds the fields never shown to analysts."""
        server: dict[str, Any] = {"counts": list(self.counts), "noise": list(self.noise)}
        if self.negative_noise is not None:
            server["negative_noise"] = list(self.negative_noise)
        return {
            "schema": self.SCHEMA,
            "mechanism": self.mechanism,
            "levels": list(self.levels),
            "sensitivity": self.sensitivity,
            "monotonicity": self.monotonicity,
            "n_max": self.n_max,
            "grid": self.grid,
            "thresholds": None if self.thresholds is None else list(self.thresholds),
            "answers": _answers_to_json(self),
            "num_answers": len(self.answers),
            "server": server,
        }

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> Release:
        """Inverse of :meth:`to_json_dict` (validated; grid releases must name their grid)."""
        if not isinstance(data, dict) or data.get("schema") != RELEASE_SCHEMA:
            raise ParameterError("schema", f"must be {RELEASE_SCHEMA!r}")
        try:
            server = data["server"]
            n = int(data["num_answers"])
            answers = list(data["answers"]) + [math.nan] * (n - len(data["answers"]))
            thresholds = data.get("thresholds")
            negative = server.get("negative_noise")
            grid = data["grid"] if data["mechanism"] in GRID_MECHANISMS else data.get("grid", 1.0)
            return cls(
                mechanism=data["mechanism"],
                levels=tuple(float(x) for x in data["levels"]),
                counts=tuple(server["counts"]),
                noise=tuple(server["noise"]),
                answers=tuple(answers),
                sensitivity=float(data["sensitivity"]),
                monotonicity=data["monotonicity"],
                n_max=data.get("n_max"),
                thresholds=None if thresholds is None else tuple(float(x) for x in thresholds),
                grid=grid,
                negative_noise=None if negative is None else tuple(negative),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ParameterError):
                raise
            raise ParameterError("release", f"malformed release record: {exc}") from exc


def _answers_to_json(release: Release) -> list[float | int | None]:
    """SALap: answers up to and including the stop (``None`` = below threshold); others as is."""
    if release.mechanism != "salap":
        return list(release.answers)
    out: list[float | int | None] = []
    for a in release.answers:
        if a is not None and math.isnan(a):
            break
        out.append(a)
    return out


def _publish(mech: Any, name: str, counts: npt.NDArray[Any], noise: npt.NDArray[Any], thresholds: Any) -> tuple[Any, ...]:
    if name == "salap":
        return tuple(SALapMechanism.publish(counts, noise, thresholds))
    if name == "ageo":
        return tuple(int(x) for x in mech.publish(counts, noise))
    return tuple((counts + noise).tolist())


def make_release(
    mechanism: MechanismName,
    counts: npt.ArrayLike,
    epsilon: float,
    *,
    sensitivity: float = 1.0,
    monotonicity: Monotonicity = "decreasing",
    n_max: int | None = None,
    thresholds: npt.ArrayLike | None = None,
    rng: RandomSource | int | None = None,
) -> Release:
    """Run ``mechanism`` once at ``epsilon`` and record it (noise kept for later relaxation).

    Grid mechanisms (:data:`GRID_MECHANISMS`) draw their noise on the grid
    of ``D / epsilon`` (:func:`~protocol.exact.default_grid`), recorded in
    the release and kept by every later relaxation; counts must lie on it
    (integers always do).
    """
    _check_epsilon("epsilon", epsilon, allow_inf=False)
    mech = _mechanism_of(mechanism, epsilon, sensitivity, monotonicity, n_max)
    integer = mechanism in ("ageo", "geometric")
    if mechanism == "ageo":
        c = mech.check_counts(counts)
    else:
        c = _as_counts(counts, integer=integer).ravel()
    grid = mech.step if mechanism in GRID_MECHANISMS else 1.0
    t: FloatArray | None = None
    if mechanism == "salap":
        if thresholds is None:
            raise ParameterError("thresholds", "is required for salap")
        c, t = _salap_inputs(c, thresholds)
    negative: tuple[float, ...] | None = None
    if mechanism in GRID_MECHANISMS:
        c = on_grid(c, grid)
        up, down = mech.noise_parts(c.shape, rng)
        noise = (up - down).astype(np.float64) * grid
        negative = tuple((down.astype(np.float64) * grid).tolist())
    else:
        noise = mech.noise(c.shape, rng)
    return Release(
        mechanism=mechanism,
        levels=(float(epsilon),),
        counts=tuple(c.tolist()),
        noise=tuple(noise.tolist()),
        answers=_publish(mech, mechanism, c, noise, t),
        sensitivity=float(sensitivity),
        monotonicity=monotonicity,
        n_max=n_max,
        thresholds=None if t is None else tuple(t.tolist()),
        grid=grid,
        negative_noise=negative,
    )


def _relax_grid_noise(release: Release, e2: float, rng: RandomSource) -> tuple[FloatArray, tuple[float, ...]]:
    """Both geometric parts of a grid release, each stepped to ``e2`` by ``min(G, H)``.

    ``noise = g (G_plus - G_minus)``: with ``G_plus' = min(G_plus, H1)`` and
    ``G_minus' = min(G_minus, H2)`` the new parts are independent geometrics
    at the new step rate (so the new noise has exactly the one-shot law,
    discrete Laplace for two-sided noise), and each ``G - G'`` is independent
    of ``G'`` (memorylessness): the old answers are the new ones plus
    independent noise, a post-processing. One-sided noise has one part.
    """
    g = release.grid
    old, new = release.mechanism_params(), release.mechanism_params(e2)
    down = grid_steps(release.negative_noise or (), g, field="negative_noise")
    up = grid_steps(np.asarray(release.noise) + np.asarray(release.negative_noise), g)
    mono = "none" if release.mechanism == "laplace" else release.monotonicity
    if mono != "increasing":
        up = _relax_geometric_exact(up, old.step_rate, new.step_rate, rng)
    if mono != "decreasing":
        down = _relax_geometric_exact(down, old.step_rate, new.step_rate, rng)
    return (up - down).astype(np.float64) * g, tuple((down.astype(np.float64) * g).tolist())


def relax_release(
    release: Release,
    epsilon: float,
    *,
    ceiling: float | None = None,
    rng: RandomSource | int | None = None,
) -> Release:
    """Refine a published release to the looser level ``epsilon`` (gradual-release paper, Sec. 3).

    The stored noise takes one exact lazy step on the release's grid
    (:func:`_relax_grid_noise`; AGeo: :func:`relax_noise`), the answers are
    recomputed from it, and ``epsilon`` is appended to ``levels``. The
    refined answers have the one-shot ``epsilon`` error, and the budget
    charged for the whole history is ``epsilon`` (not the sum of levels).

    Raises:
        TighteningRefused: ``epsilon`` below the current level.
        BudgetExceeded: ``epsilon`` above ``ceiling``.
        ParameterError: SALap, the two-sided geometric and two-sided AGeo cannot be relaxed.
    """
    e2 = _check_epsilon("epsilon", epsilon, allow_inf=False)
    if ceiling is not None and e2 > ceiling:
        raise BudgetExceeded(requested=e2, remaining=ceiling, detail="relaxation ceiling")
    if e2 < release.epsilon:
        raise TighteningRefused(current=release.epsilon, requested=e2)
    if e2 == release.epsilon:
        return release
    source = as_rng(rng)
    negative = release.negative_noise
    noise: npt.NDArray[Any]
    if release.mechanism in ("alap", "laplace"):
        noise, negative = _relax_grid_noise(release, e2, source)
    else:
        noise = relax_noise(
            release.mechanism, release.noise, release.epsilon, e2,
            sensitivity=release.sensitivity, monotonicity=release.monotonicity, rng=source,
        )
    mech = release.mechanism_params(e2)
    counts = np.asarray(release.counts)
    return dataclasses.replace(
        release, levels=(*release.levels, e2), noise=tuple(noise.tolist()), negative_noise=negative,
        answers=_publish(mech, release.mechanism, counts, noise, release.thresholds),
    )


def release_answers(release: Release) -> npt.NDArray[Any]:
    """The answers as an array (float; SALap's ``None`` becomes ``-inf``, meaning "below threshold")."""
    return np.array([-math.inf if a is None else a for a in release.answers], dtype=np.float64)


def coerce_levels(levels: Sequence[float]) -> tuple[float, ...]:
    """Validated, sorted, de-duplicated levels (for multi-level releases)."""
    out = sorted({_check_epsilon(f"levels[{i}]", lv, allow_inf=False) for i, lv in enumerate(levels)})
    if not out:
        raise ParameterError("levels", "must not be empty")
    return tuple(out)
