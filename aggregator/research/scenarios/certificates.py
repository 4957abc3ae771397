"""Scenario ``certificates``: certificates: one-sided answers to "is place i safe (count <= t)?" (ADP Sec. VI).

See :mod:`aggregator.research.scenarios` for what every scenario returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import special

from aggregator.analysis.certify import one_sided_upper_bounds
from aggregator.analysis.decoding import BitCounts
from aggregator.research.aggregate import count_generator, place_holders, released_ones
from aggregator.research.bounds import dp_beta_upper_bound, virtual_dp_sanitizer
from aggregator.research.engine import BlockCounts, Engine, LocalEngine, block_seeds, root_seed
from aggregator.research.populations import (
    SyntheticCity,
    make_population,
)
from aggregator.research.scenarios.common import (
    Figures,
    IntArray,
    Progress,
    check_levels,
    check_method,
    check_positive_int,
    quiet,
)
from aggregator.research.scenarios.plotting import pyplot, save_figure
from aggregator.research.scenarios.registry import ScenarioParts, register
from protocol.central import AGeoMechanism, ALapMechanism, certified_safe
from protocol.encodings import DirectEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.randomizers import Randomizer
from protocol.rng import RandomSource, SeededRandom
from protocol.validation import check_int, check_probability

# ==========================================================================
# certificates: one-sided answers to "is place i safe (count <= t)?" (ADP Sec. VI)
# ==========================================================================

MECHANISMS: dict[str, str] = {
    "local_alpha0": "local one-sided certificate, alpha = 0",
    "local_alpha": "local one-sided certificate, alpha > 0",
    "alap": "central ALap",
    "ageo": "central AGeo",
    "dp": "best (eps, delta)-DP sanitizer (bound)",
}


@dataclass(frozen=True, kw_only=True)
class CertificateSetup:
    """A synthetic city's visits, certified locally and released centrally.

    Attributes:
        clients, chunk, places, zipf_exponent, mean_places: the population
            (each client reports one set of places, direct encoding).
        thresholds: the threshold sweep (counts), at ``epsilon``.
        epsilon: the per-visit epsilon of the threshold sweep.
        epsilons: the epsilon sweep, at each of ``sweep_thresholds``. Local:
            asymmetric level ``2 eps`` (one visit is one bit); central:
            sensitivity 1 (one visit changes one count by 1).
        alpha: error level of the local ``alpha > 0`` certificate and of the DP bound.
        delta: ``delta`` of the ``(eps, delta)``-DP bound.
        repetitions: noise draws per setting.
    """

    clients: int
    chunk: int
    places: int
    zipf_exponent: float = 1.1
    mean_places: float = 3.0
    thresholds: tuple[int, ...]
    epsilon: float = 1.0
    epsilons: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 6.0)
    sweep_thresholds: tuple[int, ...]
    alpha: float = 1e-3
    delta: float = 1e-4
    repetitions: int

    def __post_init__(self) -> None:
        for name in ("clients", "chunk", "places", "repetitions"):
            check_positive_int(name, getattr(self, name))
        check_levels("epsilons", (*self.epsilons, self.epsilon))
        for name in ("thresholds", "sweep_thresholds"):
            values = getattr(self, name)
            if not values:
                raise ParameterError(name, "must be a non-empty tuple of integers >= 0")
            for value in values:
                check_int(name, value, low=0)
        check_probability("alpha", self.alpha, open_low=True, open_high=True)
        check_probability("delta", self.delta, open_high=True)


CERTIFICATE_SETUPS = {
    # 10,000 people over 2,000 places: most places see a handful of visits, as in the ADP paper's Tokyo data.
    "small": CertificateSetup(clients=10_000, chunk=10_000, places=2_000,
                              thresholds=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000),
                              sweep_thresholds=(5, 200), repetitions=3),
    "paper": CertificateSetup(clients=1_000_000, chunk=20_000, places=2_000,
                              thresholds=(200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000),
                              sweep_thresholds=(500, 5_000), repetitions=1),
}


@dataclass(frozen=True)
class _Visits:
    """The simulated population's counts: holders per place and, per level, every collection's ones in order.

    ``ones`` hands out the next collection drawn at the randomizer's level
    (the sweep asks for them in the order :func:`certificate_block` drew them).
    """

    params: MetricParams
    names: tuple[str, ...]
    counts: IntArray
    drawn: dict[float, list[IntArray]]

    def ones(self, randomizer: Randomizer, rng: RandomSource) -> IntArray:
        """Reports' ones per place: the next collection at ``randomizer.level`` (``rng`` is not used)."""
        return self.drawn[randomizer.level].pop(0)


@dataclass(frozen=True)
class _CountVisits:
    """The population as counts only (``method="aggregate"``): holders per place, exact joint law.

    ``ones`` draws ``holders + Binomial(clients - holders, p*)`` per place
    from ``gen`` (derived from the run's source by :func:`count_generator`).
    """

    params: MetricParams
    names: tuple[str, ...]
    counts: IntArray
    clients: int
    gen: np.random.Generator

    def ones(self, randomizer: Randomizer, rng: RandomSource) -> IntArray:
        """Reports' ones per place, drawn per place (``rng`` is not used: ``gen`` derives from it)."""
        out: IntArray = released_ones(self.counts, self.clients, randomizer, (randomizer.level,), self.gen)[0]
        return out


def _city(setup: CertificateSetup) -> tuple[SyntheticCity, MetricParams]:
    city = SyntheticCity(num_places=setup.places, zipf_exponent=setup.zipf_exponent, mean_places=setup.mean_places)
    params = MetricParams(name="visits", encoding=DirectEncoding(domain=tuple(city.names())), mode="asymmetric",
                          level=1.0)
    return city, params


def _count_visits(setup: CertificateSetup, rng: RandomSource) -> _CountVisits:
    city, params = _city(setup)
    gen = count_generator(rng)
    return _CountVisits(params=params, names=tuple(city.names()), counts=place_holders(city, setup.clients, gen),
                        clients=setup.clients, gen=gen)


def with_clients(setup: CertificateSetup, clients: int, method: str) -> CertificateSetup:
    """``setup`` at ``clients``, thresholds scaled by ``clients / setup.clients`` (the same shares of the city)."""
    check_positive_int("clients", clients)
    scale = clients / setup.clients

    def scaled(ts: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted({max(1, round(t * scale)) for t in ts}))

    return replace(setup, clients=clients, chunk=min(setup.chunk, clients), thresholds=scaled(setup.thresholds),
                   sweep_thresholds=scaled(setup.sweep_thresholds))


def _collections(setup: CertificateSetup) -> list[tuple[float, int]]:
    """``(level, occurrence)`` of every collection, in the order the sweeps use them."""
    levels = [2.0 * eps for eps in (setup.epsilon, *setup.epsilons) for _ in range(setup.repetitions)]
    return [(level, levels[:i].count(level)) for i, level in enumerate(levels)]


def certificate_block(setup: CertificateSetup, index: int, seed: np.random.SeedSequence) -> BlockCounts:
    """Clients ``index * chunk ..``: holders per place and every collection's reported ones, from ``SeededRandom(seed)``.

    Each client reports its set once per collection (direct encoding,
    asymmetric at the collection's level, ``Randomizer.simulate``).
    """
    n = min(setup.chunk, setup.clients - index * setup.chunk)
    rng = SeededRandom(seed)
    city, params = _city(setup)
    pop = make_population(city, n, params.encoding, rng)
    out: BlockCounts = {"truth": pop.true_counts(setup.places)}
    for level, occurrence in _collections(setup):
        out[f"ones/{level!r}/{occurrence}"] = params.randomizer(level).simulate(pop.bits, rng).sum(axis=0)
    return out


def _visits(setup: CertificateSetup, rng: RandomSource, engine: Engine, progress: Progress) -> _Visits:
    city, params = _city(setup)
    blocks = -(-setup.clients // setup.chunk)
    counts = engine.run(certificate_block, setup, block_seeds(root_seed(rng), blocks), progress)
    drawn: dict[float, list[IntArray]] = {}
    for level, occurrence in _collections(setup):
        drawn.setdefault(level, []).append(counts[f"ones/{level!r}/{occurrence}"])
    return _Visits(params=params, names=tuple(city.names()), counts=counts["truth"], drawn=drawn)


def _dp_saturation(eps: float, alpha: float) -> int:
    """Smallest ``k`` with ``alpha e^(eps k) >= 1``: from there on the DP bound is 1.

    Counts that far below the threshold are called safe without a draw
    (``dp_beta_upper_bound`` is exactly 1 there).
    """
    return max(1, math.ceil(math.log(1.0 / alpha) / eps))


def _dp_decisions(counts: IntArray, t: int, eps: float, setup: CertificateSetup,
                  rng: RandomSource) -> npt.NDArray[np.bool_]:
    """The virtual ``(eps, delta)``-DP sanitizer's "safe" per place (Sec. VI-A)."""
    far = t + 1 - counts >= _dp_saturation(eps, setup.alpha)
    out = np.ones(counts.shape, dtype=bool)
    near = ~far
    if near.any():
        out[near] = virtual_dp_sanitizer(counts[near], t, eps, alpha=setup.alpha, delta=setup.delta, rng=rng)
    return out


def _safe_decisions(visits: _Visits | _CountVisits, setup: CertificateSetup, eps: float, thresholds: list[int],
                    rng: RandomSource) -> dict[str, npt.NDArray[np.bool_]]:
    """One draw of every mechanism at per-visit ``eps``: ``safe`` per (threshold, place)."""
    level = 2.0 * eps
    counts = BitCounts(ones=visits.ones(visits.params.randomizer(level), rng)[None, :],
                       totals=np.array([setup.clients]))
    bound0 = one_sided_upper_bounds(counts, visits.params, level, visits.names, alpha=0.0)
    bound_a = one_sided_upper_bounds(counts, visits.params, level, visits.names, alpha=setup.alpha)
    mech = ALapMechanism(epsilon=eps)
    alap = mech.release(visits.counts, rng)
    ageo = AGeoMechanism(epsilon=eps, n_max=setup.clients).release(visits.counts, rng)
    t = np.asarray(thresholds)[:, None]
    dp = np.stack([_dp_decisions(visits.counts, x, eps, setup, rng) for x in thresholds])
    # the central certificate on integer counts: answer < t + 1 (certified_safe), at ALap's grid and AGeo's 1
    return {"local_alpha0": bound0[None, :] <= t, "local_alpha": bound_a[None, :] <= t,
            "alap": np.stack([certified_safe(alap, x, mech.step) for x in thresholds]),
            "ageo": np.stack([certified_safe(ageo, x) for x in thresholds]), "dp": dp}


def _safe_theory(name: str, counts: IntArray, t: int, eps: float, setup: CertificateSetup) -> float | None:
    """``E[beta]``: the mean over truly safe places of ``P(certified safe)`` in closed form."""
    safe = counts[counts <= t]
    if safe.size == 0:
        return None
    if name == "local_alpha0":  # ones = c + Binomial(N - c, q), q = exp(-eps)
        return float(np.mean(special.bdtr(t - safe, setup.clients - safe, math.exp(-eps))))
    central = {m.name: m for m in (ALapMechanism(epsilon=eps), AGeoMechanism(epsilon=eps, n_max=setup.clients))}
    if name in central:  # the central certificate of the mechanism registered under that name
        mech = central[name]
        return float(np.mean([mech.certificate_probability(int(c), t) for c in safe]))
    if name == "dp":
        cut = _dp_saturation(eps, setup.alpha)
        return float(np.mean([
            1.0 if t + 1 - c >= cut else dp_beta_upper_bound(alpha=setup.alpha, epsilon=eps, delta=setup.delta,
                                                            k=int(t + 1 - c))
            for c in safe]))
    return None  # local alpha > 0: no closed form (a bound: false-safe <= alpha)


def _certificate_sweep(visits: _Visits | _CountVisits, setup: CertificateSetup, eps: float, thresholds: list[int],
                       rng: RandomSource) -> list[Figures]:
    """Per threshold: safe fraction, false-safe rate and theory of every mechanism at ``eps``."""
    c = visits.counts
    truly = c[None, :] <= np.asarray(thresholds)[:, None]
    hits = {m: np.zeros(len(thresholds), dtype=np.int64) for m in MECHANISMS}
    wrong = {m: np.zeros(len(thresholds), dtype=np.int64) for m in MECHANISMS}
    for _ in range(setup.repetitions):
        for m, decided in _safe_decisions(visits, setup, eps, thresholds, rng).items():
            hits[m] += (decided & truly).sum(axis=1)
            wrong[m] += (decided & ~truly).sum(axis=1)
    rows = []
    for i, t in enumerate(thresholds):
        n_safe, n_unsafe = int(truly[i].sum()), int((~truly[i]).sum())
        row: Figures = {"epsilon": eps, "threshold": t, "threshold_fraction": t / setup.clients,
                        "safe_places": n_safe, "unsafe_places": n_unsafe}
        for m in MECHANISMS:
            row[m] = {
                "safe_fraction": float(hits[m][i] / (n_safe * setup.repetitions)) if n_safe else None,
                "false_safe_rate": float(wrong[m][i] / (n_unsafe * setup.repetitions)) if n_unsafe else None,
                "theory": _safe_theory(m, c, t, eps, setup),
            }
        rows.append(row)
    return rows


def certificates(setup: CertificateSetup, rng: RandomSource, progress: Progress = quiet, *,
                 method: str = "per-client", engine: Engine | None = None) -> Figures:
    """Certified-safe fraction and false-safe rate vs threshold and vs epsilon.

    ``safe_fraction`` is the ADP paper's ``E[beta]`` (the mean over truly
    safe places of the probability to be certified safe); ``false_safe_rate``
    the share of truly unsafe places certified safe (0 for the local
    ``alpha = 0`` certificate, ALap and AGeo; at most ``alpha`` otherwise).
    ``method="per-client"`` draws every client's set and reports in blocks
    of ``chunk`` on ``engine`` (local by default; Dask gives identical
    figures); ``method="aggregate"`` draws the holders and the reported ones
    per place directly.
    """
    check_method(method)
    progress(f"certificates: drawing {setup.clients:,} clients ({method})")
    visits: _Visits | _CountVisits = (_count_visits(setup, rng) if method == "aggregate"
                                      else _visits(setup, rng, engine or LocalEngine(), progress))
    progress(f"certificates: threshold sweep at eps {setup.epsilon:g}")
    by_threshold = _certificate_sweep(visits, setup, setup.epsilon, list(setup.thresholds), rng)
    by_epsilon = []
    for eps in setup.epsilons:
        progress(f"certificates: eps {eps:g}")
        by_epsilon += _certificate_sweep(visits, setup, eps, list(setup.sweep_thresholds), rng)
    rows = by_threshold + by_epsilon
    never_wrong = ("local_alpha0", "alap", "ageo")
    decisions = {m: _false_safe_total(rows, m, setup.repetitions) for m in MECHANISMS}
    return {
        "clients": setup.clients, "method": method,
        "engine": None if method == "aggregate" else (engine or LocalEngine()).name,
        "places": setup.places, "visits": int(visits.counts.sum()),
        "repetitions": setup.repetitions, "alpha": setup.alpha, "delta": setup.delta,
        "epsilon": setup.epsilon, "sweep_thresholds": list(setup.sweep_thresholds), "mechanisms": MECHANISMS,
        "by_threshold": by_threshold, "by_epsilon": by_epsilon,
        "false_safe": decisions,
        "never_wrong_errors": sum(decisions[m]["wrong"] for m in never_wrong),
    }


def _false_safe_total(rows: list[Figures], mechanism: str, reps: int) -> dict[str, int]:
    """Unsafe decisions made and how many were "safe", pooled over every setting."""
    made = sum(r["unsafe_places"] * reps for r in rows)
    wrong = sum(round((r[mechanism]["false_safe_rate"] or 0.0) * r["unsafe_places"] * reps) for r in rows)
    return {"decisions": made, "wrong": wrong}


# --------------------------------------------------------------------------
# what ``onesided simulate`` prints and draws, and the scenario's entry
# --------------------------------------------------------------------------


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
    plt = pyplot()
    sweeps = f["sweep_thresholds"]
    fig, axes = plt.subplots(1, 1 + len(sweeps), figsize=(5.2 * (1 + len(sweeps)), 4.4))
    labels = _certificate_labels(f)
    _certificate_panel(axes[0], f["by_threshold"], "threshold", labels)
    axes[0].set_xlabel(f"threshold t (count), eps = {f['epsilon']:g}")
    axes[0].legend(fontsize=7, title="dotted: closed form", title_fontsize=7)
    for ax, t in zip(axes[1:], sweeps, strict=True):
        _certificate_panel(ax, [r for r in f["by_epsilon"] if r["threshold"] == t], "epsilon", labels)
        ax.set_xlabel(f"per-visit epsilon, t = {t}")
    save_figure(fig, path, title)


register(ScenarioParts(name="certificates", setups=CERTIFICATE_SETUPS, run=certificates, resize=with_clients,
                       summary=_certificate_lines, plot=_plot_certificates))
