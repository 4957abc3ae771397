"""Scenario ``association``: the joint of two variables from one pair metric (docs/decoding.md 9).

Two variables of ``size_a`` and ``size_b`` values with a dependent joint
(``a`` Zipf, ``b | a`` Zipf over ``b`` rotated by ``a``); every client
reports its pair once as one value of a pair metric (per-report epsilon:
everything the client sends). Counts are drawn exactly at the aggregate
level (:func:`aggregator.research.scenarios.discovery.reported_counts`).
Figures: total variation ``tv = 1/2 sum |joint - truth|`` of the estimated
joint against the population's shares, for the direct and the Bloom pair
encodings, both modes, EM and projection; and, for comparison, RAPPOR's
design (two filters per report, linked, the epsilon split in two) decoded
with the per-report EM.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aggregator.analysis.association import (
    em_reports,
    estimate_joint,
    log_likelihoods,
    pair_domain,
)
from aggregator.research.aggregate import count_generator
from aggregator.research.scenarios.common import (
    Figures,
    FloatArray,
    Progress,
    check_positive_int,
    quiet,
)
from aggregator.research.scenarios.discovery import level_for_epsilon, reported_counts
from aggregator.research.scenarios.plotting import pyplot, save_figure
from aggregator.research.scenarios.registry import ScenarioParts, register
from protocol.encodings import BloomEncoding, DirectEncoding, Encoding
from protocol.errors import ParameterError
from protocol.local import local_mechanism
from protocol.params import MetricParams
from protocol.randomizers import Mode
from protocol.rng import RandomSource


@dataclass(frozen=True, kw_only=True)
class AssociationSetup:
    """Attributes: population and grid; ``split_clients`` is the population of the per-report EM comparison."""

    clients: int
    size_a: int = 12
    size_b: int = 15
    epsilon: float = 4.0
    epsilons: tuple[float, ...] = (1.0, 2.0, 4.0)
    client_counts: tuple[int, ...]
    bloom_bits: int = 128
    bloom_cohorts: int = 16
    split_clients: int

    def __post_init__(self) -> None:
        for name in ("clients", "size_a", "size_b", "split_clients"):
            check_positive_int(name, getattr(self, name))
        if not self.client_counts:
            raise ParameterError("client_counts", "must not be empty")


ASSOCIATION_SETUPS = {
    "small": AssociationSetup(clients=100_000, client_counts=(100_000,), epsilons=(4.0,), split_clients=20_000),
    "paper": AssociationSetup(clients=1_000_000, client_counts=(100_000, 1_000_000), split_clients=200_000),
}


def true_joint(size_a: int, size_b: int) -> FloatArray:
    """``P(a) P(b | a)``: ``a`` Zipf(1), ``b | a`` Zipf(1.2) over ``b`` rotated by ``3 a``."""
    pa = 1.0 / np.arange(1, size_a + 1)
    pa /= pa.sum()
    base = np.arange(1, size_b + 1, dtype=np.float64) ** -1.2
    rows = np.stack([np.roll(base, 3 * i) for i in range(size_a)])
    out: FloatArray = pa[:, None] * rows / rows.sum(axis=1, keepdims=True)
    return out


def _names(setup: AssociationSetup) -> tuple[list[str], list[str]]:
    return [f"os-{i}" for i in range(setup.size_a)], [f"country-{j}" for j in range(setup.size_b)]


def _params(setup: AssociationSetup, kind: str, mode: Mode, epsilon: float) -> MetricParams:
    a, b = _names(setup)
    encoding: Encoding = (DirectEncoding(domain=pair_domain(a, b)) if kind == "direct" else
                          BloomEncoding(num_bits=setup.bloom_bits, num_hashes=1, num_cohorts=setup.bloom_cohorts))
    return MetricParams(name="pair", encoding=encoding, mode=mode, value_kind="set" if local_mechanism(mode).one_sided
                        else "categorical", level=level_for_epsilon(mode, epsilon))


def _pair_run(setup: AssociationSetup, kind: str, mode: Mode, epsilon: float, clients: int,
              gen: np.random.Generator) -> Figures:
    params = _params(setup, kind, mode, epsilon)
    a, b = _names(setup)
    cells = pair_domain(a, b)
    holders = gen.multinomial(gen.multinomial(clients, true_joint(setup.size_a, setup.size_b).ravel()),
                              np.full(params.num_cohorts, 1.0 / params.num_cohorts))
    counts = reported_counts(params, params.encoding.bit_table(list(cells)), holders, gen)
    truth = holders.sum(axis=1) / clients
    row: Figures = {"encoding": kind, "mode": mode, "clients": clients,
                    "epsilon": params.guarantee().epsilon_per_report}
    for method in ("em", "projection"):
        fit = estimate_joint(counts, params, None, a, b, method=method)
        row[f"tv_{method}"] = float(0.5 * np.abs(fit.joint.ravel() - truth).sum())
        inside = np.abs(fit.estimates.ravel() / clients - truth) <= 1.96 * fit.std_errors.ravel() / clients
        row["interval_coverage"] = float(np.mean(inside))
    row["tv"] = row["tv_projection"]
    return row


def _split_run(setup: AssociationSetup, epsilon: float, gen: np.random.Generator) -> Figures:
    """RAPPOR's design: two direct filters per report, ``epsilon / 2`` each, per-report EM."""
    n = setup.split_clients
    joint = true_joint(setup.size_a, setup.size_b)
    cell = gen.choice(joint.size, size=n, p=joint.ravel())
    value_a, value_b = cell // setup.size_b, cell % setup.size_b
    logs = []
    for size, value in ((setup.size_a, value_a), (setup.size_b, value_b)):
        params = MetricParams(name="var", encoding=DirectEncoding(domain=tuple(str(i) for i in range(size))),
                              mode="symmetric", value_kind="categorical",
                              level=level_for_epsilon("symmetric", epsilon / 2.0))
        p_star, q_star = params.randomizer().probabilities()
        truth = np.zeros((n, size), dtype=bool)
        truth[np.arange(n), value] = True
        reports = gen.random((n, size)) < np.where(truth, q_star, p_star)
        table = np.arange(size)[None, :, None]
        logs.append(log_likelihoods(reports, np.zeros(n, dtype=np.int64), table, (p_star, q_star)))
    fit, _ = em_reports(logs[0], logs[1])
    shares = np.bincount(cell, minlength=joint.size) / n
    return {"encoding": "two direct filters (RAPPOR-style), per-report EM", "mode": "symmetric", "clients": n,
            "epsilon": epsilon, "tv": float(0.5 * np.abs(fit.ravel() - shares).sum())}


def association(setup: AssociationSetup, rng: RandomSource, progress: Progress = quiet) -> Figures:
    """Total variation of the estimated joint over encodings, modes, epsilon and clients."""
    gen = count_generator(rng)
    rows = []
    for kind in ("direct", "bloom"):
        for mode in ("symmetric", "asymmetric"):
            for clients in setup.client_counts:
                for eps in setup.epsilons:
                    progress(f"association: {kind} {mode}, {clients:,} clients, eps {eps:g}")
                    rows.append(_pair_run(setup, kind, mode, eps, clients, gen))
    progress(f"association: two filters per report, {setup.split_clients:,} clients")
    split = [_split_run(setup, setup.epsilon, gen)]
    head = next(r for r in rows if r["encoding"] == "direct" and r["mode"] == "symmetric"
                and r["clients"] == setup.clients and abs(r["epsilon"] - setup.epsilon) < 1e-3)
    return {"clients": setup.clients, "tv": head["tv"], "epsilon": head["epsilon"], "encoding": "direct",
            "mode": "symmetric", "cells": setup.size_a * setup.size_b, "size_a": setup.size_a,
            "size_b": setup.size_b, "rows": rows, "split": split}


# --------------------------------------------------------------------------
# what ``onesided simulate`` prints and draws, and the scenario's entry
# --------------------------------------------------------------------------


def _association_lines(f: Figures) -> list[str]:
    out = [f"joint of {f['size_a']} x {f['size_b']} values from one pair metric; total variation (projection, EM)",
           "encoding  mode         clients     eps     tv     tv_em  95% coverage"]
    for r in f["rows"]:
        out.append(f"{r['encoding']:8s}  {r['mode']:11s}  {r['clients']:>9,}  {r['epsilon']:<6g}  {r['tv']:.4f}  "
                   f"{r['tv_em']:.4f}  {r['interval_coverage']:.3f}")
    for r in f["split"]:
        out.append(f"{r['encoding']}: {r['clients']:,} clients, eps {r['epsilon']:g}: tv {r['tv']:.4f}")
    return out


def _plot_association(f: Figures, path: Path, title: str) -> None:
    plt = pyplot()
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
    save_figure(fig, path, title)


register(ScenarioParts(name="association", setups=ASSOCIATION_SETUPS, run=association, summary=_association_lines,
                       plot=_plot_association))
