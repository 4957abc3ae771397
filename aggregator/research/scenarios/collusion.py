"""Scenario ``collusion``: collusion: the averaging attack (multi-user paper, Sec. B).

See :mod:`aggregator.research.scenarios` for what every scenario returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aggregator.research.collusion import Scheme, colluders_needed, collusion_experiment
from aggregator.research.scenarios.common import (
    Figures,
    Progress,
    check_levels,
    check_positive_int,
    quiet,
)
from aggregator.research.scenarios.plotting import pyplot, save_figure
from aggregator.research.scenarios.registry import ScenarioParts, register
from protocol.errors import ParameterError
from protocol.rng import RandomSource

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
            check_positive_int(name, getattr(self, name))
        check_levels("epsilon", (self.epsilon, self.sensitivity, self.margin, self.top_level))
        if self.top_level < self.epsilon:
            raise ParameterError("top_level", "must be >= epsilon")

    def colluders(self) -> list[int]:
        """A log-spaced grid from 1 to ``max_colluders`` with the paper's ``i``."""
        grid = np.unique(np.round(np.geomspace(1, self.max_colluders, 12)).astype(int))
        need = colluders_needed(self.margin, self.epsilon, self.sensitivity)
        return sorted({int(x) for x in grid} | ({need} if need <= self.max_colluders else set()))


COLLUSION_SETUPS = {
    "small": CollusionSetup(max_colluders=256, trials=4_000),
    "paper": CollusionSetup(max_colluders=1_024, trials=40_000),  # noise drawn in blocks of 2^20 values
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


def collusion(setup: CollusionSetup, rng: RandomSource, progress: Progress = quiet) -> Figures:
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


# --------------------------------------------------------------------------
# what ``onesided simulate`` prints and draws, and the scenario's entry
# --------------------------------------------------------------------------


def _collusion_lines(f: Figures) -> list[str]:
    sizes = f["colluders"]
    out = [f"averaging attack, eps = {f['epsilon']:g}, D = {f['sensitivity']:g}, margin m = {f['margin']:g}, "
           f"{f['trials']:,} trials; paper's i = max(30, 18 D^2/(m^2 eps^2)) = {f['paper_colluders']}",
           "RMSE   i = " + " ".join(f"{i:>6d}" for i in sizes)]
    for scheme, res in f["schemes"].items():
        out.append(f"{scheme:24s}" + " ".join(f"{x:6.3f}" for x in res["rmse"]))
    at = f["independent_within_margin_at_paper_colluders"]
    if at is not None:
        out.append(f"independent Laplace, P(|estimate - r| < m) at i = {f['paper_colluders']}: {at:.4f} "
                   f"(normal approximation {_at(f, 'independent_within_margin'):.4f})")
    return out


def _at(f: Figures, key: str) -> float:
    return float(f["theory"][key][f["colluders"].index(f["paper_colluders"])])


def _plot_collusion(f: Figures, path: Path, title: str) -> None:
    plt = pyplot()
    sizes, theory = f["colluders"], f["theory"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (scheme, res) in enumerate(f["schemes"].items()):
        left.plot(sizes, res["rmse"], "o-", color=f"C{i}", label=scheme)
        left.plot(sizes, theory[scheme], ":", color=f"C{i}")
        right.plot(sizes, res["within_margin"], "o-", color=f"C{i}", label=scheme)
    for ax in (left, right):
        ax.axvline(f["paper_colluders"], color="grey", ls="--", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("colluding analysts i")
    left.set_yscale("log")
    left.set_ylabel("RMSE of the averaged answer (dotted: theory / bound)")
    left.legend(fontsize=8)
    right.axhline(0.99, color="grey", lw=1)
    right.set_ylabel(f"P(|estimate - r| < m = {f['margin']:g})")
    right.text(f["paper_colluders"], 0.02, f" i = {f['paper_colluders']}", fontsize=8)
    save_figure(fig, path, title)


register(ScenarioParts(name="collusion", setups=COLLUSION_SETUPS, run=collusion, summary=_collusion_lines,
                       plot=_plot_collusion))
