"""The six places where the source papers' printed figures differ from their own formulas.

docs/central.md section 8 lists them; each test computes the figure the docs print, from the
formula, independently of the quoted text.
"""

from __future__ import annotations

import math

import pytest
from scipy import integrate

from aggregator.research.bounds import approx_dp_delta_lower_bound, dp_epsilon_lower_bound
from aggregator.research.collusion import colluders_needed
from protocol.multianalyst import MechanismA, coalition_epsilon


def test_adp_example_after_inequality_5_is_8_517_not_8_4() -> None:
    # k = 1, alpha = 1e-4, beta = 1/2: eps > ln(beta / alpha) = ln 5000
    eps = dp_epsilon_lower_bound(alpha=1e-4, beta=0.5, k=1)
    assert eps == pytest.approx(math.log(5000), rel=1e-15) and round(eps, 3) == 8.517


def test_adp_example_after_inequality_7_is_0_045_not_0_12() -> None:
    # k = 3, alpha = 0, beta = 1/2, eps = 1: delta > beta / (1 + e + e^2)
    delta = approx_dp_delta_lower_bound(alpha=0.0, beta=0.5, epsilon=1.0, k=3)
    assert delta == pytest.approx(0.5 / (1 + math.e + math.e**2), rel=1e-12) and round(delta, 3) == 0.045


@pytest.mark.parametrize("eps", [0.1, 1.0, 2.5])
def test_laplace_sqrt2_over_eps_is_the_rmse_not_the_mean_absolute_error(eps: float) -> None:
    # Laplace(D / eps), D = 1: E|X| = 1/eps, sqrt(E X^2) = sqrt(2)/eps. ALap's Exp(eps) has the same
    # two moments (E X = 1/eps, E X^2 = 2/eps^2): its gain is the one-sided error, not either moment.
    def laplace(x: float) -> float:
        return eps / 2 * math.exp(-eps * abs(x))

    def exponential(x: float) -> float:
        return eps * math.exp(-eps * x)

    mean_abs = 2 * integrate.quad(lambda x: x * laplace(x), 0, math.inf, epsabs=0, epsrel=1e-12)[0]
    second = 2 * integrate.quad(lambda x: x * x * laplace(x), 0, math.inf, epsabs=0, epsrel=1e-12)[0]
    assert mean_abs == pytest.approx(1 / eps, rel=1e-9) and mean_abs != pytest.approx(math.sqrt(2) / eps)
    assert math.sqrt(second) == pytest.approx(math.sqrt(2) / eps, rel=1e-9)
    alap_abs = integrate.quad(lambda x: x * exponential(x), 0, math.inf, epsabs=0, epsrel=1e-12)[0]
    alap_second = integrate.quad(lambda x: x * x * exponential(x), 0, math.inf, epsabs=0, epsrel=1e-12)[0]
    assert alap_abs == pytest.approx(mean_abs, rel=1e-9) and alap_second == pytest.approx(second, rel=1e-9)


def _irr_as_threshold(beta: float, gamma: float, *, printed: bool) -> tuple[float, float]:
    """Gradual-release eq. (46): RAPPOR's IRR (P(1|1) = beta, P(1|0) = gamma) as ``[z + V > tau]``.

    Returns ``(tau, rate)`` of ``V ~ Laplace(1 / rate)``; ``printed`` uses the paper's rate.
    """
    tau = math.log(2 * gamma) / math.log(4 * gamma * (1 - beta))
    rate = -math.log(4 * beta * (1 - gamma)) if printed else -math.log(4 * gamma * (1 - beta))
    return tau, rate


def _laplace_tail(t: float, rate: float) -> float:
    """``P(V > t)`` for ``V ~ Laplace(1 / rate)``."""
    return 0.5 * math.exp(-rate * t) if t >= 0 else 1 - 0.5 * math.exp(rate * t)


@pytest.mark.parametrize("beta, gamma", [(0.75, 0.5), (0.8, 0.3), (0.6, 0.45), (0.99, 0.01)])
def test_gradual_release_eq_46_swaps_beta_and_gamma_in_the_rate(beta: float, gamma: float) -> None:
    # P(w = 1 | z) = P(z + V > tau): the corrected rate -ln(4 gamma (1 - beta)) gives beta and gamma;
    # the printed -ln(4 beta (1 - gamma)) is <= 0 whenever gamma <= 1/2 <= beta: no Laplace scale at all.
    tau, rate = _irr_as_threshold(beta, gamma, printed=False)
    assert 0 <= tau <= 1 and rate > 0
    assert _laplace_tail(tau - 1, rate) == pytest.approx(beta, rel=1e-12)
    assert _laplace_tail(tau, rate) == pytest.approx(gamma, rel=1e-12)
    _, printed_rate = _irr_as_threshold(beta, gamma, printed=True)
    assert printed_rate <= 0
    # RAPPOR's defaults (q = 0.75, p = 0.5): corrected rate ln 2, printed -ln 1.5
    if (beta, gamma) == (0.75, 0.5):
        assert rate == pytest.approx(math.log(2)) and printed_rate == pytest.approx(-math.log(1.5))


def test_multi_user_3_sigma_is_99_73_percent_not_99() -> None:
    inside = math.erf(3 / math.sqrt(2))  # P(|N(0, 1)| < 3)
    assert round(inside, 4) == 0.9973
    # the paper's colluder count puts 3 sigma / sqrt(i) at the margin: i = 18 D^2 / (m^2 eps^2)
    i = colluders_needed(1.0, 0.5)
    assert i == 72 and 3 * math.sqrt(2) / 0.5 / math.sqrt(i) == pytest.approx(1.0)


def _mixture_density(t: float, r: float, mech: MechanismA) -> float:
    """One analyst's answer ``r + mu + Lap(b)``, ``mu`` uniform on the location interval."""
    lo, hi, b = mech.location_low, mech.location_high, mech.scale
    val = integrate.quad(lambda mu: math.exp(-abs(t - r - mu) / b) / (2 * b), lo, hi, epsabs=0, epsrel=1e-13)[0]
    return val / (hi - lo)


def test_multi_user_budget_grows_with_the_coalition_unless_answers_are_correlated() -> None:
    """Mechanism A: a coalition of i analysts loses i eps, whatever the secret locations.

    Each analyst's location and noise are independent of the others', so given the data the coalition's
    answers are independent and its density is a product: the log-ratio between neighbours is a sum of
    per-analyst terms, each reaching eps/k above every r + mu (where the worst outcomes occur together).
    """
    mech = MechanismA(epsilon=0.5, queries=1, sensitivity=1.0, location_low=1.5, location_high=2.5)
    analysts = 3
    far = [30.0, 40.0, 55.0]  # one answer per analyst, all above every r + mu
    joint = sum(math.log(_mixture_density(t, 5.0, mech) / _mixture_density(t, 4.0, mech)) for t in far)
    assert joint == pytest.approx(analysts * 0.5, abs=1e-9)
    assert mech.coalition_epsilon(analysts) == pytest.approx(1.5) and mech.coalition_epsilon(10) == pytest.approx(5.0)
    # the condition under which the budget does not grow: every member's answer a post-processing of
    # one release (correlated releases); then the coalition is at its most trusted member's level
    assert coalition_epsilon([0.5] * 10, correlated=True) == 0.5
    assert coalition_epsilon([0.5] * 10, correlated=False) == pytest.approx(5.0)
