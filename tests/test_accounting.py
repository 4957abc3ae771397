"""Exact privacy numbers, tightness, and the exact accounting of relaxed sequences."""

from __future__ import annotations

import math

import numpy as np
import pytest

from protocol import (
    Randomizer,
    bit_epsilon,
    check_sequence_privacy,
    guarantee,
    laplace_rate_from_f,
    relax_exponential,
    relax_laplace,
    round_up,
    sequence_bit_epsilon,
    sequence_pattern_probabilities,
)
from protocol.errors import ParameterError
from protocol.rng import SeededRandom

LN3 = math.log(3)


def test_symmetric_f_half_is_ln3_and_tight() -> None:
    level = laplace_rate_from_f(0.5)
    assert bit_epsilon("symmetric", level) == pytest.approx(LN3, abs=1e-15)
    assert check_sequence_privacy("symmetric", (level,), LN3)
    assert not check_sequence_privacy("symmetric", (level,), math.log(2.999))


def test_rappor_eps_inf_and_eps_1() -> None:
    # RAPPOR (Erlingsson et al. 2014, Table): h = 2, f = 0.5, p = 0.5, q = 0.75:
    # eps_inf = 2h ln 3 = 4 ln 3 = 4.3944, eps_1 = 1.0743.
    r = Randomizer(mode="symmetric", level=laplace_rate_from_f(0.5), irr_p=0.5, irr_q=0.75)
    g = guarantee(r, num_hashes=2, value_kind="categorical")
    assert 4 * LN3 <= g.epsilon_longitudinal <= 4 * LN3 + 1e-6
    q_star = 0.5 * 0.5 * 1.25 + 0.5 * 0.75
    p_star = 0.5 * 0.5 * 1.25 + 0.5 * 0.5
    eps1 = 2 * math.log(q_star * (1 - p_star) / (p_star * (1 - q_star)))
    assert eps1 <= g.epsilon_per_report <= eps1 + 1e-6
    assert round(eps1, 4) == 1.0743


def test_set_neighbours_cost_k_bits_and_asymmetric_costs_k_half_level() -> None:
    r = Randomizer(mode="symmetric", level=laplace_rate_from_f(0.5))
    assert guarantee(r, num_hashes=2, value_kind="set").epsilon_longitudinal == round_up(2 * LN3)
    a = Randomizer(mode="asymmetric", level=2.0)
    ga = guarantee(a, num_hashes=2)
    assert ga.epsilon_bit == 1.0 and ga.epsilon_longitudinal == 2.0 and ga.epsilon_per_report == 2.0
    assert "NOT" in ga.reveals
    # Asymmetric with IRR: per transmission k ln(1/q_eff), q_eff = q + (1-q) q_irr.
    ai = Randomizer(mode="asymmetric", level=2.0, irr_q=0.2)
    q_eff = math.exp(-1.0) + (1 - math.exp(-1.0)) * 0.2
    assert guarantee(ai, num_hashes=2).epsilon_per_report == round_up(2 * math.log(1 / q_eff))


def test_laplace_relaxed_pair_costs_exactly_1_5512() -> None:
    eps, exact = sequence_bit_epsilon("symmetric", (1.0, 2.0))
    assert exact
    assert round(eps, 4) == 1.5512
    # more private than the continuous bound, less than... more than the final single bit
    assert bit_epsilon("symmetric", 2.0) < eps < 2.0
    # tight: the exact value passes, 1% less fails
    assert check_sequence_privacy("symmetric", (1.0, 2.0), eps)
    assert not check_sequence_privacy("symmetric", (1.0, 2.0), 0.99 * eps)


def test_three_level_sequence_is_exact_and_tight() -> None:
    eps, exact = sequence_bit_epsilon("symmetric", (0.5, 1.0, 2.0))
    assert exact
    assert sequence_bit_epsilon("symmetric", (1.0, 2.0))[0] <= eps + 1e-6 < 2.0
    assert check_sequence_privacy("symmetric", (0.5, 1.0, 2.0), eps)
    assert not check_sequence_privacy("symmetric", (0.5, 1.0, 2.0), 0.99 * eps)


def test_long_sequences_fall_back_to_the_continuous_bound() -> None:
    # up to 10 levels are charged the proven enclosure (tests/test_laplace_chain_rigorous.py); 11 fall back
    eleven = tuple(0.5 * (i + 1) for i in range(11))
    eps, exact = sequence_bit_epsilon("symmetric", eleven)
    assert not exact and eps == 5.5
    eps, exact = sequence_bit_epsilon("symmetric", eleven[:7])
    assert exact and eps < 3.5
    eps, exact = sequence_bit_epsilon("symmetric", (0.5, 1.0, 1.5, 2.0))
    assert exact and eps < 2.0


def test_asymmetric_sequence_costs_the_last_level() -> None:
    eps, exact = sequence_bit_epsilon("asymmetric", (1.0, 2.0, 3.0))
    assert exact and eps == 1.5
    assert check_sequence_privacy("asymmetric", (1.0, 3.0), 1.5)
    assert not check_sequence_privacy("asymmetric", (1.0, 3.0), 0.99 * 1.5)


def test_sequence_probabilities_agree_with_monte_carlo() -> None:
    probs = sequence_pattern_probabilities((1.0, 2.0))
    assert sum(probs.values()) == pytest.approx(1.0, abs=1e-9)
    n = 1_000_000
    rng = SeededRandom(31)
    v1 = rng.laplace(1.0, n)
    v2 = relax_laplace(v1, 1.0, 2.0, rng)
    y1, y2 = v1 > 0.5, v2 > 0.5
    for (a, b), p in probs.items():
        freq = np.mean((y1 == bool(a)) & (y2 == bool(b)))
        # binomial 6-sigma band: false-failure rate < 2e-9 per pattern
        assert abs(freq - p) < 6 * math.sqrt(p * (1 - p) / n)


def test_exponential_sequence_monte_carlo_matches_last_level() -> None:
    # For b = 0 the outcome "all ones" has probability exp(-L_n / 2); for b = 1 it is 1.
    n = 1_000_000
    rng = SeededRandom(32)
    v1 = rng.exponential(1.0, n)
    v2 = relax_exponential(v1, 1.0, 3.0, rng)
    freq = np.mean((v1 > 0.5) & (v2 > 0.5))
    p = math.exp(-1.5)
    assert abs(freq - p) < 6 * math.sqrt(p * (1 - p) / n)


def test_round_up_never_rounds_down() -> None:
    assert round_up(1.0) == 1.0
    assert round_up(1.0000001) == 1.000001
    assert round_up(LN3) >= LN3
    assert round_up(1.5511991, slack=1e-8) == 1.5512
    assert round_up(math.inf) == math.inf


@pytest.mark.parametrize(
    ("levels", "field"),
    [((), "levels"), ((1.0, 1.0), "levels"), ((2.0, 1.0), "levels"), ((0.0, 1.0), "levels[0]"),
     ((1.0, math.inf), "levels[1]")],
)
def test_sequence_validation(levels: tuple[float, ...], field: str) -> None:
    with pytest.raises(ParameterError) as err:
        sequence_bit_epsilon("symmetric", levels)
    assert err.value.field == field


# Values of the adaptive scipy quadrature (tolerance 1e-12) the accounting used before it moved to numpy
# Gauss-Legendre (the device has no scipy): the two must agree within 1e-9, and the reported epsilon is
# still rounded up with the quadrature slack.
SCIPY_REFERENCE = {
    (1.0, 2.0): 1.551199118360969,
    (1.0, 3.0): 2.1824091994219192,
    (0.5, 1.0): 0.8549355472654562,
    (0.2, 0.3): 0.2828279604619779,
    (1.3862943611198906, 2.0): 1.5336687536099571,
    (1.0, 2.0, 3.0): 2.2118576116080284,
    (0.5, 1.0, 4.0): 2.7887031518182415,
    (2.0, 3.0, 5.0): 3.363681645285176,
}


@pytest.mark.parametrize("levels", sorted(SCIPY_REFERENCE))
def test_numpy_quadrature_matches_the_scipy_reference(levels: tuple[float, ...]) -> None:
    from protocol.accounting import _laplace_sequence_exact
    from protocol.laplace_chain_rigorous import enclosed_sequence_epsilon

    assert abs(_laplace_sequence_exact(levels) - SCIPY_REFERENCE[levels]) < 1e-9
    eps, exact = sequence_bit_epsilon("symmetric", levels)
    # the charge is the enclosure's upper end rounded up: proven above, within a rounding step of the reference
    assert exact and SCIPY_REFERENCE[levels] <= eps <= SCIPY_REFERENCE[levels] + 1e-6 + 1e-9
    assert eps == round_up(enclosed_sequence_epsilon(levels)[1])


def test_accounting_does_not_import_scipy() -> None:
    import subprocess
    import sys

    code = "import sys, protocol.accounting, client_sdk; print('scipy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
