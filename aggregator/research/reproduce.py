"""``onesided reproduce``: every quantitative experiment of the three papers, beside the paper's numbers.

An experiment (the ``experiments_*`` modules beside this one) runs ``R``
seeded repetitions (repetition ``r`` draws from child ``r`` of
``SeedSequence(seed)``) and returns :class:`Row` records, one per figure
the paper states: the paper's value, ours as the mean over the
repetitions with a 95% confidence interval for the mean (Student's ``t``),
the 2.5-97.5% range of the single repetitions (where a single run of the
paper's size would fall), a verdict with its reason, and every
repetition's value (in order: the first is seed ``seed``'s run). Curves (the
papers' figures) go to one CSV each and a PNG.

:func:`write_report` writes the folder: ``rows.csv`` (every row),
``SERIES.csv`` and ``EXPERIMENT.png`` per experiment, ``run.json`` (seed,
scale, machine, start time, seconds per experiment) and ``index.html``
(the table, the plots, the run's facts).
"""

from __future__ import annotations

import csv
import html
import json
import math
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SCALES: tuple[str, ...] = ("small", "paper")
# Per scale: seeded repetitions and sizes (the small scale is what the test runs). ``scenario``: runs of
# a cheap ``simulate`` scenario; ``slow_scenario``: of association and discovery (half a minute and more a
# run at the small scale), which run at the paper scale only.
SIZES: dict[str, dict[str, int]] = {
    "small": {"adp": 20, "lazy": 10, "lazy_n": 100_000, "jump_chains": 4_000, "jump_steps": 200, "jump_reps": 5,
              "splits": 100, "scenario": 3, "slow_scenario": 0},
    "paper": {"adp": 200, "lazy": 40, "lazy_n": 1_000_000, "jump_chains": 40_000, "jump_steps": 1_000,
              "jump_reps": 10, "splits": 500, "scenario": 3, "slow_scenario": 1},
}

__all__ = [
    "SCALES", "SIZES", "Experiment", "Outcome", "Row", "experiments", "generators", "interval", "machine", "plt",
    "run_experiments", "save", "verdict", "within", "write_report",
]


def interval(values: Sequence[float]) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean and its 95% Student-t interval (a single value: itself, twice)."""
    from scipy import stats

    v = np.asarray(values, dtype=np.float64)
    mean = float(np.mean(v))
    if v.size < 2:
        return mean, mean, mean
    half = float(stats.t.ppf(0.975, v.size - 1) * np.std(v, ddof=1) / math.sqrt(v.size))
    return mean, mean - half, mean + half


@dataclass(frozen=True, kw_only=True)
class Row:
    """One figure of a paper beside ours.

    Attributes:
        experiment: the experiment's name (``rows.csv`` groups by it).
        source: paper and place (``"ADP Fig. 2"``).
        quantity: what is measured.
        parameters: the setting, in words.
        paper: the paper's number (``None`` when it states a property, not a number).
        paper_text: what the paper says, in short.
        values: ours, one value per repetition (one value: exact or computed once).
        agree: the verdict (``None``: nothing to compare).
        why: the reason for the verdict (or the disagreement).
    """

    experiment: str
    source: str
    quantity: str
    parameters: str
    paper: float | None
    paper_text: str
    values: tuple[float, ...]
    agree: bool | None
    why: str

    @property
    def summary(self) -> dict[str, Any]:
        mean, low, high = interval(self.values)
        spread = np.percentile(self.values, [2.5, 97.5]) if len(self.values) > 1 else (mean, mean)
        return {
            "experiment": self.experiment, "source": self.source, "quantity": self.quantity,
            "parameters": self.parameters, "paper": self.paper, "paper_text": self.paper_text,
            "ours_mean": mean, "ci95_low": low, "ci95_high": high,
            "single_run_low": float(spread[0]), "single_run_high": float(spread[1]),
            "repetitions": len(self.values),
            "agree": "" if self.agree is None else ("yes" if self.agree else "no"), "why": self.why,
            "values": " ".join(f"{v:.6g}" for v in self.values),
        }


@dataclass
class Outcome:
    """What an experiment returns: its rows, its curves (CSV rows) and how to draw them."""

    rows: list[Row]
    series: list[dict[str, Any]] = field(default_factory=list)
    plot: Callable[[Path], None] | None = None


@dataclass(frozen=True)
class Experiment:
    """A named experiment: ``run(scale, seed, options) -> Outcome``, run at the ``scales`` named."""

    name: str
    title: str
    run: Callable[[str, int, dict[str, Any]], Outcome]
    scales: tuple[str, ...] = SCALES


def experiments() -> list[Experiment]:
    """Every experiment, in the order of docs/simulation.md (imports the experiment modules)."""
    from aggregator.research import experiments_adp as adp
    from aggregator.research import experiments_gradual as gr
    from aggregator.research import experiments_multiuser as mu
    from aggregator.research import experiments_scenarios as sc

    return [
        Experiment("adp-fig2", "ADP Figs. 2-3: certified safe places at 6 p.m.", adp.adp_fig2),
        Experiment("adp-fig4", "ADP Fig. 4: E[beta] against eps, t, alpha, delta", adp.adp_fig4),
        Experiment("adp-fig5", "ADP Fig. 5: SALap's right answers on the day's visits", adp.adp_fig5),
        Experiment("adp-fig6", "ADP Fig. 6: SALap against eps and t", adp.adp_fig6),
        Experiment("mu-collusion", "multi-user Sec. B: the averaging attack", mu.collusion_formula),
        Experiment("mu-table1", "multi-user Table 1: noise magnitude and KL divergence", mu.kl_table),
        Experiment("mu-regression", "multi-user Fig. 6: iris regression against mu", mu.regression_fig6),
        Experiment("gr-lazy-step", "gradual release Theorems 10, 12, eq. 28: the lazy step", gr.lazy_step),
        Experiment("gr-jumps", "gradual release: jumps of the lazy process", gr.jumps),
        Experiment("gr-rappor", "gradual release eqs. 45-46: RAPPOR as thresholded Laplace", gr.rappor_threshold),
        Experiment("sim-relaxation", "simulate relaxation over seeds", gr.scenario_relaxation),
        Experiment("sim-asymmetric-advantage", "simulate asymmetric-advantage over seeds", gr.scenario_advantage),
        Experiment("sim-collusion", "simulate collusion over seeds", gr.scenario_collusion),
        Experiment("sim-sql-counting", "simulate sql-counting over seeds", gr.scenario_sql_counting),
        Experiment("sim-certificates", "simulate certificates over seeds", sc.scenario_certificates),
        Experiment("sim-city", "simulate city over seeds", sc.scenario_city),
        Experiment("sim-irr-relaxation", "simulate irr-relaxation over seeds", sc.scenario_irr),
        Experiment("sim-bloom-cells", "the aggregate method's Bloom cells against the per-client path's",
                   sc.scenario_bloom_cells),
        Experiment("sim-association", "simulate association (paper scale only)", sc.scenario_association,
                   scales=("paper",)),
        Experiment("sim-discovery", "simulate discovery (paper scale only)", sc.scenario_discovery,
                   scales=("paper",)),
        Experiment("sim-multi-analyst-regression", "simulate multi-analyst-regression (paper scale only)",
                   sc.scenario_regression, scales=("paper",)),
    ]


def machine() -> dict[str, Any]:
    """Where the run happened: host, CPU, cores, Python and numpy versions, load average."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    return {"host": platform.node(), "cpu": _cpu_name(), "cores": os.cpu_count(), "system": platform.platform(),
            "python": platform.python_version(), "numpy": np.__version__,
            "load_average": [round(x, 2) for x in load]}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_experiments(experiments: Sequence[Experiment], *, scale: str, seed: int, options: dict[str, Any],
                    progress: Callable[[str], None]) -> tuple[dict[str, Outcome], dict[str, dict[str, float]]]:
    """Run each experiment of ``scale`` once; returns the outcomes and each one's wall and CPU seconds.

    Beside the seconds: the 1-minute load average when the experiment started (the machine's other work)
    and the process's peak RSS when it ended (the run's peak so far). An experiment that does not run at
    ``scale`` is named in ``progress`` and skipped.
    """
    outcomes: dict[str, Outcome] = {}
    seconds: dict[str, dict[str, float]] = {}
    for exp in experiments:
        if scale not in exp.scales:
            progress(f"{exp.name}: skipped, runs at --scale {' or '.join(exp.scales)} only")
            continue
        progress(f"{exp.name}: {exp.title}")
        wall, cpu, load = time.perf_counter(), time.process_time(), _load()
        outcomes[exp.name] = exp.run(scale, seed, options)
        seconds[exp.name] = {"wall": round(time.perf_counter() - wall, 2), "cpu": round(time.process_time() - cpu, 2),
                             "load_1min_at_start": load, "peak_rss_mib_so_far": _peak_rss_mib()}
    return outcomes, seconds


def _load() -> float:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else math.nan


def _peak_rss_mib() -> float:
    try:
        import resource
    except ImportError:  # not on this platform
        return math.nan
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def write_report(out: Path, outcomes: dict[str, Outcome], *, facts: dict[str, Any]) -> list[dict[str, Any]]:
    """Write ``rows.csv``, the series' CSVs and PNGs, ``run.json`` and ``index.html`` into ``out``; returns the rows."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [row.summary for outcome in outcomes.values() for row in outcome.rows]
    _write_csv(out / "rows.csv", rows)
    pictures: list[str] = []
    for name, outcome in outcomes.items():
        if outcome.series:
            _write_csv(out / f"{name}.csv", outcome.series)
        if outcome.plot is not None:
            outcome.plot(out / f"{name}.png")
            pictures.append(name)
    (out / "run.json").write_text(json.dumps({**facts, "rows": rows}, indent=2, allow_nan=True) + "\n")
    (out / "index.html").write_text(_index_html(rows, pictures, outcomes, facts))
    return rows


def _write_csv(path: Path, records: list[dict[str, Any]]) -> None:
    columns: list[str] = []
    for record in records:
        columns.extend(k for k in record if k not in columns)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(records)


def _number(value: Any) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def _index_html(rows: list[dict[str, Any]], pictures: list[str], outcomes: dict[str, Outcome],
                facts: dict[str, Any]) -> str:
    head = ("<tr><th>source</th><th>quantity</th><th>parameters</th><th>paper</th><th>ours (mean)</th>"
            "<th>95% CI</th><th>single runs 2.5-97.5%</th><th>reps</th><th>agree</th><th>why</th></tr>")
    body = "".join(
        f"<tr class='{r['agree'] or 'na'}'><td>{_number(r['source'])}</td><td>{_number(r['quantity'])}</td>"
        f"<td>{_number(r['parameters'])}</td><td>{_number(r['paper'])} {_number(r['paper_text'])}</td>"
        f"<td>{_number(r['ours_mean'])}</td><td>{_number(r['ci95_low'])} - {_number(r['ci95_high'])}</td>"
        f"<td>{_number(r['single_run_low'])} - {_number(r['single_run_high'])}</td><td>{r['repetitions']}</td>"
        f"<td>{r['agree']}</td><td>{_number(r['why'])}</td></tr>"
        for r in rows
    )
    figures = "".join(
        f"<figure><img src='{name}.png' alt='{name}'><figcaption>{name}"
        f"{' (data: ' + name + '.csv)' if outcomes[name].series else ''}</figcaption></figure>"
        for name in pictures
    )
    facts_list = "".join(f"<li>{html.escape(k)}: {html.escape(json.dumps(v))}</li>" for k, v in facts.items())
    style = ("body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;padding:2px 4px}tr.no{background:#fdd}tr.yes{background:#efe}"
             "img{max-width:900px}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>onesided reproduce</title>"
            f"<style>{style}</style></head><body><h1>The three papers, reproduced</h1><ul>{facts_list}</ul>"
            f"<p>Data: rows.csv (every row), one CSV per figure; run.json (this page's facts).</p>"
            f"<table>{head}{body}</table>{figures}</body></html>\n")


def generators(seed: int, reps: int) -> Iterator[np.random.Generator]:
    """One numpy generator per repetition: child ``r`` of ``SeedSequence(seed)``."""
    for child in np.random.SeedSequence(seed).spawn(reps):
        yield np.random.Generator(np.random.PCG64(child))


def within(paper: float, values: list[float], tolerance: float) -> tuple[bool, str]:
    """Agree when the paper's single run is within ``tolerance`` of our mean or inside our single runs' range."""
    mean = float(np.mean(values))
    low, high = (np.percentile(values, [2.5, 97.5]) if len(values) > 1 else (mean, mean))
    if low <= paper <= high:
        return True, "the paper's value is inside the range of our single runs"
    if abs(mean - paper) <= tolerance:
        return True, f"within {tolerance:g} of our mean"
    return False, f"off by {mean - paper:+.4g} (more than {tolerance:g}, outside our single runs)"


def plt() -> Any:
    """``matplotlib.pyplot`` on the file-only backend (imported when a figure is drawn)."""
    from aggregator.research.scenarios.plotting import pyplot

    return pyplot()


def save(fig: Any, path: Path, title: str) -> None:
    """Title ``fig`` and write it to ``path`` as a PNG."""
    from aggregator.research.scenarios.plotting import save_figure

    save_figure(fig, path, title)


def verdict(paper: float, values: list[float], tolerance: float, reason: str) -> dict[str, Any]:
    """:func:`within` as a :class:`Row`'s ``agree`` and ``why``, with ``reason`` added to a disagreement."""
    agree, why = within(paper, values, tolerance)
    return {"agree": agree, "why": why if agree else f"{why}: {reason}"}
