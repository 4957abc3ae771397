"""Certified epsilons of symmetric relaxed chains, and what they prove about the product's charge.

Deterministic (interval arithmetic and fixed chains, or chains drawn with a fixed seed): no false failures.
"""

from __future__ import annotations

import math
import random

import pytest

mpmath = pytest.importorskip("mpmath")

from protocol import accounting  # noqa: E402
from protocol.errors import ParameterError  # noqa: E402
from protocol.laplace_chain_rigorous import (  # noqa: E402
    EXACT_WIDTH,
    CertifiedEpsilon,
    _exp_enclosure,
    certified_pattern_probabilities,
    certified_sequence_epsilon,
    enclosed_sequence_epsilon,
)


def charge_check(levels: tuple[float, ...]) -> tuple[float, bool, CertifiedEpsilon]:
    """The product's charge for a symmetric chain next to its certified enclosure: a proven bound
    when ``charge >= certified.hi``, tight when also below ``certified.lo`` plus the rounding step."""
    charge, exact = accounting.sequence_bit_epsilon("symmetric", levels)
    return charge, exact, certified_sequence_epsilon(levels)


# What a charge may exceed the exact epsilon by: the 1e-6 rounding step plus the widest enclosure called exact.
STEP = 1e-6 + EXACT_WIDTH

RAPPOR = 2.0 * math.log(2.0)  # f = 1/2
# 2-6 levels in [0.1, 8]: narrow, RAPPOR-like (relaxing f = 1/2 towards f = 1/4), near-coincident, wide.
CHAINS = [
    (1.0, 2.0),
    (0.1, 8.0),
    (7.9, 8.0),
    (RAPPOR, 2.0 * RAPPOR),
    (1.0, 1.5, 2.0),
    (RAPPOR, 1.7, 2.0 * RAPPOR),
    (0.1, 7.99, 8.0),
    (1.0, 1.5, 2.0, 2.5),
    (2.0, 2.0001, 2.0002, 2.0003),
    (RAPPOR, 1.6, 1.9, 2.3, 2.0 * RAPPOR),
    (0.5, 1.0, 2.0, 4.0, 6.0),
    (4.0, 5.0, 6.0, 7.0, 7.5, 8.0),
    (0.1, 0.11, 0.12, 0.13, 0.14, 0.15),  # the forward grid is too wide: the continuous bound
    (0.1, 0.5, 1.0, 2.0, 4.0, 8.0),  # idem
]


def _contains(interval, value: float) -> bool:
    return bool(interval.a <= value <= interval.b)


def test_exp_enclosure_holds_and_is_one_ulp_wide() -> None:
    with mpmath.workprec(300):
        for x in (0.0, 1e-300, -1e-9, 0.5, -1.0, 3.25, -16.016, 32.0, -64.0, 699.0):
            lo, hi = _exp_enclosure(x)
            exact = mpmath.exp(mpmath.mpf(x))
            assert lo <= exact <= hi, x
            assert hi <= math.nextafter(math.nextafter(lo, math.inf), math.inf), x  # at most 2 ulps
    with pytest.raises(ParameterError, match="levels"):
        _exp_enclosure(701.0)


def test_one_level_is_the_closed_form() -> None:
    for level in (0.1, RAPPOR, 5.0, 32.0):
        r = certified_sequence_epsilon([level])
        exact = accounting.bit_epsilon("symmetric", level)
        assert r.lo - 1e-15 <= exact <= r.hi + 1e-15 and r.width < 1e-12
    r = certified_sequence_epsilon([RAPPOR])
    with mpmath.workprec(200):
        assert r.lo <= mpmath.log(3) <= r.hi  # f = 1/2: ln 3


@pytest.mark.parametrize("levels", [(1.0, 2.0), (0.5, 1.0, 2.0), (0.3, 0.6, 1.0, 1.5, 2.2, 3.0),
                                    tuple(1.0 + 0.5 * i for i in range(9))])
def test_probabilities_are_a_law_and_consistent_under_marginals(levels: tuple[float, ...]) -> None:
    """Sum 1, and summing out the first, a middle or the last release gives the shorter chain.

    The last two are the Markov property and Chapman-Kolmogorov of the relaxation process (the
    chain from e_1 through e_2 to e_3 has the law of the chain from e_1 to e_3): identities that
    hold exactly, checked on the enclosures of two separate computations.
    """
    probs = certified_pattern_probabilities(levels)
    assert _contains(mpmath.iv.mpf(0) + sum(probs.values()), 1.0)
    n = len(levels)
    for drop in sorted({0, n // 2, n - 1}):
        shorter = certified_pattern_probabilities(levels[:drop] + levels[drop + 1:])
        for pattern, p in shorter.items():
            total = probs[pattern[:drop] + (0,) + pattern[drop:]] + probs[pattern[:drop] + (1,) + pattern[drop:]]
            assert total.a <= p.b and p.a <= total.b, (drop, pattern)  # the two enclosures meet
            assert p.delta < 1e-20 * p.a


def test_float_probabilities_agree_with_the_enclosures() -> None:
    for levels in [(1.0, 2.0), (0.5, 1.0, 2.0), (1.0, 1.5, 2.0, 2.5), (0.5, 1.0, 2.0, 4.0, 6.0)]:
        floats = accounting.sequence_pattern_probabilities(levels)
        for pattern, p in certified_pattern_probabilities(levels).items():
            assert abs(floats[pattern] - float(p.mid)) <= 1e-12 * floats[pattern], (levels, pattern)


@pytest.mark.parametrize("levels", CHAINS)
def test_the_charge_is_a_proven_bound_and_tight(levels: tuple[float, ...]) -> None:
    """``sequence_bit_epsilon`` >= the certified upper end; an exact charge within one step of the lower end."""
    charge, exact, certified = charge_check(levels)
    assert certified.width < 1e-9
    assert charge >= certified.hi
    if exact:
        assert charge <= certified.lo + STEP
    else:  # the continuous bound: valid, with the gap the docs print
        assert charge == accounting.round_up(levels[-1]) and charge - certified.hi > 4e-3


def _random_chains(seed: int, count: int, top: float) -> list[tuple[float, ...]]:
    rng = random.Random(seed)
    chains: list[tuple[float, ...]] = []
    while len(chains) < count:
        n = rng.randint(2, 6)
        levels = tuple(sorted(round(rng.uniform(0.1, top), 3) for _ in range(n)))
        if len(set(levels)) == n:
            chains.append(levels)
    return chains


@pytest.mark.slow
@pytest.mark.parametrize("levels", _random_chains(2026, 40, 8.0))
def test_random_chains_are_charged_a_proven_tight_bound(levels: tuple[float, ...]) -> None:
    charge, exact, certified = charge_check(levels)
    assert charge >= certified.hi
    assert not exact or charge <= certified.lo + STEP


@pytest.mark.parametrize("levels", [*CHAINS, (0.05, 32.0, 32.032), (1.0, 1.001),
                                    tuple(1.0 + 0.5 * i for i in range(7)),
                                    (0.1, 0.3, 0.7, 1.2, 2.0, 3.0, 4.5, 6.0, 8.0)])
def test_double_enclosure_contains_the_certified_one(levels: tuple[float, ...]) -> None:
    lo, hi = enclosed_sequence_epsilon(levels)
    certified = certified_sequence_epsilon(levels)
    assert lo <= certified.lo and certified.hi <= hi
    assert hi - lo < 1e-9


def test_double_enclosure_gives_up_rather_than_guess() -> None:
    # rates 1e-9 apart: the closed form's cancellation eats every digit of a double
    lo, hi = enclosed_sequence_epsilon((1.0, 1.0 + 1e-9))
    assert hi == math.inf and lo == 0.0
    certified = certified_sequence_epsilon((1.0, 1.0 + 1e-9))  # 96 bits absorb the cancellation
    assert certified.width < 1e-12
    # adjacent doubles: the doubles give up, the certified path raises its precision
    touching = (1.0, math.nextafter(1.0, 2.0))
    assert enclosed_sequence_epsilon(touching) == (0.0, math.inf)
    close = certified_sequence_epsilon(touching)
    assert close.prec > 96 and close.width < 1e-12  # about one release at rate 1:
    assert abs(close.lo - accounting.bit_epsilon("symmetric", 1.0)) < 1e-12
    # an unreachable width: the precision doubles up to its cap and the enclosure is still returned
    capped = certified_sequence_epsilon((1.0, 1.0 + 1e-9), width=1e-300)
    assert capped.prec == 1536 and capped.lo <= certified.hi and certified.lo <= capped.hi


# Chains of 7-10 levels: certified exact value vs the continuous bound (the last level) charged today.
LONG: dict[tuple[float, ...], float | None] = {
    (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0): 2.854808421509578,
    (RAPPOR, 1.5, 1.65, 1.8, 2.0, 2.2, 2.5, 2.0 * RAPPOR): None,
    (0.1, 0.3, 0.7, 1.2, 2.0, 3.0, 4.5, 6.0, 8.0): None,
    tuple(1.0 + 0.5 * i for i in range(10)): 3.7545177880560905,
}


@pytest.mark.parametrize("levels", list(LONG))
def test_long_chains_certified_below_the_continuous_bound(levels: tuple[float, ...]) -> None:
    certified = certified_sequence_epsilon(levels)
    assert certified.width < 1e-9
    figure = LONG[levels]
    if figure is not None:
        assert abs(certified.lo - figure) < 1e-12  # the figure docs/privacy.md prints
    charge, exact = accounting.sequence_bit_epsilon("symmetric", levels)
    assert charge >= certified.hi and levels[-1] - certified.hi > 0.2  # the bound's gap, in docs


def test_the_double_enclosure_runs_without_mpmath() -> None:
    import subprocess
    import sys

    code = ("import sys; from protocol.laplace_chain_rigorous import enclosed_sequence_epsilon as e; "
            "lo, hi = e((1.0, 1.5, 2.0, 2.5)); assert lo <= 1.898771125145579 <= hi; "
            "assert 'mpmath' not in sys.modules, 'mpmath imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_bad_levels_name_the_field() -> None:
    for bad in ([], [1.0, 1.0], [2.0, 1.0], [0.0, 1.0], [1.0, math.nan]):
        with pytest.raises(ParameterError, match="levels"):
            certified_sequence_epsilon(bad)
        with pytest.raises(ParameterError, match="levels"):
            enclosed_sequence_epsilon(bad)


# Once findings (wide chains overcharged by the float quadrature; 7+ levels left at the bound): the charge
# is now the enclosure's upper end up to MAX_ENCLOSED_LAPLACE_LEVELS levels.
def test_wide_chains_up_to_max_level_are_charged_tightly() -> None:
    for levels in [(0.05, 32.0, 32.032), (0.1, 16.0, 32.0), (0.05, 8.0, 8.008)]:
        charge, exact, certified = charge_check(levels)
        assert exact and certified.hi <= charge <= certified.lo + STEP, levels


def test_long_chains_are_charged_the_enclosed_value() -> None:
    levels = tuple(1.0 + 0.5 * i for i in range(8))
    charge, exact, certified = charge_check(levels)
    assert exact and certified.hi <= charge <= certified.lo + STEP
