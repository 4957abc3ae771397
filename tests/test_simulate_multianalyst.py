"""Scenarios sql-counting, multi-analyst-regression and irr-relaxation: their pieces and their small runs.

Statistical checks use fixed seeds and state their false-failure rates; the
plot and data of each scenario are checked with the others in test_simulate.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from aggregator.research.scenarios import multianalyst as ma
from aggregator.research.scenarios import run_scenario
from aggregator.research.scenarios.irr import IrrSetup
from protocol.errors import ParameterError
from protocol.rng import SeededRandom

Z = 4.9  # two-sided normal quantile for a false-failure rate of 1e-6


# --- sql-counting -----------------------------------------------------------


def test_the_join_count_and_its_sensitivity_are_the_plain_loops() -> None:
    setup = ma.SqlSetup(customers=300, max_colluders=8, trials=10)
    customer_id, product_id, in_us = ma.sql_tables(setup, SeededRandom(3))
    count, sensitivity = ma.sql_count(customer_id, product_id, in_us)
    assert count == sum(1 for c, p in zip(customer_id, product_id, strict=True) if p == 1 and in_us[c])
    per_customer = [int(np.sum(customer_id == c)) for c in range(setup.customers)]
    assert sensitivity == max(per_customer) == setup.max_orders  # customer 0 attains it


def test_sql_counting_attack_follows_the_laplace_analysis() -> None:
    f = run_scenario("sql-counting", seed=5)
    d = f["sensitivity"]
    for row in f["rows"]:
        eps, sizes = row["epsilon"], row["colluders"]
        schemes = row["schemes"]
        # independent Laplace: mean square error of the average of i answers is 2 (D/eps)^2 / i; over
        # `trials` coalitions the measured MSE is a mean of i.i.d. squares: normal test at Z (rate 1e-6 each,
        # the variance of a squared mean of i Laplace draws bounded by its fourth moment, 24 b^4 / i^2 + ...)
        for i, rmse in zip(sizes, schemes["independent"]["rmse"], strict=True):
            b = d / eps
            mse = 2 * b * b / i
            fourth = (24 * b**4 / i**3 + 3 * (i - 1) * (2 * b * b) ** 2 / i**3)  # E[mean^4]
            sd = math.sqrt((fourth - mse**2) / f["trials"])
            assert abs(rmse**2 - mse) < Z * sd
        # Mechanism A: the average drifts to the count plus the mean location 2D. RMSE >= |mean error|, whose
        # sd over the trials is below 62 / sqrt(1,000) = 2 here: 1.5D = 75 is 12 sd away (rate far below 1e-6)
        assert schemes["mechanism_a"]["rmse"][-1] > 1.5 * d
        # correlated: the average is the most trusted member's noise plus independent tightening noise, so its
        # expected square is at least that member's; 10% below would take the cross term to > Z sd of its
        # mean over the trials (rate < 1e-6)
        for rmse, best in zip(schemes["correlated"]["rmse"], schemes["correlated"]["best_member_rmse"], strict=True):
            assert rmse >= 0.9 * best


def test_sql_setup_checks_fields() -> None:
    with pytest.raises(ParameterError) as err:
        ma.SqlSetup(customers=10, max_colluders=4, trials=5, us_share=1.5)
    assert err.value.field == "us_share"
    with pytest.raises(ParameterError) as err:
        ma.SqlSetup(customers=10, max_colluders=4, trials=5, top_factor=0.5)
    assert err.value.field == "top_factor"


# --- multi-analyst-regression -------------------------------------------------


def test_newton_fit_is_the_minimizer() -> None:
    x, labels = ma.iris_rows()
    assert np.abs(x).sum(axis=1).max() <= 1.0 + 1e-12 and x.shape == (150, 5)
    y = np.where(labels == 1, 1.0, -1.0)
    rng = np.random.default_rng(1)
    linear, ridge = rng.normal(size=(3, 5)) * 5, np.array([0.01, 0.1, 1.0])
    fitted = ma.fit_logistic(x, y, linear, ridge)
    for k in range(3):
        def objective(w: np.ndarray, k: int = k) -> float:
            return float(np.logaddexp(0, -y * (x @ w)).mean() + ridge[k] / 2 * w @ w + linear[k] @ w / x.shape[0])

        best = optimize.minimize(objective, np.zeros(5), method="BFGS", options={"gtol": 1e-10})
        assert objective(fitted[k]) <= best.fun + 1e-12
        assert np.allclose(fitted[k], best.x, atol=1e-4)


def test_objective_perturbation_spends_exactly_epsilon() -> None:
    n, lam, c = 105, 0.01, 0.25
    for eps in (0.05, 0.3, 1.0, 5.0):
        rate, delta = ma.objective_perturbation_terms(eps, n, lam)
        # the noise costs 2 * rate (L1 sensitivity 2), the Jacobian 2 ln(1 + c / (n (Lambda + Delta)))
        assert math.isclose(2 * rate + 2 * math.log1p(c / (n * (lam + delta))), eps, rel_tol=1e-12)
        assert delta >= 0
    assert ma.objective_perturbation_terms(5.0, n, lam)[1] == 0.0  # large enough: no extra ridge
    assert ma.objective_perturbation_terms(0.05, n, lam)[1] > 0.0


def test_correlated_analysts_share_one_chain() -> None:
    # corr(V_j, V_k) = rate_j / rate_k along a lazy Laplace chain; Fisher z test at Z (rate 1e-6 per pair)
    rates = np.array([1.0, 2.0, 4.0])
    noise = ma._analyst_noise(rates, (40_000,), True, SeededRandom(9))
    fresh = ma._analyst_noise(rates, (40_000,), False, SeededRandom(9))
    for j, k in ((0, 1), (1, 2), (0, 2)):
        expected = rates[j] / rates[k]
        got = np.corrcoef(noise[j], noise[k])[0, 1]
        assert abs(np.arctanh(got) - np.arctanh(expected)) < Z / math.sqrt(40_000 - 3)
        assert abs(np.arctanh(np.corrcoef(fresh[j], fresh[k])[0, 1])) < Z / math.sqrt(40_000 - 3)
    for j, rate in enumerate(rates):  # each analyst's noise is Laplace at its own rate: KS at 1e-6
        assert stats.kstest(noise[j], stats.laplace(scale=1 / rate).cdf).pvalue > 1e-6


def test_regression_scenario_runs_and_accounts_coalitions() -> None:
    f = run_scenario("multi-analyst-regression", seed=3)
    assert run_scenario("multi-analyst-regression", seed=3) == f
    levels = f["analyst_levels"]
    assert f["analysts"]["correlated"]["coalition_epsilon"] == [max(levels[: i + 1]) for i in range(len(levels))]
    assert f["analysts"]["independent"]["coalition_epsilon"] == [math.fsum(levels[: i + 1]) for i in range(len(levels))]
    assert np.asarray(f["objective_accuracy"]).shape == (len(f["epsilons"]), len(f["locations"]))
    assert 0.7 < f["non_private_accuracy"] <= 1.0


def test_iris_needs_scikit_learn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ma.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ParameterError) as err:
        ma.iris_rows()
    assert err.value.field == "scenario" and "scikit-learn" in str(err.value)


# --- irr-relaxation -------------------------------------------------------------


def test_irr_round_has_the_one_shot_law_and_the_exact_epsilons() -> None:
    f = run_scenario("irr-relaxation", seed=4)
    setup_items, reps = f["items"], f["repetitions"]
    k = setup_items * reps  # independent squared errors per MSE (one per item and population)
    low, high = stats.chi2.ppf(5e-7, k) / k, stats.chi2.isf(5e-7, k) / k  # two-sided, rate 1e-6 each
    for r in f["rows"]:
        # the estimates are sums of 20,000 independent bits: normal, so MSE / theory ~ chi2(k) / k
        assert low < r["relaxed_mse"] / r["theory_mse"] < high
        assert low < r["one_shot_mse"] / r["theory_mse"] < high
        assert r["epsilon_relaxed"] < r["epsilon_fresh"]
        if r["predicted_agreement"] is not None:
            n = f["clients"] * setup_items * reps
            p = r["predicted_agreement"]
            assert abs(r["agreement"] - p) < Z * math.sqrt(p * (1 - p) / n)  # binomial, rate 1e-6
    kept, doubled, asym = f["rows"]
    assert kept["epsilon_relaxed"] == kept["epsilon_one_report"]
    assert asym["epsilon_relaxed"] == asym["epsilon_one_report"]
    assert doubled["epsilon_one_report"] < doubled["epsilon_relaxed"]


def test_irr_setup_checks_fields() -> None:
    with pytest.raises(ParameterError) as err:
        IrrSetup(clients=0, repetitions=1)
    assert err.value.field == "clients"
