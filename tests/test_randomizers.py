"""Thresholded randomizers: closed forms, IRR, one function for one client and a million."""

from __future__ import annotations

import math

import numpy as np
import pytest

from protocol import Randomizer, laplace_rate_from_f
from protocol.errors import ParameterError
from protocol.rng import SeededRandom

N = 400_000


def _six_sigma(p: float, n: int) -> float:
    # Binomial 6-sigma band: false-failure rate < 2e-9 per comparison.
    return 6 * math.sqrt(max(p * (1 - p), 1e-12) / n)


@pytest.mark.parametrize(
    "r",
    [
        Randomizer(mode="symmetric", level=laplace_rate_from_f(0.5)),
        Randomizer(mode="symmetric", level=1.3, irr_p=0.25, irr_q=0.75),
        Randomizer(mode="asymmetric", level=2.0),
        Randomizer(mode="asymmetric", level=1.0, irr_q=0.1),
    ],
)
def test_output_probabilities_match_closed_forms(r: Randomizer) -> None:
    rng = SeededRandom(17)
    p_star, q_star = r.probabilities()
    zeros = r.simulate(np.zeros((N, 1), dtype=bool), rng).mean()
    ones = r.simulate(np.ones((N, 1), dtype=bool), rng).mean()
    assert abs(zeros - p_star) <= _six_sigma(p_star, N)
    assert abs(ones - q_star) <= _six_sigma(q_star, N)


def test_rappor_f_mapping() -> None:
    r = Randomizer(mode="symmetric", level=laplace_rate_from_f(0.5))
    assert math.isclose(r.f, 0.5)
    assert r.permanent_probabilities() == pytest.approx((0.25, 0.75))


def test_asymmetric_never_turns_a_one_into_zero() -> None:
    r = Randomizer(mode="asymmetric", level=0.1, irr_q=0.3)
    out = r.simulate(np.ones((50_000, 8), dtype=bool), SeededRandom(2))
    assert out.all()


@pytest.mark.parametrize(
    "r",
    [
        Randomizer(mode="symmetric", level=1.0, irr_p=0.2, irr_q=0.8),
        Randomizer(mode="asymmetric", level=3.0, irr_q=0.15),
        Randomizer(mode="symmetric", level=2.5),
    ],
)
def test_simulate_has_the_law_of_report_of_draw_noise(r: Randomizer) -> None:
    # simulate no longer consumes the stream as report(bits, draw_noise(...)) does; it samples the
    # same law exactly. Its probabilities are the exact composition of the stated doubles ...
    p_star, q_star = r.probabilities()
    exact = r.exact_probabilities()
    assert math.isclose(float(exact[0]), p_star, rel_tol=1e-15)
    assert math.isclose(float(exact[1]), q_star, rel_tol=1e-15)
    # ... and the single-report path agrees in law: per b, a two-proportion z-test |z| < 4.9
    # (false-failure rate 1e-6 each; fixed seeds, deterministic).
    n = 300_000
    for b in (False, True):
        bits = np.full((n // 100, 100), b)
        fast = r.simulate(bits, SeededRandom(30 + b)).mean()
        slow = r.report(bits, r.draw_noise(bits.shape, SeededRandom(40 + b)), SeededRandom(50 + b)).mean()
        p = float(exact[int(b)])
        if p == 1.0:
            assert fast == slow == 1.0
            continue
        assert abs(fast - slow) <= 4.9 * math.sqrt(2 * p * (1 - p) / n)


def test_simulate_twins_and_shape() -> None:
    r = Randomizer(mode="symmetric", level=1.0, irr_p=0.2, irr_q=0.8)
    bits = SeededRandom(1).bernoulli(0.3, (50, 33))
    a = r.simulate(bits, SeededRandom(9))
    assert a.shape == bits.shape and a.dtype == np.bool_
    assert np.array_equal(a, r.simulate(bits, SeededRandom(9)))
    assert not np.array_equal(a, r.simulate(bits, SeededRandom(10)))


@pytest.mark.parametrize(
    "r",
    [Randomizer(mode="symmetric", level=1.3, irr_p=0.25, irr_q=0.75), Randomizer(mode="asymmetric", level=1.0, irr_q=0.1)],
)
def test_two_stage_sampling_matches_the_one_shot_law(r: Randomizer) -> None:
    # sample_permanent then sample_instantaneous: binomial 6-sigma bands (false failure < 2e-9 each).
    for b in (False, True):
        bits = np.full((N // 100, 100), b)
        perm = r.sample_permanent(bits, SeededRandom(60 + b))
        assert abs(perm.mean() - r.permanent_probabilities()[b]) <= _six_sigma(r.permanent_probabilities()[b], N)
        out = r.sample_instantaneous(perm, SeededRandom(70 + b)).mean()
        target = float(r.exact_probabilities()[b])
        assert abs(out - target) <= _six_sigma(target, N)


def test_relax_permanent_reaches_the_new_level_and_refuses_the_trusted_mode() -> None:
    r = Randomizer(mode="asymmetric", level=1.0)
    bits = np.zeros((N // 100, 100), dtype=bool)
    bits[:, 0] = True
    perm = r.sample_permanent(bits, SeededRandom(80))
    relaxed = r.relax_permanent(bits, perm, 3.0, SeededRandom(81))
    assert np.all(relaxed <= perm) and np.all(relaxed[bits])
    q = math.exp(-1.5)  # binomial 6 sigma on the zeros
    assert abs(relaxed[~bits].mean() - q) <= _six_sigma(q, int((~bits).sum()))
    sym = Randomizer(mode="symmetric", level=1.0)  # the Laplace chain's bits: tests/test_laplace_bits.py
    relaxed = sym.relax_permanent(bits, sym.sample_permanent(bits, SeededRandom(82)), 3.0, SeededRandom(83))
    half_f = math.exp(-1.5) / 2  # the stated marginal at 3.0, binomial 6 sigma for each true bit
    assert abs(relaxed[~bits].mean() - half_f) <= _six_sigma(half_f, int((~bits).sum()))
    assert abs(relaxed[bits].mean() - (1 - half_f)) <= _six_sigma(half_f, int(bits.sum()))
    with pytest.raises(ParameterError) as err:
        Randomizer(mode="trusted", level=math.inf).relax_permanent(bits, perm, 3.0)
    assert err.value.field == "mode"


def test_trusted_mode_is_exact() -> None:
    r = Randomizer(mode="trusted", level=math.inf)
    bits = np.array([True, False, True])
    assert np.array_equal(r.simulate(bits, SeededRandom(1)), bits)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"mode": "both", "level": 1.0}, "mode"),
        ({"mode": "symmetric", "level": 0.0}, "level"),
        ({"mode": "symmetric", "level": -1.0}, "level"),
        ({"mode": "symmetric", "level": math.inf}, "level"),
        ({"mode": "symmetric", "level": math.nan}, "level"),
        ({"mode": "symmetric", "level": 1.0, "irr_p": 0.3}, "irr_q"),
        ({"mode": "symmetric", "level": 1.0, "irr_p": 0.8, "irr_q": 0.2}, "irr_q"),
        ({"mode": "symmetric", "level": 1.0, "irr_p": -0.1, "irr_q": 0.2}, "irr_p"),
        ({"mode": "asymmetric", "level": 1.0, "irr_p": 0.1, "irr_q": 0.2}, "irr_p"),
        ({"mode": "asymmetric", "level": 1.0, "irr_q": 1.0}, "irr_q"),
        ({"mode": "trusted", "level": 1.0}, "level"),
    ],
)
def test_validation_names_the_field(kwargs: dict, field: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ParameterError) as err:
        Randomizer(**kwargs)
    assert err.value.field == field


@pytest.mark.parametrize("mode", ["symmetric", "asymmetric"])
def test_cut_on_uniforms_equals_thresholding_the_noise(mode: str) -> None:
    # The million-client path compares uniforms with cuts; it must give exactly the bits of
    # [b + V > 1/2] for the noise V that draw_noise makes from the same uniforms.
    r = Randomizer(mode=mode, level=1.7)  # type: ignore[arg-type]
    bits = SeededRandom(40).bernoulli(0.3, (2000, 64))
    fast = r.permanent_from_uniforms(bits, SeededRandom(41).uniform(bits.shape))
    slow = r.permanent(bits, r.draw_noise(bits.shape, SeededRandom(41)))
    assert np.array_equal(fast, slow)
