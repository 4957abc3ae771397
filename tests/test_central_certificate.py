"""The certificate on integer counts: ``answer < floor(t) + 1`` proves ``count <= t``, at the same privacy.

The ADP paper's sanitizer says "safe" when ``answer <= t``. Counts are integers and the one-sided noise
is ``>= 0``, so ``answer < floor(t) + 1`` implies ``count < floor(t) + 1``, i.e. ``count <= t``: the
stronger statement is never wrong either, and it reads the same answer (a post-processing: the epsilon
does not change). Probabilities here are exact (sums of the mechanisms' own pmfs, closed forms); the one
sampling test states its false-failure rate.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.server.services.releases import StoredRelease, place_answers, safe_cut
from protocol.central import (
    AGeoMechanism,
    ALapMechanism,
    SALapMechanism,
    certificate_cut,
    certificate_statement,
    certified_safe,
)
from protocol.errors import ParameterError
from protocol.releases import make_release
from protocol.rng import SeededRandom


def _exact_alap_certificate(mech: ALapMechanism, count: int, threshold: float) -> float:
    """``P(answer < floor(t) + 1 | count)`` by summing ALap's own pmf over the grid answers below the bound."""
    top = math.floor(threshold) + 1
    steps = np.arange(0, max(0, round((top - count) / mech.step)))
    return float(np.exp(mech.log_pmf(count + mech.step * steps, float(count))).sum())


def test_count_0_threshold_1_alap_eps_1_certifies_with_0_865_not_0_632() -> None:
    mech = ALapMechanism(epsilon=1.0)
    stronger = mech.certificate_probability(0, 1)
    assert stronger == pytest.approx(1 - math.exp(-2), rel=1e-12) and round(stronger, 3) == 0.865
    assert stronger == pytest.approx(_exact_alap_certificate(mech, 0, 1), rel=1e-9)
    weaker = mech.safe_probability(0, 1)  # the paper's answer <= t, on the grid: 1 - exp(-(1 + g))
    assert round(weaker, 3) == 0.632 and weaker < stronger
    # AGeo's integer answers: answer < t + 1 is answer <= t, so it already certified 1 - e^-(t - c + 1)
    geo = AGeoMechanism(epsilon=1.0, n_max=50)
    assert geo.certificate_probability(0, 1) == geo.safe_probability(0, 1) == pytest.approx(stronger, rel=1e-12)


@pytest.mark.parametrize("eps, sensitivity", [(1.0, 1.0), (0.3, 1.0), (2.0, 3.0), (0.7, 2.0)])
@pytest.mark.parametrize("count, threshold", [(0, 1), (2, 5), (5, 5), (3, 5.5), (6, 5), (0, 0)])
def test_alap_certificate_probability_is_exact(eps: float, sensitivity: float, count: int, threshold: float) -> None:
    mech = ALapMechanism(epsilon=eps, sensitivity=sensitivity)
    got = mech.certificate_probability(count, threshold)
    assert got == pytest.approx(_exact_alap_certificate(mech, count, threshold), rel=1e-9, abs=1e-15)
    if count > threshold:
        assert got == 0.0  # never wrong
    else:  # D_p / g is an integer here: the continuous figure 1 - exp(-eps (floor(t) + 1 - c) / D_p), exactly
        assert got == pytest.approx(-math.expm1(-eps * (math.floor(threshold) + 1 - count) / sensitivity), rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    threshold=st.floats(-1e6, 1e6, allow_nan=False),
    exponent=st.integers(-20, 0),
    count=st.integers(-10**6, 10**6),
    noise_steps=st.integers(0, 2**20),
)
def test_the_certificate_is_never_wrong_and_as_strong_as_the_grid_allows(
    threshold: float, exponent: int, count: int, noise_steps: int
) -> None:
    grid = 2.0**exponent
    cut = certificate_cut(threshold, grid)
    answer = count + grid * noise_steps  # one-sided noise: answer >= count
    if answer <= cut:
        assert count <= threshold  # never wrong
    # the largest grid answer below floor(t) + 1: one grid step above it is not below
    assert cut < math.floor(threshold) + 1 <= cut + grid and cut >= threshold - grid
    assert bool(certified_safe([answer], threshold, grid)[0]) == (answer < math.floor(threshold) + 1)


def test_alap_certificates_sampled_match_the_exact_probability() -> None:
    # 40,000 ALap answers per count (seeded); each certified share within 6 sd of the exact probability:
    # false-failure rate below 1e-8 per count (4 counts)
    mech = ALapMechanism(epsilon=1.0)
    n = 40_000
    for count in range(4):
        answers = mech.release(np.full(n, float(count)), SeededRandom(100 + count))
        share = float(certified_safe(answers, 2, mech.step).mean())
        p = mech.certificate_probability(count, 2)
        assert abs(share - p) <= 6 * math.sqrt(p * (1 - p) / n) + 1e-12
        if count > 2:
            assert share == 0.0


def test_salap_bottoms_at_the_cut_are_never_wrong_and_come_more_often() -> None:
    mech = SALapMechanism(epsilon=1.0)
    counts = np.array([0.0, 1.0, 0.0, 2.0])
    cut = certificate_cut(1, mech.step)
    stronger = mech.prefix_probability(counts, np.full(4, cut))
    weaker = mech.prefix_probability(counts, np.full(4, 1.0))
    assert np.all(stronger[:3] > weaker[:3]) and stronger[3] == weaker[3] == 0.0  # count 2 > t: never
    assert stronger[0] == pytest.approx(1 - math.exp(-2), rel=1e-12) and stronger[-1] == 0.0
    for seed in range(200):
        answers = mech.release(counts, np.full(4, cut), SeededRandom(seed))
        for c, a in zip(counts, answers, strict=False):
            if a is None:
                assert c <= 1  # a bottom proves count <= t


def test_the_certificate_needs_one_sided_noise() -> None:
    with pytest.raises(ParameterError) as info:
        ALapMechanism(epsilon=1.0, monotonicity="none").certificate_probability(0, 1)
    assert info.value.field == "monotonicity"
    with pytest.raises(ParameterError) as info:
        certificate_cut(1.0, 0.3)
    assert info.value.field == "grid"


def _view(mechanism: str, counts: list[int], threshold: float, seed: int) -> dict[str, object]:
    kwargs: dict[str, object] = {"n_max": 100} if mechanism == "ageo" else {}
    release = make_release(mechanism, counts, 1.0, rng=SeededRandom(seed), **kwargs)  # type: ignore[arg-type]
    stored = StoredRelease(id=1, analyst="a", metric="visits", window=0, places=tuple(f"p{i}" for i in range(len(counts))),
                           threshold=threshold, group=None, release=release, created_at=0, updated_at=0)
    return stored.public_view()


def test_the_release_view_calls_safe_what_the_certificate_proves_and_says_so() -> None:
    counts = [0, 1, 1, 2, 3, 0, 1, 2] * 25
    seen_between = False
    for seed in range(5):
        view = _view("alap", counts, 1, seed)
        for count, row in zip(counts, view["answers"], strict=True):  # type: ignore[call-overload]
            assert row["safe"] == (row["answer"] < 2)
            assert not (row["safe"] and count > 1)  # never wrong
            seen_between |= 1 < row["answer"] < 2 and row["safe"]
        assert view["certificate"] == certificate_statement(1, one_sided=True)
        assert "answer < 2" in str(view["certificate"]) and "count <= 1" in str(view["certificate"])
    assert seen_between  # answers in (t, t + 1) are now certified (P ~ 0.23 each: not vacuous)
    two_sided = _view("laplace", counts, 1, 0)
    assert all(r["safe"] == (r["answer"] <= 1) for r in two_sided["answers"])  # type: ignore[attr-defined]
    assert "estimate" in str(two_sided["certificate"])


def test_safe_cut_per_mechanism() -> None:
    alap = make_release("alap", [0, 3], 1.0, rng=SeededRandom(1))
    assert safe_cut(alap, 1.0) == 2.0 - alap.grid
    ageo = make_release("ageo", [0, 3], 1.0, n_max=10, rng=SeededRandom(1))
    assert safe_cut(ageo, 1.0) == 1.0 and safe_cut(ageo, 1.5) == 1.0
    laplace = make_release("laplace", [0, 3], 1.0, rng=SeededRandom(1))
    assert safe_cut(laplace, 1.0) == 1.0
    public = {"answers": [1.5, 2.0, None]}
    assert [r["safe"] for r in place_answers(public, ("a", "b", "c"), 1.75)] == [True, False, True]
