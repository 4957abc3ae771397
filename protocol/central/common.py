"""What the central mechanisms share: checks, p-sensitivity, guarantees, the grid, certificates, the
:class:`CentralMechanism` Protocol and its registry."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from ..errors import ParameterError, TighteningRefused
from ..exact import (
    MAX_GRID_VALUE,
    check_grid,
    exact_rate,
    geometric_exact,
)
from ..rng import FloatArray, RandomSource
from ..rounding import round_up
from ..validation import check_int, check_integer_array, check_number

if TYPE_CHECKING:
    from .alap import ALapMechanism

IntArray = npt.NDArray[np.int64]
Monotonicity = Literal["decreasing", "increasing", "none"]
MONOTONICITIES: tuple[str, ...] = ("decreasing", "increasing", "none")
Answers = IntArray | FloatArray | list[float | None]



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
