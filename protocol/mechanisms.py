"""Central (aggregator-side) mechanisms with one-sided error (docs/central.md), behind one interface.

The aggregator holds exact counts ``c`` (one per place, say) and publishes
noisy answers. The query "is place ``i`` safe, ``c_i <= t``?" is answered
by the sanitizer ``answer_i <= t`` (the ADP paper's); for integer counts
the one-sided mechanisms certify the stronger ``answer_i < floor(t) + 1``
(:func:`certificate_cut`), at the same privacy.

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
* Competitors: eps-DP Laplace and two-sided geometric (the paper's bounds
  and virtual (eps, delta)-DP sanitizer are research tools:
  :mod:`aggregator.research.bounds`).

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

Every mechanism implements :class:`CentralMechanism` (its name, integer or
grid output, noise, publish, relax, guarantee) and registers under its name
(:func:`mechanism_class`, :func:`mechanism_names`); the release records of
:mod:`protocol.releases` dispatch through that registry, never on strings.
The shape follows diffprivlib's mechanism base class (parameters checked at
construction, one ``randomise``), OpenDP's constructors (the privacy claim
derived from the parameters) and PipelineDP's additive-mechanism factory
(one table from a kind to its class).

>>> mech = ALapMechanism(epsilon=1.0)
>>> mech.step, float(mech.step_rate)  # grid 2**-10, rate eps g / D per grid step
(0.0009765625, 0.0009765625)
>>> mech.safe_probability(count=2, threshold=5) == 1 - math.exp(-float(mech.step_rate) * (3 / mech.step + 1))
True
>>> mechanism_names()
('alap', 'ageo', 'salap', 'laplace', 'geometric')
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Literal, Protocol, Self, TypeVar

import numpy as np
import numpy.typing as npt

from .errors import ParameterError, TighteningRefused
from .exact import (
    MAX_GRID_VALUE,
    check_grid,
    default_grid,
    exact_rate,
    geometric_exact,
    grid_epsilon,
    grid_step_rate,
    two_sided_geometric_exact,
)
from .rng import FloatArray, RandomSource, as_rng
from .rounding import round_up
from .validation import check_int, check_integer_array, check_number

IntArray = npt.NDArray[np.int64]
Monotonicity = Literal["decreasing", "increasing", "none"]
MONOTONICITIES: tuple[str, ...] = ("decreasing", "increasing", "none")
Answers = IntArray | FloatArray | list[float | None]

__all__ = [
    "AGeoMechanism",
    "ALapMechanism",
    "CentralGuarantee",
    "CentralMechanism",
    "GeometricMechanism",
    "LaplaceMechanism",
    "Noise",
    "PSensitivity",
    "SALapMechanism",
    "ageo",
    "alap",
    "certificate_cut",
    "certificate_statement",
    "certified_safe",
    "check_epsilon",
    "check_level",
    "geometric_mechanism",
    "laplace_mechanism",
    "mechanism_class",
    "mechanism_names",
    "on_grid",
    "register_mechanism",
    "relax_noise",
    "salap",
    "sign_p",
]


# ==========================================================================
# Validation: one rule per meaning (protocol.validation underneath)
# ==========================================================================


def check_epsilon(field: str, value: Any) -> float:
    """A mechanism's epsilon: a number ``> 0``; ``inf`` is allowed and releases the counts."""
    return check_number(field, value, positive=True, finite=False)


def check_level(field: str, value: Any) -> float:
    """A released level (what a release is at and charged): a finite number ``> 0``."""
    return check_number(field, value, positive=True)


def check_monotonicity(value: Any) -> Monotonicity:
    if value not in MONOTONICITIES:
        raise ParameterError("monotonicity", f"must be one of {MONOTONICITIES}, got {value!r}")
    return value


def as_counts(counts: npt.ArrayLike, *, integer: bool) -> npt.NDArray[Any]:
    """Counts as int64 (``integer``: whole numbers only) or finite float64."""
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


def integer_sensitivity(value: Any) -> int:
    """The sensitivity of an integer mechanism: an integer ``>= 1`` (a whole float is accepted)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return check_int("sensitivity", value, low=1)


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
    check_monotonicity(monotonicity)
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
        check_level("value", self.value)
        check_monotonicity(self.monotonicity)

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
        "answer <= t certifies count <= t (never wrong); for integer counts answer < floor(t) + 1 does",
    ),
    "increasing": (
        "that a person is NOT counted: adding a contribution changes no output probability by more than e^eps",
        "that a person IS counted may be revealed (the policy declares it non-sensitive)",
        "answer >= t certifies count >= t (never wrong); for integer counts answer > ceil(t) - 1 does",
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
    arr = as_counts(values, integer=False)
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
# The one-sided certificate on integer counts
# ==========================================================================


def certificate_cut(threshold: float, grid: float = 1.0) -> float:
    """The largest answer that certifies an integer count ``<= threshold`` (noise ``>= 0``).

    For integer counts, ``count <= t`` is ``count < floor(t) + 1``, and noise
    ``>= 0`` makes ``answer < floor(t) + 1`` imply it: a stronger statement
    than the paper's ``answer <= t`` (at count 0, ``t = 1``, ALap at eps 1
    certifies with probability ``1 - e^-2 = 0.865`` instead of ``1 - e^-1 =
    0.632``), at the same privacy, since it reads the same answer. On the
    grid ``g`` (a power of two ``<= 1``) the answers below ``floor(t) + 1``
    are those ``<= floor(t) + 1 - g``; where that is not a double (``|t|``
    near ``2**53``) the cut is ``floor(t)``, the paper's statement.
    """
    top = math.floor(threshold) + 1.0
    cut = top - check_grid(grid)
    return cut if cut < top else top - 1.0


def certified_safe(answers: npt.ArrayLike, threshold: float, grid: float = 1.0) -> npt.NDArray[np.bool_]:
    """``answer < floor(t) + 1`` per answer: the certificate of :func:`certificate_cut`."""
    out: npt.NDArray[np.bool_] = np.asarray(answers, dtype=np.float64) <= certificate_cut(threshold, grid)
    return out


def certificate_statement(threshold: float, *, one_sided: bool) -> str:
    """What ``safe`` means for a release at ``threshold``, in words (the API, the CLI and the dashboard show it)."""
    if not one_sided:
        return f"safe: answer <= {threshold:g}, an estimate of count <= {threshold:g} (two-sided noise: may be wrong)"
    top = math.floor(threshold) + 1
    return f"safe: answer < {top:g}, which certifies count <= {top - 1:g} (integer counts, noise >= 0: never wrong)"


# ==========================================================================
# The interface every central mechanism implements, and the registry
# ==========================================================================


@dataclass(frozen=True)
class Noise:
    """The noise a release keeps server-side (never published), in answer units.

    Attributes:
        total: what is added to the counts (integers for integer mechanisms).
        negative: grid mechanisms: the part ``g G_minus`` of
            ``total = g (G_plus - G_minus)`` (zeros for one-sided noise), kept
            so that relaxation can step both geometrics; ``None`` for integers.
    """

    total: npt.NDArray[Any]
    negative: FloatArray | None = None

    @classmethod
    def from_steps(cls, up: IntArray, down: IntArray, grid: float) -> Noise:
        """``g (up - down)`` with its negative part ``g down``."""
        return cls(total=(up - down).astype(np.float64) * grid, negative=down.astype(np.float64) * grid)


class CentralMechanism(Protocol):
    """A central mechanism as :mod:`protocol.releases` runs, records and relaxes it.

    Attributes:
        name: the registry key, recorded in every release.
        integer: ``True``: publishes integers (``step`` is 1); ``False``:
            multiples of the power-of-two ``step``, recorded in the release.
        sequential: answers threshold queries in order and stops (needs one
            threshold per count; nothing after the stop is published).
        bounded: publishes within ``{0..n_max}`` (takes the largest possible
            count ``n_max``, recorded in the release).
        relaxable: has a lazy step (:meth:`relax`) for one-sided or Laplace
            noise, so correlated releases can relax it.
    """

    name: ClassVar[str]
    integer: ClassVar[bool]
    sequential: ClassVar[bool]
    bounded: ClassVar[bool]
    relaxable: ClassVar[bool]

    @property
    def epsilon(self) -> float: ...

    @property
    def step(self) -> float:
        """The output grid (1 for integer mechanisms)."""
        ...

    @classmethod
    def from_params(
        cls, epsilon: float, *, sensitivity: float, monotonicity: Monotonicity, n_max: int | None, grid: float | None
    ) -> CentralMechanism:
        """The mechanism from a release's parameters (those it does not use are ignored)."""
        ...

    def prepare(
        self, counts: npt.ArrayLike, thresholds: npt.ArrayLike | None
    ) -> tuple[npt.NDArray[Any], FloatArray | None]:
        """Validated flat counts on the output grid, and the thresholds (``None`` unless sequential)."""
        ...

    def draw_noise(self, shape: int | tuple[int, ...], rng: RandomSource | int | None = None) -> Noise:
        """Fresh noise from the exact samplers, with what relaxation needs."""
        ...

    def publish(
        self, counts: npt.ArrayLike, noise: npt.ArrayLike, thresholds: npt.ArrayLike | None = None
    ) -> Answers:
        """The answers from the counts and the (total) noise: a pure function."""
        ...

    def relax(self, noise: Noise, epsilon: float, rng: RandomSource) -> Noise:
        """The lazy step from this mechanism's epsilon to ``epsilon >= self.epsilon`` (new noise, same grid).

        Raises:
            ParameterError: (field ``mechanism``) the mechanism has no lazy step.
        """
        ...

    def guarantee(self) -> CentralGuarantee:
        """What a release by this mechanism promises (epsilon rounded up)."""
        ...


MechanismType = TypeVar("MechanismType", bound=CentralMechanism)
_REGISTRY: dict[str, type[CentralMechanism]] = {}


def register_mechanism(cls: type[MechanismType]) -> type[MechanismType]:
    """Class decorator: make ``cls`` available to releases under ``cls.name``.

    Raises:
        ValueError: the name is taken by another class.
    """
    if _REGISTRY.get(cls.name, cls) is not cls:
        raise ValueError(f"mechanism name {cls.name!r} is already registered")
    _REGISTRY[cls.name] = cls
    return cls


def mechanism_class(name: Any) -> type[CentralMechanism]:
    """The registered class named ``name``.

    Raises:
        ParameterError: (field ``mechanism``) no such mechanism.
    """
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ParameterError("mechanism", f"must be one of {mechanism_names()}, got {name!r}")
    return _REGISTRY[name]


def mechanism_names() -> tuple[str, ...]:
    """The registered names, in registration order."""
    return tuple(_REGISTRY)


def check_not_tighter(current: float, requested: float) -> None:
    """Released answers cannot be revoked: a lazy step only goes up.

    Raises:
        TighteningRefused: ``requested < current``.
    """
    if requested < current:
        raise TighteningRefused(current=current, requested=requested)


def _relax_geometric_exact(noise: npt.ArrayLike, r1: Fraction, r2: Fraction | float, rng: RandomSource) -> IntArray:
    """``min(G, H)`` with ``P(H >= k) = exp(-(r2 - r1) k)`` (``r2 = inf``: zeros)."""
    g = check_integer_array("noise", noise)
    if isinstance(r2, float):
        return np.zeros_like(g)
    gap = r2 - r1
    if gap <= 0:
        return g.copy()
    return np.minimum(g, geometric_exact(rng, exact_rate(gap), g.shape))


def _relax_grid(mech: ALapMechanism, noise: Noise, epsilon: float, rng: RandomSource) -> Noise:
    """Both geometric parts of grid noise, each stepped to ``epsilon`` by ``min(G, H)``.

    ``noise = g (G_plus - G_minus)``: with ``G_plus' = min(G_plus, H1)`` and
    ``G_minus' = min(G_minus, H2)`` the new parts are independent geometrics
    at the new step rate (so the new noise has exactly the one-shot law,
    discrete Laplace for two-sided noise), and each ``G - G'`` is independent
    of ``G'`` (memorylessness): the old answers are the new ones plus
    independent noise, a post-processing. One-sided noise has one part.
    """
    g = mech.step
    total = np.asarray(noise.total, dtype=np.float64)
    negative = np.zeros_like(total) if noise.negative is None else np.asarray(noise.negative, dtype=np.float64)
    down = grid_steps(negative, g, field="negative_noise")
    up = grid_steps(total + negative, g)
    r2 = math.inf if math.isinf(epsilon) else dataclasses.replace(mech, epsilon=epsilon, grid=g).step_rate
    if mech.monotonicity != "increasing":
        up = _relax_geometric_exact(up, mech.step_rate, r2, rng)
    if mech.monotonicity != "decreasing":
        down = _relax_geometric_exact(down, mech.step_rate, r2, rng)
    return Noise.from_steps(up, down, g)


def _no_lazy_step(name: str, detail: str) -> ParameterError:
    return ParameterError("mechanism", f"{name!r} ({detail}) has no lazy step")


# ==========================================================================
# ALap (Def. V.3) and the eps-DP Laplace competitor, on the grid
# ==========================================================================


@register_mechanism
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

    name: ClassVar[str] = "alap"
    integer: ClassVar[bool] = False
    sequential: ClassVar[bool] = False
    bounded: ClassVar[bool] = False
    relaxable: ClassVar[bool] = True

    epsilon: float
    sensitivity: float = 1.0
    monotonicity: Monotonicity = "decreasing"
    grid: float | None = None

    def __post_init__(self) -> None:
        check_epsilon("epsilon", self.epsilon)
        check_level("sensitivity", self.sensitivity)
        check_monotonicity(self.monotonicity)
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
            return as_counts(counts, integer=False)
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

    def certificate_probability(self, count: int, threshold: float) -> float:
        """``P(answer < floor(t) + 1 | count)`` for an integer count (decreasing): :func:`certificate_cut`.

        ``1 - exp(-r (floor(t) + 1 - c) / g)`` for ``c <= t``, i.e. ``1 - exp(-eps (floor(t) + 1 - c) / D_p)``
        when ``D_p / g`` is an integer: AGeo's figure.
        """
        if self.monotonicity != "decreasing":
            raise ParameterError("monotonicity", "the certificate answer < floor(t) + 1 needs noise >= 0 (decreasing)")
        return self.safe_probability(count, certificate_cut(threshold, self.step))

    @classmethod
    def from_params(
        cls, epsilon: float, *, sensitivity: float, monotonicity: Monotonicity, n_max: int | None, grid: float | None
    ) -> ALapMechanism:
        return cls(epsilon=epsilon, sensitivity=sensitivity, monotonicity=monotonicity, grid=grid)

    def prepare(self, counts: npt.ArrayLike, thresholds: npt.ArrayLike | None) -> tuple[FloatArray, None]:
        return on_grid(as_counts(counts, integer=False).ravel(), self.step), None

    def draw_noise(self, shape: int | tuple[int, ...], rng: RandomSource | int | None = None) -> Noise:
        return Noise.from_steps(*self.noise_parts(shape, rng), self.step)

    def publish(
        self, counts: npt.ArrayLike, noise: npt.ArrayLike, thresholds: npt.ArrayLike | None = None
    ) -> FloatArray:
        return np.asarray(counts, dtype=np.float64) + np.asarray(noise, dtype=np.float64)

    def relax(self, noise: Noise, epsilon: float, rng: RandomSource) -> Noise:
        return _relax_grid(self, noise, epsilon, rng)

    def guarantee(self) -> CentralGuarantee:
        # Theorem V.4 on the grid: P(z | c) / P(z | c - m g) = exp(r m) on the whole support of the
        # second, m <= floor(D_p / g): exactly effective_epsilon at the largest shift.
        scale = f"L1 change <= {self.sensitivity:g}; grid {self.step:g}"
        return _adp_guarantee(self.name, self.effective_epsilon, self.monotonicity, scale)


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



# ==========================================================================
# AGeo (Def. VIII.1) and the two-sided geometric competitor
# ==========================================================================


@register_mechanism
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

    name: ClassVar[str] = "ageo"
    integer: ClassVar[bool] = True
    sequential: ClassVar[bool] = False
    bounded: ClassVar[bool] = True
    relaxable: ClassVar[bool] = True

    epsilon: float
    n_max: int
    monotonicity: Monotonicity = "decreasing"
    sensitivity: int = 1

    def __post_init__(self) -> None:
        check_epsilon("epsilon", self.epsilon)
        check_int("sensitivity", self.sensitivity, low=1)
        if not math.isinf(self.epsilon):
            self.step_rate  # noqa: B018 -- validates the exact sampler's range
        check_int("n_max", self.n_max, low=0)
        check_monotonicity(self.monotonicity)

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

    @property
    def step(self) -> float:
        return 1.0

    @classmethod
    def from_params(
        cls, epsilon: float, *, sensitivity: float, monotonicity: Monotonicity, n_max: int | None, grid: float | None
    ) -> AGeoMechanism:
        if n_max is None:
            raise ParameterError("n_max", "is required for ageo")
        return cls(epsilon=epsilon, n_max=n_max, monotonicity=monotonicity, sensitivity=integer_sensitivity(sensitivity))

    def prepare(self, counts: npt.ArrayLike, thresholds: npt.ArrayLike | None) -> tuple[IntArray, None]:
        return self.check_counts(counts).ravel(), None

    def draw_noise(self, shape: int | tuple[int, ...], rng: RandomSource | int | None = None) -> Noise:
        return Noise(total=self.noise(shape, rng))

    def relax(self, noise: Noise, epsilon: float, rng: RandomSource) -> Noise:
        """``min(G, H)`` on the untruncated ``G`` at ``r = eps / D`` per count (one-sided noise only)."""
        if self.monotonicity == "none":
            raise _no_lazy_step(self.name, "two-sided noise")
        r2 = math.inf if math.isinf(epsilon) else dataclasses.replace(self, epsilon=epsilon).step_rate
        return Noise(total=_relax_geometric_exact(noise.total, self.step_rate, r2, rng))

    def publish(
        self, counts: npt.ArrayLike, noise: npt.ArrayLike, thresholds: npt.ArrayLike | None = None
    ) -> IntArray:
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
        c = as_counts(counts, integer=True)
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

    def certificate_probability(self, count: int, threshold: float) -> float:
        """``P(answer < floor(t) + 1 | count)``: on integers the same as ``answer <= floor(t)``."""
        if self.monotonicity != "decreasing":
            raise ParameterError("monotonicity", "the certificate answer < floor(t) + 1 needs noise >= 0 (decreasing)")
        return self.safe_probability(count, int(certificate_cut(threshold)))

    def guarantee(self) -> CentralGuarantee:
        # Theorem VIII.2 at rate eps / D per count: the ratio for a shift of D is exactly e^(r D)
        # on the whole support (privacy_loss() is tight).
        scale = f"L1 change <= {self.sensitivity}"
        return _adp_guarantee(self.name, self.effective_epsilon, self.monotonicity, scale)


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



# ==========================================================================
# SALap (Algorithm 1)
# ==========================================================================


@dataclass(frozen=True, kw_only=True)
class _RunsALap:
    """What Laplace and SALap share: each runs an :class:`ALapMechanism` of its own parameters (:attr:`base`)."""

    epsilon: float
    sensitivity: float = 1.0
    grid: float | None = None

    def __post_init__(self) -> None:
        self.base  # noqa: B018 -- validates

    @property
    def base(self) -> ALapMechanism:
        raise NotImplementedError

    @property
    def step(self) -> float:
        return self.base.step

    @property
    def step_rate(self) -> Fraction:
        return self.base.step_rate

    @property
    def effective_epsilon(self) -> float:
        return self.base.effective_epsilon

    def noise_parts(self, shape: int | tuple[int, ...], rng: RandomSource | int | None = None) -> tuple[IntArray, IntArray]:
        return self.base.noise_parts(shape, rng)

    def noise(self, shape: int | tuple[int, ...], rng: RandomSource | int | None = None) -> FloatArray:
        return self.base.noise(shape, rng)

    def draw_noise(self, shape: int | tuple[int, ...], rng: RandomSource | int | None = None) -> Noise:
        return self.base.draw_noise(shape, rng)

    @classmethod
    def from_params(
        cls, epsilon: float, *, sensitivity: float, monotonicity: Monotonicity, n_max: int | None, grid: float | None
    ) -> Self:
        return cls(epsilon=epsilon, sensitivity=sensitivity, grid=grid)


@register_mechanism
@dataclass(frozen=True, kw_only=True)
class SALapMechanism(_RunsALap):
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

    name: ClassVar[str] = "salap"
    integer: ClassVar[bool] = False
    sequential: ClassVar[bool] = True
    bounded: ClassVar[bool] = False
    relaxable: ClassVar[bool] = False

    @property
    def one_sided(self) -> ALapMechanism:
        """The ALap each query uses (decreasing p-sensitivity, the per-query bound ``D``)."""
        return ALapMechanism(epsilon=self.epsilon, sensitivity=self.sensitivity, grid=self.grid)

    @property
    def base(self) -> ALapMechanism:
        return self.one_sided

    def prepare(self, counts: npt.ArrayLike, thresholds: npt.ArrayLike | None) -> tuple[FloatArray, FloatArray]:
        if thresholds is None:
            raise ParameterError("thresholds", "is required for salap")
        c, t = _salap_inputs(counts, thresholds)
        return on_grid(c, self.step), t

    def relax(self, noise: Noise, epsilon: float, rng: RandomSource) -> Noise:
        # a relaxed bottom could turn into a value after the stop: the sequence is not a post-processing
        raise _no_lazy_step(self.name, "a stopped sequence")

    @staticmethod
    def publish(
        counts: npt.ArrayLike, noise: npt.ArrayLike, thresholds: npt.ArrayLike | None = None
    ) -> list[float | None]:
        """The answers from counts, the noise and the thresholds (lines 2-12)."""
        if thresholds is None:
            raise ParameterError("thresholds", "is required for salap")
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
        return _adp_guarantee(self.name, self.effective_epsilon, "decreasing", scale)


def _salap_inputs(counts: npt.ArrayLike, thresholds: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    c = as_counts(counts, integer=False).ravel()
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


@register_mechanism
@dataclass(frozen=True, kw_only=True)
class LaplaceMechanism(_RunsALap):
    """The eps-DP Laplace mechanism (competitor), discretized exactly: ``f(X) + g (G1 - G2)``.

    The discrete Laplace on the grid ``g`` with ``P(g k)`` proportional to
    ``exp(-r |k|)``, ``r = eps g / D`` (see :class:`ALapMechanism`).
    """

    name: ClassVar[str] = "laplace"
    integer: ClassVar[bool] = False
    sequential: ClassVar[bool] = False
    bounded: ClassVar[bool] = False
    relaxable: ClassVar[bool] = True

    @property
    def two_sided(self) -> ALapMechanism:
        return ALapMechanism(epsilon=self.epsilon, sensitivity=self.sensitivity, monotonicity="none", grid=self.grid)

    @property
    def base(self) -> ALapMechanism:
        return self.two_sided

    def release(self, counts: npt.ArrayLike, rng: RandomSource | int | None = None) -> FloatArray:
        return self.two_sided.release(counts, rng)

    def prepare(self, counts: npt.ArrayLike, thresholds: npt.ArrayLike | None) -> tuple[FloatArray, None]:
        return self.two_sided.prepare(counts, thresholds)

    def publish(
        self, counts: npt.ArrayLike, noise: npt.ArrayLike, thresholds: npt.ArrayLike | None = None
    ) -> FloatArray:
        return self.two_sided.publish(counts, noise)

    def relax(self, noise: Noise, epsilon: float, rng: RandomSource) -> Noise:
        return self.two_sided.relax(noise, epsilon, rng)

    def guarantee(self) -> CentralGuarantee:
        scale = f"L1 change <= {self.sensitivity:g}; grid {self.step:g}"
        return _dp_guarantee(self.name, self.effective_epsilon, scale)


def laplace_mechanism(
    counts: npt.ArrayLike, epsilon: float, *, sensitivity: float = 1.0, rng: RandomSource | int | None = None
) -> FloatArray:
    """eps-DP discrete Laplace answers on the grid (competitor)."""
    return LaplaceMechanism(epsilon=epsilon, sensitivity=sensitivity).release(counts, rng)

@register_mechanism
@dataclass(frozen=True, kw_only=True)
class GeometricMechanism:
    """The eps-DP two-sided geometric mechanism (competitor; ADP paper Sec. VIII-A).

    ``c + Z`` with ``P(Z = z)`` proportional to ``exp(-eps |z| / D)``; exact sampler.
    """

    name: ClassVar[str] = "geometric"
    integer: ClassVar[bool] = True
    sequential: ClassVar[bool] = False
    bounded: ClassVar[bool] = False
    relaxable: ClassVar[bool] = False

    epsilon: float
    sensitivity: int = 1

    def __post_init__(self) -> None:
        check_epsilon("epsilon", self.epsilon)
        check_int("sensitivity", self.sensitivity, low=1)
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
        c = as_counts(counts, integer=True)
        return c + self.noise(c.shape, rng)

    @property
    def step(self) -> float:
        return 1.0

    @classmethod
    def from_params(
        cls, epsilon: float, *, sensitivity: float, monotonicity: Monotonicity, n_max: int | None, grid: float | None
    ) -> GeometricMechanism:
        return cls(epsilon=epsilon, sensitivity=integer_sensitivity(sensitivity))

    def prepare(self, counts: npt.ArrayLike, thresholds: npt.ArrayLike | None) -> tuple[IntArray, None]:
        return as_counts(counts, integer=True).ravel(), None

    def draw_noise(self, shape: int | tuple[int, ...], rng: RandomSource | int | None = None) -> Noise:
        return Noise(total=self.noise(shape, rng))

    def publish(
        self, counts: npt.ArrayLike, noise: npt.ArrayLike, thresholds: npt.ArrayLike | None = None
    ) -> IntArray:
        return np.asarray(counts, dtype=np.int64) + np.asarray(noise, dtype=np.int64)

    def relax(self, noise: Noise, epsilon: float, rng: RandomSource) -> Noise:
        # two-sided integer noise: min(G, H) needs a non-negative G (the grid's two parts are not kept here)
        raise _no_lazy_step(self.name, "two-sided noise")

    def guarantee(self) -> CentralGuarantee:
        eff = math.inf if math.isinf(self.epsilon) else float(self.rate) * self.sensitivity
        return _dp_guarantee(self.name, eff, f"count change <= {self.sensitivity}")


def geometric_mechanism(
    counts: npt.ArrayLike, epsilon: float, *, sensitivity: int = 1, rng: RandomSource | int | None = None
) -> IntArray:
    """eps-DP two-sided geometric answers (competitor), exact integers."""
    return GeometricMechanism(epsilon=epsilon, sensitivity=sensitivity).release(counts, rng)


# ==========================================================================
# The lazy step on a single array of one-sided noise
# ==========================================================================


def relax_noise(
    mechanism: str,
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
    noise needs both of its geometric parts (:meth:`CentralMechanism.relax`
    on a :class:`Noise` steps each).

    Raises:
        TighteningRefused: ``eps_to < eps_from``.
        ParameterError: two-sided noise, SALap and the two-sided geometric (field ``mechanism``).
    """
    source = as_rng(rng)
    e1 = check_level("eps_from", eps_from)
    e2 = check_epsilon("eps_to", eps_to)
    check_not_tighter(e1, e2)
    check_monotonicity(monotonicity)
    # n_max: the stored noise is untruncated, its law (and its step) does not depend on it
    mech = mechanism_class(mechanism).from_params(
        e1, sensitivity=sensitivity, monotonicity=monotonicity, n_max=0, grid=grid
    )
    if monotonicity == "none" or not isinstance(mech, ALapMechanism | AGeoMechanism):
        raise _no_lazy_step(mechanism, f"{monotonicity}, a single noise array")
    values = np.asarray(noise)
    if mech.integer:
        return mech.relax(Noise(total=values), e2, source).total
    values = values.astype(np.float64)
    negative = -values if monotonicity == "increasing" else np.zeros_like(values)
    return mech.relax(Noise(total=values, negative=negative), e2, source).total
