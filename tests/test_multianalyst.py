"""Multi-analyst releases and collusion (docs/central.md; gradual-release Sec. 4.2; multi-user Laplace paper).

Statistical tests use fixed seeds; each states its false-failure rate.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats
from statsupport import P_MIN

from aggregator.research.collusion import colluders_needed, collusion_experiment
from protocol.errors import ParameterError
from protocol.multianalyst import (
    MechanismA,
    coalition_epsilon,
    correlated_releases,
    mechanism_a_accuracy_bound,
)
from protocol.rng import SeededRandom

SIZES = [1, 4, 16, 64, 256]
TRIALS = 4000
# RMSE of an average of Laplace-like noise over TRIALS runs: the MSE has relative sd
# sqrt(20)/2/sqrt(4000) = 3.5% at worst (Laplace kurtosis), so the RMSE 1.8%; 10% is > 5 sd.
RMSE_TOL = 0.10


# ---------------------------------------------------------------------------
# correlated releases
# ---------------------------------------------------------------------------


def test_correlated_releases_give_each_analyst_the_one_shot_law_at_its_level() -> None:
    counts = np.zeros(60_000)
    levels = [0.5, 2.0, 1.0]
    releases = correlated_releases(counts, levels, rng=11)
    for rel, lv in zip(releases, levels, strict=True):
        assert rel.levels == (lv,) and rel.epsilon == lv
        assert stats.kstest(np.asarray(rel.answers), stats.laplace(scale=1 / lv).cdf).pvalue > P_MIN
    low, high = (np.asarray(releases[i].answers) for i in (0, 1))
    # One draw of the lazy process: corr(V_0.5, V_2) = 0.5 / 2 = 0.25 (sd ~ 0.004: 0.025 is > 6 sd).
    assert abs(np.corrcoef(low, high)[0, 1] - 0.25) < 0.025


def test_equal_levels_get_identical_answers() -> None:
    releases = correlated_releases([1, 5, 9], [1.0, 0.3, 1.0], rng=12)
    assert releases[0].answers == releases[2].answers
    assert releases[0].answers != releases[1].answers


@pytest.mark.parametrize(("mechanism", "extra"), [("alap", {}), ("ageo", {"n_max": 100})])
def test_correlated_one_sided_answers_only_improve_with_trust(mechanism: str, extra: dict) -> None:
    counts = np.arange(2000) % 10
    releases = correlated_releases(counts, [0.2, 0.6, 1.5], mechanism=mechanism, rng=13, **extra)  # type: ignore[arg-type]
    answers = [np.asarray(r.answers, dtype=float) for r in releases]
    assert np.all(answers[0] >= answers[1]) and np.all(answers[1] >= answers[2])
    assert np.all(answers[2] >= counts)  # still never wrong


def test_correlated_releases_validation() -> None:
    with pytest.raises(ParameterError) as info:
        correlated_releases([1], [1.0], mechanism="salap")
    assert info.value.field == "mechanism"
    with pytest.raises(ParameterError) as info:
        correlated_releases([1], [])
    assert info.value.field == "levels"


def test_coalition_epsilon_is_the_max_for_correlated_and_the_sum_otherwise() -> None:
    assert coalition_epsilon([0.1, 0.5, 0.2], correlated=True) == 0.5
    assert coalition_epsilon([0.1, 0.5, 0.2], correlated=False) == pytest.approx(0.8)
    with pytest.raises(ParameterError):
        coalition_epsilon([0.1, -1.0], correlated=True)


# ---------------------------------------------------------------------------
# Mechanism A
# ---------------------------------------------------------------------------


def test_mechanism_a_answers_are_shifted_laplace_with_scale_k_d_over_eps() -> None:
    mech = MechanismA(epsilon=2.0, queries=4, sensitivity=1.5, location_low=1.0, location_high=3.0)
    assert mech.scale == pytest.approx(3.0)
    rng = SeededRandom(21)
    mu = mech.draw_locations(20_000, rng)
    assert mu.min() >= 1.0 and mu.max() <= 3.0
    r = np.array([10.0, 0.0, 5.0, 7.0])
    answers = mech.answer(r, mu, rng)
    assert answers.shape == (20_000, 4)
    residual = (answers - r[None, :] - mu[:, None]).ravel()
    assert stats.kstest(residual, stats.laplace(scale=3.0).cdf).pvalue > P_MIN


def test_theorem_2_bound_as_printed_and_exact_from_lemma_1() -> None:
    eps, d, beta = 1.0, 1.0, 0.05
    for mu in (0.0, 0.7, 2.0):
        alpha = mechanism_a_accuracy_bound(beta, epsilon=eps, sensitivity=d, location=mu)
        printed = -d / eps * math.log(2 * beta / (math.exp(mu * eps / d) + math.exp(-mu * eps / d)))
        assert alpha == pytest.approx(printed, rel=1e-12)
        assert alpha >= mu  # Lemma 1's premise holds for beta <= 1/2
        tail = stats.laplace(loc=mu, scale=d / eps)
        assert tail.sf(alpha) + tail.cdf(-alpha) == pytest.approx(beta, rel=1e-9)  # tight
    # k queries: the scale is k D / eps (mu = 0: alpha = -b ln(beta)).
    assert mechanism_a_accuracy_bound(0.1, epsilon=1.0, queries=3) == pytest.approx(3 * math.log(10), rel=1e-12)
    with pytest.raises(ParameterError) as info:
        mechanism_a_accuracy_bound(0.6, epsilon=1.0)
    assert info.value.field == "beta"


def test_theorem_2_bound_holds_empirically() -> None:
    mech = MechanismA(epsilon=0.5, location_low=1.0, location_high=1.0)
    alpha = mech.accuracy_bound(0.1)
    rng = SeededRandom(22)
    noise = mech.answer([0.0], mech.draw_locations(50_000, rng), rng).ravel()
    exceed = int((np.abs(noise) > alpha).sum())
    assert stats.binomtest(exceed, noise.size, 0.1).pvalue > P_MIN


def _answer_density(t: float, r: float, mech: MechanismA) -> float:
    """Density of one answer ``r + mu + Lap(b)`` with ``mu`` uniform on the interval (by quadrature)."""
    lo, hi, b = mech.location_low, mech.location_high, mech.scale
    val, _ = integrate.quad(lambda mu: math.exp(-abs(t - r - mu) / b) / (2 * b), lo, hi, epsabs=0, epsrel=1e-13)
    return val / (hi - lo)


def test_mechanism_a_privacy_is_eps_per_analyst_and_tight_despite_the_secret_location() -> None:
    mech = MechanismA(epsilon=0.8, queries=2, sensitivity=1.0, location_low=-1.0, location_high=3.0)
    # Neighbouring data: r = 5 vs r = 4. Far above every r + mu the ratio is exactly e^(eps/k).
    t = 20.0
    log_ratio = math.log(_answer_density(t, 5.0, mech) / _answer_density(t, 4.0, mech))
    assert log_ratio == pytest.approx(0.4, abs=1e-9)
    # ... and never above it anywhere (Theorem 1).
    grid = np.linspace(-10, 20, 61)
    worst = max(abs(math.log(_answer_density(x, 5.0, mech) / _answer_density(x, 4.0, mech))) for x in grid)
    assert worst <= 0.4 + 1e-9
    assert mech.coalition_epsilon(5) == pytest.approx(4.0)  # i analysts: i eps, each factor tight


def test_mechanism_a_validation() -> None:
    with pytest.raises(ParameterError) as info:
        MechanismA(epsilon=1.0, location_low=2.0, location_high=1.0)
    assert info.value.field == "location_high"
    with pytest.raises(ParameterError) as info:
        MechanismA(epsilon=1.0, queries=0)
    assert info.value.field == "queries"
    with pytest.raises(ParameterError):
        MechanismA(epsilon=1.0, queries=2).answer([1.0, 2.0, 3.0], [0.0])


# ---------------------------------------------------------------------------
# Collusion: the averaging attack
# ---------------------------------------------------------------------------


def test_paper_colluder_count() -> None:
    assert colluders_needed(1.0, 0.5) == 72  # 18 / (1 * 0.25)
    assert colluders_needed(10.0, 1.0) == 30  # the CLT floor
    assert colluders_needed(0.1, 1.0, sensitivity=2.0) == 7200
    with pytest.raises(ParameterError):
        colluders_needed(0.0, 1.0)


def test_independent_answers_fall_to_the_averaging_attack() -> None:
    eps, margin = 0.5, 1.0
    need = colluders_needed(margin, eps)
    res = collusion_experiment("independent", [*SIZES, need], epsilon=eps, margin=margin, trials=TRIALS, rng=31)
    for i, rmse in zip(res.colluders, res.rmse, strict=True):
        assert rmse == pytest.approx(math.sqrt(2) / eps / math.sqrt(i), rel=RMSE_TOL)
    # At the paper's i the estimate is within m w.p. ~ P(|N(0,1)| < 3) = 0.997 (CLT); 0.99 is
    # > 7 sd below for 4000 trials.
    assert res.paper_colluders == need and res.within_margin[-1] > 0.99
    assert res.within_margin[0] < 0.6


def test_mechanism_a_error_shrinks_to_the_location_mean_not_to_zero() -> None:
    eps, margin, lo, hi = 0.5, 1.0, 1.5, 2.5
    need = colluders_needed(margin, eps)
    res = collusion_experiment(
        "mechanism_a", [*SIZES, need], epsilon=eps, margin=margin, location=(lo, hi), trials=TRIALS, rng=32
    )
    mean_mu, var_mu, b = (lo + hi) / 2, (hi - lo) ** 2 / 12, 1 / eps
    for i, rmse in zip(res.colluders, res.rmse, strict=True):
        # E[(mean of i answers - r)^2] = mean_mu^2 + (var_mu + 2 b^2) / i
        assert rmse == pytest.approx(math.sqrt(mean_mu**2 + (var_mu + 2 * b * b) / i), rel=RMSE_TOL)
    assert all(a > b for a, b in zip(res.rmse[:3], res.rmse[1:4], strict=True))  # shrinks ...
    assert res.rmse[4] > 0.95 * mean_mu  # ... towards |mean mu| = 2 > m (Theorem 3)
    assert res.within_margin[-1] < 0.01  # at the paper's i the attack fails (expected ~1e-6)


def test_mechanism_a_falls_to_an_attacker_who_knows_the_location_mean() -> None:
    eps, margin, lo, hi = 0.5, 1.0, 1.5, 2.5
    res = collusion_experiment(
        "mechanism_a_calibrated", [*SIZES, colluders_needed(margin, eps)],
        epsilon=eps, margin=margin, location=(lo, hi), trials=TRIALS, rng=33,
    )
    var_mu, b = (hi - lo) ** 2 / 12, 1 / eps
    for i, rmse in zip(res.colluders, res.rmse, strict=True):
        assert rmse == pytest.approx(math.sqrt((var_mu + 2 * b * b) / i), rel=RMSE_TOL)
    assert res.within_margin[-1] > 0.99  # 0.996 expected (slightly wider noise than Laplace alone)


def test_correlated_answers_keep_the_coalition_at_its_most_trusted_member() -> None:
    eps, margin = 0.5, 1.0
    same = collusion_experiment("correlated", SIZES, epsilon=eps, margin=margin, trials=TRIALS, rng=34)
    # Everyone got the same answer: averaging gains nothing (equal up to float summation).
    assert all(r == pytest.approx(same.rmse[0], rel=1e-12) for r in same.rmse)
    assert same.rmse[0] == pytest.approx(math.sqrt(2) / eps, rel=RMSE_TOL)
    levels = list(np.linspace(eps, 2 * eps, max(SIZES)))
    spread = collusion_experiment(
        "correlated", SIZES, epsilon=eps, margin=margin, levels=levels, trials=TRIALS, rng=35
    )
    for i, rmse, best in zip(spread.colluders, spread.rmse, spread.best_member_rmse, strict=True):
        top = max(levels[:i])
        assert best == pytest.approx(math.sqrt(2) / top, rel=RMSE_TOL)
        # Averaging = best member + independent zero-mean noise, so it is never better (same trials).
        assert rmse >= best * (1 - 1e-9)
    assert spread.within_margin[-1] < 0.7  # far from the 0.99 that independent answers reach


def test_collusion_experiment_validation() -> None:
    with pytest.raises(ParameterError) as info:
        collusion_experiment("median", [1], epsilon=1.0, margin=1.0)  # type: ignore[arg-type]
    assert info.value.field == "scheme"
    with pytest.raises(ParameterError) as info:
        collusion_experiment("correlated", [1, 5], epsilon=1.0, margin=1.0, levels=[1.0, 2.0])
    assert info.value.field == "levels"
    res = collusion_experiment("independent", [2, 3], epsilon=1.0, margin=1.0, trials=10, rng=1)
    assert res.to_dict()["colluders"] == [2, 3]
