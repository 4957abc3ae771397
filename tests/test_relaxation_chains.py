"""Symmetric relaxed chains of 4 to 6 levels: exact epsilons by the forward recursion.

The recursion (``protocol.accounting._forward_pattern_probabilities``) is checked against an
independent method at every length: the nested quadrature at 2-3 levels, and at 4-6 levels the
consistency of the lazy process (the releases at any sub-chain of levels are the process at those
levels, so marginalizing a 5-level law onto 3 of its levels must give the nested 3-level law), the
one-level closed form ``P(y_i = 1 | 0) = e^{-l_i/2} / 2``, and the sampler itself.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from protocol.accounting import (
    MAX_EXACT_LAPLACE_LEVELS,
    _forward_pattern_probabilities,
    bit_epsilon,
    check_sequence_privacy,
    sequence_bit_epsilon,
    sequence_pattern_probabilities,
)
from protocol.errors import ParameterError
from protocol.relaxation import relax_laplace
from protocol.rng import SeededRandom

LONG_CHAINS = [
    (1.0, 1.5, 2.0, 2.5),
    (0.5, 1.0, 1.5, 2.0, 2.5),
    (1.0, 1.2, 1.4, 1.6, 1.8, 2.0),
    (2 * math.log(2), 2 * math.log(3), 2 * math.log(4), 2 * math.log(5)),
    (0.3, 2.0, 6.0, 12.0),
]


@pytest.mark.parametrize("levels", [(1.0, 2.0), (0.5, 1.2, 3.0), (1.0, 1.5, 2.0), (0.05, 0.1, 0.2), (0.3, 0.4, 10.0)])
def test_forward_recursion_equals_the_nested_quadrature(levels: tuple[float, ...]) -> None:
    forward = _forward_pattern_probabilities(levels)
    nested = sequence_pattern_probabilities(levels)
    assert forward.keys() == nested.keys()
    for pattern, p in nested.items():
        assert forward[pattern] == pytest.approx(p, rel=1e-11)


def _marginal(law: dict[tuple[int, ...], float], keep: tuple[int, ...]) -> dict[tuple[int, ...], float]:
    out: dict[tuple[int, ...], float] = {}
    for pattern, p in law.items():
        key = tuple(pattern[i] for i in keep)
        out[key] = out.get(key, 0.0) + p
    return out


@pytest.mark.parametrize("levels", LONG_CHAINS)
def test_long_chains_are_consistent_with_every_sub_chain(levels: tuple[float, ...]) -> None:
    law = sequence_pattern_probabilities(levels)
    assert len(law) == 2 ** len(levels) and math.fsum(law.values()) == pytest.approx(1.0, abs=1e-12)
    for i, level in enumerate(levels):  # each release alone: the one-level law, in closed form
        assert _marginal(law, (i,))[(1,)] == pytest.approx(math.exp(-level / 2) / 2, rel=1e-11)
    for keep in itertools.combinations(range(len(levels)), 3):  # any three: the nested quadrature
        sub = sequence_pattern_probabilities(tuple(levels[i] for i in keep))
        for pattern, p in _marginal(law, keep).items():
            assert p == pytest.approx(sub[pattern], rel=1e-10), (keep, pattern)


def test_long_chain_law_matches_the_sampler() -> None:
    # 400,000 chains of the product's relax_laplace (seeded); each of the 16 pattern frequencies within
    # 6 sd of the exact law: false-failure rate below 1e-7 in all
    levels = (1.0, 1.5, 2.0, 2.5)
    n = 400_000
    rng = SeededRandom(24)
    noise = rng.laplace(levels[0], n)
    bits = [noise > 0.5]
    for a, b in itertools.pairwise(levels):
        noise = relax_laplace(noise, a, b, rng)
        bits.append(noise > 0.5)
    codes = sum(bit.astype(np.int64) << i for i, bit in enumerate(bits))
    counts = np.bincount(codes, minlength=16)
    for pattern, p in sequence_pattern_probabilities(levels).items():
        code = sum(b << i for i, b in enumerate(pattern))
        assert abs(counts[code] / n - p) < 6 * math.sqrt(p * (1 - p) / n), pattern


@pytest.mark.parametrize("levels", LONG_CHAINS)
def test_long_chain_epsilon_is_exact_tight_and_below_the_continuous_bound(levels: tuple[float, ...]) -> None:
    eps, exact = sequence_bit_epsilon("symmetric", levels)
    assert exact and len(levels) <= MAX_EXACT_LAPLACE_LEVELS
    assert check_sequence_privacy("symmetric", levels, eps)
    assert not check_sequence_privacy("symmetric", levels, eps * 0.99)  # tight
    assert eps < levels[-1]  # strictly better than the continuous bound charged before
    # more releases are never more private than fewer: at least every 3-level sub-chain and the last bit
    for keep in itertools.combinations(range(len(levels)), 3):
        assert eps >= sequence_bit_epsilon("symmetric", tuple(levels[i] for i in keep))[0] - 1e-6
    assert eps >= bit_epsilon("symmetric", levels[-1]) - 1e-6


def test_the_ledger_charges_a_four_level_window_exactly() -> None:
    from client_sdk.ledger import window_cost
    from protocol.encodings import DirectEncoding
    from protocol.params import MetricParams

    params = MetricParams(name="m", encoding=DirectEncoding(domain=("a", "b")), mode="symmetric", level=1.0)
    cost, exact = window_cost(params, [1.0, 1.5, 2.0, 2.5])
    assert exact and cost == sequence_bit_epsilon("symmetric", (1.0, 1.5, 2.0, 2.5))[0] < 2.5


def test_chains_past_the_enclosure_keep_the_continuous_bound() -> None:
    eleven = tuple(1.0 + 0.1 * i for i in range(11))  # past MAX_ENCLOSED_LAPLACE_LEVELS: the continuous bound
    assert sequence_bit_epsilon("symmetric", eleven) == (eleven[-1], False)
    with pytest.raises(ParameterError) as info:
        check_sequence_privacy("symmetric", eleven, 20.0)
    assert info.value.field == "levels"
    # seven levels, and a chain too wide for the float grid (969 pieces x 128 steps), are charged the
    # proven enclosure: exact, below the bound
    for chain in (eleven[:7], (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)):
        eps, exact = sequence_bit_epsilon("symmetric", chain)
        assert exact and eps < chain[-1]
        assert check_sequence_privacy("symmetric", chain, eps) and not check_sequence_privacy("symmetric", chain, eps * 0.99)
