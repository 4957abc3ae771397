"""AGeo (ADP paper, Def. VIII.1), the discrete optimal one-sided mechanism, and the lazy step on stored
one-sided noise (:func:`relax_noise`, ALap or AGeo)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ..errors import ParameterError
from ..exact import (
    exact_rate,
    geometric_exact,
    grid_epsilon,
    two_sided_geometric_exact,
)
from ..rng import FloatArray, RandomSource, as_rng
from ..validation import check_int
from .alap import ALapMechanism
from .common import (
    CentralGuarantee,
    IntArray,
    Monotonicity,
    Noise,
    _adp_guarantee,
    _max_log_ratio,
    _no_lazy_step,
    _relax_geometric_exact,
    as_counts,
    certificate_cut,
    check_epsilon,
    check_level,
    check_monotonicity,
    check_not_tighter,
    integer_sensitivity,
    mechanism_class,
    register_mechanism,
)


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
