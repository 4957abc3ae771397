"""Scenario ``discovery``: frequent strings found without a dictionary (prefix metric, docs/decoding.md 8).

Random strings of 8 to 16 letters, Zipf popularity over a universe of them;
every client holds one, draws a cohort uniformly (its group: one prefix
length) and reports that prefix once. The aggregator runs
:func:`aggregator.analysis.discovery.discover` on the counts; figures are
recall and precision against the strings of share ``>= min_share``, over a
grid of epsilon (per client: its one report is everything it sends),
client counts, modes and cohort layouts.

Counts are simulated exactly at the aggregate level: the holders of each
string split over cohorts as a multinomial, a cohort's true ones per bit are
the holders of the prefixes hashed there, and the reported ones are
``Binomial(t, q*) + Binomial(N_c - t, p*)`` per (cohort, bit): the law of the
aggregator's counts when each client randomizes its own bits independently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aggregator.analysis.decoding import BitCounts
from aggregator.analysis.discovery import DiscoverySettings, discover, levels_for, recall_precision
from aggregator.research.aggregate import count_generator
from aggregator.research.scenarios.common import (
    Figures,
    IntArray,
    Progress,
    check_positive_int,
    quiet,
)
from aggregator.research.scenarios.plotting import pyplot, save_figure
from aggregator.research.scenarios.registry import ScenarioParts, register
from protocol.accounting import ValueKind
from protocol.encodings import PrefixEncoding
from protocol.errors import ParameterError
from protocol.local import local_mechanism
from protocol.params import MetricParams
from protocol.randomizers import Mode
from protocol.rng import RandomSource

ALPHABET = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Cohorts of a prefix metric: levels ``first, first + step, ..., max_length + 1``.

    ``per_level`` cohorts for every level but the last, ``last`` cohorts for the last one.
    """

    name: str
    step: int
    first: int
    per_level: int
    last: int

    def lengths(self, max_length: int) -> tuple[int, ...]:
        levels = levels_for(max_length, self.step, self.first)
        return tuple(x for x in levels[:-1] for _ in range(self.per_level)) + (levels[-1],) * self.last


@dataclass(frozen=True, kw_only=True)
class DiscoverySetup:
    """The population and the grid.

    Attributes:
        clients: the headline population (the goal is stated at it).
        universe, min_length, max_length, zipf_exponent: the strings.
        num_bits: Bloom bits per cohort (one hash).
        min_share: strings at least this frequent are the truth.
        epsilons, client_counts: the sweep (symmetric and asymmetric, main layout).
        layouts: the first is the main one; the others are compared at ``epsilon``.
        epsilon: the headline epsilon.
    """

    clients: int
    universe: int = 100_000
    min_length: int = 8
    max_length: int = 16
    zipf_exponent: float = 1.1
    num_bits: int = 2048
    min_share: float = 0.01
    epsilons: tuple[float, ...] = (1.0, 2.0, 4.0)
    client_counts: tuple[int, ...]
    layouts: tuple[Layout, ...]
    epsilon: float = 4.0

    def __post_init__(self) -> None:
        for name in ("clients", "universe", "num_bits"):
            check_positive_int(name, getattr(self, name))
        if not 1 <= self.min_length <= self.max_length:
            raise ParameterError("min_length", f"must be in [1, max_length], got {self.min_length}")
        if not self.layouts:
            raise ParameterError("layouts", "must name at least one layout")


_STEP2 = Layout(name="step 2, 4 cohorts/level, 8 last", step=2, first=3, per_level=4, last=8)
_LAYOUTS = (
    _STEP2,
    Layout(name="step 2, 4 cohorts/level, 4 last", step=2, first=3, per_level=4, last=4),
    Layout(name="step 1, 2 cohorts/level, 8 last", step=1, first=2, per_level=2, last=8),
    Layout(name="step 3, 6 cohorts/level, 8 last", step=3, first=3, per_level=6, last=8),
)

DISCOVERY_SETUPS = {
    "small": DiscoverySetup(clients=200_000, universe=5_000, client_counts=(200_000,), epsilons=(4.0,),
                            layouts=(_STEP2,), num_bits=1024),
    "paper": DiscoverySetup(clients=1_000_000, client_counts=(100_000, 300_000, 1_000_000),
                            epsilons=(1.0, 2.0, 3.0, 4.0, 6.0), layouts=_LAYOUTS),
}


def level_for_epsilon(mode: Mode, epsilon: float, num_hashes: int = 1) -> float:
    """The noise level whose per-report epsilon is ``epsilon``.

    Symmetric categorical: ``eps = 2k ln((1 - f/2) / (f/2))`` with ``f = exp(-level/2)``;
    asymmetric set (one member): ``eps = k level / 2``.
    """
    if local_mechanism(mode).one_sided:
        return 2.0 * epsilon / num_hashes
    half_f = 1.0 / (1.0 + math.exp(epsilon / (2.0 * num_hashes)))
    return -2.0 * math.log(2.0 * half_f)


def _strings(setup: DiscoverySetup, gen: np.random.Generator) -> list[str]:
    letters = np.frombuffer(ALPHABET.encode(), dtype=np.uint8)
    sizes = gen.integers(setup.min_length, setup.max_length + 1, setup.universe)
    out: dict[str, None] = {}
    while len(out) < setup.universe:
        size = int(sizes[len(out)])
        out[letters[gen.integers(0, letters.size, size)].tobytes().decode()] = None
    return list(out)


def _holders(setup: DiscoverySetup, clients: int, cohorts: int, gen: np.random.Generator) -> IntArray:
    """``(universe, cohorts)`` holders of each string in each cohort (Zipf, then uniform cohorts)."""
    weights = np.arange(1, setup.universe + 1, dtype=np.float64) ** -setup.zipf_exponent
    per_string = gen.multinomial(clients, weights / weights.sum())
    out: IntArray = gen.multinomial(per_string, np.full(cohorts, 1.0 / cohorts))
    return out


def reported_counts(params: MetricParams, table: IntArray, holders: IntArray, gen: np.random.Generator) -> BitCounts:
    """Exact draw of the aggregator's counts (module docstring): ``holders`` ``(values, cohorts)``, one hash."""
    m = params.num_bits
    truth = np.stack([np.bincount(table[c, :, 0], weights=holders[:, c], minlength=m)
                      for c in range(params.num_cohorts)]).astype(np.int64)
    totals = holders.sum(axis=0)
    p_star, q_star = params.randomizer().probabilities()
    ones = gen.binomial(truth, q_star) + gen.binomial(totals[:, None] - truth, p_star)
    return BitCounts(ones=ones, totals=totals)


def _metric(setup: DiscoverySetup, layout: Layout, mode: Mode, epsilon: float) -> MetricParams:
    encoding = PrefixEncoding(num_bits=setup.num_bits, num_hashes=1, lengths=layout.lengths(setup.max_length))
    kind: ValueKind = "set" if local_mechanism(mode).one_sided else "categorical"
    return MetricParams(name="discovery", encoding=encoding, mode=mode, value_kind=kind,
                        level=level_for_epsilon(mode, epsilon))


def _run(setup: DiscoverySetup, strings: list[str], truth: list[str], tables: dict[str, IntArray], layout: Layout,
         mode: Mode, epsilon: float, clients: int, gen: np.random.Generator) -> Figures:
    params = _metric(setup, layout, mode, epsilon)
    if layout.name not in tables:
        tables[layout.name] = params.encoding.bit_table(strings)
    holders = _holders(setup, clients, params.num_cohorts, gen)
    counts = reported_counts(params, tables[layout.name], holders, gen)
    found = discover(counts, params, settings=DiscoverySettings(alphabet=ALPHABET, min_share=setup.min_share))
    recall, precision = recall_precision(found.strings, truth)
    share = dict(zip(strings, holders.sum(axis=1) / clients, strict=True))
    return {
        "layout": layout.name, "mode": mode, "clients": clients,
        "epsilon": params.guarantee().epsilon_per_report, "cohorts": params.num_cohorts,
        "recall": recall, "precision": precision, "found": len(found.strings), "truth": len(truth),
        "false": [f"{s} ({share.get(s, 0.0):.4f})" for s in found.strings if s not in truth],
        "missed": [f"{s} ({share[s]:.4f})" for s in truth if s not in found.strings],
        "candidates": sum(level["candidates"] for level in found.levels),
    }


def discovery(setup: DiscoverySetup, rng: RandomSource, progress: Progress = quiet) -> Figures:
    """Recall and precision of prefix discovery over epsilon, clients, modes and layouts."""
    gen = count_generator(rng)
    strings = _strings(setup, gen)
    weights = np.arange(1, setup.universe + 1, dtype=np.float64) ** -setup.zipf_exponent
    truth = [s for s, w in zip(strings, weights / weights.sum(), strict=True) if w >= setup.min_share]
    tables: dict[str, IntArray] = {}
    main = setup.layouts[0]
    rows = []
    modes: tuple[Mode, ...] = ("symmetric", "asymmetric")
    for mode in modes:
        for clients in setup.client_counts:
            for eps in setup.epsilons:
                progress(f"discovery: {mode}, {clients:,} clients, eps {eps:g}")
                rows.append(_run(setup, strings, truth, tables, main, mode, eps, clients, gen))
    layouts = []
    for layout in setup.layouts[1:]:
        for mode in modes:
            progress(f"discovery: layout {layout.name}, {mode}")
            layouts.append(_run(setup, strings, truth, tables, layout, mode, setup.epsilon, setup.clients, gen))
    head = next(r for r in rows if r["mode"] == "symmetric" and r["clients"] == setup.clients
                and math.isclose(r["epsilon"], setup.epsilon, rel_tol=1e-4))
    return {
        "clients": setup.clients, "epsilon": head["epsilon"], "recall": head["recall"],
        "precision": head["precision"], "mode": "symmetric", "layout": main.name,
        "universe": setup.universe, "zipf_exponent": setup.zipf_exponent, "min_share": setup.min_share,
        "frequent_strings": len(truth), "num_bits": setup.num_bits, "rows": rows, "layouts": layouts,
    }


# --------------------------------------------------------------------------
# what ``onesided simulate`` prints and draws, and the scenario's entry
# --------------------------------------------------------------------------


def _discovery_lines(f: Figures) -> list[str]:
    out = [f"discovery of the {f['frequent_strings']} strings of share >= {f['min_share']:g} "
           f"(Zipf {f['zipf_exponent']:g} over {f['universe']:,} strings)",
           "layout                              mode         clients     eps     recall  precision"]
    for r in f["rows"] + f["layouts"]:
        out.append(f"{r['layout']:34s}  {r['mode']:11s}  {r['clients']:>9,}  {r['epsilon']:<6g}  "
                   f"{r['recall']:.2f}    {r['precision']:.2f}")
    return out


def _plot_discovery(f: Figures, path: Path, title: str) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, key in ((left, "recall"), (right, "precision")):
        for mode in ("symmetric", "asymmetric"):
            for clients in sorted({r["clients"] for r in f["rows"]}):
                rows = [r for r in f["rows"] if r["mode"] == mode and r["clients"] == clients]
                ax.plot([r["epsilon"] for r in rows], [r[key] for r in rows], marker="o",
                        label=f"{mode}, {clients:,}")
        ax.axhline(0.9, color="grey", ls="--", lw=1)
        ax.set_xlabel("epsilon per client")
        ax.set_ylabel(f"{key} (strings of share >= {f['min_share']:g})")
    left.legend(fontsize=7)
    save_figure(fig, path, title)


register(ScenarioParts(name="discovery", setups=DISCOVERY_SETUPS, run=discovery, summary=_discovery_lines,
                       plot=_plot_discovery))
