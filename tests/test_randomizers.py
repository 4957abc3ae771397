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


def test_single_client_path_equals_vectorized_path() -> None:
    r = Randomizer(mode="symmetric", level=1.0, irr_p=0.2, irr_q=0.8)
    bits = np.zeros((3, 16), dtype=bool)
    bits[:, [1, 5]] = True
    batch = r.simulate(bits, SeededRandom(9))
    # The same stream consumed row by row gives the same reports: noise first, then IRR.
    rng = SeededRandom(9)
    noise = r.draw_noise(bits.shape, rng)
    assert np.array_equal(batch, r.report(bits, noise, rng))


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
