"""Scenario ``asymmetric-advantage``: rare items, 1 - e^-eps.

See :mod:`aggregator.research.scenarios` for what every scenario returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from aggregator.analysis.decoding import BitCounts, bit_estimates
from aggregator.research.aggregate import count_generator, released_ones
from aggregator.research.engine import BlockCounts, Engine, LocalEngine, block_seeds, root_seed
from aggregator.research.populations import (
    theoretical_variance,
)
from aggregator.research.scenarios.common import (
    Figures,
    FloatArray,
    Progress,
    check_levels,
    check_method,
    check_positive_int,
    quiet,
)
from aggregator.research.scenarios.plotting import pyplot, save_figure
from aggregator.research.scenarios.registry import ScenarioParts, register
from protocol.accounting import bit_epsilon
from protocol.errors import ParameterError
from protocol.randomizers import Randomizer, laplace_rate_from_f
from protocol.rng import RandomSource, SeededRandom

# ==========================================================================
# asymmetric-advantage: rare items, 1 - e^-eps
# ==========================================================================


@dataclass(frozen=True, kw_only=True)
class AdvantageSetup:
    """``items`` rare items of a direct metric, each held by ``holders`` of ``clients``.

    Item ``j`` is held by clients ``j * holders .. (j + 1) * holders - 1``.
    Each repetition gives ``items`` independent estimate errors per mode.
    """

    clients: int
    chunk: int
    items: int
    holders: int
    epsilons: tuple[float, ...]
    repetitions: int

    def __post_init__(self) -> None:
        for name in ("clients", "chunk", "items", "holders", "repetitions"):
            check_positive_int(name, getattr(self, name))
        check_levels("epsilons", self.epsilons)
        if self.items * self.holders > self.clients:
            raise ParameterError("holders", "items * holders must not exceed clients")


ADVANTAGE_SETUPS = {
    "small": AdvantageSetup(clients=2_000, chunk=2_000, items=64, holders=10,
                            epsilons=(0.25, 0.5, 1.0, 2.0, 3.0), repetitions=100),
    # The small setup's 6,400 estimates per point would take 6.4e9 draws per mode and epsilon at
    # 10^6 clients: fewer epsilons, and 128 items x 30 repetitions (3,840 estimates per point).
    "paper": AdvantageSetup(clients=1_000_000, chunk=50_000, items=128, holders=1_000,
                            epsilons=(0.5, 1.0, 2.0), repetitions=30),
}


def equal_epsilon_randomizers(epsilon: float) -> dict[str, Randomizer]:
    """Symmetric and asymmetric randomizers whose memoized bit costs ``epsilon``.

    Symmetric: ``f/2 = 1/(1 + e^eps)``, i.e. ``f = 2/(1 + e^eps)``;
    asymmetric: ``level = 2 eps`` (docs/privacy.md).
    """
    return {
        "symmetric": Randomizer(mode="symmetric", level=laplace_rate_from_f(2.0 / (1.0 + math.exp(epsilon)))),
        "asymmetric": Randomizer(mode="asymmetric", level=2.0 * epsilon),
    }


def _block_key(mode: str, eps: float) -> str:
    return f"{mode}/{eps!r}"


def advantage_block(setup: AdvantageSetup, index: int, seed: np.random.SeedSequence) -> BlockCounts:
    """Clients ``index * chunk ..``: their reported ones per (repetition, item), per mode and epsilon.

    Client ``c`` holds item ``c // holders`` (if below ``items``). Every
    repetition draws every client's report afresh through
    ``Randomizer.simulate``, from ``SeededRandom(seed)``, epsilons and modes in order.
    """
    start = index * setup.chunk
    size = min(setup.chunk, setup.clients - start)
    rng = SeededRandom(seed)
    owner = np.arange(start, start + size) // setup.holders
    bits = owner[:, None] == np.arange(setup.items)[None, :]
    out: BlockCounts = {"clients": np.array([size])}
    for eps in setup.epsilons:
        for mode, randomizer in equal_epsilon_randomizers(eps).items():
            ones = np.empty((setup.repetitions, setup.items), dtype=np.int64)
            for rep in range(setup.repetitions):
                ones[rep] = randomizer.simulate(bits, rng).sum(axis=0)
            out[_block_key(mode, eps)] = ones
    return out


def _per_client_errors(setup: AdvantageSetup, rng: RandomSource, engine: Engine,
                       progress: Progress) -> dict[str, FloatArray]:
    """Estimate errors, shape ``(repetitions, items)`` per (mode, epsilon), from every client's reports."""
    blocks = -(-setup.clients // setup.chunk)
    counts = engine.run(advantage_block, setup, block_seeds(root_seed(rng), blocks), progress)
    errors: dict[str, FloatArray] = {}
    for eps in setup.epsilons:
        for mode, randomizer in equal_epsilon_randomizers(eps).items():
            ones = counts[_block_key(mode, eps)]
            bc = BitCounts(ones=ones, totals=np.full(setup.repetitions, setup.clients))
            errors[_block_key(mode, eps)] = bit_estimates(bc, randomizer)[0] - setup.holders
    return errors


def _rare_item_errors_aggregate(setup: AdvantageSetup, randomizer: Randomizer, gen: np.random.Generator) -> FloatArray:
    """:func:`_rare_item_errors` with each item's count drawn directly (``holders`` ones of ``clients``)."""
    truth = np.full((setup.repetitions, setup.items), setup.holders, dtype=np.int64)
    ones = released_ones(truth, setup.clients, randomizer, (randomizer.level,), gen)[0]
    counts = BitCounts(ones=ones, totals=np.full(setup.repetitions, setup.clients))
    errors: FloatArray = bit_estimates(counts, randomizer)[0] - setup.holders
    return errors


def with_clients(setup: AdvantageSetup, clients: int, method: str) -> AdvantageSetup:
    """``setup`` at ``clients``: the same rare items, with ``holders`` capped at ``clients // items``."""
    check_positive_int("clients", clients)
    return replace(setup, clients=clients, chunk=min(setup.chunk, clients),
                   holders=max(1, min(setup.holders, clients // setup.items)))


def _mse_and_relative_se(errors: FloatArray) -> tuple[float, float]:
    """Mean squared error (the truth is known) and the relative standard error of that mean."""
    sq = errors.ravel() ** 2
    mse = float(sq.mean())
    return mse, float(sq.std(ddof=1) / math.sqrt(sq.size) / mse)


def asymmetric_advantage(setup: AdvantageSetup, rng: RandomSource, progress: Progress = quiet, *,
                         method: str = "per-client", engine: Engine | None = None) -> Figures:
    """Rare-item variance, asymmetric over symmetric at equal per-bit epsilon.

    Predicted ``1 - e^-eps`` (``N/(e^eps - 1)`` against ``N e^eps/(e^eps - 1)^2``);
    with ``h`` holders exactly ``(1 - h/N)(1 - e^-eps)`` (``exact_ratio``).
    ``method="per-client"`` draws every client's reports in blocks of
    ``chunk`` on ``engine`` (local by default; Dask gives identical figures);
    ``method="aggregate"`` draws each item's count directly.
    """
    check_method(method)
    gen = count_generator(rng) if method == "aggregate" else None
    per_client = None if gen is not None else _per_client_errors(setup, rng, engine or LocalEngine(), progress)
    rows = []
    truth = np.full(setup.items, float(setup.holders))
    for eps in setup.epsilons:
        progress(f"asymmetric-advantage: eps {eps:g}")
        row: Figures = {"epsilon": eps}
        rel_se = []
        for mode, randomizer in equal_epsilon_randomizers(eps).items():
            errors = (per_client[_block_key(mode, eps)] if per_client is not None
                      else _rare_item_errors_aggregate(setup, randomizer, gen))  # type: ignore[arg-type]
            mse, se = _mse_and_relative_se(errors)
            row[f"{mode}_level"] = randomizer.level
            row[f"{mode}_epsilon_bit"] = bit_epsilon(randomizer.mode, randomizer.level)
            row[f"{mode}_variance"] = mse
            row[f"{mode}_theory"] = float(theoretical_variance(truth, np.full_like(truth, setup.clients), randomizer)[0])
            rel_se.append(se)
        row["ratio"] = row["asymmetric_variance"] / row["symmetric_variance"]
        row["ratio_se"] = row["ratio"] * math.hypot(*rel_se)
        row["predicted"] = -math.expm1(-eps)
        row["exact_ratio"] = row["asymmetric_theory"] / row["symmetric_theory"]
        rows.append(row)
    return {
        "clients": setup.clients, "method": method,
        "engine": None if method == "aggregate" else (engine or LocalEngine()).name,
        "items": setup.items, "holders": setup.holders,
        "repetitions": setup.repetitions, "samples": setup.items * setup.repetitions, "rows": rows,
        "max_relative_gap": max(abs(r["ratio"] / r["predicted"] - 1.0) for r in rows),
    }


# --------------------------------------------------------------------------
# what ``onesided simulate`` prints and draws, and the scenario's entry
# --------------------------------------------------------------------------


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


def _plot_advantage(f: Figures, path: Path, title: str) -> None:
    plt = pyplot()
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
    save_figure(fig, path, title)


register(ScenarioParts(name="asymmetric-advantage", setups=ADVANTAGE_SETUPS, run=asymmetric_advantage,
                       resize=with_clients, summary=_advantage_lines, plot=_plot_advantage))
