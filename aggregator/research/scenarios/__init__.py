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
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# This package's top stays light (no numpy): ``onesided --help`` lists the scenarios.
Progress = Callable[[str], None]
Figures = dict[str, Any]


def quiet(_: str) -> None:
    """The default progress callback: says nothing."""
    return None

SCALES: tuple[str, ...] = ("small", "paper")


@dataclass(frozen=True)
class Scenario:
    """A named scenario: its module (imported when it runs), the setups' and the function's names there."""

    name: str
    title: str
    module: str
    setups: str
    function: str
    resize: str | None = None  # the module's with_clients(setup, clients, method), if it has clients

    @property
    def has_clients(self) -> bool:
        return self.resize is not None

    def load(self) -> tuple[dict[str, Any], Any, Any]:
        """``(setups by scale, run function, with_clients or None)`` from the scenario's module."""
        module = importlib.import_module(f"aggregator.research.scenarios.{self.module}")
        resize = getattr(module, self.resize) if self.resize else None
        return getattr(module, self.setups), getattr(module, self.function), resize


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("relaxation", "relaxation round vs one-shot vs composition (gradual-release paper)",
                 "relaxation", "RELAXATION_SETUPS", "relaxation", "with_clients"),
        Scenario("asymmetric-advantage", "rare-item variance, asymmetric vs symmetric at equal epsilon",
                 "advantage", "ADVANTAGE_SETUPS", "asymmetric_advantage", "with_clients"),
        Scenario("certificates", "certified-safe places: local one-sided vs central ALap/AGeo/(eps,delta)-DP (ADP)",
                 "certificates", "CERTIFICATE_SETUPS", "certificates", "with_clients"),
        Scenario("city", "the demo's synthetic city: relaxation round, decoding, certificates",
                 "city", "CITY_SETUPS", "city", "with_clients"),
        Scenario("collusion", "averaging attack vs colluders: independent, Mechanism A, correlated (multi-user)",
                 "collusion", "COLLUSION_SETUPS", "collusion"),
        Scenario("association", "joint of two variables from one pair metric: TV vs epsilon and clients",
                 "association", "ASSOCIATION_SETUPS", "association"),
        Scenario("discovery", "frequent strings without a dictionary (prefix metric): recall and precision",
                 "discovery", "DISCOVERY_SETUPS", "discovery"),
        Scenario("irr-relaxation", "a round relaxing the IRR too: one-shot law, exact epsilons, report agreement",
                 "irr", "IRR_SETUPS", "irr_relaxation"),
        Scenario("sql-counting", "FLEX join count answered to colluding analysts: Laplace, Mechanism A, correlated",
                 "multianalyst", "SQL_SETUPS", "sql_counting"),
        Scenario("multi-analyst-regression", "logistic regression on iris: objective perturbation with location mu "
                 "(multi-user paper Fig. 6), analysts' correlated vs independent models",
                 "multianalyst", "REGRESSION_SETUPS", "multi_analyst_regression"),
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
    scenario = SCENARIOS[name]
    setups, run, resize = scenario.load()
    setup = setups[scale]
    if resize is None:
        if clients is not None or method != "per-client" or engine is not None or noise is not None:
            raise ParameterError("method", f"scenario {name!r} has no clients to simulate another way")
        result: Figures = run(setup, SeededRandom(seed), progress)
        return result
    if clients is not None:
        setup = resize(setup, clients, method)
    if noise is not None:
        if name != "city":
            raise ParameterError("noise", "only the city scenario has keyed noise")
        setup = dataclasses.replace(setup, noise=noise)
    if engine is not None:
        if method != "per-client":
            raise ParameterError("engine", "only per-client paths run on an engine")
        result = run(setup, SeededRandom(seed), progress, method=method, engine=engine)
        return result
    result = run(setup, SeededRandom(seed), progress, method=method)
    return result


__all__ = ["SCALES", "SCENARIOS", "Scenario", "run_scenario"]
