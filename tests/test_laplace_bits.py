"""The symmetric (Laplace) chain's permanent bits relaxed without the noise (relax_laplace_bits).

Exactness (the marginals, the sampled law) is checked in rationals, with no statistics. The
statistical tests compare the bit chain with the noise chain (relax_laplace, then the threshold)
on pattern counts, with fixed seeds; each states its false-failure rate under the null.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats
from statsupport import P_MIN, chisquare_p

from protocol import Randomizer
from protocol.accounting import sequence_pattern_probabilities
from protocol.errors import ParameterError, TighteningRefused
from protocol.relaxation import (
    MAX_BIT_CHAIN_LEVELS,
    extend_pattern,
    laplace_bit_conditionals,
    laplace_bit_law,
    relax_laplace,
    relax_laplace_bits,
)
from protocol.rng import SeededRandom

CHAINS = [(1.0, 2.5), (0.5, 4.0), (2.0 * math.log(2), 3.0), (0.5, 1.5, 4.0), (1.0, 2.0, 8.0), (4.0, 6.0, 12.0)]
N = 200_000


def _stated(level: float) -> tuple[Fraction, Fraction]:
    p0, p1 = Randomizer(mode="symmetric", level=level).permanent_probabilities()
    return Fraction(p0), Fraction(p1)


def _pattern(h: int, k: int) -> tuple[int, ...]:
    return tuple((h >> i) & 1 for i in range(k))


@pytest.mark.parametrize("levels", CHAINS)
def test_every_marginal_is_the_stated_probability_exactly(levels: tuple[float, ...]) -> None:
    # In rationals: the sampled law sums to 1 and its marginal at every level is the stated double.
    law = laplace_bit_law(levels)
    for b in (0, 1):
        assert sum(law[b]) == 1
        assert all(p > 0 for p in law[b])
        for i, level in enumerate(levels):
            ones = sum(p for h, p in enumerate(law[b]) if (h >> i) & 1)
            assert ones == _stated(level)[b], (b, i)
    for b in (0, 1):
        assert all(0 < c < 1 for c in laplace_bit_conditionals(levels)[b])


@pytest.mark.parametrize("levels", CHAINS)
def test_the_law_is_the_quadratures_up_to_its_error(levels: tuple[float, ...]) -> None:
    # Every pattern within 1e-14 of the chain's (quadrature) law for b = 0, and of P0(not y) for b = 1.
    k = len(levels)
    quad = sequence_pattern_probabilities(levels)
    law = laplace_bit_law(levels)
    for h in range(1 << k):
        y = _pattern(h, k)
        assert abs(float(law[0][h]) - quad[y]) < 1e-14
        assert abs(float(law[1][h]) - quad[tuple(1 - v for v in y)]) < 1e-14


def _bit_chain(levels: tuple[float, ...], b: bool, seed: int) -> np.ndarray:
    bits = np.full(N, b)
    r = Randomizer(mode="symmetric", level=levels[0])
    history = r.sample_permanent(bits, SeededRandom(seed)).view(np.uint8)
    rng = SeededRandom(seed + 1)
    for i in range(1, len(levels)):
        history = extend_pattern(history, relax_laplace_bits(bits, history, levels[:i], levels[i], rng), i)
    return np.bincount(history, minlength=1 << len(levels))


def _noise_chain(levels: tuple[float, ...], b: bool, seed: int) -> np.ndarray:
    rng = SeededRandom(seed)
    r = Randomizer(mode="symmetric", level=levels[0])
    noise = r.draw_noise(N, rng)
    history = r.permanent(np.full(N, b), noise).view(np.uint8).copy()
    for i in range(1, len(levels)):
        noise = relax_laplace(noise, levels[i - 1], levels[i], rng)
        history |= r.permanent(np.full(N, b), noise).view(np.uint8) << np.uint8(i)
    return np.bincount(history, minlength=1 << len(levels))


@pytest.mark.parametrize("levels", [(1.0, 2.5), (0.5, 1.5, 4.0), (1.0, 2.0, 8.0)])
@pytest.mark.parametrize("b", [False, True])
def test_bit_chain_has_the_noise_chains_pattern_law(levels: tuple[float, ...], b: bool) -> None:
    # 200,000 chains of each kind: the bit chain's and the noise chain's pattern counts fit the chain's
    # law (chi-square each, P_MIN = 1e-6) and each other (two-sample chi-square, 1e-6): false-failure
    # rate 3e-6 per case, 1.8e-5 over the 6 cases.
    bits = _bit_chain(levels, b, 500 + 7 * len(levels) + int(b))
    noise = _noise_chain(levels, b, 600 + 7 * len(levels) + int(b))
    law = np.array([float(p) for p in laplace_bit_law(levels)[int(b)]])
    assert chisquare_p(bits, law) > P_MIN
    assert chisquare_p(noise, law) > P_MIN
    keep = (bits + noise) > 0
    assert stats.chi2_contingency(np.stack([bits[keep], noise[keep]])).pvalue > P_MIN


def test_independent_releases_with_the_same_marginals_fail() -> None:
    # The test above can fail: releases drawn independently at each level (right marginals, no chain)
    # give p < 1e-100 against the chain's law (deterministic: fixed seed).
    levels = (0.5, 1.5, 4.0)
    bits = np.zeros(N, dtype=bool)
    history = np.zeros(N, dtype=np.uint8)
    for i, level in enumerate(levels):
        y = Randomizer(mode="symmetric", level=level).sample_permanent(bits, SeededRandom(700 + i))
        history |= y.view(np.uint8) << np.uint8(i)
    counts = np.bincount(history, minlength=8)
    assert chisquare_p(counts, np.array([float(p) for p in laplace_bit_law(levels)[0]])) < 1e-100


def test_edges_and_checks() -> None:
    bits = np.array([True, False, True, False])
    perm = np.array([True, True, False, False])
    new = relax_laplace_bits(bits, perm, (1.0,), math.inf, SeededRandom(1))
    pattern = extend_pattern(perm, new, 1)
    assert new.tolist() == bits.tolist() and pattern.tolist() == [3, 1, 2, 0]  # level inf: the truth
    new = relax_laplace_bits(bits, pattern, (1.0, 2.0), 2.0, SeededRandom(1))  # the same level: no change
    assert new.tolist() == [True, False, True, False] and extend_pattern(pattern, new, 2).tolist() == [7, 1, 6, 0]
    r = Randomizer(mode="symmetric", level=1.0)
    assert np.array_equal(r.relax_permanent(bits, perm, 3.0, SeededRandom(5)),
                          relax_laplace_bits(bits, perm, [1.0], 3.0, SeededRandom(5)))
    with pytest.raises(TighteningRefused):
        relax_laplace_bits(bits, perm, (2.0,), 1.0)
    for history, levels, field in ((perm[:3], (1.0,), "history"), (np.array([0, 1, 2, 1]), (1.0,), "history"),
                                   (np.array([0.0, 1.0, 0.0, 1.0]), (1.0,), "history"),
                                   (perm, (2.0, 1.0), "levels"), (perm, (), "levels"),
                                   (perm, tuple(range(1, MAX_BIT_CHAIN_LEVELS + 2)), "levels")):
        with pytest.raises(ParameterError) as err:
            relax_laplace_bits(bits, history, levels, 20.0)
        assert err.value.field == field, (history, levels)
    with pytest.raises(ParameterError) as err:  # a 4-level chain: the quadrature stops at 3
        relax_laplace_bits(bits, np.zeros(4, dtype=np.uint8), (1.0, 2.0, 3.0), 4.0)
    assert err.value.field == "levels"
    with pytest.raises(ParameterError) as err:
        extend_pattern(np.array([0, 1, 2, 3]), bits, 1)
    assert err.value.field == "history"


@pytest.mark.parametrize("levels", CHAINS)
def test_after_a_one_the_next_release_forgets_the_history(levels: tuple[float, ...]) -> None:
    # Closed form, independent of the quadrature: for y > 1/2 the lazy step gives
    # P(V' > 1/2 | V = y) = (e + e') exp(-(e' - e)/2) / (2 e'), the same for every y (the exponential tail
    # is memoryless). So for b = 0 every history ending in 1 has that conditional, and by symmetry for
    # b = 1 every history ending in 0 has 1 minus it (within the quadrature's 1e-13 relative).
    e, e_next = levels[-2], levels[-1]
    after_one = (e + e_next) * math.exp(-(e_next - e) / 2) / (2 * e_next)
    k = len(levels) - 1
    cond = laplace_bit_conditionals(levels)
    for h in range(1 << k):
        last = (h >> (k - 1)) & 1
        if last == 1:
            assert float(cond[0][h]) == pytest.approx(after_one, rel=1e-13)
        else:
            assert float(cond[1][h]) == pytest.approx(1 - after_one, rel=1e-13)
