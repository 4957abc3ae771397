"""Central mechanisms (docs/central.md): exact samplers, ALap, AGeo, SALap, Sec. III bounds, gradual release.

Statistical tests use fixed seeds; each states its false-failure rate (the
probability that a correct implementation fails it for a random seed).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from statsupport import P_MIN, binomial_ok, chisquare_p, geometric_pmf

from aggregator.research.bounds import (
    adp_epsilon_lower_bound,
    approx_dp_delta_lower_bound,
    dp_beta_upper_bound,
    dp_epsilon_lower_bound,
    virtual_dp_sanitizer,
)
from protocol.accounting import round_up
from protocol.central import (
    AGeoMechanism,
    ALapMechanism,
    GeometricMechanism,
    LaplaceMechanism,
    PSensitivity,
    SALapMechanism,
    ageo,
    alap,
    geometric_mechanism,
    laplace_mechanism,
    relax_noise,
    salap,
    sign_p,
)
from protocol.errors import BudgetExceeded, ParameterError, TighteningRefused
from protocol.exact import (
    bernoulli_exp,
    exact_rate,
    exact_uniform_words,
    geometric_exact,
    two_sided_geometric_exact,
    uniform_below,
)
from protocol.releases import Release, make_release, relax_release
from protocol.rng import KeyedRandom, RandomSource, SeededRandom

# ---------------------------------------------------------------------------
# exact integer sampling
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("source", [SeededRandom(11), KeyedRandom(b"k" * 32)])
def test_exact_words_are_uniform_in_high_and_low_bits(source: RandomSource) -> None:
    w = exact_uniform_words(source, 200_000)
    assert w.min() >= 0 and w.max() < 2**48
    for cells in (w >> 44, w & 15):  # top 4 bits and bottom 4 bits: 16 equiprobable cells
        assert chisquare_p(np.bincount(cells, minlength=16), np.full(16, 1 / 16)) > P_MIN


def test_exact_words_reject_a_source_outside_the_open_interval() -> None:
    class Broken(RandomSource):
        def uniform(self, shape: int | tuple[int, ...]) -> np.ndarray:
            return np.ones(shape)

    with pytest.raises(ParameterError) as info:
        exact_uniform_words(Broken(), 3)
    assert info.value.field == "rng"


@pytest.mark.parametrize("n", [3, 7, 1000, 2**48 + 5, 3 * 2**58])
def test_uniform_below_is_uniform(n: int) -> None:
    x = uniform_below(SeededRandom(n % 1000), n, 120_000)
    assert x.min() >= 0 and x.max() < n
    cells = 3 if n % 3 == 0 else 7 if n == 7 else 10
    idx = (x * cells) // n if n < 2**50 else x // (n // cells)
    counts = np.bincount(idx, minlength=cells)
    probs = np.array([len(range(math.ceil(i * n / cells), math.ceil((i + 1) * n / cells))) / n for i in range(cells)])
    assert chisquare_p(counts, probs) > P_MIN


def test_uniform_below_validates_its_bound() -> None:
    for bad in (0, -1, 2**62 + 1, 1.5, True):
        with pytest.raises(ParameterError):
            uniform_below(SeededRandom(1), bad, 3)  # type: ignore[arg-type]
    assert np.array_equal(uniform_below(SeededRandom(1), 1, 4), np.zeros(4))


@pytest.mark.parametrize("gamma", [0, 0.3, 1, Fraction(7, 3), 2.5])
def test_bernoulli_exp_is_exact(gamma: float) -> None:
    n = 100_000
    hits = int(bernoulli_exp(SeededRandom(7), gamma, n).sum())
    if gamma == 0:
        assert hits == n
    else:
        assert binomial_ok(hits, n, math.exp(-float(gamma)))


@pytest.mark.parametrize("rate", [1.0, 0.1, math.log(3), 2.5, Fraction(1, 3)])
def test_geometric_exact_matches_the_closed_form(rate: float) -> None:
    g = geometric_exact(SeededRandom(21), rate, 150_000)
    top = int(np.ceil(12 / float(rate)))
    support = np.arange(top + 1)
    counts = np.bincount(np.minimum(g, top), minlength=top + 1)
    assert g.min() >= 0
    assert chisquare_p(counts, geometric_pmf(float(rate), support)) > P_MIN


def test_two_sided_geometric_matches_the_closed_form() -> None:
    rate = 0.5
    z = two_sided_geometric_exact(SeededRandom(22), rate, 150_000)
    q = math.exp(-rate)
    support = np.arange(-25, 26)
    probs = (1 - q) / (1 + q) * q ** np.abs(support)
    probs[0] = q**25 / (1 + q)  # P(Z <= -25)
    probs[-1] = q**25 / (1 + q)  # P(Z >= 25)
    counts = np.bincount(np.clip(z, -25, 25) + 25, minlength=51)
    assert chisquare_p(counts, probs) > P_MIN


def test_exact_samplers_are_reproducible_and_seed_dependent() -> None:
    a = geometric_exact(SeededRandom(5), 0.1, 1000)
    assert np.array_equal(a, geometric_exact(SeededRandom(5), 0.1, 1000))
    assert not np.array_equal(a, geometric_exact(SeededRandom(6), 0.1, 1000))
    assert geometric_exact(SeededRandom(5), 0.3, (4, 5)).shape == (4, 5)


def test_exact_rate_uses_the_float_exactly_or_rounds_down() -> None:
    assert exact_rate(0.1) == Fraction(0.1)  # denominator 2**55 <= 2**56
    assert exact_rate(1.0) == 1
    small = exact_rate(1e-5)
    assert small <= Fraction(1e-5) and Fraction(1e-5) - small < Fraction(1, 2**56)
    assert small.denominator <= 2**56
    for bad in (0.0, -1.0, 2.0**21, 2.0**-60, "1"):
        with pytest.raises(ParameterError):
            exact_rate(bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# p-sensitivity
# ---------------------------------------------------------------------------


def test_sign_p_and_monotonicity_from_differences() -> None:
    assert (sign_p("increasing"), sign_p("decreasing"), sign_p("none")) == (1, -1, 0)
    ps = PSensitivity.from_differences([[-1, 0, 0], [0, -1, -1]])
    assert (ps.value, ps.monotonicity) == (2.0, "decreasing")
    assert PSensitivity.from_differences([[1, 0], [0, 2]]).monotonicity == "increasing"
    assert PSensitivity.from_differences([[1, -1]]).monotonicity == "none"
    with pytest.raises(ParameterError):
        sign_p("up")  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        PSensitivity.from_differences([])


# ---------------------------------------------------------------------------
# ALap
# ---------------------------------------------------------------------------


def test_alap_noise_direction_and_mean_absolute_error() -> None:
    counts = np.zeros(200_000)
    dec = alap(counts, 0.5, sensitivity=2.0, rng=31)
    inc = alap(counts, 0.5, sensitivity=2.0, monotonicity="increasing", rng=32)
    assert dec.min() >= 0 and inc.max() <= 0
    # Corollary V.5: E|noise| = D/eps = 4; sd of the mean 4/sqrt(2e5) ~ 0.009: 0.05 is > 5 sigma.
    assert abs(dec.mean() - 4.0) < 0.05 and abs(inc.mean() + 4.0) < 0.05
    two = alap(counts, 0.5, sensitivity=2.0, monotonicity="none", rng=33)
    assert stats.kstest(two, stats.laplace(scale=4.0).cdf).pvalue > P_MIN


def test_alap_infinite_epsilon_returns_the_counts() -> None:
    assert np.array_equal(alap([1.5, 2.0], math.inf, rng=1), [1.5, 2.0])


def _one_sided_check(
    counts: np.ndarray, threshold: int, answers: np.ndarray, mech: ALapMechanism | AGeoMechanism
) -> None:
    safe = answers <= threshold
    assert not np.any(safe & (counts > threshold)), "a safe answer was wrong"
    for c in np.unique(counts[counts <= threshold]):
        sel = counts == c
        assert binomial_ok(int(safe[sel].sum()), int(sel.sum()), mech.safe_probability(int(c), threshold))


def test_alap_safe_answers_are_never_wrong_and_beta_matches() -> None:
    t, eps = 5, 0.7
    counts = np.repeat(np.arange(0, 10), 20_000).astype(float)
    answers = alap(counts, eps, rng=34)
    mech = ALapMechanism(epsilon=eps)
    _one_sided_check(counts, t, answers, mech)
    # on the grid g = 2**-10 (scale 1/0.7): 1 - exp(-r (3/g + 1)), r = eps g; the continuous law as g -> 0
    g, r = mech.step, float(mech.step_rate)
    assert g == 2.0**-10 and r == pytest.approx(eps * g, rel=1e-15)
    assert mech.safe_probability(2, t) == pytest.approx(1 - math.exp(-r * (3 / g + 1)), rel=1e-15)
    assert mech.safe_probability(2, t) == pytest.approx(1 - math.exp(-eps * 3), rel=1e-3)
    assert mech.safe_probability(6, t) == 0.0


def test_alap_probability_ratio_is_exactly_e_eps_and_unbounded_in_reverse() -> None:
    mech = ALapMechanism(epsilon=0.8, sensitivity=2.0)
    z = 3.0 + mech.step * np.arange(0, 20_000, 37)  # grid points of the support
    ratio = mech.log_pmf(z, 3.0) - mech.log_pmf(z, 1.0)  # X ~p X': count 3 -> 1
    assert np.allclose(ratio, 0.8, rtol=0, atol=1e-12)
    reverse = mech.log_pmf(np.array([1.5]), 1.0) - mech.log_pmf(np.array([1.5]), 3.0)
    assert math.isinf(reverse[0])
    assert math.isinf(-mech.log_pmf(np.array([3.0 + mech.step / 2]), 3.0)[0])  # off the grid: impossible
    g = mech.guarantee()
    assert (g.epsilon, g.delta, g.definition) == (0.8, 0.0, "(eps, p)-ADP")
    assert "never wrong" in (g.one_sided or "")
    assert ALapMechanism(epsilon=0.8, monotonicity="none").guarantee().definition == "eps-DP"


def test_laplace_competitor() -> None:
    x = laplace_mechanism(np.zeros(100_000), 2.0, sensitivity=1.0, rng=35)
    assert stats.kstest(x, stats.laplace(scale=0.5).cdf).pvalue > P_MIN
    assert LaplaceMechanism(epsilon=2.0).guarantee().one_sided is None


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("epsilon", {"epsilon": 0.0}),
        ("epsilon", {"epsilon": float("nan")}),
        ("sensitivity", {"epsilon": 1.0, "sensitivity": -1.0}),
        ("monotonicity", {"epsilon": 1.0, "monotonicity": "up"}),
    ],
)
def test_alap_validation_names_the_field(field: str, kwargs: dict) -> None:
    with pytest.raises(ParameterError) as info:
        ALapMechanism(**kwargs)
    assert info.value.field == field


# ---------------------------------------------------------------------------
# AGeo
# ---------------------------------------------------------------------------


def test_ageo_safe_answers_are_never_wrong_and_beta_matches() -> None:
    t, eps, n_max = 4, 0.6, 40
    counts = np.repeat(np.arange(0, 9), 20_000)
    answers = ageo(counts, eps, n_max=n_max, rng=41)
    assert answers.dtype == np.int64 and answers.min() >= 0 and answers.max() <= n_max
    assert np.all(answers >= counts)
    mech = AGeoMechanism(epsilon=eps, n_max=n_max)
    _one_sided_check(counts, t, answers, mech)
    # The geometric analogue of ALap's 1 - exp(-eps (t - c)): one step better.
    assert mech.safe_probability(2, t) == pytest.approx(1 - math.exp(-eps * 3), rel=1e-15)


def test_ageo_output_law_is_def_viii_1() -> None:
    mech = AGeoMechanism(epsilon=0.4, n_max=12)
    for c in (0, 5, 12):
        probs = np.exp(mech.log_pmf(np.arange(13), c))
        assert probs.sum() == pytest.approx(1.0, abs=1e-12)
        sample = mech.release(np.full(100_000, c), SeededRandom(42 + c))
        observed = np.bincount(sample, minlength=13)
        if c == 12:
            assert np.all(sample == 12)
        else:
            assert chisquare_p(observed[probs > 0], probs[probs > 0]) > P_MIN


@pytest.mark.parametrize("mono", ["decreasing", "increasing"])
def test_ageo_privacy_loss_is_exact_and_tight(mono: str) -> None:
    eps = 0.7
    mech = AGeoMechanism(epsilon=eps, n_max=15, monotonicity=mono)  # type: ignore[arg-type]
    loss = mech.privacy_loss()
    assert abs(loss - eps) < 1e-12  # the ratio hits e^eps exactly (every output of the support)
    assert loss <= eps + 1e-12 and not loss <= eps * (1 - 1e-3)  # check(eps) holds, check(0.999 eps) fails
    assert math.isinf(mech.privacy_loss(reverse=True))  # the unprotected direction is revealed
    assert mech.guarantee().epsilon == round_up(eps)


def test_ageo_two_sided_case_is_the_geometric_mechanism() -> None:
    mech = AGeoMechanism(epsilon=0.7, n_max=15, monotonicity="none")
    assert abs(mech.privacy_loss() - 0.7) < 1e-12 and abs(mech.privacy_loss(reverse=True) - 0.7) < 1e-12
    assert mech.guarantee().definition == "eps-DP"
    z = geometric_mechanism(np.full(100_000, 3), 0.7, rng=43) - 3
    q = math.exp(-0.7)
    support = np.arange(-15, 16)
    probs = (1 - q) / (1 + q) * q ** np.abs(support)
    probs[0] = probs[-1] = q**15 / (1 + q)
    assert chisquare_p(np.bincount(np.clip(z, -15, 15) + 15, minlength=31), probs) > P_MIN
    assert GeometricMechanism(epsilon=0.7).guarantee().epsilon == 0.7


def test_ageo_validates_counts_and_parameters() -> None:
    with pytest.raises(ParameterError) as info:
        ageo([0, 11], 1.0, n_max=10)
    assert info.value.field == "counts"
    with pytest.raises(ParameterError):
        ageo([0.5], 1.0, n_max=10)
    with pytest.raises(ParameterError) as info:
        AGeoMechanism(epsilon=1.0, n_max=-1)
    assert info.value.field == "n_max"
    assert np.array_equal(ageo([2, 3], math.inf, n_max=5), [2, 3])


# ---------------------------------------------------------------------------
# SALap
# ---------------------------------------------------------------------------


def test_salap_bottoms_are_never_wrong_and_the_prefix_law_matches() -> None:
    rng = SeededRandom(51)
    eps = 1.0
    counts = np.array([0, 1, 3, 0, 2, 4, 1, 0])
    thresholds = np.array([5, 5, 5, 4, 5, 5, 6, 3])
    mech = SALapMechanism(epsilon=eps)
    runs = 20_000
    stops = np.empty(runs, dtype=np.int64)
    for r in range(runs):
        answers = mech.release(counts, thresholds, rng)
        k = next((i for i, a in enumerate(answers) if a is not None), len(answers))
        assert all(counts[i] <= thresholds[i] for i in range(k))  # every bottom is right
        if k < len(answers):
            assert answers[k] > thresholds[k]
            assert all(math.isnan(a) for a in answers[k + 1 :])  # type: ignore[arg-type]
        stops[r] = k
    prefix = mech.prefix_probability(counts, thresholds)
    for j in (1, 3, 8):
        assert binomial_ok(int((stops >= j).sum()), runs, float(prefix[j - 1]))


def test_salap_stops_at_a_count_above_threshold_and_validates() -> None:
    answers = salap([0, 7, 0], [5, 5, 5], 2.0, rng=52)
    assert answers[0] is None or answers[0] > 5
    assert answers[1] is not None  # 7 + noise > 5 always
    assert SALapMechanism(epsilon=1.0).guarantee().epsilon == 1.0
    with pytest.raises(ParameterError) as info:
        salap([0, 1], [5, 5, 5], 1.0)
    assert info.value.field == "thresholds"


# ---------------------------------------------------------------------------
# Section III necessary conditions and the (eps, delta)-DP competitor
# ---------------------------------------------------------------------------


def test_inequality_5_as_printed() -> None:
    # eps > ln(beta/alpha)/k. The paper's example quotes 8.4; the formula gives ln(5000) = 8.517.
    assert dp_epsilon_lower_bound(alpha=1e-4, beta=0.5) == pytest.approx(math.log(5000), rel=1e-15)
    assert dp_epsilon_lower_bound(alpha=1e-4, beta=0.5) > 8.5
    assert dp_epsilon_lower_bound(alpha=0.01, beta=0.9, k=3) == pytest.approx(math.log(90) / 3, rel=1e-15)
    assert math.isinf(dp_epsilon_lower_bound(alpha=0.0, beta=0.5))


def test_inequality_7_as_printed() -> None:
    # delta > (beta - alpha e^(eps k)) / sum_{i=1..k} e^((i-1) eps). The paper quotes 0.12 for
    # k=3, alpha=0, beta=1/2, eps=1; the formula gives 0.5 / (1 + e + e^2) = 0.045.
    got = approx_dp_delta_lower_bound(alpha=0.0, beta=0.5, epsilon=1.0, k=3)
    assert got == pytest.approx(0.5 / (1 + math.e + math.e**2), rel=1e-14)
    assert 0.045 < got < 0.046
    got = approx_dp_delta_lower_bound(alpha=1e-3, beta=0.8, epsilon=0.5, k=4)
    assert got == pytest.approx((0.8 - 1e-3 * math.exp(2.0)) / sum(math.exp(i * 0.5) for i in range(4)), rel=1e-14)
    # k = 1 reduces to beta - alpha e^eps
    assert approx_dp_delta_lower_bound(alpha=0.1, beta=0.5, epsilon=1.0) == pytest.approx(0.5 - 0.1 * math.e)


def test_virtual_competitor_is_the_boundary_of_inequality_7() -> None:
    for k in (1, 3, 6):
        beta = dp_beta_upper_bound(alpha=1e-3, epsilon=1.0, delta=1e-4, k=k)
        assert beta < 1
        assert approx_dp_delta_lower_bound(alpha=1e-3, beta=beta, epsilon=1.0, k=k) == pytest.approx(1e-4, rel=1e-9)
    assert dp_beta_upper_bound(alpha=0.0, epsilon=1.0, delta=0.0, k=5) == 0.0  # eps-DP, alpha = 0: never safe
    assert adp_epsilon_lower_bound(alpha=0.0, beta=1 - math.exp(-1)) == pytest.approx(1.0)  # ALap attains it


def test_alap_beats_the_virtual_dp_sanitizer_at_alpha_zero() -> None:
    t, eps = 5, 1.0
    counts = np.repeat(np.arange(0, 6), 5000)
    dp_safe = virtual_dp_sanitizer(counts, t, eps, alpha=0.0, delta=1e-4, rng=61)
    adp_safe = alap(counts, eps, rng=62) <= t
    # (1, 1e-4)-DP at alpha = 0 certifies a count c <= 5 w.p. <= 1e-4 * sum e^(i-1), at most 0.0234
    # (mean over c = 0..5: 0.006); ALap certifies c = 0 w.p. 1 - e^-5 = 0.993 (sd 0.0012 at n = 5000).
    # Both margins exceed 10 sd: false-failure rate below 1e-9.
    assert dp_safe.mean() < 0.03 and adp_safe[counts == 0].mean() > 0.98
    assert not np.any(virtual_dp_sanitizer(np.full(1000, 7), t, eps, alpha=0.0, rng=63))


# ---------------------------------------------------------------------------
# Gradual release of published answers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mechanism", "kwargs"),
    [("alap", {}), ("alap", {"monotonicity": "none"}), ("laplace", {}), ("ageo", {"n_max": 10**6})],
)
def test_relaxed_answers_have_the_one_shot_error(mechanism: str, kwargs: dict) -> None:
    e1, e2 = 0.3, 1.2
    counts = np.full(100_000, 50)
    first = make_release(mechanism, counts, e1, rng=71, **kwargs)  # type: ignore[arg-type]
    refined = relax_release(first, e2, rng=72)
    one_shot = make_release(mechanism, counts, e2, rng=73, **kwargs)  # type: ignore[arg-type]
    mse = lambda r: float(np.mean((np.asarray(r.answers, dtype=float) - counts) ** 2))  # noqa: E731
    # MSE estimates have relative sd < 1.5% at n = 1e5 (heaviest case: two-sided tails); 10% is > 6 sd.
    assert 0.9 < mse(refined) / mse(one_shot) < 1.1
    assert refined.epsilon == e2 and refined.levels == (e1, e2)  # charged: the final level
    assert mse(first) > 10 * mse(refined)


def test_relaxed_ageo_noise_has_exactly_the_one_shot_law() -> None:
    g1 = geometric_exact(SeededRandom(74), 0.25, 150_000)
    g2 = relax_noise("ageo", g1, 0.25, 0.9, rng=75)
    assert np.all(g2 <= g1)  # lazy: noise only shrinks, so a safe answer stays safe
    top = 20
    counts = np.bincount(np.minimum(g2, top), minlength=top + 1)
    assert chisquare_p(counts, geometric_pmf(0.9, np.arange(top + 1))) > P_MIN


def test_alap_relaxation_keeps_safe_answers_safe() -> None:
    rel = make_release("alap", np.arange(1000) % 8, 0.5, rng=76)
    t = 5
    before = np.asarray(rel.answers) <= t
    after = np.asarray(relax_release(rel, 2.0, rng=77).answers) <= t
    assert np.all(after[before])


def test_relax_release_refuses_tightening_ceiling_and_unrelaxable_mechanisms() -> None:
    rel = make_release("alap", [1, 2, 3], 1.0, rng=78)
    with pytest.raises(TighteningRefused):
        relax_release(rel, 0.5)
    with pytest.raises(BudgetExceeded):
        relax_release(rel, 3.0, ceiling=2.0)
    assert relax_release(rel, 1.0) is rel
    for name, extra in (("salap", {"thresholds": 5}), ("geometric", {})):
        other = make_release(name, [1, 2, 3], 1.0, rng=79, **extra)  # type: ignore[arg-type]
        with pytest.raises(ParameterError) as info:
            relax_release(other, 2.0)
        assert info.value.field == "mechanism"


# ---------------------------------------------------------------------------
# The Release record
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mechanism", "kwargs"),
    [
        ("alap", {"sensitivity": 2.0}),
        ("ageo", {"n_max": 20}),
        ("laplace", {}),
        ("geometric", {}),
        ("salap", {"thresholds": [5, 5, 1, 5]}),
    ],
)
def test_release_json_round_trip(mechanism: str, kwargs: dict) -> None:
    rel = make_release(mechanism, [0, 3, 9, 1], 0.8, rng=81, **kwargs)  # type: ignore[arg-type]
    text = json.dumps(rel.to_json_dict(), allow_nan=False)
    back = Release.from_json_dict(json.loads(text))
    assert back.to_json_dict() == rel.to_json_dict()
    public = rel.public_dict()
    assert "server" not in public and '"noise":' not in json.dumps(public) and "counts" not in public
    assert public["epsilon"] == 0.8 and public["guarantee"]["epsilon"] == 0.8


def test_salap_release_encodes_the_stop_without_nan() -> None:
    rel = make_release("salap", [0, 9, 0, 0], 1.0, thresholds=5, rng=82)
    data = rel.to_json_dict()
    assert data["answers"][-1] is not None and len(data["answers"]) <= 2
    back = Release.from_json_dict(data)
    assert len(back.answers) == 4 and all(a is None or a > 5 or math.isnan(a) for a in back.answers)


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=20),
    eps=st.floats(min_value=0.05, max_value=5.0),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_ageo_release_round_trip_property(counts: list[int], eps: float, seed: int) -> None:
    rel = make_release("ageo", counts, eps, n_max=50, rng=seed)
    assert all(c <= a <= 50 for c, a in zip(counts, rel.answers, strict=True))  # type: ignore[operator]
    back = Release.from_json_dict(json.loads(json.dumps(rel.to_json_dict())))
    assert back == rel


def test_release_validation() -> None:
    rel = make_release("alap", [1, 2], 1.0, rng=83)
    data = rel.to_json_dict()
    with pytest.raises(ParameterError) as info:
        Release.from_json_dict({**data, "schema": "other"})
    assert info.value.field == "schema"
    with pytest.raises(ParameterError) as info:
        Release.from_json_dict({**data, "levels": [1.0, 0.5]})
    assert info.value.field == "levels"
    with pytest.raises(ParameterError) as info:
        Release.from_json_dict({**data, "server": {"counts": [1, 2], "noise": [0.1]}})
    assert info.value.field == "noise"
    with pytest.raises(ParameterError):
        Release.from_json_dict({k: v for k, v in data.items() if k != "server"})
    with pytest.raises(ParameterError) as info:
        make_release("ageo", [1], 1.0)
    assert info.value.field == "n_max"
    with pytest.raises(ParameterError) as info:
        make_release("median", [1], 1.0)  # type: ignore[arg-type]
    assert info.value.field == "mechanism"


def test_dp_beta_bound_saturates_instead_of_overflowing() -> None:
    # alpha e^(eps k) passes 1 long before exp overflows (eps k > 709)
    assert dp_beta_upper_bound(alpha=1e-3, epsilon=1.0, k=2000) == 1.0
    assert dp_beta_upper_bound(alpha=0.0, epsilon=1.0, delta=1e-4, k=2000) == 1.0
    assert dp_beta_upper_bound(alpha=0.0, epsilon=1.0, k=3000) == 0.0
    # below saturation the formula as printed
    expected = 1e-3 * math.exp(3.0) + 1e-4 * (1 + math.e + math.e**2)
    assert dp_beta_upper_bound(alpha=1e-3, epsilon=1.0, delta=1e-4, k=3) == pytest.approx(expected, rel=1e-12)
