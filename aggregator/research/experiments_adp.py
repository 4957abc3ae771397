"""The ADP paper's experiments for ``onesided reproduce`` (Sec. VI, Figs. 2-6), with seeded repetitions.

* ADP paper (asymmetric differential privacy), Sec. VI, on a Peopleflow-like
  population (:mod:`aggregator.research.adp_paper`): Fig. 2 (certified
  safe places at 6 p.m., the paper's rule ``answer <= t`` beside ours
  ``answer < t + 1``), Fig. 3 (``alpha = 1e-3``), Fig. 4 (``E[beta]``
  against ``eps``, ``t``, ``alpha``, ``delta``), Figs. 5-6 (SALap on the
  day's visits).

Repetition ``r`` of a numpy experiment draws from child ``r`` of
``SeedSequence(seed)``; a ``simulate`` scenario's repetition ``r`` runs at
seed ``seed + r``, so repetition 0 is the documented single run.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from aggregator.research.adp_paper import (
    RULES,
    PeopleflowLike,
    alap_safe_probabilities,
    dp_safe_probabilities,
    expected_beta,
    salap_right_answers,
)
from aggregator.research.reproduce import (
    SIZES,
    Outcome,
    Row,
    generators,
    interval,
    plt,
    save,
    verdict,
    within,
)

ADP = "ADP (asymmetric DP)"

DEFAULT_SWEEPS: dict[str, tuple[float, ...]] = {
    "epsilon": (0.1, 0.25, 0.5, 1.0, 2.0, 4.0),
    "threshold": (1, 2, 3, 5, 10),
    "alpha": (1e-4, 1e-3, 1e-2, 1e-1),
    "delta": (1e-6, 1e-4, 1e-2, 1e-1),
}
# Fig. 4's defaults (Sec. VI-B2).
EPS, ALPHA, DELTA, T = 1.0, 1e-3, 1e-4, 5


# --------------------------------------------------------------------------
# ADP paper, low-sensitive query: Figs. 2-4
# --------------------------------------------------------------------------


def adp_fig2(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """Fig. 2 (alpha = 0) and Fig. 3 (alpha = 1e-3) at eps = 1, delta = 1e-4, t = 5."""
    reps = SIZES[scale]["adp"]
    pf = PeopleflowLike()
    keys = ("safe", "alap_paper", "alap_product", "beta_paper", "beta_product", "dp_alpha0", "pure_dp_alpha0",
            "dp_alpha3", "pure_dp_alpha3", "beta_paper_low_shape")
    got: dict[str, list[float]] = {k: [] for k in keys}
    low = PeopleflowLike(low_shape=True)
    for gen in generators(seed, reps):
        counts = pf.hourly_counts(gen)
        safe = counts <= T
        got["safe"].append(float(safe.sum()))
        for rule in RULES:
            s = alap_safe_probabilities(counts, T, EPS, rule=rule)
            got[f"alap_{rule}"].append(float(np.sum(gen.random(counts.size) < s)))  # one noise draw
            got[f"beta_{rule}"].append(expected_beta(s, counts, T))
        for alpha, tag in ((0.0, "alpha0"), (ALPHA, "alpha3")):
            for delta, name in ((DELTA, "dp"), (0.0, "pure_dp")):
                s = dp_safe_probabilities(counts, T, EPS, alpha=alpha, delta=delta)
                got[f"{name}_{tag}"].append(float(np.sum(gen.random(counts.size)[safe] < s[safe])))
        low_counts = low.hourly_counts(gen)
        got["beta_paper_low_shape"].append(
            expected_beta(alap_safe_probabilities(low_counts, T, EPS, rule="paper"), low_counts, T))
    setting = f"eps 1, t 5, {pf.users:,} users, {pf.places:,} places"
    rows = [
        Row(experiment="adp-fig2", source=f"{ADP} Fig. 2", quantity="places with <= 5 visitors (truth)",
            parameters=f"{setting}; popularity shape {pf.popularity_shape:.3f} fitted to this number",
            paper=5343, paper_text="5,343 of 5,835", values=tuple(got["safe"]),
            agree=within(5343, got["safe"], 60)[0], why="fitted in expectation (the one free parameter)"),
        Row(experiment="adp-fig2", source=f"{ADP} Fig. 2", quantity="ALap certified safe, paper's rule answer <= t",
            parameters=f"{setting}, alpha 0, one noise draw per repetition", paper=5031, paper_text="5,031",
            values=tuple(got["alap_paper"]), **verdict(5031, got["alap_paper"], 100,
                                                           "Peopleflow's own counts are not public")),
        Row(experiment="adp-fig2", source=f"{ADP} Fig. 2", quantity="ALap certified safe, product's rule answer < t+1",
            parameters=f"{setting}, alpha 0", paper=5031, paper_text="5,031 (with answer <= t)",
            values=tuple(got["alap_product"]), agree=None,
            why="not the paper's rule: the same answers read as answer < t+1 certify more (never wrong either)"),
        Row(experiment="adp-fig2", source=f"{ADP} Fig. 2", quantity="E[beta], paper's rule",
            parameters=setting, paper=5031 / 5343, paper_text="5,031 / 5,343 = 0.942",
            values=tuple(got["beta_paper"]), **verdict(5031 / 5343, got["beta_paper"], 0.02,
                                                          "Peopleflow's own counts are not public")),
        Row(experiment="adp-fig2", source=f"{ADP} Fig. 2", quantity="E[beta], paper's rule, other fitted shape",
            parameters=f"{setting}; the more overdispersed shape {low.popularity_shape:.3f} that also fits 5,343",
            paper=5031 / 5343, paper_text="0.942", values=tuple(got["beta_paper_low_shape"]), agree=None,
            why="sensitivity: the two populations that fit 5,343 bracket the paper's 0.942"),
        Row(experiment="adp-fig2", source=f"{ADP} Fig. 2", quantity="E[beta], product's rule",
            parameters=setting, paper=None, paper_text="", values=tuple(got["beta_product"]), agree=None,
            why="the product's certificate beside the paper's"),
        Row(experiment="adp-fig2", source=f"{ADP} Fig. 2", quantity="(1, 1e-4)-DP right answers (best sanitizer)",
            parameters=f"{setting}, alpha 0, delta 1e-4", paper=4, paper_text="4 of 5,343",
            values=tuple(got["dp_alpha0"]), **verdict(4, got["dp_alpha0"], 10,
                                                         "the virtual sanitizer's beta grows with the distance "
                                                         "k = t+1-c from the threshold; 4 needs almost no place far "
                                                         "below t, or a bound at k = 1 for every place")),
        Row(experiment="adp-fig2", source=f"{ADP} Fig. 2", quantity="1-DP right answers",
            parameters=f"{setting}, alpha 0", paper=0, paper_text="0 (all obscure)",
            values=tuple(got["pure_dp_alpha0"]), agree=max(got["pure_dp_alpha0"]) == 0,
            why="eps-DP cannot be one-sided at alpha = 0 (inequality 5)"),
        Row(experiment="adp-fig3", source=f"{ADP} Fig. 3", quantity="(1, 1e-4)-DP minus 1-DP right answers",
            parameters=f"{setting}, alpha 1e-3", paper=None, paper_text="almost the same results",
            values=tuple(a - b for a, b in zip(got["dp_alpha3"], got["pure_dp_alpha3"], strict=True)),
            agree=None, why="see the next two rows: the difference against their size"),
        Row(experiment="adp-fig3", source=f"{ADP} Fig. 3", quantity="1-DP right answers",
            parameters=f"{setting}, alpha 1e-3", paper=None, paper_text="misses many safe places",
            values=tuple(got["pure_dp_alpha3"]), agree=bool(np.mean(got["pure_dp_alpha3"]) < 0.9 * 5343),
            why="agree: far below the safe places"),
        Row(experiment="adp-fig3", source=f"{ADP} Fig. 3", quantity="(1, 1e-4)-DP right answers",
            parameters=f"{setting}, alpha 1e-3", paper=None, paper_text="almost the same as 1-DP",
            values=tuple(got["dp_alpha3"]),
            agree=bool(np.mean(got["dp_alpha3"]) < 1.2 * np.mean(got["pure_dp_alpha3"])),
            why="agree when within 20% of 1-DP's"),
    ]
    means = {k: float(np.mean(v)) for k, v in got.items()}

    def plot(path: Path) -> None:
        pyplot = plt()
        fig, ax = pyplot.subplots(figsize=(8, 3.6))
        names = ["truth", "1-DP a=0", "(1,1e-4)-DP a=0", "1-DP a=1e-3", "(1,1e-4)-DP a=1e-3",
                 "ALap <= t", "ALap < t+1"]
        values = [means["safe"], means["pure_dp_alpha0"], means["dp_alpha0"], means["pure_dp_alpha3"],
                  means["dp_alpha3"], means["alap_paper"], means["alap_product"]]
        ax.barh(names, values, color=["grey", "C3", "C3", "C1", "C1", "C0", "C2"])
        ax.axvline(5031, color="k", ls="--", lw=1, label="paper's ALap: 5,031")
        ax.set_xlabel("places certified safe (mean over repetitions)")
        ax.legend(fontsize=8)
        save(fig, path, f"ADP Figs. 2-3: Peopleflow-like 6 p.m., eps 1, t 5 ({reps} repetitions)")

    return Outcome(rows=rows, plot=plot)


Samples = dict[tuple[str, float, str], list[float]]


def _sweeps(options: dict[str, Any], names: tuple[str, ...]) -> dict[str, tuple[float, ...]]:
    """The values to sweep per parameter: the command line's, else the defaults."""
    return {name: tuple(options.get(name) or DEFAULT_SWEEPS[name]) for name in names}


def _points(sweeps: dict[str, tuple[float, ...]]) -> Iterator[tuple[str, float, dict[str, float]]]:
    """``(varied parameter, value, setting)`` for each point of the sweeps: the defaults with one value changed."""
    for vary, values in sweeps.items():
        for value in values:
            yield vary, float(value), {"epsilon": EPS, "threshold": T, "alpha": ALPHA, "delta": DELTA, vary: value}


def _series(samples: Samples, label: str) -> list[dict[str, Any]]:
    """One CSV record per (varied parameter, value, ``label``): the mean over repetitions and its 95% interval."""
    series = []
    for (vary, value, what), vals in samples.items():
        mean, low, high = interval(vals)
        series.append({"vary": vary, "value": value, label: what, "mean": mean, "ci95_low": low,
                       "ci95_high": high, "repetitions": len(vals)})
    return series


def _betas(counts: np.ndarray, t: int, eps: float, alpha: float, delta: float) -> dict[str, float]:
    out = {f"alap_{rule}": expected_beta(alap_safe_probabilities(counts, t, eps, rule=rule), counts, t)
           for rule in RULES}
    out["dp"] = expected_beta(dp_safe_probabilities(counts, t, eps, alpha=alpha, delta=delta), counts, t)
    return out


def adp_fig4(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """Fig. 4: E[beta] of ALap (both rules) and the (eps, delta)-DP competitor, one parameter varied at a time."""
    reps = SIZES[scale]["adp"]
    sweeps = _sweeps(options, tuple(DEFAULT_SWEEPS))
    pf = PeopleflowLike()
    samples: Samples = {}
    for gen in generators(seed, reps):
        counts = pf.hourly_counts(gen)
        for vary, value, setting in _points(sweeps):
            betas = _betas(counts, int(setting["threshold"]), setting["epsilon"], setting["alpha"], setting["delta"])
            for mech, beta in betas.items():
                samples.setdefault((vary, value, mech), []).append(beta)
    series = _series(samples, "mechanism")
    rows = _fig4_rows(samples, sweeps)

    def plot(path: Path) -> None:
        pyplot = plt()
        fig, axes = pyplot.subplots(1, 4, figsize=(14, 3.4))
        labels = {"alap_paper": "ALap, answer <= t", "alap_product": "ALap, answer < t+1", "dp": "(eps,delta)-DP"}
        for ax, vary in zip(axes, sweeps, strict=True):
            for mech, label in labels.items():
                pts = sorted((s["value"], s["mean"], s["ci95_low"], s["ci95_high"]) for s in series
                             if s["vary"] == vary and s["mechanism"] == mech)
                x, y, lo, hi = (np.array(c) for c in zip(*pts, strict=True))
                ax.errorbar(x, y, yerr=[y - lo, hi - y], marker="o", ms=3, label=label)
            ax.set_xscale("log" if vary in ("alpha", "delta") else "linear")
            ax.set_xlabel(vary)
            ax.set_ylim(-0.02, 1.02)
        axes[0].set_ylabel("E[beta]")
        axes[0].legend(fontsize=7)
        save(fig, path, f"ADP Fig. 4: E[beta] (eps 1, t 5, alpha 1e-3, delta 1e-4 unless varied; {reps} reps)")

    return Outcome(rows=rows, series=series, plot=plot)


def _fig4_rows(samples: Samples, sweeps: dict[str, tuple[float, ...]]) -> list[Row]:
    rows: list[Row] = []
    src = f"{ADP} Fig. 4"
    if 1.0 in sweeps["threshold"]:
        paper_rule = samples[("threshold", 1.0, "alap_paper")]
        rows.append(Row(experiment="adp-fig4", source=src, quantity="E[beta] of ALap at t = 1, paper's rule",
                        parameters="eps 1", paper=0.4, paper_text="about 0.4", values=tuple(paper_rule),
                        **verdict(0.4, paper_rule, 0.05, "the share of empty places differs")))
        rows.append(Row(experiment="adp-fig4", source=src, quantity="E[beta] of ALap at t = 1, product's rule",
                        parameters="eps 1", paper=None, paper_text="(not the paper's rule)",
                        values=tuple(samples[("threshold", 1.0, "alap_product")]), agree=None,
                        why="answer < 2 also certifies the places with one visitor"))
        dp = samples[("threshold", 1.0, "dp")]
        rows.append(Row(experiment="adp-fig4", source=src, quantity="E[beta] of (eps, delta)-DP at t = 1",
                        parameters="eps 1, alpha 1e-3, delta 1e-4", paper=0.0, paper_text="does not work at all",
                        values=tuple(dp), agree=bool(np.mean(dp) < 0.05), why="agree when below 0.05"))
    for vary, value in (("alpha", 1e-2), ("delta", 1e-1)):
        if value not in sweeps[vary]:
            continue
        dp, adp = samples[(vary, value, "dp")], samples[(vary, value, "alap_paper")]
        gap = [a - b for a, b in zip(adp, dp, strict=True)]
        rows.append(Row(experiment="adp-fig4", source=src, quantity=f"ALap (paper's rule) minus DP at {vary} = {value:g}",
                        parameters="eps 1, t 5", paper=None, paper_text="DP becomes close to ADP",
                        values=tuple(gap), agree=bool(abs(np.mean(gap)) < 0.15), why="agree when within 0.15"))
    return rows


# --------------------------------------------------------------------------
# ADP paper, high-sensitive query: SALap, Figs. 5-6
# --------------------------------------------------------------------------

FIG5_KS = tuple(range(1, 31))
FIG5_STAYS = (1.25, 1.5, 2.0, 3.0)


def adp_fig5(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """Fig. 5: SALap's right answers on the day's visits (alpha 0, t 5, eps 1), both rules; ALap for contrast."""
    reps = SIZES[scale]["adp"]
    curves: dict[tuple[float, str], list[np.ndarray]] = {}
    alap_d: list[float] = []
    for gen in generators(seed, reps):
        for stays in FIG5_STAYS:
            pf = PeopleflowLike(mean_daily_stays=stays)
            counts = pf.daily_counts(gen)
            for rule in RULES:
                at_least, _ = salap_right_answers(alap_safe_probabilities(counts, T, EPS, rule=rule), FIG5_KS)
                curves.setdefault((stays, rule), []).append(at_least)
            if stays == PeopleflowLike().mean_daily_stays:  # ALap with D_p = |C^T| (one user, every place)
                alap_d.append(float(np.sum(alap_safe_probabilities(counts, T, EPS, rule="paper",
                                                                   sensitivity=pf.places))))
    series = []
    for (stays, rule), arrays in curves.items():
        stack = np.array(arrays)
        for j, k in enumerate(FIG5_KS):
            mean, low, high = interval(stack[:, j].tolist())
            series.append({"mean_daily_stays": stays, "rule": rule, "k": k, "p_at_least_k": mean,
                           "ci95_low": low, "ci95_high": high, "repetitions": len(arrays)})
    default = PeopleflowLike().mean_daily_stays
    at10 = {rule: [float(a[9]) for a in curves[(default, rule)]] for rule in RULES}
    # The paper's own Fig. 2 counts bound P(>= 10) in a random order: the first 10 places must all be safe
    # at 6 p.m. already (a day's visitors include the hour's): C(5343, 10) / C(5835, 10).
    bound = math.comb(5343, 10) / math.comb(5835, 10)
    src = f"{ADP} Fig. 5"
    rows = [
        Row(experiment="adp-fig5", source=src, quantity="SALap P(at least 10 right answers), paper's rule",
            parameters=f"day's visits, {default:g} stays/user/day, eps 1, t 5, alpha 0", paper=0.5,
            paper_text="about 0.5", values=tuple(at10["paper"]),
            **verdict(0.5, at10["paper"], 0.1, "see the bound in the next row: 0.5 needs places ordered "
                                                 "quietest first, or fewer visits than Fig. 2's")),
        Row(experiment="adp-fig5", source=src, quantity="upper bound on P(at least 10) from Fig. 2's own counts",
            parameters="random order; 5,343 of 5,835 places safe at 6 p.m.", paper=0.5, paper_text="about 0.5",
            values=(bound,), agree=False,
            why="even a mechanism that certifies every safe place reaches 0.5 only if the order is not random"),
        Row(experiment="adp-fig5", source=src, quantity="SALap P(at least 10 right answers), product's rule",
            parameters=f"{default:g} stays/user/day", paper=None, paper_text="(not the paper's rule)",
            values=tuple(at10["product"]), agree=None, why="the product's certificate beside the paper's"),
        Row(experiment="adp-fig5", source=src, quantity="ALap (D_p = number of places) expected right answers",
            parameters=f"{default:g} stays/user/day, eps 1", paper=1, paper_text="only one location",
            values=tuple(alap_d), **verdict(1, alap_d, 4, "ALap's scale is |C^T| / eps")),
    ]

    def plot(path: Path) -> None:
        pyplot = plt()
        fig, ax = pyplot.subplots(figsize=(7, 3.8))
        for stays, rule in curves:
            pts = [(s["k"], s["p_at_least_k"]) for s in series if s["mean_daily_stays"] == stays and s["rule"] == rule]
            ax.plot(*zip(*pts, strict=True), ls="-" if rule == "paper" else ":", color=f"C{FIG5_STAYS.index(stays)}",
                    label=f"{stays:g} stays/day, {'answer <= t' if rule == 'paper' else 'answer < t+1'}")
        ax.axhline(0.5, color="grey", lw=0.8)
        ax.axvline(10, color="grey", lw=0.8)
        ax.set_xlabel("k")
        ax.set_ylabel("P(at least k right answers)")
        ax.legend(fontsize=7)
        save(fig, path, f"ADP Fig. 5: SALap on the day's visits (eps 1, t 5; {reps} repetitions)")

    return Outcome(rows=rows, series=series, plot=plot)


def adp_fig6(scale: str, seed: int, options: dict[str, Any]) -> Outcome:
    """Fig. 6: SALap's expected right answers and E[beta] against eps and t (alpha 1e-3; SALap is alpha 0)."""
    reps = SIZES[scale]["adp"]
    sweeps = _sweeps(options, ("epsilon", "threshold"))
    pf = PeopleflowLike()
    samples: Samples = {}
    for gen in generators(seed, reps):
        counts = pf.daily_counts(gen)
        for vary, value, setting in _points(sweeps):
            t = int(setting["threshold"])
            for rule in RULES:
                s = alap_safe_probabilities(counts, t, setting["epsilon"], rule=rule)
                samples.setdefault((vary, value, f"right_{rule}"), []).append(salap_right_answers(s, [])[1])
                samples.setdefault((vary, value, f"beta_{rule}"), []).append(expected_beta(s, counts, t))
    series = _series(samples, "what")
    rows = []
    for vary, small, default, text in (("epsilon", 0.5, 1.0, "sharp decrease when eps < 1"),
                                       ("threshold", 2.0, 5.0, "sharp decrease when t < 3")):
        if small not in sweeps[vary] or default not in sweeps[vary]:
            continue
        ratio = [a / b if b > 0 else math.nan for a, b in zip(
            samples[(vary, small, "right_paper")], samples[(vary, default, "right_paper")], strict=True)]
        ratio = [r for r in ratio if math.isfinite(r)] or [math.nan]
        rows.append(Row(experiment="adp-fig6", source=f"{ADP} Fig. 6",
                        quantity=f"SALap E[#right] at {vary} {small:g} / at {default:g}, paper's rule",
                        parameters=f"day's visits, {pf.mean_daily_stays:g} stays/user/day", paper=None,
                        paper_text=text, values=tuple(ratio), agree=bool(np.nanmean(ratio) < 0.5),
                        why="agree when the ratio is below 0.5 (repetitions where SALap expects no right "
                            "answer at the default are left out)"))

    def plot(path: Path) -> None:
        pyplot = plt()
        fig, axes = pyplot.subplots(1, 2, figsize=(10, 3.4))
        for ax, vary in zip(axes, sweeps, strict=True):
            twin = ax.twinx()
            for rule, style in (("paper", "-"), ("product", ":")):
                pts = sorted((s["value"], s["mean"]) for s in series if s["vary"] == vary
                             and s["what"] == f"right_{rule}")
                ax.bar([str(p[0]) + (" " if rule == "product" else "") for p in pts], [p[1] for p in pts],
                       alpha=0.4, label=f"E[#right], {rule} rule")
                pts = sorted((s["value"], s["mean"]) for s in series if s["vary"] == vary
                             and s["what"] == f"beta_{rule}")
                twin.plot([str(p[0]) for p in pts], [p[1] for p in pts], ls=style, color="k",
                          label=f"E[beta], {rule} rule")
            ax.set_xlabel(vary)
            ax.tick_params(axis="x", labelsize=6)
            ax.set_ylabel("E[#right answers] (bars)")
            twin.set_ylabel("E[beta] (lines)")
            twin.set_ylim(0, 1.02)
        axes[0].legend(fontsize=7, loc="upper left")
        save(fig, path, f"ADP Fig. 6: SALap on the day's visits ({reps} repetitions)")

    return Outcome(rows=rows, series=series, plot=plot)
