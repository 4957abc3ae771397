"""``onesided simulate SCENARIO``: research simulations with a plot (see :mod:`aggregator.research.scenarios`).

Writes ``OUT/SCENARIO.png`` (matplotlib, Agg backend) and
``OUT/SCENARIO.json`` (every figure), and prints the key figures: a short
table, or with ``--json`` one JSON object
``{"scenario", "scale", "seed", "clients", "method", "engine", "seconds",
"peak_rss_mib", "peak_traced_mib", "plot", "data", "figures"}``.
Progress goes to stderr.

``--clients N --method aggregate`` simulates any number of clients from
the cells' counts (docs/simulation.md); ``--engine gpu`` runs the relaxation
scenario's per-client blocks with CuPy (extra ``[gpu]``); ``--engine dask`` runs a
per-client path's seeded blocks (relaxation, asymmetric-advantage,
certificates, city) on a Dask cluster (``--scheduler ADDRESS``, or a
LocalCluster of ``--workers``), with the local engine's figures. Wall
time and peak memory are printed and recorded: ``peak_rss_mib`` is this process's peak resident set (its whole
life, interpreter included; Dask worker processes are not in it),
``peak_traced_mib`` the peak of the Python and numpy allocations during the
run (tracemalloc). The scenario's modules are imported before the clock starts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aggregator.cli.options import Subparsers

Figures = dict[str, Any]


def register(subparsers: Subparsers) -> None:
    from aggregator.research.scenarios import SCALES, SCENARIOS

    lines = "\n".join(f"  {name:22s} {s.title}" for name, s in SCENARIOS.items())
    parser = subparsers.add_parser(
        "simulate", help="research simulations reproducing the papers' claims, with a plot",
        description=f"Scenarios:\n{lines}", formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("scenario", choices=sorted(SCENARIOS), metavar="SCENARIO", help="one of: "
                        + ", ".join(SCENARIOS))
    parser.add_argument("--out", type=Path, default=Path("onesided-simulate"),
                        help="folder for SCENARIO.png and SCENARIO.json (default ./onesided-simulate)")
    parser.add_argument("--seed", type=int, default=2026, help="seed of the simulation (default 2026)")
    parser.add_argument("--scale", choices=SCALES, default="small",
                        help="small (seconds, default) or paper (up to 10^6 simulated clients, minutes)")
    parser.add_argument("--clients", type=_positive_int, default=None, metavar="N",
                        help="simulated clients (default: the scale's; thresholds scale with it)")
    parser.add_argument("--method", choices=("per-client", "aggregate"), default="per-client",
                        help="per-client: every client's set and bits (default); aggregate: the cells' counts "
                             "drawn exactly (10^9 clients in seconds)")
    parser.add_argument("--engine", choices=("local", "dask", "gpu"), default="local",
                        help="where a per-client path's blocks run: local (default) or dask (the same figures), "
                             "gpu (CuPy, extra [gpu]; the same laws, another stream; relaxation)")
    parser.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="Dask scheduler address (default: a LocalCluster for the run)")
    parser.add_argument("--workers", type=_positive_int, default=2, help="LocalCluster workers (default 2)")
    parser.add_argument("--noise", choices=("seeded", "keyed"), default=None,
                        help="city per-client noise: seeded block streams (default) or each client's secret (SDK)")
    parser.add_argument("--json", action="store_true", help="print one JSON object with the key figures")
    parser.set_defaults(func=run)


def _positive_int(text: str) -> int:
    value = int(float(text)) if "e" in text.lower() else int(text)  # 1e9 is accepted
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _engine(args: argparse.Namespace) -> Any:
    """The engine for a per-client path, ``None`` for the default (local)."""
    if args.engine == "local" and args.scheduler is None:
        return None
    if args.engine == "gpu":
        from aggregator.research.arrays import ArrayEngine, namespace

        namespace("cupy")  # CuPy and a device, or one line saying why, before anything runs
        return ArrayEngine("cupy", block_clients=2_000_000)
    from aggregator.research.engine import DaskEngine

    return DaskEngine(scheduler=args.scheduler, workers=args.workers)


def _measured(run: Callable[[], Figures]) -> tuple[Figures, dict[str, float]]:
    """``run()`` with its wall time, this process's peak RSS and the traced allocation peak."""
    import resource
    import tracemalloc

    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    started = time.perf_counter()
    figures = run()
    seconds = time.perf_counter() - started
    traced = tracemalloc.get_traced_memory()[1]
    if not tracing:
        tracemalloc.stop()
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return figures, {"seconds": round(seconds, 3), "peak_rss_mib": round(rss_kib / 1024, 1),
                     "peak_traced_mib": round(traced / 2**20, 1)}


def run(args: argparse.Namespace) -> int:
    import matplotlib  # noqa: F401  # the plot needs it: without the research extra, say so before the run

    from aggregator.research.scenarios import SCENARIOS, run_scenario

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    engine = _engine(args)
    SCENARIOS[args.scenario].load()  # its imports happen before the clock and the tracer start
    figures, cost = _measured(lambda: run_scenario(
        args.scenario, scale=args.scale, seed=args.seed, progress=progress, clients=args.clients,
        method=args.method, engine=engine, noise=args.noise))
    args.out.mkdir(parents=True, exist_ok=True)
    plot_path = args.out / f"{args.scenario}.png"
    clients = figures.get("clients")
    label = f"{args.scale}, seed {args.seed}" + (f", {clients:,} clients, {args.method}" if clients else "")
    PLOTS[args.scenario](figures, plot_path, f"{SCENARIOS[args.scenario].title} [{label}]")
    document = {"scenario": args.scenario, "scale": args.scale, "seed": args.seed, "clients": clients,
                "method": args.method if SCENARIOS[args.scenario].has_clients else None,
                "engine": engine.name if engine is not None else "local", **cost,
                "plot": str(plot_path), "data": str(args.out / f"{args.scenario}.json"), "figures": figures}
    text = json.dumps(document, indent=2, allow_nan=False)
    (args.out / f"{args.scenario}.json").write_text(text + "\n")
    if args.json:
        print(text)
    else:
        for line in SUMMARIES[args.scenario](figures):
            print(line)
        print(f"plot: {plot_path}  data: {document['data']}")
        print(f"wall time {cost['seconds']:.1f} s, peak memory {cost['peak_rss_mib']:,.0f} MiB RSS "
              f"({cost['peak_traced_mib']:,.0f} MiB traced allocations)")
    return 0


# --------------------------------------------------------------------------
# text summaries
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


def _advantage_lines(f: Figures) -> list[str]:
    out = [f"rare item ({f['holders']} of {f['clients']:,} clients), variance of its estimate at equal per-bit eps "
           f"({f['samples']:,} estimates per point)",
           "eps    symmetric var (theory)     asymmetric var (theory)    ratio +- se       1 - e^-eps"]
    for r in f["rows"]:
        out.append(f"{r['epsilon']:<5g}  {r['symmetric_variance']:11.1f} ({r['symmetric_theory']:9.1f})  "
                   f"{r['asymmetric_variance']:11.1f} ({r['asymmetric_theory']:9.1f})  "
                   f"{r['ratio']:.3f} +- {r['ratio_se']:.3f}   {r['predicted']:.3f}")
    out.append(f"largest relative gap to 1 - e^-eps: {f['max_relative_gap']:.1%}")
    return out


def _fraction(value: float | None) -> str:
    return "   -  " if value is None else f"{value:6.3f}"


def _certificate_lines(f: Figures) -> list[str]:
    names = list(f["mechanisms"])
    head = "  ".join(f"{n:>12s}" for n in names)
    out = [f"certified-safe share of the truly safe places (E[beta]), {f['clients']:,} clients, {f['places']:,} places, "
           f"alpha = {f['alpha']:g}, delta = {f['delta']:g}",
           f"eps    t        safe  {head}"]
    for r in f["by_threshold"] + f["by_epsilon"]:
        cells = "  ".join(f"{_fraction(r[n]['safe_fraction']):>12s}" for n in names)
        out.append(f"{r['epsilon']:<5g}  {r['threshold']:<7d}  {r['safe_places']:5d}  {cells}")
    wrong = ", ".join(f"{n} {v['wrong']}/{v['decisions']:,}" for n, v in f["false_safe"].items())
    out.append(f"unsafe places certified safe: {wrong}")
    out.append(f"never-wrong mechanisms (local alpha = 0, ALap, AGeo) wrong: {f['never_wrong_errors']}")
    return out


def _city_lines(f: Figures) -> list[str]:
    c = f["certificates"]
    out = [f"synthetic city: {f['clients']:,} clients ({f['method']}), {f['places']:,} places, {f['visits']:,} visits; "
           f"round {f['level_from']:g} -> {f['level_to']:g} with {f['willing']:,} clients "
           f"(window epsilon {f['epsilon_window']:g})",
           "collection  level  reports         MSE of place counts   closed form      ratio"]
    for name in ("round0", "round"):
        r = f[name]
        out.append(f"{name:10s}  {r['level']:<5g}  {r['reports']:<14,d}  {r['mse']:<20.4g}  {r['theory']:<15.4g}  "
                   f"{r['ratio']:.3f}")
    for key in ("alpha0", "alpha"):
        a = c[key]
        share = "-" if a["share_of_safe"] is None else f"{a['share_of_safe']:.3f}"
        out.append(f"certified safe (<= {c['threshold']:,}) at alpha = {a['alpha']:g}: {a['certified_safe']:,} of "
                   f"{c['truly_safe']:,} truly safe ({share}), wrongly: {a['false_safe']}")
    return out


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


def _association_lines(f: Figures) -> list[str]:
    out = [f"joint of {f['size_a']} x {f['size_b']} values from one pair metric; total variation (projection, EM)",
           "encoding  mode         clients     eps     tv     tv_em  95% coverage"]
    for r in f["rows"]:
        out.append(f"{r['encoding']:8s}  {r['mode']:11s}  {r['clients']:>9,}  {r['epsilon']:<6g}  {r['tv']:.4f}  "
                   f"{r['tv_em']:.4f}  {r['interval_coverage']:.3f}")
    for r in f["split"]:
        out.append(f"{r['encoding']}: {r['clients']:,} clients, eps {r['epsilon']:g}: tv {r['tv']:.4f}")
    return out


def _discovery_lines(f: Figures) -> list[str]:
    out = [f"discovery of the {f['frequent_strings']} strings of share >= {f['min_share']:g} "
           f"(Zipf {f['zipf_exponent']:g} over {f['universe']:,} strings)",
           "layout                              mode         clients     eps     recall  precision"]
    for r in f["rows"] + f["layouts"]:
        out.append(f"{r['layout']:34s}  {r['mode']:11s}  {r['clients']:>9,}  {r['epsilon']:<6g}  "
                   f"{r['recall']:.2f}    {r['precision']:.2f}")
    return out


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


def _sql_lines(f: Figures) -> list[str]:
    out = [f"{f['query']}", f"{f['customers']:,} customers, {f['orders']:,} orders: count {f['count']:,}, "
           f"sensitivity {f['sensitivity']} (FLEX elastic sensitivity at distance 0; the paper's 50), margin "
           f"{f['margin']:g}, {f['trials']:,} trials"]
    for r in f["rows"]:
        sizes = r["colluders"]
        out.append(f"eps {r['epsilon']:g}: paper's i = {r['paper_colluders']}; RMSE at i = "
                   + " ".join(f"{i:>6d}" for i in sizes))
        for scheme, res in r["schemes"].items():
            out.append(f"  {scheme:24s}" + " ".join(f"{x:6.1f}" for x in res["rmse"])
                       + f"   P(within margin) at the largest i: {res['within_margin'][-1]:.3f}")
    return out


def _regression_lines(f: Figures) -> list[str]:
    out = [f"iris, {f['train_rows']} training rows, one-vs-rest logistic, Lambda {f['regularization']:g}, "
           f"{f['repetitions']} splits; non-private accuracy {f['non_private_accuracy']:.3f}",
           "objective perturbation accuracy   mu = " + " ".join(f"{m:>6g}" for m in f["locations"]) + "  spread"]
    for eps, row, spread in zip(f["epsilons"], f["objective_accuracy"], f["location_spread"], strict=True):
        out.append(f"  eps {eps:<6g}                          " + " ".join(f"{a:6.3f}" for a in row) + f"  {spread:.3f}")
    out.append("analysts (output perturbation)  levels " + " ".join(f"{lv:>6g}" for lv in f["analyst_levels"]))
    for kind, res in f["analysts"].items():
        out.append(f"  {kind:12s} each analyst           " + " ".join(f"{a:6.3f}" for a in res["accuracy"]))
        out.append(f"  {kind:12s} coalition pooled       " + " ".join(f"{a:6.3f}" for a in res["coalition_accuracy"])
                   + "   coalition eps " + " ".join(f"{e:g}" for e in res["coalition_epsilon"]))
    return out


SUMMARIES: dict[str, Callable[[Figures], list[str]]] = {
    "relaxation": _relaxation_lines,
    "asymmetric-advantage": _advantage_lines,
    "certificates": _certificate_lines,
    "city": _city_lines,
    "collusion": _collusion_lines,
    "association": _association_lines,
    "discovery": _discovery_lines,
    "irr-relaxation": _irr_lines,
    "sql-counting": _sql_lines,
    "multi-analyst-regression": _regression_lines,
}


# --------------------------------------------------------------------------
# plots
# --------------------------------------------------------------------------


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path, title: str) -> None:
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)


def _plot_relaxation(f: Figures, path: Path, title: str) -> None:
    plt = _pyplot()
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
    _save(fig, path, title)


def _plot_advantage(f: Figures, path: Path, title: str) -> None:
    import numpy as np

    plt = _pyplot()
    rows = f["rows"]
    eps = [r["epsilon"] for r in rows]
    dense = np.linspace(min(eps) * 0.8, max(eps) * 1.05, 200)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.errorbar(eps, [r["ratio"] for r in rows], yerr=[2 * r["ratio_se"] for r in rows], fmt="o",
                  label="measured (+- 2 se)")
    left.plot(dense, -np.expm1(-dense), label="1 - e^-eps")
    left.set_xlabel("per-bit epsilon")
    left.set_ylabel("Var asymmetric / Var symmetric")
    left.legend()
    for i, mode in enumerate(("symmetric", "asymmetric")):
        right.plot(eps, [r[f"{mode}_variance"] for r in rows], "o", color=f"C{i}", label=f"{mode}, measured")
        right.plot(eps, [r[f"{mode}_theory"] for r in rows], "-", color=f"C{i}", label=f"{mode}, theory")
    right.set_yscale("log")
    right.set_xlabel("per-bit epsilon")
    right.set_ylabel(f"variance of a rare item's count ({f['holders']} of {f['clients']:,})")
    right.legend(fontsize=8)
    _save(fig, path, title)


def _certificate_labels(f: Figures) -> dict[str, str]:
    return {
        "local_alpha0": "local one-sided certificate, alpha = 0",
        "local_alpha": f"local one-sided certificate, alpha = {f['alpha']:g}",
        "alap": "central ALap", "ageo": "central AGeo",
        "dp": f"best (eps, {f['delta']:g})-DP sanitizer, alpha = {f['alpha']:g}",
    }


def _certificate_panel(ax: Any, rows: list[Figures], key: str, labels: dict[str, str]) -> None:
    for i, (name, label) in enumerate(labels.items()):
        xs = [r[key] for r in rows if r[name]["safe_fraction"] is not None]
        ys = [r[name]["safe_fraction"] for r in rows if r[name]["safe_fraction"] is not None]
        line, = ax.plot(xs, ys, "o-", label=label, color=f"C{i}")
        theory = [(r[key], r[name]["theory"]) for r in rows if r[name]["theory"] is not None]
        if theory:
            ax.plot(*zip(*theory, strict=True), ":", color=line.get_color())
    ax.set_xscale("log")
    ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel("share of truly safe places certified safe")
    if key == "epsilon":
        from matplotlib.ticker import NullFormatter

        ax.set_xticks([r[key] for r in rows], [f"{r[key]:g}" for r in rows])
        ax.xaxis.set_minor_formatter(NullFormatter())


def _plot_certificates(f: Figures, path: Path, title: str) -> None:
    plt = _pyplot()
    sweeps = f["sweep_thresholds"]
    fig, axes = plt.subplots(1, 1 + len(sweeps), figsize=(5.2 * (1 + len(sweeps)), 4.4))
    labels = _certificate_labels(f)
    _certificate_panel(axes[0], f["by_threshold"], "threshold", labels)
    axes[0].set_xlabel(f"threshold t (count), eps = {f['epsilon']:g}")
    axes[0].legend(fontsize=7, title="dotted: closed form", title_fontsize=7)
    for ax, t in zip(axes[1:], sweeps, strict=True):
        _certificate_panel(ax, [r for r in f["by_epsilon"] if r["threshold"] == t], "epsilon", labels)
        ax.set_xlabel(f"per-visit epsilon, t = {t}")
    _save(fig, path, title)


def _plot_collusion(f: Figures, path: Path, title: str) -> None:
    plt = _pyplot()
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
    _save(fig, path, title)


def _plot_city(f: Figures, path: Path, title: str) -> None:
    import numpy as np

    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    for i, (name, truth, label) in enumerate((("round0", "truth", "round 0"), ("round", "round_truth", "round"))):
        r = f[name]
        t = np.asarray(f[truth], dtype=float)
        ones = np.asarray(f["ones_round0" if name == "round0" else "ones_round"], dtype=float)
        q = np.exp(-r["level"] / 2.0)
        estimate = (ones - q * r["reports"]) / (1.0 - q)
        left.scatter(t, estimate - t, s=4, color=f"C{i}", alpha=0.5,
                     label=f"{label}, level {r['level']:g} (sd {r['mse'] ** 0.5:.3g}, theory {r['theory'] ** 0.5:.3g})")
    left.set_xscale("symlog")
    left.set_xlabel("true count of the place")
    left.set_ylabel("estimate - truth")
    left.legend(fontsize=8)
    c = f["certificates"]
    names = ["truly safe", "certified, alpha = 0", f"certified, alpha = {c['alpha']['alpha']:g}",
             "wrongly certified (alpha > 0)"]
    values = [c["truly_safe"], c["alpha0"]["certified_safe"], c["alpha"]["certified_safe"], c["alpha"]["false_safe"]]
    right.bar(range(4), values, color=["grey", "C0", "C1", "C3"])
    right.set_xticks(range(4), names, rotation=15, fontsize=8)
    right.set_ylabel(f"places (threshold {c['threshold']:,} round participants)")
    _save(fig, path, title)


def _plot_association(f: Figures, path: Path, title: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for (kind, mode), marker in zip([(k, m) for k in ("direct", "bloom") for m in ("symmetric", "asymmetric")],
                                    "osD^", strict=True):
        for clients in sorted({r["clients"] for r in f["rows"]}):
            rows = [r for r in f["rows"] if (r["encoding"], r["mode"], r["clients"]) == (kind, mode, clients)]
            ax.plot([r["epsilon"] for r in rows], [r["tv"] for r in rows], marker=marker,
                    label=f"{kind} {mode}, {clients:,}")
    ax.axhline(0.05, color="grey", ls="--", lw=1)
    ax.set_xlabel("epsilon per report (everything a client sends)")
    ax.set_ylabel("total variation of the joint")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    _save(fig, path, title)


def _plot_discovery(f: Figures, path: Path, title: str) -> None:
    plt = _pyplot()
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
    _save(fig, path, title)


def _plot_irr(f: Figures, path: Path, title: str) -> None:
    plt = _pyplot()
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
    _save(fig, path, title)


def _plot_sql(f: Figures, path: Path, title: str) -> None:
    plt = _pyplot()
    rows = f["rows"]
    fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 4.2), squeeze=False)
    for ax, r in zip(axes[0], rows, strict=True):
        for i, (scheme, res) in enumerate(r["schemes"].items()):
            ax.plot(r["colluders"], res["rmse"], "o-", color=f"C{i}", label=scheme, ms=3)
        ax.axvline(r["paper_colluders"], color="grey", ls="--", lw=1)
        ax.axhline(f["margin"], color="grey", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"colluding analysts (eps {r['epsilon']:g})")
    axes[0][0].set_ylabel(f"RMSE of the averaged count (true {f['count']:,})")
    axes[0][0].legend(fontsize=7)
    _save(fig, path, title)


def _plot_regression(f: Figures, path: Path, title: str) -> None:
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for j, mu in enumerate(f["locations"]):
        left.plot(f["epsilons"], [row[j] for row in f["objective_accuracy"]], "o-", label=f"mu = {mu:g}", ms=3)
    left.axhline(f["non_private_accuracy"], color="grey", ls="--", lw=1)
    left.set_xscale("log")
    left.set_xlabel("epsilon (whole model)")
    left.set_ylabel("test accuracy (objective perturbation)")
    left.legend(fontsize=7)
    for i, (kind, res) in enumerate(f["analysts"].items()):
        right.plot(f["analyst_levels"], res["accuracy"], "o-", color=f"C{i}", label=f"{kind}: each analyst")
        right.plot(f["analyst_levels"], res["coalition_accuracy"], "s:", color=f"C{i}",
                   label=f"{kind}: coalition of the first analysts, pooled")
    right.axhline(f["non_private_accuracy"], color="grey", ls="--", lw=1)
    right.set_xlabel("analyst level (coalition: up to this analyst)")
    right.set_ylabel("test accuracy (output perturbation)")
    right.legend(fontsize=7)
    _save(fig, path, title)


PLOTS: dict[str, Callable[[Figures, Path, str], None]] = {
    "relaxation": _plot_relaxation,
    "asymmetric-advantage": _plot_advantage,
    "certificates": _plot_certificates,
    "city": _plot_city,
    "collusion": _plot_collusion,
    "association": _plot_association,
    "discovery": _plot_discovery,
    "irr-relaxation": _plot_irr,
    "sql-counting": _plot_sql,
    "multi-analyst-regression": _plot_regression,
}
