"""Scenario ``irr-relaxation``: a round that relaxes the IRR as well (docs/irr-relaxation.md).

Every client holds one of ``items`` items (direct encoding), memoizes its
permanent bits and sends a report with the first IRR; a round then relaxes
the IRR (:func:`protocol.irr_relaxation.relax_instantaneous`) and, where
asked, the permanent bits. Per mode the scenario measures

* the round's estimates against a one-shot collection at the round's
  randomizer (fresh clients): MSE ratio 1 (the relaxed reports have the
  one-shot law), both against the plug-in theory;
* how often a client's two reports agree, against ``report_agreement``;

and prints the exact epsilons of the two reports (:func:`report_chain_epsilon`):
relaxed chain, fresh IRR every round, one report at the last level.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aggregator.analysis.decoding import BitCounts, bit_estimates
from aggregator.research.scenarios.common import Figures, Progress, check_positive_int, quiet
from aggregator.research.scenarios.plotting import pyplot, save_figure
from aggregator.research.scenarios.registry import ScenarioParts, register
from protocol.irr_relaxation import relax_instantaneous, report_agreement, report_chain_epsilon
from protocol.randomizers import Randomizer, laplace_rate_from_f
from protocol.rng import RandomSource


@dataclass(frozen=True, kw_only=True)
class IrrSetup:
    """``clients`` clients, ``items`` items (client ``c`` holds item ``c % items``), ``repetitions`` populations."""

    clients: int
    items: int = 32
    repetitions: int

    def __post_init__(self) -> None:
        for name in ("clients", "items", "repetitions"):
            check_positive_int(name, getattr(self, name))


IRR_SETUPS = {
    "small": IrrSetup(clients=20_000, repetitions=20),
    "paper": IrrSetup(clients=1_000_000, repetitions=20),
}


def irr_chains() -> dict[str, tuple[Randomizer, Randomizer]]:
    """The rounds compared: RAPPOR's f = 0.5 with IRR (0.5, 0.75) -> (0.25, 0.75), level kept and doubled; asymmetric."""
    level = laplace_rate_from_f(0.5)
    first = Randomizer(mode="symmetric", level=level, irr_p=0.5, irr_q=0.75)
    return {
        "symmetric, level kept": (first, Randomizer(mode="symmetric", level=level, irr_p=0.25, irr_q=0.75)),
        "symmetric, level doubled": (first, Randomizer(mode="symmetric", level=2 * level, irr_p=0.25, irr_q=0.75)),
        "asymmetric, level 2 -> 4": (Randomizer(mode="asymmetric", level=2.0, irr_q=0.5),
                                     Randomizer(mode="asymmetric", level=4.0, irr_q=0.2)),
    }


def _squared_errors(reports: np.ndarray, randomizer: Randomizer, truth: np.ndarray) -> float:
    counts = BitCounts.from_reports(reports, np.zeros(reports.shape[0], dtype=np.int64), 1)
    return float(np.mean((bit_estimates(counts, randomizer)[0][0] - truth) ** 2))


def _memoized_one_share(randomizer: Randomizer, items: int) -> float:
    p0, p1 = randomizer.permanent_probabilities()
    return p1 / items + p0 * (1.0 - 1.0 / items)


def irr_relaxation(setup: IrrSetup, rng: RandomSource, progress: Progress = quiet) -> Figures:
    """Per chain: MSE of the round vs one-shot vs theory, report agreement, exact epsilons."""
    held = np.arange(setup.clients) % setup.items
    bits = held[:, None] == np.arange(setup.items)[None, :]
    truth = bits.sum(axis=0).astype(np.float64)
    rows = []
    for name, (before, after) in irr_chains().items():
        progress(f"irr-relaxation: {name}")
        relaxed = one_shot = agree = 0.0
        for _ in range(setup.repetitions):
            perm = before.sample_permanent(bits, rng)
            first = before.sample_instantaneous(perm, rng)
            new = before.relax_permanent(bits, perm, after.level, rng) if after.level > before.level else perm
            second = relax_instantaneous(new, first, before, after, rng, previous_permanent=perm)
            relaxed += _squared_errors(second, after, truth)
            one_shot += _squared_errors(after.simulate(bits, rng), after, truth)
            agree += float(np.mean(first == second))
        p, q = after.probabilities()
        theory = float(np.mean((truth * q * (1 - q) + (setup.clients - truth) * p * (1 - p)) / (q - p) ** 2))
        chain = [before, after]
        rows.append({
            "chain": name, "before": [before.level, before.irr_p, before.irr_q],
            "after": [after.level, after.irr_p, after.irr_q],
            "relaxed_mse": relaxed / setup.repetitions, "one_shot_mse": one_shot / setup.repetitions,
            "theory_mse": theory, "agreement": agree / setup.repetitions,
            # predicted where the memoized bits are kept: P(B = 1) = p1 / items + p0 (1 - 1 / items)
            "predicted_agreement": report_agreement(before, after, _memoized_one_share(before, setup.items))[0]
            if after.level == before.level else None,
            "epsilon_relaxed": report_chain_epsilon(chain), "epsilon_fresh": report_chain_epsilon(chain, relaxed=False),
            "epsilon_one_report": report_chain_epsilon([after]),
        })
    return {"clients": setup.clients, "items": setup.items, "repetitions": setup.repetitions, "rows": rows}


# --------------------------------------------------------------------------
# what ``onesided simulate`` prints and draws, and the scenario's entry
# --------------------------------------------------------------------------


def _irr_lines(f: Figures) -> list[str]:
    out = [f"a round relaxing the IRR, {f['clients']:,} clients x {f['items']} items, {f['repetitions']} populations",
           "chain                        MSE relaxed/one-shot  relaxed/theory  agreement (predicted)  "
           "eps relaxed  fresh IRR  one report"]
    for r in f["rows"]:
        predicted = "-" if r["predicted_agreement"] is None else f"{r['predicted_agreement']:.4f}"
        out.append(f"{r['chain']:28s} {r['relaxed_mse'] / r['one_shot_mse']:8.3f}            "
                   f"{r['relaxed_mse'] / r['theory_mse']:8.3f}        {r['agreement']:.4f} ({predicted})       "
                   f"{r['epsilon_relaxed']:.6f}   {r['epsilon_fresh']:.6f}  {r['epsilon_one_report']:.6f}")
    return out


def _plot_irr(f: Figures, path: Path, title: str) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = [r["chain"] for r in f["rows"]]
    at = range(len(names))
    left.bar([i - 0.2 for i in at], [r["relaxed_mse"] / r["theory_mse"] for r in f["rows"]], 0.4, label="relaxed round")
    left.bar([i + 0.2 for i in at], [r["one_shot_mse"] / r["theory_mse"] for r in f["rows"]], 0.4, label="one-shot")
    left.axhline(1.0, color="grey", lw=1)
    left.set_ylabel("MSE / theory")
    for i, key in enumerate(("epsilon_relaxed", "epsilon_fresh", "epsilon_one_report")):
        right.bar([j + (i - 1) * 0.27 for j in at], [r[key] for r in f["rows"]], 0.27, label=key.replace("_", " "))
    right.set_ylabel("exact epsilon of the two reports (one bit)")
    for ax in (left, right):
        ax.set_xticks(list(at), names, rotation=10, fontsize=8)
        ax.legend(fontsize=8)
    save_figure(fig, path, title)


register(ScenarioParts(name="irr-relaxation", setups=IRR_SETUPS, run=irr_relaxation, summary=_irr_lines,
                       plot=_plot_irr))
