"""ALap (ADP paper, Def. V.3): one-sided exponential noise on a power-of-two grid."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from ..errors import ParameterError
from ..exact import (
    check_grid,
    default_grid,
    grid_epsilon,
    grid_step_rate,
)
from ..rng import FloatArray, RandomSource, as_rng
from .common import (
    CentralGuarantee,
    IntArray,
    Monotonicity,
    Noise,
    _adp_guarantee,
    _geometric_parts,
    _grid_safe_probability,
    _relax_grid,
    as_counts,
    certificate_cut,
    check_epsilon,
    check_level,
    check_monotonicity,
    on_grid,
    register_mechanism,
    sign_p,
)


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
