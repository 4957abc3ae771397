"""Research scenarios behind ``onesided simulate`` (docs/simulation.md).

Each scenario reproduces one claim of the papers on vectorized simulated
populations, through the same functions the client and the aggregator run
(``Randomizer``, the relaxation steps, ``bit_estimates``, the one-sided
certificates, the central mechanisms), and returns its key figures as a
JSON-ready dict next to the closed-form prediction:

* ``relaxation`` (gradual-release paper, Sec. 3, Thm. 10): MSE of
  the per-(cohort, bit) estimates after a relaxation round, against a
  one-shot collection at the new level and against plain composition, over
  a grid of ``(level_from, level_to)`` in both modes. Claim: ratio 1.
* ``asymmetric-advantage``: variance of a rare item's estimate,
  asymmetric over symmetric at equal per-bit epsilon. Claim: ``1 - e^-eps``.
* ``certificates`` (ADP paper, Sec. VI): share of the truly safe places
  certified safe (``E[beta]``) and share of the unsafe ones wrongly
  certified, against the threshold and the epsilon, for local one-sided
  certificates and the central ALap, AGeo and the best ``(eps, delta)``-DP
  sanitizer. Claim: the one-sided ones are never wrong at ``alpha = 0``.
* ``city`` (the demo's workload): a synthetic city's visits, a relaxation
  round, decoding and one-sided certificates, without the server.
* ``collusion`` (multi-user paper, Sec. B): the averaging attack against
  independent Laplace answers, Mechanism A and correlated releases, with the
  paper's ``i = max{30, 18 D^2 / (m^2 eps^2)}``.
* ``sql-counting`` and ``multi-analyst-regression`` (multi-user paper,
  experiments): a FLEX join count answered to colluding analysts, and
  private logistic regression on iris with non-zero-mean noise and several
  analysts' correlated or independent models.
* ``irr-relaxation``: a round that relaxes the instantaneous randomized
  response too; the round's law, the exact epsilons, how often reports agree.

:data:`SCENARIOS` is the catalogue (name, title, module: light, for
``onesided --help``); each scenario module ends with its one entry
(:class:`~aggregator.research.scenarios.registry.ScenarioParts`: setups, run
function, resize, printed summary and plot), which ``onesided simulate``
reads once the module is imported.

Every scenario has a ``small`` setup (seconds; what the tests run) and a
``paper`` setup (up to a million simulated clients, minutes). Randomness
comes from one :class:`~protocol.rng.SeededRandom` per run. The scenarios
with clients also take ``clients`` (any number) and ``method``:
``"per-client"`` (every client's set and bits; rounds relax the bits
without the noise) or ``"aggregate"`` (the cells' counts drawn exactly,
10^9 clients in seconds; docs/simulation.md).
Their per-client paths run in seeded blocks on an engine (local or Dask,
identical figures for the same seed).

>>> run_scenario("collusion", scale="small", seed=1)["paper_colluders"]
72
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aggregator.research.scenarios.registry import Figures, ScenarioParts, registered_parts

# This package's top stays light (no numpy): ``onesided --help`` lists the scenarios.
Progress = Callable[[str], None]


def quiet(_: str) -> None:
    """The default progress callback: says nothing."""
    return None

SCALES: tuple[str, ...] = ("small", "paper")


@dataclass(frozen=True)
class Scenario:
    """A scenario in the catalogue: its name, title and module (imported when it runs).

    The module registers the rest (setups, run function, summary, plot) with
    :func:`~aggregator.research.scenarios.registry.register`.
    """

    name: str
    title: str
    module: str

    def load(self) -> ScenarioParts:
        """The scenario's registered parts (importing its module)."""
        return registered_parts(self.name, self.module)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("relaxation", "relaxation round vs one-shot vs composition (gradual-release paper)",
                 "relaxation"),
        Scenario("asymmetric-advantage", "rare-item variance, asymmetric vs symmetric at equal epsilon",
                 "advantage"),
        Scenario("certificates", "certified-safe places: local one-sided vs central ALap/AGeo/(eps,delta)-DP (ADP)",
                 "certificates"),
        Scenario("city", "the demo's synthetic city: relaxation round, decoding, certificates", "city"),
        Scenario("collusion", "averaging attack vs colluders: independent, Mechanism A, correlated (multi-user)",
                 "collusion"),
        Scenario("association", "joint of two variables from one pair metric: TV vs epsilon and clients",
                 "association"),
        Scenario("discovery", "frequent strings without a dictionary (prefix metric): recall and precision",
                 "discovery"),
        Scenario("irr-relaxation", "a round relaxing the IRR too: one-shot law, exact epsilons, report agreement",
                 "irr"),
        Scenario("sql-counting", "FLEX join count answered to colluding analysts: Laplace, Mechanism A, correlated",
                 "multianalyst"),
        Scenario("multi-analyst-regression", "logistic regression on iris: objective perturbation with location mu "
                 "(multi-user paper Fig. 6), analysts' correlated vs independent models",
                 "multianalyst"),
    )
}


def run_scenario(name: str, *, scale: str = "small", seed: int = 2026, progress: Progress = quiet,
                 clients: int | None = None, method: str = "per-client", engine: Any = None,
                 noise: str | None = None) -> Figures:
    """Run scenario ``name`` at ``scale`` with a ``SeededRandom(seed)`` stream; returns its figures.

    Args:
        clients: replaces the setup's number of clients (its thresholds scale with it).
        method: ``"per-client"`` or ``"aggregate"``.
        engine: an :class:`~aggregator.research.engine.Engine` for a per-client path (default: local).
        noise: ``city``'s per-client noise, ``"seeded"`` or ``"keyed"`` (the SDK's per-client secrets).

    Raises:
        ParameterError: unknown ``scenario``, ``scale`` or ``method``; ``clients``,
            ``method`` or ``engine`` for a scenario without them.
    """
    from protocol.errors import ParameterError
    from protocol.rng import SeededRandom

    if name not in SCENARIOS:
        raise ParameterError("scenario", f"must be one of {sorted(SCENARIOS)}, got {name!r}")
    if scale not in SCALES:
        raise ParameterError("scale", f"must be one of {SCALES}, got {scale!r}")
    parts = SCENARIOS[name].load()
    setup, run, resize = parts.setups[scale], parts.run, parts.resize
    if resize is None:
        if clients is not None or method != "per-client" or engine is not None or noise is not None:
            raise ParameterError("method", f"scenario {name!r} has no clients to simulate another way")
        result: Figures = run(setup, SeededRandom(seed), progress)
        return result
    if clients is not None:
        setup = resize(setup, clients, method)
    if noise is not None:
        if not parts.keyed_noise:
            raise ParameterError("noise", "only the city scenario has keyed noise")
        setup = dataclasses.replace(setup, noise=noise)
    if engine is not None:
        if method != "per-client":
            raise ParameterError("engine", "only per-client paths run on an engine")
        result = run(setup, SeededRandom(seed), progress, method=method, engine=engine)
        return result
    result = run(setup, SeededRandom(seed), progress, method=method)
    return result


__all__ = ["SCALES", "SCENARIOS", "Scenario", "ScenarioParts", "run_scenario"]
