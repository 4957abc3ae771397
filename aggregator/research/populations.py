"""Vectorized simulated populations: a synthetic city and its clients.

The research and demo path. It calls the same protocol functions as the
client SDK (encodings, ``Randomizer``, relaxation steps); only the source of
randomness differs (a seeded stream for the whole population instead of one
keyed stream per client), which changes no distribution.

>>> city = SyntheticCity(num_places=50, zipf_exponent=1.1, mean_places=2.0)
>>> pop = make_population(city, 1000, BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4), SeededRandom(1))
>>> pop.bits.shape, int(pop.true_counts(50).sum()) == int((pop.item_sets >= 0).sum())
((1000, 32), True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from protocol.encodings import BloomEncoding, Encoding, encode_population
from protocol.errors import ParameterError
from protocol.randomizers import Randomizer
from protocol.rng import FloatArray, RandomSource, SeededRandom
from protocol.validation import check_int, check_number

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

__all__ = [
    "BloomEncoding",
    "Population",
    "RelaxationResult",
    "SeededRandom",
    "SyntheticCity",
    "cohort_bit_counts",
    "make_population",
    "relaxation_draw",
    "relaxation_experiment",
    "score_relaxation",
    "sort_by_cohort",
    "theoretical_variance",
]


@dataclass(frozen=True, kw_only=True)
class SyntheticCity:
    """Places with Zipf popularity: place ``i`` (0-based) has weight ``(i + 1) ** -zipf_exponent``.

    Attributes:
        num_places: how many places.
        zipf_exponent: the Zipf exponent ``s > 0``.
        mean_places: mean size of a client's set (``1 + Poisson(mean_places - 1)``).
    """

    num_places: int = 2000
    zipf_exponent: float = 1.1
    mean_places: float = 3.0
    max_places: int = 12

    def __post_init__(self) -> None:
        check_int("num_places", self.num_places, low=1)
        check_number("zipf_exponent", self.zipf_exponent, positive=True)
        if not 1.0 <= self.mean_places <= self.max_places:
            raise ParameterError("mean_places", f"must be in [1, max_places], got {self.mean_places}")

    def names(self) -> list[str]:
        width = len(str(self.num_places))
        return [f"place-{i:0{width}d}" for i in range(self.num_places)]

    def popularity(self) -> FloatArray:
        w = (np.arange(1, self.num_places + 1, dtype=np.float64)) ** -self.zipf_exponent
        return w / w.sum()

    def size_pmf(self) -> FloatArray:
        """``P(k draws)``, ``k = 1 .. max_places``: the law of ``min(1 + Poisson(mean_places - 1), max_places)``.

        :meth:`draw_sets` makes that many draws (repeats then dropped); the
        aggregate path (:mod:`aggregator.research.aggregate`) uses the same law.
        """
        lam = self.mean_places - 1.0
        k = np.arange(self.max_places - 1, dtype=np.float64)
        log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, self.max_places - 1)))])
        pmf = np.exp(-lam + k * np.log(lam) - log_fact) if lam > 0 else (k == 0).astype(np.float64)
        out: FloatArray = np.append(pmf, max(0.0, 1.0 - pmf.sum()))
        return out

    def draw_sets(self, n_clients: int, rng: RandomSource) -> IntArray:
        """Per client a set of distinct places, shape ``(n, max_places)`` padded with -1."""
        cdf = np.cumsum(self.popularity())
        cdf[-1] = 1.0
        sizes = 1 + _poisson(self.mean_places - 1.0, n_clients, rng)
        sizes = np.minimum(sizes, self.max_places)
        picks = np.searchsorted(cdf, rng.uniform((n_clients, self.max_places)), side="right")
        picks = np.minimum(picks, self.num_places - 1).astype(np.int64)
        picks[np.arange(self.max_places)[None, :] >= sizes[:, None]] = -1
        # drop repeats within a row (a set, not a multiset)
        srt = np.sort(picks, axis=1)
        dup = np.zeros_like(srt, dtype=bool)
        dup[:, 1:] = (srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)
        srt[dup] = -1
        return srt


def _poisson(lam: float, n: int, rng: RandomSource) -> IntArray:
    """Poisson(lam) by inversion of one uniform per draw (lam is small here)."""
    if lam <= 0:
        return np.zeros(n, dtype=np.int64)
    u = rng.uniform(n)
    k = np.zeros(n, dtype=np.int64)
    p = np.full(n, np.exp(-lam))
    cdf = p.copy()
    for step in range(1, 200):
        more = u > cdf
        if not more.any():
            break
        k[more] += 1
        p = p * lam / step
        cdf = cdf + p
    return k


@dataclass(frozen=True)
class Population:
    """Simulated clients: their sets, cohorts and true bit vectors."""

    item_sets: IntArray  # (n, K) place indices, -1 padded
    cohorts: IntArray  # (n,)
    bits: BoolArray  # (n, num_bits)
    names: tuple[str, ...]

    @property
    def size(self) -> int:
        return int(self.cohorts.shape[0])

    def true_counts(self, num_places: int) -> IntArray:
        """How many clients hold each place."""
        held = self.item_sets[self.item_sets >= 0]
        return np.bincount(held, minlength=num_places).astype(np.int64)

    def member_sets(self, i: int) -> list[str]:
        return [self.names[j] for j in self.item_sets[i] if j >= 0]


def make_population(city: SyntheticCity, n_clients: int, encoding: Encoding, rng: RandomSource) -> Population:
    """Draw ``n_clients`` clients: sets from ``city``, cohorts uniform, bits by ``encoding``."""
    names = tuple(city.names())
    sets = city.draw_sets(n_clients, rng)
    cohorts = rng.integers(encoding.num_cohorts, n_clients)
    table = encoding.bit_table(list(names))
    bits = encode_population(encoding, sets, cohorts, table)
    return Population(item_sets=sets, cohorts=cohorts, bits=bits, names=names)


def cohort_bit_counts(reports: BoolArray, cohorts: IntArray, num_cohorts: int) -> tuple[IntArray, IntArray]:
    """``(ones (num_cohorts, num_bits), totals (num_cohorts,))``: the aggregator's aggregates.

    Rows are taken in cohort order (a stable sort, skipped when ``cohorts``
    is already sorted, as :func:`sort_by_cohort` leaves a population) and
    each cohort's rows summed as one slice: no index arrays of the ones.
    """
    rows = np.asarray(reports, dtype=bool)
    groups = np.asarray(cohorts)
    totals = np.bincount(groups, minlength=num_cohorts).astype(np.int64)
    if groups.size > 1 and bool(np.any(groups[1:] < groups[:-1])):
        rows = rows[np.argsort(groups, kind="stable")]
    ones = np.zeros((num_cohorts, rows.shape[1]), dtype=np.int64)
    start = 0
    for cohort, size in enumerate(totals.tolist()):
        if size:
            ones[cohort] = rows[start : start + size].sum(axis=0)
            start += size
    return ones, totals


def sort_by_cohort(pop: Population) -> Population:
    """The same clients in cohort order (stable): clients are exchangeable, and cohort sums become slices."""
    order = np.argsort(pop.cohorts, kind="stable")
    return Population(item_sets=pop.item_sets[order], cohorts=pop.cohorts[order], bits=pop.bits[order],
                      names=pop.names)


# --------------------------------------------------------------------------
# Relaxation experiments (gradual-release paper, Sec. 3)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class RelaxationResult:
    """Mean squared error of per-(cohort, bit) true-count estimates, pooled over repetitions.

    Attributes:
        first: the first collection at ``level_from``.
        relaxed: the round: memoized noise relaxed to ``level_to`` by the lazy step.
        one_shot: a fresh collection at ``level_to`` (the accuracy to match).
        composition: the first collection combined (inverse-variance weights)
            with an independent second collection at ``level_to - level_from``:
            the same total level spent by plain composition.
        theory_one_shot: the closed-form variance of a one-shot ``level_to``
            collection at the true counts (mean over cells).
    """

    first: float
    relaxed: float
    one_shot: float
    composition: float
    theory_one_shot: float
    cells: int

    @property
    def ratio(self) -> float:
        """``relaxed / one_shot``: 1 means the earlier release cost no accuracy."""
        return self.relaxed / self.one_shot

    @property
    def composition_ratio(self) -> float:
        return self.composition / self.one_shot


def theoretical_variance(true_ones: FloatArray, totals: FloatArray, randomizer: Randomizer) -> FloatArray:
    """Variance of the unbiased estimate ``(c - p* N)/(q* - p*)`` at the true counts."""
    p, q = randomizer.probabilities()
    return (true_ones * q * (1 - q) + (totals - true_ones) * p * (1 - p)) / (q - p) ** 2


RelaxationDraw = tuple[IntArray, IntArray, IntArray, IntArray]
PATHS: tuple[str, ...] = ("bits", "noise")


def relaxation_draw(bits: BoolArray, cohorts: IntArray, num_cohorts: int, base: Randomizer, level_to: float,
                    rng: RandomSource, *, path: str = "bits") -> RelaxationDraw:
    """One repetition's ``(first, relaxed, one_shot, extra)`` ones per (cohort, bit) cell.

    ``path="bits"`` (the default): fresh permanent bits, the round's bits
    from them by :meth:`~protocol.randomizers.Randomizer.relax_permanent`
    (both modes), the IRR per report; every bit exact at its stated
    probability, about one random byte per bit. ``path="noise"``: every
    client's memoized noise drawn and relaxed as on the device
    (``draw_noise``, ``relax_noise``, ``report``). The same joint law
    (tests/test_laplace_bits.py, tests/test_simulate_aggregate.py).
    ``one_shot`` is a fresh collection at ``level_to``, ``extra`` an
    independent one at ``level_to - base.level``.
    """
    if path not in PATHS:
        raise ParameterError("path", f"must be one of {PATHS}, got {path!r}")
    relaxed_r = base.with_level(level_to)
    extra_r = base.with_level(level_to - base.level)

    def ones(reports: BoolArray) -> IntArray:
        return cohort_bit_counts(reports, cohorts, num_cohorts)[0]

    if path == "noise":
        noise = base.draw_noise(bits.shape, rng)
        first = ones(base.report(bits, noise, rng))
        relaxed = ones(relaxed_r.report(bits, base.relax_noise(noise, level_to, rng), rng))
    else:
        permanent = base.sample_permanent(bits, rng)
        first = ones(base.sample_instantaneous(permanent, rng))
        relaxed = ones(relaxed_r.sample_instantaneous(base.relax_permanent(bits, permanent, level_to, rng), rng))
    return first, relaxed, ones(relaxed_r.simulate(bits, rng)), ones(extra_r.simulate(bits, rng))


def relaxation_experiment(
    pop: Population,
    base: Randomizer,
    level_to: float,
    *,
    repetitions: int,
    rng: RandomSource,
    path: str = "bits",
) -> RelaxationResult:
    """Collect, relax, and compare against one-shot and composition baselines.

    Every repetition draws fresh memoized bits (or noise, ``path="noise"``)
    for the whole population (:func:`relaxation_draw`); estimates are the
    aggregator's unbiased bit estimates.
    """
    num_cohorts = int(pop.cohorts.max()) + 1
    truth, totals = cohort_bit_counts(pop.bits, pop.cohorts, num_cohorts)
    draws = [relaxation_draw(pop.bits, pop.cohorts, num_cohorts, base, level_to, rng, path=path)
             for _ in range(repetitions)]
    return score_relaxation(truth, totals, base, level_to, draws)




def score_relaxation(truth: IntArray, totals: IntArray, base: Randomizer, level_to: float,
                     draws: list[RelaxationDraw]) -> RelaxationResult:
    """MSEs of one population's repetitions, each ``(first, relaxed, one_shot, extra)`` ones per cell.

    Shared by the per-client path (:func:`relaxation_experiment`) and the
    aggregate path (:mod:`aggregator.research.aggregate`): the same
    estimates (the aggregator's :func:`bit_estimates`) and the same scoring.
    """
    from aggregator.analysis.decoding import (  # decoding imports nothing from here
        BitCounts,
        bit_estimates,
    )

    truth_f, totals_f = truth.astype(np.float64), totals.astype(np.float64)[:, None]
    relaxed_r = base.with_level(level_to)
    extra_r = base.with_level(level_to - base.level)
    sums = dict.fromkeys(("first", "relaxed", "one_shot", "composition"), 0.0)

    def estimate(ones: IntArray, r: Randomizer) -> tuple[FloatArray, FloatArray]:
        return bit_estimates(BitCounts(ones=ones, totals=totals), r)

    for first_ones, relaxed_ones, one_shot_ones, extra_ones in draws:
        first, var_first = estimate(first_ones, base)
        relaxed, _ = estimate(relaxed_ones, relaxed_r)
        one_shot, _ = estimate(one_shot_ones, relaxed_r)
        extra, var_extra = estimate(extra_ones, extra_r)
        w = var_extra / (var_first + var_extra)
        combined = w * first + (1 - w) * extra
        for key, est in (("first", first), ("relaxed", relaxed), ("one_shot", one_shot), ("composition", combined)):
            sums[key] += float(np.mean((est - truth_f) ** 2))
    repetitions = len(draws)
    theory = float(np.mean(theoretical_variance(truth_f, totals_f, relaxed_r)))
    return RelaxationResult(
        first=sums["first"] / repetitions,
        relaxed=sums["relaxed"] / repetitions,
        one_shot=sums["one_shot"] / repetitions,
        composition=sums["composition"] / repetitions,
        theory_one_shot=theory,
        cells=truth.size * repetitions,
    )
