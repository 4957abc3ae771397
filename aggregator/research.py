"""Research scenarios behind ``onesided simulate`` (DESIGN 1 "Researchers", DESIGN 12).

Each scenario reproduces one claim of the papers on vectorized simulated
populations, through the same functions the client and the aggregator run
(``Randomizer``, the relaxation steps, ``bit_estimates``, the one-sided
certificates, the central mechanisms), and returns its key figures as a
JSON-ready dict next to the closed-form prediction:

* ``relaxation`` (gradual-release paper, Sec. 3, Thm. 10; DESIGN 5): MSE of
  the per-(cohort, bit) estimates after a relaxation round, against a
  one-shot collection at the new level and against plain composition, over
  a grid of ``(level_from, level_to)`` in both modes. Claim: ratio 1.
* ``asymmetric-advantage`` (DESIGN 4): variance of a rare item's estimate,
  asymmetric over symmetric at equal per-bit epsilon. Claim: ``1 - e^-eps``.
* ``certificates`` (ADP paper, Sec. VI): share of the truly safe places
  certified safe (``E[beta]``) and share of the unsafe ones wrongly
  certified, against the threshold and the epsilon, for local one-sided
  certificates and the central ALap, AGeo and the best ``(eps, delta)``-DP
  sanitizer. Claim: the one-sided ones are never wrong at ``alpha = 0``.
* ``collusion`` (multi-user paper, Sec. B): the averaging attack against
  independent Laplace answers, Mechanism A and correlated releases, with the
  paper's ``i = max{30, 18 D^2 / (m^2 eps^2)}``.

Every scenario has a ``small`` setup (seconds; what the tests run) and a
``paper`` setup (up to a million simulated clients, minutes). Randomness
comes from one :class:`~protocol.rng.SeededRandom` per run.

>>> run_scenario("collusion", scale="small", seed=1)["paper_colluders"]
72
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import special

from protocol.accounting import bit_epsilon
from protocol.central import AGeoMechanism, ALapMechanism, dp_beta_upper_bound, virtual_dp_sanitizer
from protocol.encodings import BloomEncoding, DirectEncoding, encode_population
from protocol.errors import ParameterError
from protocol.multianalyst import Scheme, colluders_needed, collusion_experiment
from protocol.params import MetricParams
from protocol.randomizers import Mode, Randomizer, laplace_rate_from_f
from protocol.rng import RandomSource, SeededRandom

from .certify import one_sided_upper_bounds
from .decoding import BitCounts, bit_estimates
from .simulation import (
    Population,
    SyntheticCity,
    cohort_bit_counts,
    make_population,
    relaxation_experiment,
    theoretical_variance,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Progress = Callable[[str], None]
Figures = dict[str, Any]

SCALES: tuple[str, ...] = ("small", "paper")
MODES: tuple[Mode, ...] = ("symmetric", "asymmetric")

__all__ = [
    "SCALES",
    "SCENARIOS",
    "AdvantageSetup",
    "CertificateSetup",
    "CollusionSetup",
    "RelaxationSetup",
    "Scenario",
    "asymmetric_advantage",
    "certificates",
    "collusion",
    "relaxation",
    "run_scenario",
]


def _quiet(_: str) -> None:
    return None


def _check_positive_int(field: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ParameterError(field, f"must be an integer >= 1, got {value!r}")


def _check_levels(field: str, values: tuple[float, ...]) -> None:
    if not values or any(isinstance(v, bool) or not 0 < v < math.inf for v in values):
        raise ParameterError(field, f"must be a non-empty tuple of finite numbers > 0, got {values!r}")


def _chunks(total: int, size: int) -> Iterator[int]:
    """Sizes of consecutive chunks of at most ``size`` adding up to ``total``."""
    for start in range(0, total, size):
        yield min(size, total - start)


# ==========================================================================
# relaxation: a round costs no accuracy (gradual-release paper, Thm. 10)
# ==========================================================================


@dataclass(frozen=True, kw_only=True)
class RelaxationSetup:
    """Population and grid of the ``relaxation`` scenario.

    Attributes:
        clients: simulated clients, drawn in populations of ``chunk``
            (the estimate of a (cohort, bit) cell for the whole population is
            the sum of the chunks', whose errors are independent: its MSE is
            the sum of the chunks' MSEs). At least 50 clients per cohort in a
            chunk, so that every chunk has every cohort.
        places, encoding: the synthetic city and its Bloom filter.
        levels: every pair ``level_from < level_to`` of it is a grid cell.
        repetitions: fresh noise draws per cell and chunk.
    """

    clients: int
    chunk: int
    places: int
    encoding: BloomEncoding
    levels: tuple[float, ...]
    repetitions: int

    def __post_init__(self) -> None:
        for name in ("clients", "chunk", "places", "repetitions"):
            _check_positive_int(name, getattr(self, name))
        _check_levels("levels", self.levels)
        if self.chunk < 50 * self.encoding.num_cohorts or self.clients % self.chunk:
            raise ParameterError("chunk", "must divide clients and hold at least 50 clients per cohort")

    def pairs(self) -> list[tuple[float, float]]:
        lv = sorted(set(self.levels))
        return [(a, b) for i, a in enumerate(lv) for b in lv[i + 1 :]]


RELAXATION_SETUPS = {
    "small": RelaxationSetup(clients=5_000, chunk=5_000, places=500,
                             encoding=BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=64),
                             levels=(0.5, 1.0, 2.0, 4.0), repetitions=4),
    "paper": RelaxationSetup(clients=1_000_000, chunk=125_000, places=2_000,
                             encoding=BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=64),
                             levels=(0.5, 1.0, 2.0, 4.0), repetitions=1),
}


def _composition_theory(pop: Population, base: Randomizer, level_to: float) -> tuple[float, float]:
    """Mean over cells of the one-shot variance at ``level_to`` and of the composed one.

    Composition: the first collection (variance ``v1``) and an independent
    one at ``level_to - level_from`` (``v2``) combined with inverse-variance
    weights: ``v1 v2 / (v1 + v2)``.
    """
    cohorts = int(pop.cohorts.max()) + 1
    truth, totals = cohort_bit_counts(pop.bits, pop.cohorts, cohorts)
    t, n = truth.astype(np.float64), totals.astype(np.float64)[:, None]
    v1 = theoretical_variance(t, n, base)
    v2 = theoretical_variance(t, n, base.with_level(level_to - base.level))
    v_to = theoretical_variance(t, n, base.with_level(level_to))
    both = np.divide(v1 * v2, v1 + v2, out=np.zeros_like(v1), where=(v1 + v2) > 0)
    return float(np.mean(v_to)), float(np.mean(both))


def _relaxation_cell(pops: list[Population], mode: Mode, pair: tuple[float, float], reps: int,
                     rng: RandomSource) -> Figures:
    level_from, level_to = pair
    base = Randomizer(mode=mode, level=level_from)
    sums = dict.fromkeys(("first", "relaxed", "one_shot", "composition", "theory", "theory_composition"), 0.0)
    cells = 0
    for pop in pops:
        res = relaxation_experiment(pop, base, level_to, repetitions=reps, rng=rng)
        v_to, v_both = _composition_theory(pop, base, level_to)
        for key, value in (("first", res.first), ("relaxed", res.relaxed), ("one_shot", res.one_shot),
                           ("composition", res.composition), ("theory", v_to), ("theory_composition", v_both)):
            sums[key] += value
        cells += res.cells
    return {
        "mode": mode, "level_from": level_from, "level_to": level_to,
        "epsilon_bit_from": bit_epsilon(mode, level_from), "epsilon_bit_to": bit_epsilon(mode, level_to),
        "mse_first": sums["first"], "mse_relaxed": sums["relaxed"], "mse_one_shot": sums["one_shot"],
        "mse_composition": sums["composition"], "mse_theory": sums["theory"],
        "ratio": sums["relaxed"] / sums["one_shot"],
        "theory_ratio": sums["relaxed"] / sums["theory"],
        "composition_ratio": sums["composition"] / sums["one_shot"],
        "theory_composition_ratio": sums["theory_composition"] / sums["theory"],
        "cells": cells,
    }


def relaxation(setup: RelaxationSetup, rng: RandomSource, progress: Progress = _quiet) -> Figures:
    """MSE after a relaxation round vs one-shot and composition, per grid cell and mode.

    ``cells`` counts the squared errors pooled per point (cells x
    repetitions x chunks). ``ratio = relaxed / one-shot`` (claim: 1, the
    earlier strict release costs no accuracy); ``theory_ratio`` is relaxed
    over the closed-form one-shot variance; ``composition_ratio`` spends the
    same total level by collecting twice (claim: above 1, by
    ``theory_composition_ratio`` with optimal weights).
    """
    city = SyntheticCity(num_places=setup.places)
    pops = [make_population(city, n, setup.encoding, rng) for n in _chunks(setup.clients, setup.chunk)]
    grid = []
    for mode in MODES:
        for pair in setup.pairs():
            progress(f"relaxation: {mode} {pair[0]:g} -> {pair[1]:g}")
            grid.append(_relaxation_cell(pops, mode, pair, setup.repetitions, rng))
    ratios = [c["ratio"] for c in grid]
    return {
        "clients": setup.clients, "encoding": setup.encoding.to_dict(), "places": setup.places,
        "repetitions": setup.repetitions, "grid": grid,
        "ratio_min": min(ratios), "ratio_max": max(ratios),
        "composition_ratio_min": min(c["composition_ratio"] for c in grid),
    }


# ==========================================================================
# asymmetric-advantage: rare items, 1 - e^-eps (DESIGN 4)
# ==========================================================================


@dataclass(frozen=True, kw_only=True)
class AdvantageSetup:
    """``items`` rare items of a direct metric, each held by ``holders`` of ``clients``.

    Item ``j`` is held by clients ``j * holders .. (j + 1) * holders - 1``.
    Each repetition gives ``items`` independent estimate errors per mode.
    """

    clients: int
    chunk: int
    items: int
    holders: int
    epsilons: tuple[float, ...]
    repetitions: int

    def __post_init__(self) -> None:
        for name in ("clients", "chunk", "items", "holders", "repetitions"):
            _check_positive_int(name, getattr(self, name))
        _check_levels("epsilons", self.epsilons)
        if self.items * self.holders > self.clients:
            raise ParameterError("holders", "items * holders must not exceed clients")


ADVANTAGE_SETUPS = {
    "small": AdvantageSetup(clients=2_000, chunk=2_000, items=64, holders=10,
                            epsilons=(0.25, 0.5, 1.0, 2.0, 3.0), repetitions=100),
    # The small setup's 6,400 estimates per point would take 6.4e9 draws per mode and epsilon at
    # 10^6 clients: fewer epsilons, and 128 items x 30 repetitions (3,840 estimates per point).
    "paper": AdvantageSetup(clients=1_000_000, chunk=50_000, items=128, holders=1_000,
                            epsilons=(0.5, 1.0, 2.0), repetitions=30),
}


def equal_epsilon_randomizers(epsilon: float) -> dict[str, Randomizer]:
    """Symmetric and asymmetric randomizers whose memoized bit costs ``epsilon``.

    Symmetric: ``f/2 = 1/(1 + e^eps)``, i.e. ``f = 2/(1 + e^eps)``;
    asymmetric: ``level = 2 eps`` (DESIGN 4).
    """
    return {
        "symmetric": Randomizer(mode="symmetric", level=laplace_rate_from_f(2.0 / (1.0 + math.exp(epsilon)))),
        "asymmetric": Randomizer(mode="asymmetric", level=2.0 * epsilon),
    }


def _rare_item_errors(setup: AdvantageSetup, randomizer: Randomizer, rng: RandomSource) -> FloatArray:
    """Estimate errors, shape ``(repetitions, items)``, through ``Randomizer.simulate`` and ``bit_estimates``."""
    errors = np.empty((setup.repetitions, setup.items))
    for rep in range(setup.repetitions):
        ones = np.zeros(setup.items, dtype=np.int64)
        start = 0
        for size in _chunks(setup.clients, setup.chunk):
            owner = np.arange(start, start + size) // setup.holders
            bits = owner[:, None] == np.arange(setup.items)[None, :]
            ones += randomizer.simulate(bits, rng).sum(axis=0)
            start += size
        counts = BitCounts(ones=ones[None, :], totals=np.array([setup.clients]))
        errors[rep] = bit_estimates(counts, randomizer)[0][0] - setup.holders
    return errors


def _mse_and_relative_se(errors: FloatArray) -> tuple[float, float]:
    """Mean squared error (the truth is known) and the relative standard error of that mean."""
    sq = errors.ravel() ** 2
    mse = float(sq.mean())
    return mse, float(sq.std(ddof=1) / math.sqrt(sq.size) / mse)


def asymmetric_advantage(setup: AdvantageSetup, rng: RandomSource, progress: Progress = _quiet) -> Figures:
    """Rare-item variance, asymmetric over symmetric at equal per-bit epsilon.

    Predicted ``1 - e^-eps`` (``N/(e^eps - 1)`` against ``N e^eps/(e^eps - 1)^2``);
    with ``h`` holders exactly ``(1 - h/N)(1 - e^-eps)`` (``exact_ratio``).
    """
    rows = []
    truth = np.full(setup.items, float(setup.holders))
    for eps in setup.epsilons:
        progress(f"asymmetric-advantage: eps {eps:g}")
        row: Figures = {"epsilon": eps}
        rel_se = []
        for mode, randomizer in equal_epsilon_randomizers(eps).items():
            mse, se = _mse_and_relative_se(_rare_item_errors(setup, randomizer, rng))
            row[f"{mode}_level"] = randomizer.level
            row[f"{mode}_epsilon_bit"] = bit_epsilon(randomizer.mode, randomizer.level)
            row[f"{mode}_variance"] = mse
            row[f"{mode}_theory"] = float(theoretical_variance(truth, np.full_like(truth, setup.clients), randomizer)[0])
            rel_se.append(se)
        row["ratio"] = row["asymmetric_variance"] / row["symmetric_variance"]
        row["ratio_se"] = row["ratio"] * math.hypot(*rel_se)
        row["predicted"] = -math.expm1(-eps)
        row["exact_ratio"] = row["asymmetric_theory"] / row["symmetric_theory"]
        rows.append(row)
    return {
        "clients": setup.clients, "items": setup.items, "holders": setup.holders,
        "repetitions": setup.repetitions, "samples": setup.items * setup.repetitions, "rows": rows,
        "max_relative_gap": max(abs(r["ratio"] / r["predicted"] - 1.0) for r in rows),
    }


# ==========================================================================
# certificates: one-sided answers to "is place i safe (count <= t)?" (ADP Sec. VI)
# ==========================================================================

MECHANISMS: dict[str, str] = {
    "local_alpha0": "local one-sided certificate, alpha = 0",
    "local_alpha": "local one-sided certificate, alpha > 0",
    "alap": "central ALap",
    "ageo": "central AGeo",
    "dp": "best (eps, delta)-DP sanitizer (bound)",
}


@dataclass(frozen=True, kw_only=True)
class CertificateSetup:
    """A synthetic city's visits, certified locally and released centrally.

    Attributes:
        clients, chunk, places, zipf_exponent, mean_places: the population
            (each client reports one set of places, direct encoding).
        thresholds: the threshold sweep (counts), at ``epsilon``.
        epsilon: the per-visit epsilon of the threshold sweep.
        epsilons: the epsilon sweep, at each of ``sweep_thresholds``. Local:
            asymmetric level ``2 eps`` (one visit is one bit); central:
            sensitivity 1 (one visit changes one count by 1).
        alpha: error level of the local ``alpha > 0`` certificate and of the DP bound.
        delta: ``delta`` of the ``(eps, delta)``-DP bound.
        repetitions: noise draws per setting.
    """

    clients: int
    chunk: int
    places: int
    zipf_exponent: float = 1.1
    mean_places: float = 3.0
    thresholds: tuple[int, ...]
    epsilon: float = 1.0
    epsilons: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 6.0)
    sweep_thresholds: tuple[int, ...]
    alpha: float = 1e-3
    delta: float = 1e-4
    repetitions: int

    def __post_init__(self) -> None:
        for name in ("clients", "chunk", "places", "repetitions"):
            _check_positive_int(name, getattr(self, name))
        _check_levels("epsilons", (*self.epsilons, self.epsilon))
        for name in ("thresholds", "sweep_thresholds"):
            values = getattr(self, name)
            if not values or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in values):
                raise ParameterError(name, f"must be a non-empty tuple of integers >= 0, got {values!r}")
        if not 0.0 < self.alpha < 1.0:
            raise ParameterError("alpha", f"must be in (0, 1), got {self.alpha}")
        if not 0.0 <= self.delta < 1.0:
            raise ParameterError("delta", f"must be in [0, 1), got {self.delta}")


CERTIFICATE_SETUPS = {
    # 10,000 people over 2,000 places: most places see a handful of visits, as in the ADP paper's Tokyo data.
    "small": CertificateSetup(clients=10_000, chunk=10_000, places=2_000,
                              thresholds=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000),
                              sweep_thresholds=(5, 200), repetitions=3),
    "paper": CertificateSetup(clients=1_000_000, chunk=20_000, places=2_000,
                              thresholds=(200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000),
                              sweep_thresholds=(500, 5_000), repetitions=1),
}


@dataclass(frozen=True)
class _Visits:
    """The simulated population, kept as item sets (bits are re-encoded per chunk)."""

    params: MetricParams
    names: tuple[str, ...]
    sets: list[IntArray]
    cohorts: list[IntArray]
    counts: IntArray

    def ones(self, randomizer: Randomizer, rng: RandomSource) -> IntArray:
        """Reports' ones per place: every client's set through ``randomizer`` (one report each)."""
        enc = self.params.encoding
        table = enc.bit_table(list(self.names))
        ones = np.zeros(enc.num_bits, dtype=np.int64)
        for sets, cohorts in zip(self.sets, self.cohorts, strict=True):
            ones += randomizer.simulate(encode_population(enc, sets, cohorts, table), rng).sum(axis=0)
        return ones


def _visits(setup: CertificateSetup, rng: RandomSource) -> _Visits:
    city = SyntheticCity(num_places=setup.places, zipf_exponent=setup.zipf_exponent, mean_places=setup.mean_places)
    names = tuple(city.names())
    params = MetricParams(name="visits", encoding=DirectEncoding(domain=names), mode="asymmetric", level=1.0)
    sets, cohorts = [], []
    counts = np.zeros(setup.places, dtype=np.int64)
    for n in _chunks(setup.clients, setup.chunk):
        pop = make_population(city, n, params.encoding, rng)
        sets.append(pop.item_sets)
        cohorts.append(pop.cohorts)
        counts += pop.true_counts(setup.places)
    return _Visits(params=params, names=names, sets=sets, cohorts=cohorts, counts=counts)


def _dp_saturation(eps: float, alpha: float) -> int:
    """Smallest ``k`` with ``alpha e^(eps k) >= 1``: from there on the DP bound is 1.

    Counts that far below the threshold are called safe without a draw
    (``dp_beta_upper_bound`` is exactly 1 there).
    """
    return max(1, math.ceil(math.log(1.0 / alpha) / eps))


def _dp_decisions(counts: IntArray, t: int, eps: float, setup: CertificateSetup,
                  rng: RandomSource) -> npt.NDArray[np.bool_]:
    """The virtual ``(eps, delta)``-DP sanitizer's "safe" per place (Sec. VI-A)."""
    far = t + 1 - counts >= _dp_saturation(eps, setup.alpha)
    out = np.ones(counts.shape, dtype=bool)
    near = ~far
    if near.any():
        out[near] = virtual_dp_sanitizer(counts[near], t, eps, alpha=setup.alpha, delta=setup.delta, rng=rng)
    return out


def _safe_decisions(visits: _Visits, setup: CertificateSetup, eps: float, thresholds: list[int],
                    rng: RandomSource) -> dict[str, npt.NDArray[np.bool_]]:
    """One draw of every mechanism at per-visit ``eps``: ``safe`` per (threshold, place)."""
    level = 2.0 * eps
    counts = BitCounts(ones=visits.ones(visits.params.randomizer(level), rng)[None, :],
                       totals=np.array([setup.clients]))
    bound0 = one_sided_upper_bounds(counts, visits.params, level, visits.names, alpha=0.0)
    bound_a = one_sided_upper_bounds(counts, visits.params, level, visits.names, alpha=setup.alpha)
    alap = ALapMechanism(epsilon=eps).release(visits.counts, rng)
    ageo = AGeoMechanism(epsilon=eps, n_max=setup.clients).release(visits.counts, rng)
    t = np.asarray(thresholds)[:, None]
    dp = np.stack([_dp_decisions(visits.counts, x, eps, setup, rng) for x in thresholds])
    return {"local_alpha0": bound0[None, :] <= t, "local_alpha": bound_a[None, :] <= t,
            "alap": alap[None, :] <= t, "ageo": ageo[None, :] <= t, "dp": dp}


def _safe_theory(name: str, counts: IntArray, t: int, eps: float, setup: CertificateSetup) -> float | None:
    """``E[beta]``: the mean over truly safe places of ``P(certified safe)`` in closed form."""
    safe = counts[counts <= t]
    if safe.size == 0:
        return None
    if name == "local_alpha0":  # ones = c + Binomial(N - c, q), q = exp(-eps)
        return float(np.mean(special.bdtr(t - safe, setup.clients - safe, math.exp(-eps))))
    if name == "alap":
        mech = ALapMechanism(epsilon=eps)
        return float(np.mean([mech.safe_probability(float(c), float(t)) for c in safe]))
    if name == "ageo":
        geo = AGeoMechanism(epsilon=eps, n_max=setup.clients)
        return float(np.mean([geo.safe_probability(int(c), t) for c in safe]))
    if name == "dp":
        cut = _dp_saturation(eps, setup.alpha)
        return float(np.mean([
            1.0 if t + 1 - c >= cut else dp_beta_upper_bound(alpha=setup.alpha, epsilon=eps, delta=setup.delta,
                                                            k=int(t + 1 - c))
            for c in safe]))
    return None  # local alpha > 0: no closed form (a bound: false-safe <= alpha)


def _certificate_sweep(visits: _Visits, setup: CertificateSetup, eps: float, thresholds: list[int],
                       rng: RandomSource) -> list[Figures]:
    """Per threshold: safe fraction, false-safe rate and theory of every mechanism at ``eps``."""
    c = visits.counts
    truly = c[None, :] <= np.asarray(thresholds)[:, None]
    hits = {m: np.zeros(len(thresholds), dtype=np.int64) for m in MECHANISMS}
    wrong = {m: np.zeros(len(thresholds), dtype=np.int64) for m in MECHANISMS}
    for _ in range(setup.repetitions):
        for m, decided in _safe_decisions(visits, setup, eps, thresholds, rng).items():
            hits[m] += (decided & truly).sum(axis=1)
            wrong[m] += (decided & ~truly).sum(axis=1)
    rows = []
    for i, t in enumerate(thresholds):
        n_safe, n_unsafe = int(truly[i].sum()), int((~truly[i]).sum())
        row: Figures = {"epsilon": eps, "threshold": t, "threshold_fraction": t / setup.clients,
                        "safe_places": n_safe, "unsafe_places": n_unsafe}
        for m in MECHANISMS:
            row[m] = {
                "safe_fraction": float(hits[m][i] / (n_safe * setup.repetitions)) if n_safe else None,
                "false_safe_rate": float(wrong[m][i] / (n_unsafe * setup.repetitions)) if n_unsafe else None,
                "theory": _safe_theory(m, c, t, eps, setup),
            }
        rows.append(row)
    return rows


def certificates(setup: CertificateSetup, rng: RandomSource, progress: Progress = _quiet) -> Figures:
    """Certified-safe fraction and false-safe rate vs threshold and vs epsilon.

    ``safe_fraction`` is the ADP paper's ``E[beta]`` (the mean over truly
    safe places of the probability to be certified safe); ``false_safe_rate``
    the share of truly unsafe places certified safe (0 for the local
    ``alpha = 0`` certificate, ALap and AGeo; at most ``alpha`` otherwise).
    """
    progress("certificates: drawing the population")
    visits = _visits(setup, rng)
    progress(f"certificates: threshold sweep at eps {setup.epsilon:g}")
    by_threshold = _certificate_sweep(visits, setup, setup.epsilon, list(setup.thresholds), rng)
    by_epsilon = []
    for eps in setup.epsilons:
        progress(f"certificates: eps {eps:g}")
        by_epsilon += _certificate_sweep(visits, setup, eps, list(setup.sweep_thresholds), rng)
    rows = by_threshold + by_epsilon
    never_wrong = ("local_alpha0", "alap", "ageo")
    decisions = {m: _false_safe_total(rows, m, setup.repetitions) for m in MECHANISMS}
    return {
        "clients": setup.clients, "places": setup.places, "visits": int(visits.counts.sum()),
        "repetitions": setup.repetitions, "alpha": setup.alpha, "delta": setup.delta,
        "epsilon": setup.epsilon, "sweep_thresholds": list(setup.sweep_thresholds), "mechanisms": MECHANISMS,
        "by_threshold": by_threshold, "by_epsilon": by_epsilon,
        "false_safe": decisions,
        "never_wrong_errors": sum(decisions[m]["wrong"] for m in never_wrong),
    }


def _false_safe_total(rows: list[Figures], mechanism: str, reps: int) -> dict[str, int]:
    """Unsafe decisions made and how many were "safe", pooled over every setting."""
    made = sum(r["unsafe_places"] * reps for r in rows)
    wrong = sum(round((r[mechanism]["false_safe_rate"] or 0.0) * r["unsafe_places"] * reps) for r in rows)
    return {"decisions": made, "wrong": wrong}


# ==========================================================================
# collusion: the averaging attack (multi-user paper, Sec. B)
# ==========================================================================


@dataclass(frozen=True, kw_only=True)
class CollusionSetup:
    """The averaging attack: ``trials`` coalitions of up to ``max_colluders`` analysts.

    Attributes:
        epsilon, sensitivity: each analyst's level and the query's ``D``.
        margin: the attacker wants ``|estimate - r| < margin``.
        location: Mechanism A's interval of secret locations.
        top_level: correlated releases: analyst levels spread evenly over
            ``[epsilon, top_level]``.
    """

    epsilon: float = 0.5
    sensitivity: float = 1.0
    margin: float = 1.0
    location: tuple[float, float] = (1.5, 2.5)
    top_level: float = 1.0
    max_colluders: int
    trials: int

    def __post_init__(self) -> None:
        for name in ("max_colluders", "trials"):
            _check_positive_int(name, getattr(self, name))
        _check_levels("epsilon", (self.epsilon, self.sensitivity, self.margin, self.top_level))
        if self.top_level < self.epsilon:
            raise ParameterError("top_level", "must be >= epsilon")

    def colluders(self) -> list[int]:
        """A log-spaced grid from 1 to ``max_colluders`` with the paper's ``i``."""
        grid = np.unique(np.round(np.geomspace(1, self.max_colluders, 12)).astype(int))
        need = colluders_needed(self.margin, self.epsilon, self.sensitivity)
        return sorted({int(x) for x in grid} | ({need} if need <= self.max_colluders else set()))


COLLUSION_SETUPS = {
    "small": CollusionSetup(max_colluders=256, trials=4_000),
    "paper": CollusionSetup(max_colluders=1_024, trials=40_000),  # ~1.6 GB of noise at the peak
}


def _collusion_theory(setup: CollusionSetup, sizes: list[int]) -> dict[str, list[float]]:
    """RMSE of the averaged answer: ``b = D/eps``, Laplace variance ``2 b^2``, ``mu ~ U[lo, hi]``."""
    b = setup.sensitivity / setup.epsilon
    lo, hi = setup.location
    mean, var = (lo + hi) / 2.0, (hi - lo) ** 2 / 12.0
    levels = np.linspace(setup.epsilon, setup.top_level, setup.max_colluders)
    sigma = math.sqrt(2.0) * b
    return {
        "independent": [sigma / math.sqrt(i) for i in sizes],
        "mechanism_a": [math.sqrt(mean**2 + (var + 2 * b * b) / i) for i in sizes],
        "mechanism_a_calibrated": [math.sqrt((var + 2 * b * b) / i) for i in sizes],
        # lower bound: the most trusted member's own error (Sec. 4.2)
        "correlated": [math.sqrt(2.0) * setup.sensitivity / float(levels[i - 1]) for i in sizes],
        "independent_within_margin": [math.erf(setup.margin * math.sqrt(i) / (sigma * math.sqrt(2.0))) for i in sizes],
    }


def collusion(setup: CollusionSetup, rng: RandomSource, progress: Progress = _quiet) -> Figures:
    """RMSE and ``P(|estimate - r| < m)`` of coalitions of ``i`` analysts, per scheme."""
    sizes = setup.colluders()
    extra: dict[Scheme, dict[str, Any]] = {
        "independent": {}, "mechanism_a": {"location": setup.location},
        "mechanism_a_calibrated": {"location": setup.location},
        "correlated": {"levels": list(np.linspace(setup.epsilon, setup.top_level, setup.max_colluders))},
    }
    schemes = {}
    for scheme, kwargs in extra.items():
        progress(f"collusion: {scheme}")
        res = collusion_experiment(scheme, sizes, epsilon=setup.epsilon, margin=setup.margin,
                                   sensitivity=setup.sensitivity, trials=setup.trials, rng=rng, **kwargs)
        schemes[scheme] = {"rmse": list(res.rmse), "within_margin": list(res.within_margin),
                           "best_member_rmse": list(res.best_member_rmse)}
    need = colluders_needed(setup.margin, setup.epsilon, setup.sensitivity)
    at_need = sizes.index(need) if need in sizes else None
    return {
        "epsilon": setup.epsilon, "sensitivity": setup.sensitivity, "margin": setup.margin,
        "location": list(setup.location), "top_level": setup.top_level, "trials": setup.trials,
        "colluders": sizes, "paper_colluders": need, "schemes": schemes,
        "theory": _collusion_theory(setup, sizes),
        "independent_within_margin_at_paper_colluders": (
            schemes["independent"]["within_margin"][at_need] if at_need is not None else None),
    }


# ==========================================================================
# registry
# ==========================================================================


@dataclass(frozen=True)
class Scenario:
    """A named scenario: its setups per scale and the function that runs it."""

    name: str
    title: str
    setups: dict[str, Any]
    run: Callable[[Any, RandomSource, Progress], Figures]


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("relaxation", "relaxation round vs one-shot vs composition (gradual-release paper)",
                 RELAXATION_SETUPS, relaxation),
        Scenario("asymmetric-advantage", "rare-item variance, asymmetric vs symmetric at equal epsilon (DESIGN 4)",
                 ADVANTAGE_SETUPS, asymmetric_advantage),
        Scenario("certificates", "certified-safe places: local one-sided vs central ALap/AGeo/(eps,delta)-DP (ADP)",
                 CERTIFICATE_SETUPS, certificates),
        Scenario("collusion", "averaging attack vs colluders: independent, Mechanism A, correlated (multi-user)",
                 COLLUSION_SETUPS, collusion),
    )
}


def run_scenario(name: str, *, scale: str = "small", seed: int = 2026, progress: Progress = _quiet) -> Figures:
    """Run scenario ``name`` at ``scale`` with a ``SeededRandom(seed)`` stream; returns its figures.

    Raises:
        ParameterError: unknown ``scenario`` or ``scale``.
    """
    if name not in SCENARIOS:
        raise ParameterError("scenario", f"must be one of {sorted(SCENARIOS)}, got {name!r}")
    if scale not in SCALES:
        raise ParameterError("scale", f"must be one of {SCALES}, got {scale!r}")
    scenario = SCENARIOS[name]
    return scenario.run(scenario.setups[scale], SeededRandom(seed), progress)
