"""Scenario ``relaxation``: relaxation: a round costs no accuracy (gradual-release paper, Thm. 10).

See :mod:`aggregator.research.scenarios` for what every scenario returns.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from aggregator.research.aggregate import bloom_bit_truth, count_generator, relaxation_draws
from aggregator.research.arrays import register_array_block
from aggregator.research.engine import BlockCounts, Engine, LocalEngine, block_seeds, root_seed
from aggregator.research.fused import DrawLaw
from aggregator.research.populations import (
    RelaxationDraw,
    RelaxationResult,
    SyntheticCity,
    cohort_bit_counts,
    make_population,
    relaxation_draw,
    score_relaxation,
    sort_by_cohort,
    theoretical_variance,
)
from aggregator.research.scenarios.common import (
    MODES,
    Figures,
    IntArray,
    Progress,
    check_levels,
    check_method,
    check_positive_int,
    quiet,
)
from aggregator.research.scenarios.plotting import pyplot, save_figure
from aggregator.research.scenarios.registry import ScenarioParts, register
from protocol.accounting import bit_epsilon
from protocol.encodings import BloomEncoding
from protocol.randomizers import Mode, Randomizer
from protocol.rng import RandomSource, SeededRandom

# ==========================================================================
# relaxation: a round costs no accuracy (gradual-release paper, Thm. 10)
# ==========================================================================


@dataclass(frozen=True, kw_only=True)
class RelaxationSetup:
    """Population and grid of the ``relaxation`` scenario.

    Attributes:
        clients: simulated clients.
        chunk: clients per block of the per-client path (one seed each,
            :mod:`aggregator.research.engine`; the last block may be shorter).
            Blocks return their cells' counts, and every estimate is the
            aggregator's, from the whole population's counts.
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


def _composition_theory(truth: IntArray, totals: IntArray, base: Randomizer, level_to: float) -> tuple[float, float]:
    """Mean over cells of the one-shot variance at ``level_to`` and of the composed one.

    Composition: the first collection (variance ``v1``) and an independent
    one at ``level_to - level_from`` (``v2``) combined with inverse-variance
    weights: ``v1 v2 / (v1 + v2)``.
    """
    t, n = truth.astype(np.float64), totals.astype(np.float64)[:, None]
    v1 = theoretical_variance(t, n, base)
    v2 = theoretical_variance(t, n, base.with_level(level_to - base.level))
    v_to = theoretical_variance(t, n, base.with_level(level_to))
    both = np.divide(v1 * v2, v1 + v2, out=np.zeros_like(v1), where=(v1 + v2) > 0)
    return float(np.mean(v_to)), float(np.mean(both))


# One population's truth and its experiment: (truth ones, totals, run(base, level_to, repetitions)).
Truth = tuple[IntArray, IntArray, Callable[[Randomizer, float, int], RelaxationResult]]


def _draw_key(mode: Mode, pair: tuple[float, float], rep: int) -> str:
    return f"{mode}/{pair[0]!r}/{pair[1]!r}/{rep}"


_DRAW_PARTS = ("first", "relaxed", "one_shot", "extra")


def relaxation_block(setup: RelaxationSetup, index: int, seed: np.random.SeedSequence) -> BlockCounts:
    """Clients ``index * chunk ..``: their cells' truth and every grid draw's ones, from ``SeededRandom(seed)``.

    The population is drawn, then every (mode, pair, repetition) in order
    (:func:`~aggregator.research.populations.relaxation_draw`, bit level).
    """
    n = min(setup.chunk, setup.clients - index * setup.chunk)
    rng = SeededRandom(seed)
    cohorts = setup.encoding.num_cohorts
    pop = sort_by_cohort(make_population(SyntheticCity(num_places=setup.places), n, setup.encoding, rng))
    truth, totals = cohort_bit_counts(pop.bits, pop.cohorts, cohorts)
    out: BlockCounts = {"truth": truth, "totals": totals}
    for mode in MODES:
        for pair in setup.pairs():
            base = Randomizer(mode=mode, level=pair[0])
            for rep in range(setup.repetitions):
                draw = relaxation_draw(pop.bits, pop.cohorts, cohorts, base, pair[1], rng)
                for part, ones in zip(_DRAW_PARTS, draw, strict=True):
                    out[f"{_draw_key(mode, pair, rep)}/{part}"] = ones
    return out


def relaxation_block_array(xp: Any, setup: RelaxationSetup, index: int, seed: np.random.SeedSequence) -> BlockCounts:
    """:func:`relaxation_block` written against the array namespace ``xp`` (NumPy or CuPy): same keys, same laws.

    The city's sets are drawn by inversion of the same CDFs as
    :meth:`SyntheticCity.draw_sets` (on the device), the cohorts' sizes by
    one multinomial (clients are exchangeable; the CPU block sorts them by
    cohort too), every bit exactly at its probability
    (:func:`~aggregator.research.arrays.exact_bits`): the permanent bits,
    the round's relaxation (the mechanism's ``relaxed_bit_table``, the law its
    ``relax_permanent`` samples), the
    one-shot and extra collections. Another stream than the CPU block's.
    """
    from aggregator.research.arrays import cohort_sums, exact_bits  # noqa: PLC0415 (beside register_array_block)

    device, ties, host = seed.spawn(3)
    gen = xp.random.default_rng(device)
    totals, edges, bits = _block_population(xp, setup, index, gen, host)

    def ones(reports: Any) -> IntArray:
        return cohort_sums(xp, reports, edges)

    def draw(probabilities: list[Any], choice: Any) -> Any:
        return exact_bits(xp, gen, probabilities, choice, ties.spawn(1)[0])

    b8 = bits.astype(xp.uint8)
    out: BlockCounts = {"truth": ones(bits), "totals": totals}
    for key, law in _grid_laws(setup):
        perm = draw(list(law.first), b8)
        relaxed = draw(list(law.relaxed), perm.astype(xp.uint8) + 2 * b8)
        for part, reports in (("first", perm), ("relaxed", relaxed),
                              ("one_shot", draw(list(law.one_shot), b8)), ("extra", draw(list(law.extra), b8))):
            out[f"{key}/{part}"] = ones(reports)
    return out


def relaxation_block_fused(xp: Any, setup: RelaxationSetup, index: int, seed: np.random.SeedSequence) -> BlockCounts:
    """:func:`relaxation_block_array` with every draw in one kernel pass (:mod:`aggregator.research.fused`).

    The same population as the array block from the same seed (its first
    three children), then the kernel keyed by the fourth: Philox4x32-10
    words compared exactly, counted per (cohort, bit) in registers; the rare
    ties finished on the host. Same keys and laws as the array block.
    """
    from aggregator.research.arrays import cohort_sums  # noqa: PLC0415 (beside register_array_block)
    from aggregator.research.fused import relaxation_counts  # noqa: PLC0415

    device, ties, host, kernel_key = seed.spawn(4)
    totals, edges, bits = _block_population(xp, setup, index, xp.random.default_rng(device), host)
    grid = _grid_laws(setup)
    counts = relaxation_counts(xp, bits, edges, [law for _, law in grid], kernel_key.generate_state(2, dtype=np.uint32),
                               SeededRandom(ties))
    out: BlockCounts = {"truth": cohort_sums(xp, bits, edges), "totals": totals}
    for d, (key, _) in enumerate(grid):
        for q, part in enumerate(_DRAW_PARTS):
            out[f"{key}/{part}"] = counts[d, q]
    return out


def _block_population(xp: Any, setup: RelaxationSetup, index: int, gen: Any,
                      host: np.random.SeedSequence) -> tuple[IntArray, list[int], Any]:
    """Block ``index``'s cohort sizes (one multinomial from ``host``), their edges, and its clients' bits on ``xp``."""
    n = min(setup.chunk, setup.clients - index * setup.chunk)
    enc, city = setup.encoding, SyntheticCity(num_places=setup.places)
    h = enc.num_cohorts
    totals = np.random.default_rng(host).multinomial(n, [1.0 / h] * h).astype(np.int64)
    edges = np.concatenate(([0], np.cumsum(totals))).tolist()
    cohorts = xp.asarray(np.repeat(np.arange(h), totals))
    return totals, edges, _city_bits_array(xp, gen, city, _city_table(enc, city.num_places), cohorts, enc.num_bits)


def _grid_laws(setup: RelaxationSetup) -> list[tuple[str, DrawLaw]]:
    """Every (mode, pair, repetition) in order, with its four parts' laws."""
    out: list[tuple[str, DrawLaw]] = []
    for mode in MODES:
        for pair in setup.pairs():
            base, to = Randomizer(mode=mode, level=pair[0]), Randomizer(mode=mode, level=pair[1])
            law = DrawLaw(first=base.permanent_probabilities(), relaxed=tuple(base.mechanism.relaxed_bit_table(*pair)),
                          one_shot=to.permanent_probabilities(),
                          extra=base.with_level(pair[1] - pair[0]).permanent_probabilities())
            out.extend((_draw_key(mode, pair, rep), law) for rep in range(setup.repetitions))
    return out


@functools.lru_cache(maxsize=8)
def _city_table(encoding: BloomEncoding, places: int) -> np.ndarray:
    """``encoding.bit_table`` of the city's place names (hashed once per process)."""
    return encoding.bit_table(list(SyntheticCity(num_places=places).names()))


def _city_bits_array(xp: Any, gen: Any, city: SyntheticCity, table: np.ndarray, cohorts: Any, num_bits: int) -> Any:
    """Every client's Bloom bits: set sizes and places by inversion of the city's CDFs, then the table's bits."""
    n, width = int(cohorts.shape[0]), city.max_places
    size_cdf = xp.asarray(np.cumsum(city.size_pmf()))
    sizes = xp.minimum(xp.searchsorted(size_cdf, gen.random(n), side="right") + 1, width)
    place_cdf = np.cumsum(city.popularity())
    place_cdf[-1] = 1.0
    picks = xp.minimum(xp.searchsorted(xp.asarray(place_cdf), gen.random((n, width)), side="right"),
                       city.num_places - 1)
    valid = xp.arange(width)[None, :] < sizes[:, None]
    rows = xp.broadcast_to(xp.arange(n)[:, None], (n, width))[valid]
    idx = xp.asarray(table)[cohorts[:, None], picks][valid]  # (pairs, k)
    bits = xp.zeros((n, num_bits), dtype=bool)
    bits[xp.repeat(rows, table.shape[2]), idx.ravel()] = True
    return bits


register_array_block(relaxation_block, relaxation_block_array, fused=relaxation_block_fused)


def _per_client_truths(setup: RelaxationSetup, rng: RandomSource, engine: Engine, progress: Progress) -> list[Truth]:
    """Every client's bits, in blocks on ``engine``; the whole population's counts, scored once per grid cell."""
    blocks = -(-setup.clients // setup.chunk)
    counts = engine.run(relaxation_block, setup, block_seeds(root_seed(rng), blocks), progress)
    truth, totals = counts["truth"], counts["totals"]

    def run(base: Randomizer, level_to: float, reps: int) -> RelaxationResult:
        pair = (base.level, level_to)
        draws: list[RelaxationDraw] = []
        for rep in range(reps):
            key = _draw_key(base.mode, pair, rep)
            first, relaxed, one_shot, extra = (counts[f"{key}/{part}"] for part in _DRAW_PARTS)
            draws.append((first, relaxed, one_shot, extra))
        return score_relaxation(truth, totals, base, level_to, draws)

    return [(truth, totals, run)]


def _aggregate_truths(setup: RelaxationSetup, rng: RandomSource) -> list[Truth]:
    """One population of ``clients``, drawn and randomized per (cohort, bit) cell (docs/simulation.md)."""
    city = SyntheticCity(num_places=setup.places)
    gen = count_generator(rng)
    truth, totals = bloom_bit_truth(city, setup.clients, setup.encoding, gen)

    def run(base: Randomizer, level_to: float, reps: int) -> RelaxationResult:
        return score_relaxation(truth, totals, base, level_to,
                                relaxation_draws(truth, totals, base, level_to, reps, gen))

    return [(truth, totals, run)]


def _relaxation_cell(pops: list[Truth], mode: Mode, pair: tuple[float, float], reps: int) -> Figures:
    level_from, level_to = pair
    base = Randomizer(mode=mode, level=level_from)
    sums = dict.fromkeys(("first", "relaxed", "one_shot", "composition", "theory", "theory_composition"), 0.0)
    cells = 0
    for truth, totals, experiment in pops:
        res = experiment(base, level_to, reps)
        v_to, v_both = _composition_theory(truth, totals, base, level_to)
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


def with_clients(setup: RelaxationSetup, clients: int, method: str) -> RelaxationSetup:
    """``setup`` at ``clients`` (the per-client path keeps its block size)."""
    check_positive_int("clients", clients)
    return replace(setup, clients=clients, chunk=min(clients, setup.chunk))


def relaxation(setup: RelaxationSetup, rng: RandomSource, progress: Progress = quiet, *,
               method: str = "per-client", engine: Engine | None = None) -> Figures:
    """MSE after a relaxation round vs one-shot and composition, per grid cell and mode.

    ``cells`` counts the squared errors pooled per point (cells x
    repetitions), each of an estimate from the whole population. ``ratio = relaxed / one-shot`` (claim: 1, the
    earlier strict release costs no accuracy); ``theory_ratio`` is relaxed
    over the closed-form one-shot variance; ``composition_ratio`` spends the
    same total level by collecting twice (claim: above 1, by
    ``theory_composition_ratio`` with optimal weights).

    ``method``: ``"per-client"`` draws every client's permanent bits and
    relaxes them bit by bit (``relax_permanent``), in blocks of ``chunk``
    on ``engine`` (local by default; Dask gives identical figures);
    ``"aggregate"`` draws the cells' counts directly
    (:mod:`aggregator.research.aggregate`), any ``clients``.
    """
    check_method(method)
    progress(f"relaxation: drawing {setup.clients:,} clients ({method})")
    if method == "aggregate":
        pops = _aggregate_truths(setup, rng)
    else:
        block_clients = getattr(engine, "block_clients", None)  # an array engine's preferred block size
        if block_clients is not None:
            setup = replace(setup, chunk=min(setup.clients, block_clients))
        pops = _per_client_truths(setup, rng, engine or LocalEngine(), progress)
    grid = []
    for mode in MODES:
        for pair in setup.pairs():
            progress(f"relaxation: {mode} {pair[0]:g} -> {pair[1]:g}")
            grid.append(_relaxation_cell(pops, mode, pair, setup.repetitions))
    ratios = [c["ratio"] for c in grid]
    return {
        "clients": setup.clients, "method": method,
        "engine": None if method == "aggregate" else (engine or LocalEngine()).name,
        "encoding": setup.encoding.to_dict(), "places": setup.places,
        "repetitions": setup.repetitions, "grid": grid,
        "ratio_min": min(ratios), "ratio_max": max(ratios),
        "composition_ratio_min": min(c["composition_ratio"] for c in grid),
    }


# --------------------------------------------------------------------------
# what ``onesided simulate`` prints and draws, and the scenario's entry
# --------------------------------------------------------------------------


def _relaxation_lines(f: Figures) -> list[str]:
    out = [f"relaxation round vs one-shot at the new level, {f['clients']:,} clients, "
           f"{f['grid'][0]['cells']:,} squared errors of (cohort, bit) estimates per point",
           "mode        level     eps_bit        relaxed/one-shot  relaxed/theory  composition/one-shot (theory)"]
    for c in f["grid"]:
        out.append(f"{c['mode']:11s} {c['level_from']:g} -> {c['level_to']:<4g} "
                   f"{c['epsilon_bit_from']:.2f} -> {c['epsilon_bit_to']:.2f}   {c['ratio']:6.3f}"
                   f"            {c['theory_ratio']:6.3f}          {c['composition_ratio']:6.3f} "
                   f"({c['theory_composition_ratio']:.3f})")
    out.append(f"relaxed/one-shot in [{f['ratio_min']:.3f}, {f['ratio_max']:.3f}] (claim: 1, no accuracy lost); "
               f"composition at least {f['composition_ratio_min']:.2f}x worse")
    return out


def _plot_relaxation(f: Figures, path: Path, title: str) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, mode in zip(axes, ("symmetric", "asymmetric"), strict=True):
        cells = [c for c in f["grid"] if c["mode"] == mode]
        x = list(range(len(cells)))
        ax.bar([i - 0.2 for i in x], [c["ratio"] for c in cells], 0.4, label="relaxation round / one-shot")
        ax.bar([i + 0.2 for i in x], [c["composition_ratio"] for c in cells], 0.4, label="composition / one-shot")
        ax.scatter([i + 0.2 for i in x], [c["theory_composition_ratio"] for c in cells], color="black", marker="_",
                   s=200, zorder=3, label="composition, theory")
        ax.axhline(1.0, color="grey", lw=1, ls="--")
        ax.set_xticks(x, [f"{c['level_from']:g}->{c['level_to']:g}" for c in cells])
        ax.set_xlabel("noise level (rate) from -> to")
        ax.set_title(f"{mode}")
    axes[0].set_ylabel("MSE / MSE of a one-shot collection")
    axes[0].legend(fontsize=8)
    save_figure(fig, path, title)


register(ScenarioParts(name="relaxation", setups=RELAXATION_SETUPS, run=relaxation, resize=with_clients,
                       summary=_relaxation_lines, plot=_plot_relaxation))
