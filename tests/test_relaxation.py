"""Lazy Markov relaxation and tightening steps (docs/privacy.md, relaxation).

Statistical tests use fixed seeds; each states its false-failure rate.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsupport import P_MIN, binomial_ok, chisquare_p, geometric_fits

from protocol import (
    Randomizer,
    relax_exponential,
    relax_geometric,
    relax_laplace,
    tighten_exponential,
    tighten_geometric,
    tighten_laplace,
)
from protocol.errors import ParameterError, TighteningRefused
from protocol.relaxation import relax_exponential_bits
from protocol.rng import KeyedRandom, SeededRandom

N = 300_000
KS_ALPHA = 1e-6  # each KS test: false-failure rate 1e-6 under the null


def _ks(sample: np.ndarray, dist) -> float:  # type: ignore[no-untyped-def]
    return float(stats.kstest(sample, dist.cdf).pvalue)


def test_laplace_relaxation_has_one_shot_law_and_correlation() -> None:
    rng = SeededRandom(101)
    v1 = rng.laplace(1.0, N)
    v2 = relax_laplace(v1, 1.0, 2.5, rng)
    assert _ks(v2, stats.laplace(scale=1 / 2.5)) > KS_ALPHA
    # corr(V1, V2) = e1/e2 = 0.4; sd of the sample correlation ~ 1/sqrt(N) ~ 0.002: 0.012 is > 6 sigma.
    assert abs(np.corrcoef(v1, v2)[0, 1] - 0.4) < 0.012
    assert abs(v2.var() - 2 / 2.5**2) < 0.01


def test_laplace_chain_matches_single_step() -> None:
    rng = SeededRandom(102)
    v1 = rng.laplace(0.5, N)
    chained = relax_laplace(relax_laplace(v1, 0.5, 1.0, rng), 1.0, 2.0, rng)
    direct = relax_laplace(v1, 0.5, 2.0, rng)
    # Two-sample KS on the joint behaviour through V1: compare V3 and corr with V1.
    assert stats.ks_2samp(chained, direct).pvalue > KS_ALPHA
    assert abs(np.corrcoef(v1, chained)[0, 1] - 0.25) < 0.012
    assert abs(np.corrcoef(v1, direct)[0, 1] - 0.25) < 0.012
    # The pair (V1, V3) has the same law either way: KS on V3 restricted to V1 > 1.
    sel = v1 > 1.0
    assert stats.ks_2samp(chained[sel], direct[sel]).pvalue > KS_ALPHA


def test_laplace_tightening_gives_the_tighter_law() -> None:
    rng = SeededRandom(103)
    v2 = rng.laplace(3.0, N)
    v1 = tighten_laplace(v2, 3.0, 1.0, rng)
    assert _ks(v1, stats.laplace(scale=1.0)) > KS_ALPHA
    # P(V1 = V2) = (e1/e2)^2 = 1/9; binomial 6 sigma.
    p = (1.0 / 3.0) ** 2
    assert abs((v1 == v2).mean() - p) < 6 * math.sqrt(p * (1 - p) / N)


def test_exponential_relaxation() -> None:
    rng = SeededRandom(104)
    v1 = rng.exponential(1.0, N)
    v2 = relax_exponential(v1, 1.0, 4.0, rng)
    assert _ks(v2, stats.expon(scale=0.25)) > KS_ALPHA
    p = 1.0 / 4.0  # P(V2 = V1) = L1 / L2
    assert abs((v2 == v1).mean() - p) < 6 * math.sqrt(p * (1 - p) / N)
    assert np.all(v2 <= v1)
    v3 = relax_exponential(v2, 4.0, 6.0, rng)
    direct = relax_exponential(v1, 1.0, 6.0, rng)
    assert stats.ks_2samp(v3, direct).pvalue > KS_ALPHA
    p = 1.0 / 6.0
    assert abs((v3 == v1).mean() - p) < 6 * math.sqrt(p * (1 - p) / N)


def test_exponential_tightening() -> None:
    rng = SeededRandom(105)
    v2 = rng.exponential(5.0, N)
    v1 = tighten_exponential(v2, 5.0, 2.0, rng)
    assert _ks(v1, stats.expon(scale=0.5)) > KS_ALPHA
    p = 2.0 / 5.0
    assert abs((v1 == v2).mean() - p) < 6 * math.sqrt(p * (1 - p) / N)


def test_geometric_relax_and_tighten() -> None:
    rng = SeededRandom(106)
    g1 = rng.geometric(0.4, N)
    assert geometric_fits(g1, 0.4)
    g2 = relax_geometric(g1, 0.4, 1.1, rng)
    assert geometric_fits(g2, 1.1)
    assert np.all(g2 <= g1)
    back = tighten_geometric(g2, 1.1, 0.4, rng)
    assert geometric_fits(back, 0.4)


def test_infinite_level_returns_the_truth() -> None:
    rng = SeededRandom(107)
    assert np.all(relax_laplace(rng.laplace(1.0, 10), 1.0, math.inf, rng) == 0)
    assert np.all(relax_exponential(rng.exponential(1.0, 10), 1.0, math.inf, rng) == 0)


def test_same_level_is_identity_and_lower_level_is_refused() -> None:
    v = np.array([0.3, -1.2])
    assert np.array_equal(relax_laplace(v, 2.0, 2.0, SeededRandom(1)), v)
    with pytest.raises(TighteningRefused):
        relax_laplace(v, 2.0, 1.0)
    with pytest.raises(TighteningRefused):
        relax_exponential(np.abs(v), 2.0, 1.0)
    with pytest.raises(TighteningRefused):
        tighten_laplace(v, 1.0, 2.0)
    with pytest.raises(ParameterError) as err:
        relax_laplace(v, 0.0, 1.0)
    assert err.value.field == "level_from"
    with pytest.raises(ParameterError) as err:
        relax_geometric(np.array([0.5]), 1.0, 2.0)
    assert err.value.field == "noise"


def test_keyed_relaxation_is_reproducible() -> None:
    secret = bytes(32)
    v1 = KeyedRandom.for_value(secret, "m", b"v", 0).laplace(1.0, 64)
    a = relax_laplace(v1, 1.0, 2.0, KeyedRandom.for_value(secret, "m", b"v", 1))
    b = relax_laplace(v1, 1.0, 2.0, KeyedRandom.for_value(secret, "m", b"v", 1))
    assert np.array_equal(a, b)


def test_exponential_bit_relaxation_has_the_noise_chains_joint_law() -> None:
    # (B1, B2, B3) for b = 0 through the bits vs through the noise: the chain is Markov on bits, so the
    # 4 reachable patterns (B3 <= B2 <= B1) match; chi-square on the bit chain's counts against the
    # closed form q3, q2 - q3, q1 - q2, 1 - q1 at P_MIN = 1e-6, and a binomial check of the noise chain.
    levels = (0.5, 1.5, 4.0)
    zeros = np.zeros(N, dtype=bool)
    r = Randomizer(mode="asymmetric", level=levels[0])
    b1 = r.sample_permanent(zeros, SeededRandom(110))
    b2 = relax_exponential_bits(zeros, b1, levels[0], levels[1], SeededRandom(111))
    b3 = relax_exponential_bits(zeros, b2, levels[1], levels[2], SeededRandom(112))
    assert np.all(b3 <= b2) and np.all(b2 <= b1)
    q1, q2, q3 = (math.exp(-lv / 2) for lv in levels)
    observed = np.array([b3.sum(), (b2 & ~b3).sum(), (b1 & ~b2).sum(), (~b1).sum()])
    assert chisquare_p(observed, np.array([q3, q2 - q3, q1 - q2, 1 - q1])) > P_MIN
    rng = SeededRandom(113)
    v1 = rng.exponential(levels[0], N)
    v3 = relax_exponential(relax_exponential(v1, levels[0], levels[1], rng), levels[1], levels[2], rng)
    assert binomial_ok(int(((v3 > 0.5) & (v1 > 0.5)).sum()), N, q3)


def test_exponential_bit_relaxation_keeps_true_ones_and_checks_shapes() -> None:
    bits = np.array([True, False, True, False])
    perm = np.array([True, True, True, False])
    out = relax_exponential_bits(bits, perm, 1.0, math.inf, SeededRandom(1))
    assert out.tolist() == [True, False, True, False]  # level inf: the truth
    assert np.array_equal(relax_exponential_bits(bits, perm, 1.0, 1.0, SeededRandom(1)), perm)
    with pytest.raises(ParameterError) as err:
        relax_exponential_bits(bits, perm[:3], 1.0, 2.0)
    assert err.value.field == "permanent"
    with pytest.raises(TighteningRefused):
        relax_exponential_bits(bits, perm, 2.0, 1.0)


def _laplace_reference(x: np.ndarray, e1: float, e2: float, u_case: np.ndarray, u_draw: np.ndarray) -> np.ndarray:
    """Algorithm 1 written plainly: every case's formula everywhere, then chosen (the values the device pins)."""
    ax = np.abs(x)
    r, s = e2 - e1, e1 + e2
    decay = np.exp(-r * ax)
    t1 = (e1 / e2) * decay
    t2 = t1 + r / (2 * e2)
    t3 = t2 + s / (2 * e2) * (1.0 - decay)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(u_case < t2, np.log(u_draw) / s,
                     np.where(u_case < t3, -np.log1p(u_draw * np.expm1(-r * ax)) / r, ax - np.log(u_draw) / s))
    moved = np.where(x < 0, -z, z)
    return np.where(u_case < t1, x, moved)


@pytest.mark.parametrize(("e1", "e2"), [(1.3, 3.0), (0.5, 0.7), (2.0, 30.0), (1.0, 1.0000001), (0.1, 32.0)])
def test_noise_steps_are_bit_for_bit_their_formulas(e1: float, e2: float) -> None:
    # The in-place evaluations must give the plain formulas' doubles exactly (keyed noise is pinned by vectors).
    x = np.concatenate([SeededRandom(31).laplace(e1, 100_000), [0.0, -0.0, 1e-300, -1e-300, 0.5, -0.5, 60.0, -60.0]])
    u = SeededRandom(32)
    u_case, u_draw = u.uniform(x.shape), u.uniform(x.shape)
    got = relax_laplace(x, e1, e2, SeededRandom(32))
    assert np.array_equal(got.view(np.uint64), _laplace_reference(x, e1, e2, u_case, u_draw).view(np.uint64))
    v = np.abs(x)
    fresh = -np.log(SeededRandom(33).uniform(v.shape)) / (e2 - e1)
    got = relax_exponential(v, e1, e2, SeededRandom(33))
    assert np.array_equal(got.view(np.uint64), np.minimum(v, fresh).view(np.uint64))
