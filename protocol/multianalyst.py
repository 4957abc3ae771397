"""Releases to several analysts, and what colluding analysts can learn (docs/central.md).

Two ways to serve analysts with different trust:

* **Correlated** (gradual-release paper, Sec. 4.2): one draw of the lazy
  noise process. Sort the analysts' levels, draw at the lowest, relax up
  the chain (:func:`protocol.releases.relax_release`), give each analyst the
  answer at its own level. Every lower-level answer is a post-processing
  of a higher one (the chain can be tightened back down, eq. 28), so a
  coalition learns no more than its most trusted member: privacy
  ``max_j eps_j``, not ``sum_j eps_j``.
* **Mechanism A** (multi-user non-zero-mean Laplace paper, Algorithm 1):
  analyst ``i`` gets a secret location ``mu_i`` drawn from an interval;
  each of its ``k`` queries is answered ``r_j + Lap(mu_i, k D / eps)``.
  Here discretized exactly: ``mu_i`` uniform on the grid points of the
  interval and the noise the discrete Laplace on the power-of-two grid of
  ``b = k D / eps`` (:func:`protocol.exact.default_grid`), from the exact
  samplers, so no answer is impossible under a neighbour (docs/central.md).
  Accuracy: Theorem 2. Against the averaging attack the paper's claim
  (Theorem 3) is that the coalition's mean converges to ``r + mean(mu)``,
  not ``r``. It is still ``eps``-DP per analyst and ``i eps`` for ``i``
  analysts by composition (the secret shift is independent of the data),
  and an attacker who knows the mean of the interval removes the bias.

The averaging attack itself (independent Laplace, Mechanism A, correlated
answers against coalitions) is a research experiment:
:mod:`aggregator.research.collusion`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from .central import Monotonicity, check_level, mechanism_class, mechanism_names, on_grid
from .errors import ParameterError
from .exact import (
    check_grid,
    default_grid,
    exact_rate,
    grid_epsilon,
    two_sided_geometric_exact,
    uniform_below,
)
from .releases import Release, coerce_levels, make_release, relax_release
from .rng import FloatArray, RandomSource, as_rng
from .rounding import round_up
from .validation import check_int, check_number

__all__ = [
    "MechanismA",
    "coalition_epsilon",
    "correlated_releases",
    "mechanism_a_accuracy_bound",
]


# ==========================================================================
# (a) correlated releases
# ==========================================================================


def correlated_releases(
    counts: npt.ArrayLike,
    levels: Sequence[float],
    *,
    mechanism: str = "laplace",
    sensitivity: float = 1.0,
    monotonicity: Monotonicity = "decreasing",
    n_max: int | None = None,
    rng: RandomSource | int | None = None,
) -> list[Release]:
    """One release per analyst (same order as ``levels``) from one draw of the noise process.

    The distinct levels are sorted; the noise is drawn at the lowest and
    relaxed level by level (:func:`protocol.releases.relax_release`); each
    analyst's :class:`Release` holds only its own level. Analysts at equal
    levels get identical answers. Mechanisms: ``laplace``, ``alap``, ``ageo``
    (those with a lazy step).
    """
    if mechanism not in mechanism_names() or not mechanism_class(mechanism).relaxable:
        raise ParameterError("mechanism", f"must be laplace, alap or ageo for correlated releases, got {mechanism!r}")
    chain = coerce_levels(levels)
    source = as_rng(rng)
    current = make_release(
        mechanism, counts, chain[0], sensitivity=sensitivity, monotonicity=monotonicity, n_max=n_max, rng=source
    )
    at_level = {chain[0]: current}
    for level in chain[1:]:
        current = relax_release(current, level, rng=source)
        at_level[level] = current
    return [_single_level(at_level[float(lv)]) for lv in levels]


def _single_level(release: Release) -> Release:
    """The release as its holder sees it: only the final level (the chain below is not theirs)."""
    return dataclasses.replace(release, levels=(release.epsilon,))


def coalition_epsilon(levels: Sequence[float], *, correlated: bool) -> float:
    """Privacy of the data against a coalition holding answers at ``levels``.

    Correlated answers: ``max`` (Sec. 4.2: the most trusted member's level).
    Independent answers: ``sum`` (sequential composition, tight for Laplace).
    """
    values = [check_level(f"levels[{i}]", lv) for i, lv in enumerate(levels)]
    if not values:
        raise ParameterError("levels", "must not be empty")
    return max(values) if correlated else math.fsum(values)


# ==========================================================================
# (b) Mechanism A: per-analyst non-zero-mean Laplace
# ==========================================================================


@dataclass(frozen=True, kw_only=True)
class MechanismA:
    """Mechanism A of the multi-user non-zero-mean Laplace paper (Algorithm 1, Theorem 1).

    Attributes:
        epsilon: each analyst's total budget over its ``queries``.
        queries: ``k``, the number of queries per analyst; each answer gets
            ``eps / k`` (noise scale ``b = k D / eps``).
        sensitivity: ``D``, the global sensitivity of every query.
        location_low, location_high: the interval the secret location
            ``mu_i`` of each analyst is drawn from, uniformly on its grid points.
        grid: the output grid; ``None``: :func:`~protocol.exact.default_grid` of ``b``.
    """

    epsilon: float
    queries: int = 1
    sensitivity: float = 1.0
    location_low: float = 0.0
    location_high: float = 0.0
    grid: float | None = None

    def __post_init__(self) -> None:
        check_level("epsilon", self.epsilon)
        check_int("queries", self.queries, low=1)
        check_number("sensitivity", self.sensitivity, positive=True)
        check_number("location_low", self.location_low)
        check_number("location_high", self.location_high)
        if self.location_high < self.location_low:
            raise ParameterError("location_high", f"must be >= location_low ({self.location_low}), got {self.location_high}")
        if self.grid is not None:
            check_grid(self.grid)
        self.step_rate  # noqa: B018 -- validates the exact sampler's range

    @property
    def scale(self) -> float:
        """``b = k D / eps``: Theorem 1's per-query noise scale."""
        return self.queries * self.sensitivity / self.epsilon

    @property
    def step(self) -> float:
        """The output grid ``g`` (given, or from the scale ``b``)."""
        return self.grid if self.grid is not None else default_grid(self.scale, self.sensitivity)

    @property
    def step_rate(self) -> Fraction:
        """``r = (eps / k) g / D`` per grid step, as the exact sampler uses it."""
        return exact_rate(Fraction(self.epsilon) * Fraction(self.step) / (self.queries * Fraction(self.sensitivity)))

    @property
    def query_epsilon(self) -> float:
        """The exact loss of one answer for a shift by ``D``: ``r floor(D / g)`` (``= eps / k``)."""
        return grid_epsilon(self.step_rate, self.sensitivity, self.step)

    @property
    def effective_epsilon(self) -> float:
        """Per analyst over its ``k`` answers: ``k r floor(D / g)`` (``= eps``), rounded up (6 decimals)."""
        return round_up(grid_epsilon(self.queries * self.step_rate, self.sensitivity, self.step))

    @property
    def location_grid(self) -> tuple[int, int]:
        """``(lo, hi)``: the locations are ``g j`` for integers ``lo <= j <= hi`` (the interval's grid points,
        or the one nearest its middle when it holds none)."""
        g = Fraction(self.step)
        lo, hi = math.ceil(Fraction(self.location_low) / g), math.floor(Fraction(self.location_high) / g)
        if hi < lo:
            lo = hi = round(Fraction(self.location_low + self.location_high) / 2 / g)
        return lo, hi

    @property
    def location_mean(self) -> float:
        lo, hi = self.location_grid
        return (lo + hi) / 2.0 * self.step

    def draw_locations(self, analysts: int, rng: RandomSource | int | None = None) -> FloatArray:
        """The secret ``mu_i``, uniform on the grid points of ``[location_low, location_high]`` (server-side).

        Exact: a uniform integer index (:func:`~protocol.exact.uniform_below`) times the grid.
        """
        n = check_int("analysts", analysts, low=1)
        lo, hi = self.location_grid
        return (lo + uniform_below(as_rng(rng), hi - lo + 1, n)).astype(np.float64) * self.step

    def answer(
        self, true_answers: npt.ArrayLike, locations: npt.ArrayLike, rng: RandomSource | int | None = None
    ) -> FloatArray:
        """``r_hat[i, j] = r_j + mu_i + g Z``, ``Z`` discrete Laplace at ``r`` per step: one row per analyst.

        ``true_answers`` and ``locations`` must lie on the grid (integer counts and
        :meth:`draw_locations` do), so every answer is a grid point.
        """
        r = np.atleast_1d(on_grid(true_answers, self.step, field="true_answers"))
        mu = np.atleast_1d(on_grid(locations, self.step, field="locations"))
        if r.ndim != 1 or r.size > self.queries:
            raise ParameterError("true_answers", f"must be a vector of at most k={self.queries} queries")
        steps = two_sided_geometric_exact(as_rng(rng), self.step_rate, (mu.size, r.size))
        return r[None, :] + mu[:, None] + steps.astype(np.float64) * self.step

    def accuracy_bound(self, beta: float, location: float | None = None) -> float:
        """Theorem 2 for this mechanism (``location`` defaults to the worst end of the interval)."""
        mu = max(abs(self.location_low), abs(self.location_high)) if location is None else location
        return mechanism_a_accuracy_bound(
            beta, epsilon=self.epsilon, sensitivity=self.sensitivity, location=mu, queries=self.queries
        )

    def coalition_epsilon(self, analysts: int) -> float:
        """``i * eps``: sequential composition. The secret location does not lower the worst case:
        for an output above every ``r + mu``, each answer's probability ratio between
        neighbours is exactly ``e^(eps/k)`` per query, whatever ``mu``."""
        i = check_int("analysts", analysts, low=1)
        return round_up(grid_epsilon(i * self.queries * self.step_rate, self.sensitivity, self.step))


def mechanism_a_accuracy_bound(
    beta: float, *, epsilon: float, sensitivity: float = 1.0, location: float = 0.0, queries: int = 1
) -> float:
    """Theorem 2: ``P(|noise| > alpha) < beta`` once ``alpha >= -b ln(2 beta / (e^(mu/b) + e^(-mu/b)))``.

    As printed, ``b = D / eps`` (the ``k = 1`` case); with ``k`` queries
    Mechanism A's noise has scale ``b = k D / eps`` and that ``b`` is used.
    From Lemma 1, ``P(|Y| > alpha) = e^(-alpha/b) cosh(mu/b)`` for
    ``alpha >= |mu|``; the bound solves it for ``beta``. It lies in that
    range whenever ``beta <= 1/2``, which is required.
    """
    check_number("beta", beta, positive=True, high=0.5)  # Lemma 1 needs alpha >= |mu|: beta <= 1/2
    b = check_int("queries", queries, low=1) * check_number("sensitivity", sensitivity, positive=True) / check_level(
        "epsilon", epsilon
    )
    check_number("location", location)
    m = abs(location) / b
    # -b ln(2 beta / (e^m + e^-m)) = b (m + ln(1 + e^(-2m)) - ln(2 beta)), stable for large m.
    return b * (m + math.log1p(math.exp(-2.0 * m)) - math.log(2.0 * beta))
