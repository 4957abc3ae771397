"""Scenario ``collusion``: collusion: the averaging attack (multi-user paper, Sec. B).

See :mod:`aggregator.research.scenarios` for what every scenario returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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
