"""Scenario ``relaxation``: relaxation: a round costs no accuracy (gradual-release paper, Thm. 10).

See :mod:`aggregator.research.scenarios` for what every scenario returns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aggregator.research.populations import (
    Population,
    SyntheticCity,
    cohort_bit_counts,
    make_population,
    relaxation_experiment,
    theoretical_variance,
)
from aggregator.research.scenarios.common import (
    MODES,
    Figures,
    Progress,
    check_levels,
    check_positive_int,
    chunks,
    quiet,
)
from protocol.accounting import bit_epsilon
from protocol.encodings import BloomEncoding
from protocol.errors import ParameterError
from protocol.randomizers import Mode, Randomizer
from protocol.rng import RandomSource

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
            check_positive_int(name, getattr(self, name))
        check_levels("levels", self.levels)
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


def relaxation(setup: RelaxationSetup, rng: RandomSource, progress: Progress = quiet) -> Figures:
    """MSE after a relaxation round vs one-shot and composition, per grid cell and mode.

    ``cells`` counts the squared errors pooled per point (cells x
    repetitions x chunks). ``ratio = relaxed / one-shot`` (claim: 1, the
    earlier strict release costs no accuracy); ``theory_ratio`` is relaxed
    over the closed-form one-shot variance; ``composition_ratio`` spends the
    same total level by collecting twice (claim: above 1, by
    ``theory_composition_ratio`` with optimal weights).
    """
    city = SyntheticCity(num_places=setup.places)
    pops = [make_population(city, n, setup.encoding, rng) for n in chunks(setup.clients, setup.chunk)]
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
