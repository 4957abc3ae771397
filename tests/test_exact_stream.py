"""The exact samplers' faster steps draw the same stream and give the same integers as the plain ones.

``onesided reproduce`` promises identical figures at the same seed, and the
central mechanisms' and Mechanism A's noise come from these samplers, so the
shortcuts (a power-of-two bound reads the word's low bits, a round with no
rejected word skips the filter, only odd stops are recorded) are checked
draw for draw against the plain steps written out below, with the
generator's position compared afterwards (the next uniform must agree).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import protocol.exact as exact
from protocol.rng import RandomSource, SeededRandom


def _plain_words(rng: RandomSource, size: int) -> np.ndarray:
    return np.floor(np.asarray(rng.uniform(size), dtype=np.float64) * float(2**48)).astype(np.int64)


def _plain_bits(rng: RandomSource, size: int, bits: int) -> np.ndarray:
    if bits <= 48:
        return _plain_words(rng, size) >> (48 - bits)
    high, low = _plain_words(rng, size), _plain_words(rng, size)
    return (high << 14) | (low >> 34)


def _plain_uniform_below(rng: RandomSource, n: int, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.int64)
    if n == 1 or size == 0:
        return out
    bits = 48 if n <= 2**48 else 62
    limit = (1 << bits) - (1 << bits) % n
    filled = 0
    while filled < size:
        words = _plain_bits(rng, size - filled, bits)
        kept = words[words < limit][: size - filled] % n
        out[filled : filled + kept.size] = kept
        filled += kept.size
    return out


def _plain_bernoulli_exp_unit(rng: RandomSource, num: np.ndarray, den: int) -> np.ndarray:
    stop_at = np.zeros(num.size, dtype=np.int64)
    active = np.arange(num.size)
    k = 1
    while active.size:
        a = num[active]
        hit = (_plain_uniform_below(rng, den, active.size) < a) if den > 1 else a > 0
        if k > 1:
            hit &= _plain_uniform_below(rng, k, active.size) == 0
        stop_at[active[~hit]] = k
        active = active[hit]
        k += 1
    return stop_at % 2 == 1


@pytest.mark.parametrize("n", [2, 3, 1024, 1000, 2**48, 2**48 + 1, 2**56, 3 * 2**55, 2**62])
def test_uniform_below_draws_what_the_plain_rejection_draws(n: int) -> None:
    fast, plain = SeededRandom(n % 997), SeededRandom(n % 997)
    assert np.array_equal(exact.uniform_below(fast, n, 50_000), _plain_uniform_below(plain, n, 50_000))
    assert np.array_equal(fast.uniform(3), plain.uniform(3))


def test_a_rejected_word_still_takes_the_filter() -> None:
    # n just above 2**47: a 48-bit word is rejected with probability ~1/2, so every round rejects some
    n = 2**47 + 1
    fast, plain = SeededRandom(5), SeededRandom(5)
    assert np.array_equal(exact.uniform_below(fast, n, 10_000), _plain_uniform_below(plain, n, 10_000))
    assert np.array_equal(fast.uniform(3), plain.uniform(3))


@pytest.mark.parametrize("den", [1, 2, 7, 1024, 2**56])
def test_bernoulli_exp_unit_matches_the_plain_rounds(den: int) -> None:
    num = SeededRandom(1).generator.integers(0, den + 1, 40_000, dtype=np.int64)
    fast, plain = SeededRandom(den % 991), SeededRandom(den % 991)
    assert np.array_equal(exact._bernoulli_exp_unit(fast, num, den), _plain_bernoulli_exp_unit(plain, num, den))
    assert np.array_equal(fast.uniform(3), plain.uniform(3))


@pytest.mark.parametrize("rate", [Fraction(1, 1024), Fraction(36028797018963, 2**56), Fraction(3, 7)])
def test_two_sided_geometric_is_unchanged_at_a_fixed_seed(rate: Fraction, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = exact.two_sided_geometric_exact(SeededRandom(11), rate, 30_000)
    monkeypatch.setattr(exact, "uniform_below", _plain_uniform_below)
    monkeypatch.setattr(exact, "_bernoulli_exp_unit", _plain_bernoulli_exp_unit)
    assert np.array_equal(fast, exact.two_sided_geometric_exact(SeededRandom(11), rate, 30_000))
