"""The gradual-release paper's constructions, and the ``simulate`` scenarios, for ``onesided reproduce``.

* Theorem 10 (the lazy step, Algorithm 1): ``P(V2 = V1) = (e1/e2)^2``,
  ``Var V2 = 2/e2^2``, ``corr(V1, V2) = e1/e2``; Theorem 12 (chains:
  ``corr(V1, V3) = e1/e3``); eq. 28 (tightening: ``Var = 2/e1^2``).
* The process ``{V_eps}`` is lazy: on ``[1, 100]`` it jumps
  ``2 ln 100 = 9.21`` times on average (``P(no jump on [e, e + d]) =
  (e/(e + d))^2``, a jump rate ``2/e``); a chain on a grid of ``S`` steps
  jumps ``sum_i 1 - (e_i/e_{i+1})^2`` times, which tends to ``2 ln 100``.
* Eqs. 45-46 (RAPPOR as thresholded Laplace): ``[0 + V > 1/2]`` is 1 with
  probability ``f/2 = exp(-e/2)/2``.
* The ``simulate`` scenarios whose single runs are quoted in
  benchmarks/RESULTS.md (relaxation, asymmetric-advantage, collusion, and
  the multi-user paper's FLEX count, sql-counting), rerun at seeds
  ``seed, seed + 1, ...``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aggregator.research.reproduce import SIZES, Outcome, Row, verdict

GR = "gradual release"
__all__ = ["jumps", "lazy_step", "rappor_threshold", "scenario_advantage", "scenario_collusion", "scenario_runs",
           "scenario_relaxation", "scenario_sql_counting"]
LEVELS = (1.0, 2.0, 4.0)


def _sources(seed: int, reps: int) -> list[Any]:
    from protocol.rng import SeededRandom

    return [SeededRandom(child) for child in np.random.SeedSequence(seed).spawn(reps)]


def lazy_step(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """Theorem 10, Theorem 12 and eq. 28 on ``lazy_n`` draws per repetition."""
    from protocol.relaxation import relax_laplace, tighten_laplace

    n = SIZES[scale]["lazy_n"]
    e1, e2, e3 = LEVELS
    got: dict[str, list[float]] = {k: [] for k in ("stay", "var", "corr", "chain", "tight")}
    for rng in _sources(seed, SIZES[scale]["lazy"]):
        v1 = rng.laplace(e1, n)
        v2 = relax_laplace(v1, e1, e2, rng)
        v3 = relax_laplace(v2, e2, e3, rng)
        got["stay"].append(float(np.mean(v2 == v1)))
        got["var"].append(float(np.var(v2) * e2**2 / 2))
        got["corr"].append(float(np.corrcoef(v1, v2)[0, 1]))
        got["chain"].append(float(np.corrcoef(v1, v3)[0, 1]))
        got["tight"].append(float(np.var(tighten_laplace(v2, e2, e1, rng)) * e1**2 / 2))
    setting = f"e1 {e1:g}, e2 {e2:g}, e3 {e3:g}, {n:,} draws per repetition"
    expected = {"stay": (e1 / e2) ** 2, "var": 1.0, "corr": e1 / e2, "chain": e1 / e3, "tight": 1.0}
    text = {"stay": ("Theorem 10 / eq. 25", "P(V2 = V1) = (e1/e2)^2"),
            "var": ("Theorem 10", "Var V2 e2^2 / 2 = 1 (V2 ~ Lap(1/e2))"),
            "corr": ("Theorem 10", "corr(V1, V2) = e1/e2"),
            "chain": ("Theorem 12", "corr(V1, V3) = e1/e3 over two steps"),
            "tight": ("eq. 28", "tightened Var e1^2 / 2 = 1")}
    rows = [Row(experiment="gr-lazy-step", source=f"{GR} {text[k][0]}", quantity=text[k][1], parameters=setting,
                paper=expected[k], paper_text="exact", values=tuple(got[k]),
                **verdict(expected[k], got[k], 0.005, "the sampler's law")) for k in got]
    return Outcome(rows=rows)


def jumps(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """The lazy process's jumps on [1, 100]: the grid's exact expectation and the limit 2 ln 100."""
    from protocol.relaxation import relax_laplace

    chains, steps = SIZES[scale]["jump_chains"], SIZES[scale]["jump_steps"]
    grid = np.geomspace(1.0, 100.0, steps + 1)
    exact = float(np.sum(1.0 - (grid[:-1] / grid[1:]) ** 2))
    means: list[float] = []
    for rng in _sources(seed, SIZES[scale]["jump_reps"]):
        v = rng.laplace(1.0, chains)
        count = np.zeros(chains)
        for low, high in zip(grid[:-1], grid[1:], strict=True):
            nxt = relax_laplace(v, float(low), float(high), rng)
            count += nxt != v
            v = nxt
        means.append(float(np.mean(count)))
    setting = f"{steps} geometric steps from 1 to 100, {chains:,} chains per repetition"
    rows = [
        Row(experiment="gr-jumps", source=f"{GR} Sec. 3 (lazy process)", quantity="mean jumps of a chain on the grid",
            parameters=setting, paper=exact, paper_text=f"grid: sum 1 - (e_i/e_i+1)^2 = {exact:.4f}",
            values=tuple(means), **verdict(exact, means, 0.05, "the sampler's stay probability")),
        Row(experiment="gr-jumps", source=f"{GR} Sec. 3 (lazy process)", quantity="mean jumps, against the continuum",
            parameters=setting, paper=2 * math.log(100), paper_text="2 ln 100 = 9.210", values=tuple(means),
            agree=None, why=f"a grid of {steps} steps has {exact:.4f} expected jumps: the gap to 2 ln 100 is the grid's"),
    ]
    return Outcome(rows=rows)


def rappor_threshold(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """Eqs. 45-46: a 0 bit reported as 1 by ``[V > 1/2]``, ``V ~ Lap(1/e)``, with probability ``exp(-e/2)/2``."""
    n = SIZES[scale]["lazy_n"]
    rows = []
    for level in (0.5, 2.0):
        values = [float(np.mean(rng.laplace(level, n) > 0.5)) for rng in _sources(seed, SIZES[scale]["lazy"])]
        expected = 0.5 * math.exp(-level / 2)
        rows.append(Row(experiment="gr-rappor", source=f"{GR} eqs. 45-46", quantity=f"P(report 1 given bit 0) at e = {level:g}",
                        parameters=f"{n:,} bits per repetition", paper=expected, paper_text="f/2 = exp(-e/2)/2",
                        values=tuple(values), **verdict(expected, values, 0.003, "the threshold")))
    return Outcome(rows=rows)


# --------------------------------------------------------------------------
# the simulate scenarios quoted in benchmarks/RESULTS.md, over several seeds
# --------------------------------------------------------------------------


def scenario_runs(name: str, scale: str, seed: int, size: str = "scenario") -> list[dict[str, Any]]:
    """``onesided simulate NAME --scale SCALE`` at seeds ``seed, seed + 1, ...`` (``SIZES[scale][size]`` runs)."""
    from aggregator.research.scenarios import run_scenario

    return [run_scenario(name, scale=scale, seed=seed + r) for r in range(SIZES[scale][size])]


def scenario_relaxation(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """``simulate relaxation``: relaxed/one-shot MSE ratios (claim: 1) and composition (claim: > 1)."""
    runs = scenario_runs("relaxation", scale, seed)
    setting = f"simulate relaxation --scale {scale}; seeds {seed}..{seed + len(runs) - 1}"
    src = f"{GR} Theorem 10 (simulate relaxation)"
    lows, highs = [f["ratio_min"] for f in runs], [f["ratio_max"] for f in runs]
    means = [float(np.mean([g["ratio"] for g in f["grid"]])) for f in runs]
    comp = [f["composition_ratio_min"] for f in runs]
    rows = [
        Row(experiment="sim-relaxation", source=src, quantity="relaxed/one-shot MSE, mean over the grid",
            parameters=setting, paper=1.0, paper_text="no loss: 1", values=tuple(means),
            **verdict(1.0, means, 0.03, "the relaxed round's estimates")),
        Row(experiment="sim-relaxation", source=src, quantity="relaxed/one-shot MSE, smallest over the grid",
            parameters=setting, paper=None, paper_text="", values=tuple(lows), agree=None, why="spread of 12 ratios"),
        Row(experiment="sim-relaxation", source=src, quantity="relaxed/one-shot MSE, largest over the grid",
            parameters=setting, paper=None, paper_text="", values=tuple(highs), agree=None, why="spread of 12 ratios"),
        Row(experiment="sim-relaxation", source=src, quantity="composition/one-shot MSE, smallest over the grid",
            parameters=setting, paper=None, paper_text="composition is worse: > 1", values=tuple(comp),
            agree=bool(min(comp) > 1.0), why="agree when above 1 in every run"),
    ]
    return Outcome(rows=rows)


def scenario_advantage(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """``simulate asymmetric-advantage``: asymmetric/symmetric variance of a rare item against ``1 - e^-eps``."""
    runs = scenario_runs("asymmetric-advantage", scale, seed)
    setting = f"simulate asymmetric-advantage --scale {scale}; seeds {seed}..{seed + len(runs) - 1}"
    rows = []
    for i, row in enumerate(runs[0]["rows"]):
        values = [f["rows"][i]["ratio"] for f in runs]
        rows.append(Row(experiment="sim-asymmetric-advantage", source="ADP local form (Mangat RR) vs RAPPOR",
                        quantity=f"asym/sym variance at eps {row['epsilon']:g}", parameters=setting,
                        paper=row["predicted"], paper_text="1 - e^-eps", values=tuple(values),
                        **verdict(row["predicted"], values, 3 * row["ratio_se"], "3 standard errors of one run")))
    return Outcome(rows=rows)


def scenario_collusion(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """``simulate collusion``: the averaging attack's figures quoted in benchmarks/RESULTS.md."""
    runs = scenario_runs("collusion", scale, seed)
    setting = f"simulate collusion --scale {scale}; seeds {seed}..{seed + len(runs) - 1}"
    last = runs[0]["colluders"][-1]
    src = "multi-user Laplace Sec. B (simulate collusion)"
    theory = runs[0]["theory"]
    rows = [Row(experiment="sim-collusion", source=src, quantity="P(average within m of r) at i = 72, independent",
                parameters=setting, paper=0.99, paper_text="99% (3 sigma, normal: 0.9973)",
                values=tuple(f["independent_within_margin_at_paper_colluders"] for f in runs),
                **verdict(0.99, [f["independent_within_margin_at_paper_colluders"] for f in runs], 0.01,
                          "the normal approximation at i = 72"))]
    for scheme in ("independent", "mechanism_a"):
        values = [f["schemes"][scheme]["rmse"][-1] for f in runs]
        expected = theory[scheme][-1]
        text = "Theorem 3: tends to the mean location; here its closed form" if scheme == "mechanism_a" else \
            "closed form sqrt(2) D / (eps sqrt(i))"
        rows.append(Row(experiment="sim-collusion", source=src, quantity=f"RMSE at i = {last}, {scheme}",
                        parameters=setting, paper=expected, paper_text=text, values=tuple(values),
                        **verdict(expected, values, 0.03 * expected, "the attack's closed form")))
    values = [f["schemes"]["correlated"]["rmse"][-1] for f in runs]
    best = theory["correlated"][-1]
    rows.append(Row(experiment="sim-collusion", source=src, quantity=f"RMSE at i = {last}, correlated",
                    parameters=setting, paper=best, paper_text="never below the most trusted member's sqrt(2) D / eps",
                    values=tuple(values), agree=bool(min(values) >= best),
                    why="agree when every run stays at or above the most trusted member's RMSE"))
    return Outcome(rows=rows)



def scenario_sql_counting(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """``simulate sql-counting``: the paper's FLEX join count (sensitivity 50) answered to colluding analysts."""
    runs = scenario_runs("sql-counting", scale, seed)
    setting = f"simulate sql-counting --scale {scale}; seeds {seed}..{seed + len(runs) - 1}; margin 50"
    src = "multi-user Laplace, FLEX experiment (simulate sql-counting)"
    rows = []
    for index, eps in ((1, 0.5), (2, 1.0)):
        need = runs[0]["rows"][index]["paper_colluders"]
        at = runs[0]["rows"][index]["colluders"].index(need)
        within = [f["rows"][index]["schemes"]["independent"]["within_margin"][at] for f in runs]
        rows.append(Row(experiment="sim-sql-counting", source=src,
                        quantity=f"FLEX Laplace: P(average within 50 of the count) at i = {need}, eps {eps:g}",
                        parameters=setting, paper=0.99, paper_text=f"a good estimate at i = {need}",
                        values=tuple(within), **verdict(0.99, within, 0.01, "the normal approximation")))
    last = runs[0]["rows"][1]["colluders"][-1]
    bias = [f["rows"][1]["schemes"]["mechanism_a"]["rmse"][-1] for f in runs]
    rows.append(Row(experiment="sim-sql-counting", source=src,
                    quantity=f"Mechanism A: RMSE of the average at i = {last}, eps 0.5",
                    parameters=f"{setting}; locations in [1.5 D, 2.5 D]", paper=100.0,
                    paper_text="Theorem 3: the average stays the mean location (2D = 100) off",
                    values=tuple(bias), **verdict(100.0, bias, 5.0, "the average's remaining spread")))
    return Outcome(rows=rows, series=_sql_series(runs[0], seed))


def _sql_series(figures: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    """The first run's table (benchmarks/RESULTS.md): RMSE and P(within the margin) per eps, scheme and i."""
    return [{"seed": seed, "count": figures["count"], "sensitivity": figures["sensitivity"],
             "trials": figures["trials"], "epsilon": row["epsilon"], "scheme": scheme, "colluders": i,
             "rmse": res["rmse"][k], "within_margin": res["within_margin"][k]}
            for row in figures["rows"] for scheme, res in row["schemes"].items()
            for k, i in enumerate(row["colluders"])]
