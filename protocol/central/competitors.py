"""The two-sided competitors: eps-DP Laplace and the two-sided geometric."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from ..exact import (
    exact_rate,
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
    _dp_guarantee,
    _no_lazy_step,
    as_counts,
    check_epsilon,
    integer_sensitivity,
    register_mechanism,
)
from .salap import _RunsALap


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
