"""SALap (ADP paper, Algorithm 1): threshold queries answered in sequence until the first "above"."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar, Self

import numpy as np
import numpy.typing as npt

from ..errors import ParameterError
from ..rng import FloatArray, RandomSource
from .alap import ALapMechanism
from .common import (
    CentralGuarantee,
    IntArray,
    Monotonicity,
    Noise,
    _adp_guarantee,
    _no_lazy_step,
    as_counts,
    on_grid,
    register_mechanism,
)


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
