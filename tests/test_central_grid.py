"""Finding 3: ALap, Laplace, SALap and Mechanism A publish values on a power-of-two grid, sampled exactly.

Floating-point inverse-CDF noise leaves holes: outputs possible under a count
``c`` and impossible under ``c - 1`` (Mironov 2012), each an infinite loss.
Here every answer is ``c + g k`` with ``k`` from the exact geometric sampler,
and the claimed epsilon is the exact loss of that discrete law, rounded up:
checked below by exact computation over the support (the claim holds, 1%
less does not), by a hole attack, and for reproducibility.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats
from statsupport import P_MIN

from protocol.central import AGeoMechanism, ALapMechanism, LaplaceMechanism, SALapMechanism
from protocol.errors import ParameterError
from protocol.exact import check_grid, default_grid, grid_epsilon, grid_step_rate
from protocol.multianalyst import MechanismA, correlated_releases
from protocol.releases import Release, make_release, relax_release
from protocol.rng import SeededRandom


def _is_on_grid(values: np.ndarray, grid: float) -> bool:
    v = np.asarray(values, dtype=np.float64)
    return bool(np.all(v / grid == np.floor(v / grid)))


# ---------------------------------------------------------------------------
# the grid
# ---------------------------------------------------------------------------


def test_default_grid_is_a_power_of_two_below_the_scale_over_1024() -> None:
    assert default_grid(1.0) == 2.0**-10
    assert default_grid(1 / 0.7) == 2.0**-10 and default_grid(10.0) == 2.0**-7
    assert default_grid(1e6) == 1.0  # never coarser than the integers
    assert default_grid(1e-12) == 2.0**-20  # never finer than 2**-20 (answers stay exact doubles)
    assert default_grid(1.0, sensitivity=0.3) == 2.0**-10 and default_grid(1e4, sensitivity=0.3) == 0.25
    for bad in (0.3, 2.0, 2.0**-21, 0.0, math.inf, True):
        with pytest.raises(ParameterError) as info:
            check_grid(bad)
        assert info.value.field == "grid"


@pytest.mark.parametrize(
    ("mechanism", "kwargs"),
    [("alap", {}), ("alap", {"monotonicity": "none"}), ("laplace", {"sensitivity": 3.0}),
     ("salap", {"thresholds": 30})],
)
def test_no_release_value_is_off_the_grid(mechanism: str, kwargs: dict) -> None:
    counts = np.arange(5000) % 37
    rel = make_release(mechanism, counts, 0.3, rng=1, **kwargs)  # type: ignore[arg-type]
    g = rel.grid
    assert g == default_grid(rel.sensitivity / 0.3, rel.sensitivity) < 1
    values = [a for a in rel.answers if a is not None and not math.isnan(a)]
    assert values and _is_on_grid(np.asarray(values), g)
    assert rel.public_dict()["grid"] == g and rel.to_json_dict()["grid"] == g
    if mechanism != "salap":
        relaxed = relax_release(relax_release(rel, 0.9, rng=2), 4.0, rng=3)
        assert relaxed.grid == g and _is_on_grid(np.asarray(relaxed.answers), g)
        back = Release.from_json_dict(json.loads(json.dumps(relaxed.to_json_dict())))
        assert back == relaxed


def test_mechanism_a_answers_and_locations_are_on_the_grid() -> None:
    mech = MechanismA(epsilon=1.0, queries=3, sensitivity=2.0, location_low=-1.3, location_high=2.9)
    rng = SeededRandom(4)
    mu = mech.draw_locations(2000, rng)
    g = mech.step
    assert g == default_grid(6.0, 2.0) and _is_on_grid(mu, g) and mu.min() >= -1.3 and mu.max() <= 2.9
    answers = mech.answer([3, 0, 11], mu, rng)
    assert _is_on_grid(answers, g)
    with pytest.raises(ParameterError) as info:
        mech.answer([3, 0, 11], [0.1], rng)  # a location off the grid
    assert info.value.field == "locations"


def test_counts_off_the_grid_are_refused() -> None:
    with pytest.raises(ParameterError) as info:
        make_release("alap", [1.0, 2.0**-30], 1.0, rng=1)
    assert info.value.field == "counts"


def test_exact_samplers_are_reproducible_with_a_seed() -> None:
    for mechanism, extra in (("alap", {}), ("laplace", {}), ("salap", {"thresholds": 3})):
        a = make_release(mechanism, [1, 2, 3, 4], 0.5, rng=SeededRandom(9), **extra)  # type: ignore[arg-type]
        b = make_release(mechanism, [1, 2, 3, 4], 0.5, rng=SeededRandom(9), **extra)  # type: ignore[arg-type]
        c = make_release(mechanism, [1, 2, 3, 4], 0.5, rng=SeededRandom(10), **extra)  # type: ignore[arg-type]
        assert a == b and a.noise != c.noise
    mech = MechanismA(epsilon=1.0, location_low=0.0, location_high=5.0)
    assert np.array_equal(mech.answer([2], mech.draw_locations(50, SeededRandom(3)), SeededRandom(4)),
                          mech.answer([2], mech.draw_locations(50, SeededRandom(3)), SeededRandom(4)))


# ---------------------------------------------------------------------------
# exact privacy loss over the support: the claim holds and is tight
# ---------------------------------------------------------------------------


FLOAT_NOISE = 1e-9  # relative: the log-probabilities are evaluated in doubles (errors ~1e-14)


def _check_tight(claimed: float, loss: float) -> None:
    assert loss <= claimed * (1 + FLOAT_NOISE)  # the claim holds
    assert loss > 0.99 * claimed  # and 1% less would not


@pytest.mark.parametrize(("eps", "sensitivity"), [(1.0, 1.0), (0.1, 1.0), (0.8, 2.0), (3.0, 3.0)])
def test_alap_claimed_epsilon_is_the_exact_max_log_ratio(eps: float, sensitivity: float) -> None:
    mech = ALapMechanism(epsilon=eps, sensitivity=sensitivity)
    g, c = mech.step, 10.0
    z = c + g * np.arange(0, 200_000)  # the support under c (inside the support under c - D)
    loss = float(np.max(mech.log_pmf(z, c) - mech.log_pmf(z, c - sensitivity)))
    claimed = mech.guarantee().epsilon
    _check_tight(claimed, loss)
    # the step rate is exact: the loss is r D / g, which the claim rounds up only
    assert Fraction(claimed) >= grid_step_rate(eps, sensitivity, g) * int(sensitivity / g)
    assert math.isinf(float(np.max(mech.log_pmf(z - sensitivity, c - sensitivity) - mech.log_pmf(z - sensitivity, c))))


@pytest.mark.parametrize("eps", [1.0, 0.25])
def test_laplace_claimed_epsilon_is_the_exact_max_log_ratio_both_ways(eps: float) -> None:
    mech = LaplaceMechanism(epsilon=eps)
    two = mech.two_sided
    z = 5.0 + mech.step * np.arange(-100_000, 100_000)
    forward = float(np.max(two.log_pmf(z, 5.0) - two.log_pmf(z, 4.0)))
    backward = float(np.max(two.log_pmf(z, 4.0) - two.log_pmf(z, 5.0)))
    _check_tight(mech.guarantee().epsilon, max(forward, backward))


def test_ageo_with_sensitivity_3_is_tight() -> None:
    mech = AGeoMechanism(epsilon=0.9, n_max=12, sensitivity=3)
    _check_tight(mech.guarantee().epsilon, mech.privacy_loss())
    assert mech.guarantee().epsilon == 0.9


def test_salap_claimed_epsilon_is_the_exact_max_log_ratio() -> None:
    """Two queries, all outputs: (bottom, bottom), (bottom, z2) and (z1, nan); count 1 of query j drops by 1."""
    mech = SALapMechanism(epsilon=0.7)
    one = mech.one_sided
    t = np.array([4.0, 4.0])
    grid_z = np.arange(0, 60_000) * mech.step

    def log_probs(c: np.ndarray) -> np.ndarray:
        safe = [one.safe_probability(float(c[i]), float(t[i])) for i in range(2)]
        bottom = [math.log(p) if p > 0 else -math.inf for p in safe]
        z1 = grid_z + t[0] + mech.step  # values above the threshold
        first = one.log_pmf(z1, float(c[0]))
        second = bottom[0] + one.log_pmf(z1, float(c[1]))
        return np.concatenate([[bottom[0] + bottom[1]], first, second])

    worst = -math.inf
    for c in (np.array([3.0, 2.0]), np.array([6.0, 5.0])):
        for j in (0, 1):
            lower = c.copy()
            lower[j] -= 1
            p, q = log_probs(c), log_probs(lower)
            support = np.isfinite(p)
            worst = max(worst, float(np.max(p[support] - q[support])))
    _check_tight(mech.guarantee().epsilon, worst)


def test_mechanism_a_claimed_epsilon_is_the_exact_max_log_ratio() -> None:
    """One answer's pmf is a mixture over the secret grid location; its worst ratio is exactly eps / k."""
    mech = MechanismA(epsilon=0.8, queries=2, sensitivity=1.0, location_low=-1.0, location_high=1.0)
    g, r = mech.step, float(mech.step_rate)
    lo, hi = mech.location_grid
    offsets = np.arange(lo, hi + 1)
    log_norm = math.log(-math.expm1(-r) / (1 + math.exp(-r)))
    ks = np.arange(-4000, 8000)  # answer = g k

    def log_pmf(count_steps: int) -> np.ndarray:
        d = np.abs(ks[:, None] - count_steps - offsets[None, :])
        return log_norm + np.logaddexp.reduce(-r * d, axis=1) - math.log(offsets.size)

    steps = round(1 / g)
    loss = float(np.max(np.abs(log_pmf(5 * steps) - log_pmf(4 * steps))))
    _check_tight(mech.query_epsilon, loss)
    assert mech.query_epsilon == pytest.approx(0.4, rel=1e-12)
    assert mech.effective_epsilon == pytest.approx(0.8, rel=1e-12) and mech.coalition_epsilon(5) >= 4.0


def test_grid_epsilon_accounts_for_a_sensitivity_off_the_grid() -> None:
    # D = 1.5 on the grid 1: on-grid counts move by at most 1 step, so the loss is r * 1 (not r * 1.5)
    rate = grid_step_rate(0.9, 1.5, 1.0)
    assert rate == Fraction(0.9) / Fraction(1.5) or rate < Fraction(0.9) / Fraction(1.5)
    assert grid_epsilon(rate, 1.5, 1.0) <= 0.9 and Fraction(grid_epsilon(rate, 1.5, 1.0)) >= rate


# ---------------------------------------------------------------------------
# the hole attack finds nothing; the law is the claimed one; relaxation stays exact
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [1.0, 0.1])
def test_hole_attack_finds_no_output_impossible_under_the_neighbour(eps: float) -> None:
    mech = ALapMechanism(epsilon=eps)
    outputs = mech.release(np.full(200_000, 10), SeededRandom(5))
    impossible = np.isinf(mech.log_pmf(outputs, 9.0))
    assert not np.any(impossible)  # floating-point inversion: 16-17.5% at eps = 1, 71% at eps = 0.1
    assert not np.any(np.isinf(mech.log_pmf(outputs, 10.0)))


def _dlap_pmf(rate: float, ks: np.ndarray) -> np.ndarray:
    q = math.exp(-rate)
    return (1 - q) / (1 + q) * q ** np.abs(ks)


def test_relaxed_laplace_grid_noise_has_exactly_the_one_shot_law_and_is_lazy() -> None:
    rel = make_release("laplace", np.zeros(150_000, dtype=int), 0.5, rng=6)
    g = rel.grid
    step = relax_release(rel, 1.5, rng=7)
    rate = float(step.mechanism_params().step_rate)
    k = np.round(np.asarray(step.noise) / g).astype(np.int64)
    edges = np.arange(-3000, 3001, 250)  # 24 bins of 250 grid steps, tails pooled
    cells = np.digitize(k, edges)
    observed = np.bincount(cells, minlength=edges.size + 1)
    all_k = np.arange(-200_000, 200_001)
    probs = np.bincount(np.digitize(all_k, edges), weights=_dlap_pmf(rate, all_k), minlength=edges.size + 1)
    assert stats.chisquare(observed, probs / probs.sum() * observed.sum()).pvalue > P_MIN
    # lazy: each geometric part only shrinks, so |new noise| <= |old| wherever the sign is kept
    old = np.asarray(rel.noise)
    new = np.asarray(step.noise)
    assert np.all(np.asarray(step.negative_noise) <= np.asarray(rel.negative_noise))
    assert np.all(new + np.asarray(step.negative_noise) <= old + np.asarray(rel.negative_noise))


def test_correlated_laplace_releases_are_exact_and_on_one_grid() -> None:
    releases = correlated_releases(np.arange(100), [0.2, 1.0, 0.5], rng=8)
    grids = {r.grid for r in releases}
    assert len(grids) == 1
    for r in releases:
        assert _is_on_grid(np.asarray(r.answers), r.grid)
