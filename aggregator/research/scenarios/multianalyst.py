"""Scenarios ``sql-counting`` and ``multi-analyst-regression``: the multi-user paper's experiments.

The multi-user non-zero-mean Laplace paper runs two experiments besides its
averaging attack (scenario ``collusion``):

* a FLEX counting query, ``select count(*) from orders join customers on
  orders.customer_id = customers.customer_id where orders.product_id = 1 and
  customers.address like '%United States%'`` with elastic sensitivity 50,
  answered to many analysts: zero-mean Laplace (FLEX) lets colluders average
  their way to the true count; the paper's Mechanism A biases the average
  by the mean secret location. :func:`sql_counting` builds synthetic
  ``orders`` and ``customers`` tables (a customer has at most 50 orders, so
  the one-to-many join's count moves by at most 50 when one customer and
  their orders come or go: FLEX's elastic sensitivity at distance 0, the
  paper's 50), runs the query, and answers it to coalitions of analysts
  with FLEX's Laplace, Mechanism A and correlated releases (one lazy chain,
  each analyst at its own level: a coalition learns what its most trusted
  member learns).
* logistic regression on the iris data "by perturbation of the objective
  function" with Laplace noise of location ``mu`` in ``[-1, 1]`` (Fig. 6:
  accuracy rises with epsilon and hardly moves with ``mu``).
  :func:`multi_analyst_regression` reproduces it with Chaudhuri, Monteleoni
  and Sarwate's objective perturbation (JMLR 2011, Algorithm 2) with
  coordinate-wise Laplace noise, and adds several analysts at different
  levels. Objective perturbation cannot be released as correlated answers
  (each model is a data-dependent function of its own noise, so the models
  are not post-processings of the most trusted one); output perturbation
  (the same paper's Algorithm 1, a noisy copy of the exact model) can: one
  lazy Laplace chain per weight. The scenario compares correlated and
  independent releases to the same analysts: each analyst's accuracy, and
  what a coalition gains by pooling its models (inverse-variance weights).

The iris data come with scikit-learn (the ``research`` extra); only its data file is read.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aggregator.research.collusion import Scheme, colluders_needed, collusion_experiment
from aggregator.research.scenarios.common import (
    Figures,
    FloatArray,
    IntArray,
    Progress,
    check_levels,
    check_positive_int,
    quiet,
)
from aggregator.research.scenarios.plotting import pyplot, save_figure
from aggregator.research.scenarios.registry import ScenarioParts, register
from protocol.errors import ParameterError
from protocol.multianalyst import coalition_epsilon
from protocol.relaxation import relax_laplace
from protocol.rng import RandomSource

# ==========================================================================
# sql-counting: FLEX's join count answered to colluding analysts
# ==========================================================================


@dataclass(frozen=True, kw_only=True)
class SqlSetup:
    """Synthetic ``customers`` and ``orders`` and the analysts asking the paper's count.

    Attributes:
        customers: rows of ``customers``; a share ``us_share`` has an address in the United States.
        max_orders: most orders of one customer (the query's sensitivity; the paper's 50).
        products: product ids of the orders, uniform (the query keeps product 1).
        epsilons: each analyst's level (correlated releases: spread over ``[eps, top_factor eps]``).
        max_colluders, trials: as in scenario ``collusion``; the margin is one sensitivity.
    """

    customers: int
    max_orders: int = 50
    products: int = 20
    us_share: float = 0.3
    epsilons: tuple[float, ...] = (0.1, 0.5, 1.0)
    top_factor: float = 2.0
    max_colluders: int
    trials: int

    def __post_init__(self) -> None:
        for name in ("customers", "max_orders", "products", "max_colluders", "trials"):
            check_positive_int(name, getattr(self, name))
        check_levels("epsilons", self.epsilons)
        if not 0.0 < self.us_share < 1.0:
            raise ParameterError("us_share", f"must be in (0, 1), got {self.us_share}")
        if self.top_factor < 1.0:
            raise ParameterError("top_factor", f"must be >= 1, got {self.top_factor}")


SQL_SETUPS = {
    "small": SqlSetup(customers=2_000, max_colluders=128, trials=1_000),
    "paper": SqlSetup(customers=100_000, max_colluders=1_024, trials=20_000),
}


def sql_tables(setup: SqlSetup, rng: RandomSource) -> tuple[IntArray, IntArray, np.ndarray]:
    """``(orders.customer_id, orders.product_id, customers.in_united_states)``.

    Orders per customer uniform on ``0..max_orders``, customer 0 at exactly
    ``max_orders`` (the sensitivity is attained).
    """
    per_customer = rng.integers(setup.max_orders + 1, setup.customers)
    per_customer[0] = setup.max_orders
    customer_id = np.repeat(np.arange(setup.customers), per_customer)
    product_id = rng.integers(setup.products, customer_id.size) + 1
    in_us = rng.uniform(setup.customers) < setup.us_share
    return customer_id, product_id, in_us


def sql_count(customer_id: IntArray, product_id: IntArray, in_us: np.ndarray) -> tuple[int, int]:
    """The query's answer and its sensitivity (most joined rows of one customer, FLEX's ``mf`` of the key)."""
    kept = (product_id == 1) & in_us[customer_id]
    sensitivity = int(np.bincount(customer_id).max()) if customer_id.size else 0
    return int(kept.sum()), sensitivity


_SCHEMES: tuple[Scheme, ...] = ("independent", "mechanism_a", "mechanism_a_calibrated", "correlated")


def _colluder_grid(max_colluders: int, need: int) -> list[int]:
    grid = np.unique(np.round(np.geomspace(1, max_colluders, 10)).astype(int))
    return sorted({int(x) for x in grid} | ({need} if need <= max_colluders else set()))


def sql_counting(setup: SqlSetup, rng: RandomSource, progress: Progress = quiet) -> Figures:
    """The count answered to coalitions: RMSE and ``P(|estimate - count| < D)`` per scheme and epsilon."""
    customer_id, product_id, in_us = sql_tables(setup, rng)
    count, sensitivity = sql_count(customer_id, product_id, in_us)
    d = float(sensitivity)
    rows = []
    for eps in setup.epsilons:
        need = colluders_needed(d, eps, d)
        sizes = _colluder_grid(setup.max_colluders, need)
        levels = list(np.linspace(eps, setup.top_factor * eps, setup.max_colluders))
        row: dict[str, object] = {"epsilon": eps, "colluders": sizes, "paper_colluders": need, "schemes": {}}
        for scheme in _SCHEMES:
            progress(f"sql-counting: eps {eps:g}, {scheme}")
            res = collusion_experiment(
                scheme, sizes, epsilon=eps, margin=d, sensitivity=d, trials=setup.trials, true_value=float(count),
                levels=levels if scheme == "correlated" else None,
                location=(1.5 * d, 2.5 * d) if scheme.startswith("mechanism_a") else (0.0, 0.0), rng=rng)
            row["schemes"][scheme] = {  # type: ignore[index]
                "rmse": list(res.rmse), "relative_rmse": [x / count for x in res.rmse],
                "within_margin": list(res.within_margin), "best_member_rmse": list(res.best_member_rmse)}
        rows.append(row)
    return {"customers": setup.customers, "orders": int(customer_id.size), "count": count,
            "sensitivity": sensitivity, "margin": d, "trials": setup.trials, "top_factor": setup.top_factor,
            "query": "select count(*) from orders join customers on orders.customer_id = customers.customer_id "
                     "where orders.product_id = 1 and customers.address like '%United States%'",
            "rows": rows}


# ==========================================================================
# multi-analyst-regression: private logistic regression on iris
# ==========================================================================

# Logistic loss: |l'| <= 1 and l'' <= 1/4 (Chaudhuri et al.'s c).
_LOGISTIC_C = 0.25
_NEWTON_STEPS = 60


@dataclass(frozen=True, kw_only=True)
class RegressionSetup:
    """Private one-vs-rest logistic regression on iris, over random train/test splits.

    Attributes:
        epsilons: the whole model's level (each of the 3 one-vs-rest models gets a third).
        locations: Laplace locations ``mu`` of the paper's Fig. 6.
        analyst_levels: several analysts' levels, released correlated or independent.
        regularization: ``Lambda`` of the ridge term.
        repetitions: random splits (``test_share`` of the rows held out), fresh noise each.
    """

    epsilons: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0)
    locations: tuple[float, ...] = (-1.0, -0.5, 0.0, 0.5, 1.0)
    analyst_levels: tuple[float, ...] = (2.0, 5.0, 10.0, 20.0)
    regularization: float = 0.01
    test_share: float = 0.3
    repetitions: int

    def __post_init__(self) -> None:
        check_positive_int("repetitions", self.repetitions)
        check_levels("epsilons", self.epsilons)
        check_levels("analyst_levels", self.analyst_levels)
        check_levels("regularization", (self.regularization,))
        if not 0.0 < self.test_share < 1.0:
            raise ParameterError("test_share", f"must be in (0, 1), got {self.test_share}")
        if not all(math.isfinite(m) for m in self.locations) or not self.locations:
            raise ParameterError("locations", "must be a non-empty tuple of finite numbers")


REGRESSION_SETUPS = {
    "small": RegressionSetup(repetitions=10),
    "paper": RegressionSetup(repetitions=500),
}


def iris_path() -> Path:
    """scikit-learn's copy of the iris data (``sklearn/datasets/data/iris.csv``), found without importing it.

    Importing scikit-learn takes seconds; only its data file is needed.

    Raises:
        ParameterError: (field ``scenario``) scikit-learn is not installed.
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ParameterError("scenario", "multi-analyst-regression needs scikit-learn for the iris data: "
                                         "pip install 'onesided[research]'")
    return Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "iris.csv"


def iris_rows() -> tuple[FloatArray, IntArray]:
    """Iris features standardized, an intercept column, every row scaled to ``||x||_1 <= 1``; labels 0..2."""
    table = np.loadtxt(iris_path(), delimiter=",", skiprows=1)
    x, labels = table[:, :4], table[:, 4].astype(np.int64)
    x = (x - x.mean(axis=0)) / x.std(axis=0)
    x = np.hstack([x, np.ones((x.shape[0], 1))])
    return x / np.abs(x).sum(axis=1).max(), labels


def fit_logistic(x: FloatArray, y: FloatArray, linear: FloatArray, ridge: FloatArray) -> FloatArray:
    """Minimizers of ``mean(log(1 + e^{-y x.w})) + ridge/2 |w|^2 + linear.w / n``, one per row of ``linear``.

    Damped Newton steps, batched (``linear`` ``(B, d)``, ``ridge`` ``(B,)``);
    the objective is ``ridge``-strongly convex, so the minimizer is unique.
    """
    n, d = x.shape
    w = np.zeros_like(linear)

    def objective(v: FloatArray) -> FloatArray:
        out: FloatArray = (np.logaddexp(0.0, -(v @ x.T) * y).mean(axis=1) + ridge / 2 * (v * v).sum(axis=1)
                           + (linear * v).sum(axis=1) / n)
        return out

    for _ in range(_NEWTON_STEPS):
        margin = (w @ x.T) * y
        s = 0.5 * (1.0 - np.tanh(margin / 2.0))  # sigma(-margin), stable
        grad = -((s * y) @ x) / n + ridge[:, None] * w + linear / n
        weight = s * (1.0 - s) / n
        hess = np.einsum("bn,ni,nj->bij", weight, x, x) + ridge[:, None, None] * np.eye(d)
        step = np.linalg.solve(hess, grad[:, :, None])[:, :, 0]
        now, scale = objective(w), np.ones(w.shape[0])
        for _ in range(30):  # halve the step where it does not decrease the objective
            worse = objective(w - scale[:, None] * step) > now + 1e-15
            if not worse.any():
                break
            scale[worse] /= 2.0
        w = w - scale[:, None] * step
        if np.abs(scale[:, None] * step).max() < 1e-10:  # Newton's quadratic convergence: far below any accuracy
            break
    return w


def objective_perturbation_terms(epsilon: float, n: int, regularization: float) -> tuple[float, float]:
    """``(noise rate, extra ridge Delta)`` of Chaudhuri et al.'s Algorithm 2 with coordinate-wise Laplace noise.

    ``eps' = eps - 2 ln(1 + c / (n Lambda))``; when that is not positive,
    ``Delta = c / (n (e^{eps/4} - 1)) - Lambda`` and ``eps' = eps/2``. The
    noise ``b`` has density ``exp(-(eps'/2) |b - mu|_1)``: one record moves
    the gradient term by at most ``2`` in L1 (``|l'| <= 1``, ``|x|_1 <= 1``),
    so the noise costs ``eps'`` and the Jacobian the rest (their Theorem 9,
    with the L1 norm in place of the L2 norm).
    """
    reduced = epsilon - 2.0 * math.log1p(_LOGISTIC_C / (n * regularization))
    if reduced > 0:
        return reduced / 2.0, 0.0
    return epsilon / 4.0, _LOGISTIC_C / (n * math.expm1(epsilon / 4.0)) - regularization


def output_perturbation_rate(epsilon: float, n: int, d: int, regularization: float) -> float:
    """Laplace rate per weight for Algorithm 1: L2 sensitivity ``2 / (n Lambda)``, L1 at most ``sqrt(d)`` times it."""
    return epsilon * n * regularization / (2.0 * math.sqrt(d))


def random_split(labels: IntArray, share: float, rng: RandomSource) -> tuple[IntArray, IntArray]:
    """A random ``(train, test)`` split of the rows, ``share`` of them held out for testing."""
    order = np.argsort(rng.uniform(labels.size))
    held = int(round(share * labels.size))
    return order[held:], order[:held]


def _accuracy(weights: FloatArray, x: FloatArray, labels: IntArray) -> FloatArray:
    """Accuracy of one-vs-rest models ``weights`` ``(B, 3, d)`` on ``(x, labels)``: ``(B,)``."""
    scores = np.einsum("bkd,nd->bnk", weights, x)
    out: FloatArray = (scores.argmax(axis=2) == labels[None, :]).mean(axis=1)
    return out


def _one_vs_rest(x: FloatArray, labels: IntArray) -> FloatArray:
    return np.where(labels[None, :] == np.arange(3)[:, None], 1.0, -1.0)


def objective_accuracy(setup: RegressionSetup, x: FloatArray, labels: IntArray, train: IntArray, test: IntArray,
                       rng: RandomSource) -> FloatArray:
    """Accuracy per (epsilon, location) of objective-perturbed models for one split."""
    n, d = train.size, x.shape[1]
    ys = _one_vs_rest(x[train], labels[train])
    out = np.empty((len(setup.epsilons), len(setup.locations)))
    for i, eps in enumerate(setup.epsilons):
        rate, delta = objective_perturbation_terms(eps / 3.0, n, setup.regularization)
        noise = rng.laplace(rate, (len(setup.locations), 3, d))
        models = np.empty((len(setup.locations), 3, d))
        for k in range(3):
            linear = noise[:, k, :] + np.asarray(setup.locations)[:, None]
            ridge = np.full(len(setup.locations), setup.regularization + delta)
            models[:, k, :] = fit_logistic(x[train], ys[k], linear, ridge)
        out[i] = _accuracy(models, x[test], labels[test])
    return out


def _analyst_noise(rates: FloatArray, shape: tuple[int, ...], correlated: bool, rng: RandomSource) -> FloatArray:
    """Noise per analyst (first axis), one lazy Laplace chain per weight when ``correlated``."""
    if not correlated:
        return np.stack([rng.laplace(float(r), shape) for r in rates])
    out, current = [], rng.laplace(float(rates[0]), shape)
    previous = float(rates[0])
    for r in rates:
        current = relax_laplace(current, previous, float(r), rng)
        previous = float(r)
        out.append(current)
    return np.stack(out)


def _analyst_accuracy(setup: RegressionSetup, x: FloatArray, labels: IntArray, train: IntArray, test: IntArray,
                      rng: RandomSource) -> dict[str, FloatArray]:
    """Output-perturbed models for the analysts: each one's accuracy and the coalitions' averaged models'."""
    n, d = train.size, x.shape[1]
    ys = _one_vs_rest(x[train], labels[train])
    exact = np.stack([fit_logistic(x[train], ys[k], np.zeros((1, d)), np.array([setup.regularization]))[0]
                      for k in range(3)])
    rates = np.array([output_perturbation_rate(e / 3.0, n, d, setup.regularization)
                      for e in sorted(setup.analyst_levels)])
    out = {"exact": _accuracy(exact[None], x[test], labels[test])}
    for kind in ("correlated", "independent"):
        models = exact[None] + _analyst_noise(rates, (3, d), kind == "correlated", rng)
        out[kind] = _accuracy(models, x[test], labels[test])
        # inverse-variance weights (Laplace variance 2 / rate^2): the best linear pooling of independent copies
        weight = np.cumsum(rates**2)
        coalition = np.cumsum(models * (rates**2)[:, None, None], axis=0) / weight[:, None, None]
        out[f"{kind}_coalition"] = _accuracy(coalition, x[test], labels[test])
    return out


def multi_analyst_regression(setup: RegressionSetup, rng: RandomSource, progress: Progress = quiet) -> Figures:
    """Fig. 6 (accuracy vs epsilon and location) and several analysts' correlated vs independent models."""
    x, labels = iris_rows()
    fig6 = np.zeros((len(setup.epsilons), len(setup.locations)))
    levels = sorted(setup.analyst_levels)
    sums: dict[str, FloatArray] = {}
    for rep in range(setup.repetitions):
        train, test = random_split(labels, setup.test_share, rng)
        fig6 += objective_accuracy(setup, x, labels, train, test, rng)
        for key, acc in _analyst_accuracy(setup, x, labels, train, test, rng).items():
            sums[key] = sums.get(key, 0.0) + acc
        if (rep + 1) % max(1, setup.repetitions // 5) == 0:
            progress(f"multi-analyst-regression: {rep + 1}/{setup.repetitions} splits")
    mean = {k: (v / setup.repetitions).tolist() for k, v in sums.items()}
    fig6 /= setup.repetitions
    n_train = labels.size - int(round(setup.test_share * labels.size))
    return {
        "rows": int(labels.size), "train_rows": n_train, "repetitions": setup.repetitions,
        "regularization": setup.regularization, "epsilons": list(setup.epsilons), "locations": list(setup.locations),
        "objective_accuracy": fig6.tolist(),
        "location_spread": [float(r.max() - r.min()) for r in fig6],
        "non_private_accuracy": mean["exact"][0],
        "analyst_levels": levels,
        "analysts": {
            kind: {"accuracy": mean[kind], "coalition_accuracy": mean[f"{kind}_coalition"],
                   "coalition_epsilon": [coalition_epsilon(levels[: i + 1], correlated=kind == "correlated")
                                         for i in range(len(levels))]}
            for kind in ("correlated", "independent")
        },
    }


# --------------------------------------------------------------------------
# what ``onesided simulate`` prints and draws, and the scenario's entry
# --------------------------------------------------------------------------


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


def _plot_sql(f: Figures, path: Path, title: str) -> None:
    plt = pyplot()
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
    save_figure(fig, path, title)


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


def _plot_regression(f: Figures, path: Path, title: str) -> None:
    plt = pyplot()
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
    save_figure(fig, path, title)


register(ScenarioParts(name="sql-counting", setups=SQL_SETUPS, run=sql_counting, summary=_sql_lines,
                       plot=_plot_sql))
register(ScenarioParts(name="multi-analyst-regression", setups=REGRESSION_SETUPS, run=multi_analyst_regression,
                       summary=_regression_lines, plot=_plot_regression))
