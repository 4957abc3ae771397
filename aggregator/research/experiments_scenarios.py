"""The ``simulate`` scenarios behind docs/simulation.md's and benchmarks/RESULTS.md's other tables.

* ``certificates`` (the ADP paper's threshold query on a simulated city:
  safe shares of ALap, AGeo and the best ``(eps, delta)``-DP bound at
  eps 1, t 5; the never-wrong mechanisms' errors), ``city`` (the demo's
  workload: a relaxation round against its theory, the certificates at
  alpha 0 and 0.01) and ``irr-relaxation`` (a round that relaxes RAPPOR's
  IRR) take a second or two a run at the small scale and run at both;
* ``association`` (joint distribution of a pair metric) and ``discovery``
  (prefix extension) take half a minute and more at the small scale, so they
  run only at ``--scale paper``, where their setup is the one quoted in
  benchmarks/RESULTS.md.

Each runs at seeds ``seed, seed + 1, ...`` (the first is the documented
single run); ``SIZES`` says how many at each scale.
"""

from __future__ import annotations

from typing import Any

from aggregator.research.experiments_gradual import scenario_runs
from aggregator.research.reproduce import Outcome, Row, verdict

__all__ = ["BLOOM_CELLS", "scenario_association", "scenario_bloom_cells", "scenario_certificates", "scenario_city",
           "scenario_discovery", "scenario_irr", "scenario_regression"]
CERTIFICATES = "ADP Fig. 2 setting (simulate certificates)"


def _runs(name: str, scale: str, seed: int, size: str = "scenario") -> tuple[list[dict[str, Any]], str]:
    """The scenario's runs and the setting in words (the command and its seeds)."""
    runs = scenario_runs(name, scale, seed, size=size)
    return runs, f"simulate {name} --scale {scale}; seeds {seed}..{seed + len(runs) - 1}"


def _never_wrong(experiment: str, source: str, setting: str, quantity: str, values: list[float]) -> Row:
    return Row(experiment=experiment, source=source, quantity=quantity, parameters=setting, paper=0.0,
               paper_text="never wrong (alpha = 0)", values=tuple(values), agree=bool(max(values) == 0),
               why="agree when no run has a single false 'safe'")


def _certified_shares(setting: str, at: list[dict[str, Any]]) -> list[Row]:
    """ALap's, AGeo's and the DP bound's share of the safe places certified, one figure per run."""
    rows = []
    for key, name in (("alap", "ALap"), ("ageo", "AGeo")):
        values = [r[key]["safe_fraction"] for r in at]
        rows.append(Row(experiment="sim-certificates", source=CERTIFICATES,
                        quantity=f"{name}: share of safe places certified at eps 1, t 5 (answer < t + 1)",
                        parameters=setting, paper=0.942, paper_text="Fig. 2: 5,031 of 5,343 (answer <= t)",
                        values=tuple(values),
                        **verdict(0.942, values, 0.01, "a different population and certificate rule")))
    dp = [r["dp"]["safe_fraction"] for r in at]
    rows.append(Row(experiment="sim-certificates", source=CERTIFICATES,
                    quantity="(eps, 1e-4)-DP bound: share of safe places certified at eps 1, t 5",
                    parameters=setting, paper=None, paper_text="far below ALap", values=tuple(dp),
                    agree=bool(max(dp) < min(r["alap"]["safe_fraction"] for r in at)),
                    why="agree when below ALap's share in every run"))
    return rows


def scenario_certificates(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """``simulate certificates``: the share of safe places certified at eps 1, t 5, and the errors.

    The shares come from the small scale only: the paper scale's thresholds grow with its 10^6 clients,
    so no t 5 row exists there to set beside the ADP paper's Fig. 2.
    """
    runs, setting = _runs("certificates", scale, seed)
    at = [next((r for r in f["by_threshold"] if r["epsilon"] == 1.0 and r["threshold"] == 5), None) for f in runs]
    rows = _certified_shares(setting, [r for r in at if r is not None]) if None not in at else []
    src = CERTIFICATES
    rows.append(_never_wrong("sim-certificates", src, setting, "never-wrong mechanisms: false 'safe' answers",
                             [float(f["never_wrong_errors"]) for f in runs]))
    for key, name in (("local_alpha", f"local certificate at alpha {runs[0]['alpha']:g}"),
                      ("dp", "(eps, 1e-4)-DP bound")):
        rates = [f["false_safe"][key]["wrong"] / f["false_safe"][key]["decisions"] for f in runs]
        rows.append(Row(experiment="sim-certificates", source=src, quantity=f"{name}: false 'safe' per decision",
                        parameters=setting, paper=None, paper_text="at most its error level", values=tuple(rates),
                        agree=None, why=f"{runs[0]['false_safe'][key]['wrong']} of "
                                        f"{runs[0]['false_safe'][key]['decisions']:,} in the first run"))
    return Outcome(rows=rows)


def scenario_city(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """``simulate city``: the round's MSE against its theory and the certificates at alpha 0 and 0.01."""
    runs, setting = _runs("city", scale, seed)
    src = "gradual release + ADP certificates (simulate city)"
    rows = []
    for key, name in (("round0", "first collection"), ("round", "relaxation round")):
        values = [f[key]["ratio"] for f in runs]
        rows.append(Row(experiment="sim-city", source=src, quantity=f"{name}: MSE / theory",
                        parameters=setting, paper=1.0, paper_text="the round's estimator's variance",
                        values=tuple(values), **verdict(1.0, values, 0.08, "the estimator's variance")))
    rows.append(_never_wrong("sim-city", src, setting, "alpha = 0 certificate: false 'safe' places",
                             [float(f["certificates"]["alpha0"]["false_safe"]) for f in runs]))
    cert = runs[0]["certificates"]["alpha"]
    rows.append(Row(experiment="sim-city", source=src,
                    quantity=f"alpha = {cert['alpha']:g} certificate: share of safe places certified",
                    parameters=setting, paper=None, paper_text="", agree=None,
                    values=tuple(f["certificates"]["alpha"]["share_of_safe"] for f in runs),
                    why=f"{cert['certified_safe']} of {runs[0]['certificates']['truly_safe']} in the first run, "
                        f"{cert['false_safe']} false"))
    return Outcome(rows=rows)


def scenario_irr(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """``simulate irr-relaxation``: relaxed/one-shot MSE per chain, the reports' agreement, exact epsilons."""
    runs, setting = _runs("irr-relaxation", scale, seed)
    src = "gradual release: a round that relaxes RAPPOR's IRR (simulate irr-relaxation)"
    rows = []
    for i, chain in enumerate(runs[0]["rows"]):
        ratio = [f["rows"][i]["relaxed_mse"] / f["rows"][i]["theory_mse"] for f in runs]
        rows.append(Row(experiment="sim-irr-relaxation", source=src, quantity=f"{chain['chain']}: relaxed MSE / theory",
                        parameters=setting, paper=1.0, paper_text="the round's randomizer's variance",
                        values=tuple(ratio), **verdict(1.0, ratio, 0.1, "the estimator's variance")))
        if chain["predicted_agreement"] is not None:
            agree = [f["rows"][i]["agreement"] for f in runs]
            rows.append(Row(experiment="sim-irr-relaxation", source=src,
                            quantity=f"{chain['chain']}: a client's two reports agree", parameters=setting,
                            paper=chain["predicted_agreement"], paper_text="report_agreement",
                            values=tuple(agree),
                            **verdict(chain["predicted_agreement"], agree, 0.003, "the chain's law")))
        rows.append(Row(experiment="sim-irr-relaxation", source=src,
                        quantity=f"{chain['chain']}: exact epsilon of the two reports", parameters=setting,
                        paper=chain["epsilon_fresh"], paper_text="fresh IRR composed (never less than ours)",
                        values=(chain["epsilon_relaxed"],), agree=chain["epsilon_relaxed"] <= chain["epsilon_fresh"],
                        why=f"exact; one report at the last level: {chain['epsilon_one_report']:g}"))
    return Outcome(rows=rows)


def scenario_association(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """``simulate association --scale paper``: TV of the estimated joint and its intervals' coverage."""
    runs, setting = _runs("association", scale, seed, size="slow_scenario")
    src = "association (simulate association): 12 x 15 pair metric"
    rows = []
    for i, r in enumerate(runs[0]["rows"]):
        where = f"{r['encoding']}, {r['mode']}, {r['clients']:,} clients, eps {r['epsilon']:g}"
        rows.append(Row(experiment="sim-association", source=src, quantity=f"TV of the joint: {where}",
                        parameters=setting, paper=None, paper_text="", agree=None,
                        values=tuple(f["rows"][i]["tv"] for f in runs), why="the projection's estimate"))
        coverage = [f["rows"][i]["interval_coverage"] for f in runs]
        rows.append(Row(experiment="sim-association", source=src, quantity=f"95% interval coverage: {where}",
                        parameters=setting, paper=0.95, paper_text="nominal 95%", values=tuple(coverage),
                        **verdict(0.95, coverage, 0.05, "180 cells: 0.9 to 0.98 is within 2.5 sd")))
    return Outcome(rows=rows)


def scenario_discovery(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """``simulate discovery --scale paper``: recall and precision of prefix extension, first layout."""
    runs, setting = _runs("discovery", scale, seed, size="slow_scenario")
    src = "discovery (simulate discovery): Zipf 1.1 strings, prefix extension"
    layout = runs[0]["rows"][0]["layout"]
    rows = []
    for i, r in enumerate(runs[0]["rows"]):
        if r["layout"] != layout:
            continue
        where = f"{r['mode']}, {r['clients']:,} clients, eps {r['epsilon']:g}"
        for key in ("recall", "precision"):
            rows.append(Row(experiment="sim-discovery", source=src, quantity=f"{key}: {where}",
                            parameters=f"{setting}; {layout}", paper=None, paper_text="", agree=None,
                            values=tuple(f["rows"][i][key] for f in runs),
                            why=f"{r['found']} found of {r['truth']} strings with share >= 1%"))
    return Outcome(rows=rows)


# The Bloom approximation of the aggregate method (docs/simulation.md, "What is approximated"): the relaxation
# scenario's city and filter at 10^5 clients, the same at both scales (12 draws a path take about 4 s).
BLOOM_CELLS = {"clients": 100_000, "places": 2_000, "bits": 128, "hashes": 2, "cohorts": 64, "draws": 12}


def _standardized_cells(ones: Any, totals: Any, marginal: Any) -> Any:
    """Each cell against its exact law ``Binomial(t_c, pi_cj)``: ``(ones - t pi) / sqrt(t pi (1 - pi))``."""
    import numpy as np

    t = totals[:, None].astype(np.float64)
    return (ones - t * marginal) / np.sqrt(t * marginal * (1.0 - marginal))


def _cell_statistics(z: Any) -> dict[str, float]:
    """Over one draw's ``(cohorts, bits)`` standardized cells: a cell's variance, a cohort sum's, the correlation.

    The cells' means are 0 by construction, so second moments are taken about 0; the mean correlation of two
    cells of one cohort is ``(E S^2 - E sum z^2) / (m (m - 1))`` with ``S`` the cohort's sum over its ``m`` bits.
    """
    import numpy as np

    m = z.shape[1]
    squares, sums = float(np.mean(np.sum(z**2, axis=1))), float(np.mean(np.sum(z, axis=1) ** 2))
    return {"variance": squares / m, "sum_variance": sums / m, "correlation": (sums - squares) / (m * (m - 1))}


def _law_verdict(values: list[float]) -> dict[str, Any]:
    """Agree when the exact law's variance 1 is inside the draws' range or within 0.02 of their mean."""
    from aggregator.research.reproduce import within

    agree, why = within(1.0, values, 0.02)
    return {"agree": agree, "why": why.replace("the paper's value", "the exact law's 1")}


def scenario_bloom_cells(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """The per-client path's Bloom cells against the aggregate path's, each standardized by its exact law.

    Draw ``r`` of the per-client path is ``make_population`` from ``SeededRandom(child r of SeedSequence(seed))``,
    the aggregate path's :func:`~aggregator.research.aggregate.bloom_bit_truth` from child ``r`` of
    ``SeedSequence(seed + 1)``; ``pi_cj = sum_k P(k) (1 - (1 - P(A_cj))^k)``.
    """
    import numpy as np
    from scipy import stats

    from aggregator.research.aggregate import bloom_bit_truth, bloom_hit_probabilities
    from aggregator.research.populations import SyntheticCity, cohort_bit_counts, make_population
    from protocol.encodings import BloomEncoding
    from protocol.rng import SeededRandom

    b = BLOOM_CELLS
    enc = BloomEncoding(num_bits=b["bits"], num_hashes=b["hashes"], num_cohorts=b["cohorts"])
    city = SyntheticCity(num_places=b["places"])
    hit, pmf = bloom_hit_probabilities(city, enc), city.size_pmf()
    marginal = sum(pmf[k - 1] * -np.expm1(k * np.log1p(-np.minimum(hit, 1.0))) for k in range(1, pmf.size + 1))
    paths: dict[str, list[Any]] = {"per-client": [], "aggregate": []}
    for child in np.random.SeedSequence(seed).spawn(b["draws"]):
        pop = make_population(city, b["clients"], enc, SeededRandom(child))
        paths["per-client"].append(_standardized_cells(*cohort_bit_counts(pop.bits, pop.cohorts, b["cohorts"]),
                                                        marginal))
    for child in np.random.SeedSequence(seed + 1).spawn(b["draws"]):
        ones, totals = bloom_bit_truth(city, b["clients"], enc, np.random.default_rng(child))
        paths["aggregate"].append(_standardized_cells(ones, totals, marginal))
    setting = (f"{b['clients']:,} clients, {b['places']:,} places, Bloom {b['bits']}x{b['hashes']}x{b['cohorts']}, "
               f"{b['draws']} draws a path; seeds {seed} (per-client), {seed + 1} (aggregate)")
    src = "docs/simulation.md: the aggregate method's Bloom approximation"
    rows = []
    for path, draws in paths.items():
        got = [_cell_statistics(z) for z in draws]
        variance = [g["variance"] for g in got]
        rows += [
            Row(experiment="sim-bloom-cells", source=src, quantity=f"{path}: variance of a standardized cell",
                parameters=setting, paper=1.0, paper_text="exact marginal law: 1", values=tuple(variance),
                **_law_verdict(variance)),
            Row(experiment="sim-bloom-cells", source=src, quantity=f"{path}: mean correlation of two cells of a cohort",
                parameters=setting, paper=None, paper_text="", values=tuple(g["correlation"] for g in got),
                agree=None, why="one client's draws set several bits (per-client); the cohort's clients per size "
                                "(aggregate)"),
            Row(experiment="sim-bloom-cells", source=src,
                quantity=f"{path}: variance of a cohort's sum over its bits / {b['bits']}", parameters=setting,
                paper=None, paper_text="", values=tuple(g["sum_variance"] for g in got), agree=None,
                why="1 if the cells of a cohort were independent"),
        ]
    ks = stats.ks_2samp(np.concatenate([z.ravel() for z in paths["per-client"]]),
                        np.concatenate([z.ravel() for z in paths["aggregate"]]))
    rows.append(Row(experiment="sim-bloom-cells", source=src, quantity="two-sample KS of the two paths' cells, p-value",
                    parameters=setting, paper=None, paper_text="the cells' laws agree", values=(float(ks.pvalue),),
                    agree=bool(ks.pvalue > 1e-3), why="agree when p > 0.001"))
    return Outcome(rows=rows)


def scenario_regression(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """``simulate multi-analyst-regression --scale paper``: benchmarks/RESULTS.md's iris table, one run.

    Rows: the accuracy's spread over mu per eps and the non-private accuracy; the series: every (eps, mu)
    accuracy and the analysts' (correlated, independent) accuracies, as the table prints them.
    """
    runs, setting = _runs("multi-analyst-regression", scale, seed, size="slow_scenario")
    first = runs[0]
    src = "multi-user Laplace Fig. 6 (simulate multi-analyst-regression)"
    rows = [Row(experiment="sim-multi-analyst-regression", source=src,
                quantity=f"accuracy spread over mu at eps {eps:g}",
                parameters=f"{setting}; {first['repetitions']} splits", paper=None,
                paper_text="fluctuates slightly with mu", values=tuple(f["location_spread"][i] for f in runs),
                agree=None, why="max - min over mu of the mean accuracy")
            for i, eps in enumerate(first["epsilons"])]
    rows.append(Row(experiment="sim-multi-analyst-regression", source=src, quantity="non-private accuracy",
                    parameters=setting, paper=None, paper_text="", values=tuple(f["non_private_accuracy"] for f in runs),
                    agree=None, why="the unperturbed model on the same splits"))
    series: list[dict[str, Any]] = [
        {"seed": seed, "table": "objective perturbation", "epsilon": eps, "mu": mu,
         "accuracy": first["objective_accuracy"][i][j]}
        for i, eps in enumerate(first["epsilons"]) for j, mu in enumerate(first["locations"])]
    for kind, got in first["analysts"].items():
        series += [{"seed": seed, "table": f"analysts, {kind}", "epsilon": level, "mu": "",
                    "accuracy": got["accuracy"][i], "coalition_accuracy": got["coalition_accuracy"][i],
                    "coalition_epsilon": got["coalition_epsilon"][i]}
                   for i, level in enumerate(first["analyst_levels"])]
    return Outcome(rows=rows, series=series)
