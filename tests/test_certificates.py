"""One-sided certificates: the guarantee P(safe and count > t) <= alpha, and alpha = 0 never wrong.

Statistical tests use fixed seeds and state their false-failure rates.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from aggregator.analysis.certify import (
    Certificate,
    certify,
    one_sided_upper_bounds,
    upper_bounds_from_table,
)
from aggregator.analysis.decoding import BitCounts
from aggregator.analysis.decoding.simulation import simulate_counts, true_bits
from protocol import BloomEncoding, DirectEncoding, MetricParams, SeededRandom
from protocol.errors import ParameterError


def _bloom(level: float, cohorts: int = 4, irr_q: float | None = None) -> MetricParams:
    enc = BloomEncoding(num_bits=64, num_hashes=2, num_cohorts=cohorts)
    return MetricParams(name="places", encoding=enc, mode="asymmetric", level=level, irr_q=irr_q)


def _direct(level: float, size: int = 8) -> MetricParams:
    enc = DirectEncoding(domain=tuple(f"p{i}" for i in range(size)))
    return MetricParams(name="places", encoding=enc, mode="asymmetric", level=level)


def _population(
    params: MetricParams, candidates: list[str], holders: list[int], clients: int, rng: SeededRandom
) -> tuple[BitCounts, np.ndarray]:
    """``holders[i]`` clients hold candidate ``i`` (one item each), the rest nothing; uniform cohorts."""
    items = np.full(clients, -1)
    items[: sum(holders)] = np.repeat(np.arange(len(holders)), holders)
    cohorts = rng.integers(params.num_cohorts, clients)
    bits = true_bits(params, items, cohorts, params.encoding.bit_table(candidates))
    return simulate_counts(params, None, bits, cohorts, rng), np.bincount(
        items[items >= 0], minlength=len(candidates)
    )


def test_symmetric_metric_is_refused() -> None:
    enc = BloomEncoding(num_bits=64, num_hashes=2, num_cohorts=4)
    params = MetricParams(name="s", encoding=enc, mode="symmetric", level=2.0)
    with pytest.raises(ParameterError, match="two-sided") as err:
        certify(BitCounts.zeros(4, 64), params, None, ["a"], threshold=3, alpha=0.0)
    assert err.value.field == "mode"


def test_deterministic_bound_is_the_sum_of_cohort_minima() -> None:
    params = _bloom(3.0)
    rng = SeededRandom(3)
    counts = BitCounts(ones=rng.integers(50, (4, 64)), totals=np.full(4, 60))
    candidates = [f"c{i}" for i in range(40)]
    table = params.encoding.bit_table(candidates)
    expected = [
        sum(min(counts.ones[j, b] for b in table[j, i]) for j in range(4)) for i in range(40)
    ]
    got = one_sided_upper_bounds(counts, params, None, candidates, alpha=0.0)
    assert got.tolist() == expected


def test_alpha_zero_certificates_are_never_wrong_near_the_threshold() -> None:
    # 240 populations whose candidate count straddles t = 20; low noise so that
    # the deterministic bound certifies some. A wrong alpha = 0 certificate is
    # impossible whatever the seed (deterministic argument): no false failure.
    params = _bloom(10.0)
    candidates = ["target", "other-a", "other-b", "other-c"]
    rng = SeededRandom(2024)
    t, wrong, certified_low = 20, 0, 0
    for k in range(240):
        h = t - 6 + k % 10  # 14 .. 23
        counts, truth = _population(params, candidates, [h, 40, 25, 10], 600, rng)
        cert = certify(counts, params, None, candidates, threshold=t, alpha=0.0)[0]
        assert cert.upper_bound >= truth[0]
        wrong += cert.safe and truth[0] > t
        certified_low += cert.safe and truth[0] <= t - 4
    assert wrong == 0
    # Non-trivial: most low-count populations get certified (96 of them; noise ~2 ones).
    assert certified_low >= 48


@pytest.mark.parametrize(
    ("params", "clients", "t", "populations"),
    [(_bloom(2.0, irr_q=0.05), 2000, 30, 240), (_direct(2.0), 2000, 30, 400)],
    ids=["bloom", "direct"],
)
def test_false_safe_rate_at_alpha_005(
    params: MetricParams, clients: int, t: int, populations: int
) -> None:
    # The hardest populations: exactly t + 1 holders. Certified safe = wrong.
    candidates = (
        ["target", "p5", "p6"]
        if isinstance(params.encoding, DirectEncoding)
        else ["target", "x", "y"]
    )
    if isinstance(params.encoding, DirectEncoding):
        params = MetricParams(
            name="places",
            encoding=DirectEncoding(domain=tuple(candidates)),
            mode="asymmetric",
            level=params.level,
        )
    rng = SeededRandom(77)
    false_safe = 0
    for _ in range(populations):
        counts, truth = _population(params, candidates, [t + 1, 60, 30], clients, rng)
        assert truth[0] == t + 1
        false_safe += certify(counts, params, None, candidates, threshold=t, alpha=0.05)[0].safe
    # One-sided binomial test of rate <= 0.05 at level 1e-3: false-failure rate <= 1e-3.
    assert stats.binom.sf(false_safe - 1, populations, 0.05) > 1e-3
    if isinstance(params.encoding, DirectEncoding):
        # One cohort, one bit (K = 1): the exact binomial bound is tight, the rate is ~alpha
        # (>= 0.045 by discreteness). Fewer than 8 of 400 has probability < 1e-3 at rate 0.045.
        assert false_safe >= 8


def test_alpha_bound_is_much_tighter_than_the_deterministic_one() -> None:
    params = _direct(4.0)  # q = e^-2: ~13.5% noise ones
    names = [f"p{i}" for i in range(8)]
    counts, truth = _population(params, names, [0, 25, 200, 0, 0, 0, 0, 0], 10_000, SeededRandom(9))
    det = one_sided_upper_bounds(counts, params, None, ["p0", "p1", "p2"], alpha=0.0)
    loose = one_sided_upper_bounds(counts, params, None, ["p0", "p1", "p2"], alpha=0.05)
    assert np.all(loose <= det)
    assert np.all(det >= 1200)  # the noise floor: 10,000 x 0.135
    # With alpha = 0.05 the floor is subtracted: U - count ~ 1.645 sd (sd = 34) plus the
    # noise deviation; > 238 needs the noise > 5 sd above its mean (rate < 1e-6 per candidate).
    assert np.all(loose <= truth[:3] + 238)


def test_bound_decreases_with_alpha() -> None:
    params = _bloom(2.0, cohorts=8, irr_q=0.02)
    candidates = [f"v{i}" for i in range(30)]
    counts, truth = _population(
        params, candidates, list(range(10, 310, 10)), 20_000, SeededRandom(5)
    )
    previous = one_sided_upper_bounds(counts, params, None, candidates, alpha=0.0)
    for alpha in (1e-6, 1e-3, 0.05, 0.5):
        bound = one_sided_upper_bounds(counts, params, None, candidates, alpha=alpha)
        assert np.all(bound <= previous) and np.all(bound >= 0)
        previous = bound


def _scan_bound(minimum: int, num_reports: int, q: float, level: float) -> int:
    """max{h <= M : P(Bin(N - h, q) <= M - h) > level}, by brute force."""
    passing = [
        h for h in range(minimum + 1) if stats.binom.cdf(minimum - h, num_reports - h, q) > level
    ]
    return max(passing, default=0)


def test_binomial_bound_matches_a_brute_force_scan() -> None:
    params = _direct(3.0, size=6)
    q = math.exp(-1.5)
    rng = SeededRandom(12)
    names = [f"p{i}" for i in range(6)]
    counts, _ = _population(params, names, [0, 3, 10, 30, 60, 100], 400, rng)
    for alpha in (0.01, 0.05, 0.3):
        got = one_sided_upper_bounds(counts, params, None, names, alpha=alpha)
        want = [_scan_bound(int(c), 400, q, alpha) for c in counts.ones[0]]
        assert got.tolist() == want


def test_union_bound_counts_distinct_bits_per_cohort() -> None:
    # Two cohorts; candidate 0 has distinct bits in both (K = 4), candidate 1 repeats a bit in cohort 0 (K = 2).
    counts = BitCounts(ones=[[30, 25, 28, 40], [35, 31, 22, 27]], totals=[100, 100])  # type: ignore[arg-type]
    table = np.array([[[0, 1], [2, 2]], [[2, 3], [0, 1]]])
    q, alpha = 0.2, 0.05
    got = upper_bounds_from_table(counts, q, table, alpha=alpha)
    m0 = min(30, 25) + min(22, 27)
    m1 = 28 + min(35, 31)
    assert got.tolist() == [_scan_bound(m0, 200, q, alpha / 4), _scan_bound(m1, 200, q, alpha / 2)]


def test_trusted_metric_bound_is_the_exact_count() -> None:
    enc = DirectEncoding(domain=("a", "b"))
    params = MetricParams(name="t", encoding=enc, mode="trusted", level=math.inf)
    counts = BitCounts(ones=[[4, 9]], totals=[20])  # type: ignore[arg-type]
    certs = certify(counts, params, None, ["a", "b"], threshold=5, alpha=0.05)
    assert certs == [
        Certificate(candidate="a", upper_bound=4, safe=True),
        Certificate(candidate="b", upper_bound=9, safe=False),
    ]
    assert certs[0].to_dict() == {"candidate": "a", "upper_bound": 4, "safe": True}


def test_no_reports_means_nothing_is_held() -> None:
    params = _bloom(2.0)
    certs = certify(BitCounts.zeros(4, 64), params, None, ["a", "b"], threshold=0, alpha=0.05)
    assert all(c.safe and c.upper_bound == 0 for c in certs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"threshold": -1, "alpha": 0.0}, "threshold"),
        ({"threshold": True, "alpha": 0.0}, "threshold"),
        ({"threshold": 1.5, "alpha": 0.0}, "threshold"),
        ({"threshold": 3, "alpha": 1.0}, "alpha"),
        ({"threshold": 3, "alpha": -0.1}, "alpha"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, object], field: str) -> None:
    params = _bloom(2.0)
    with pytest.raises(ParameterError) as err:
        certify(BitCounts.zeros(4, 64), params, None, ["a"], **kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


def test_counts_of_another_shape_are_refused() -> None:
    with pytest.raises(ParameterError) as err:
        certify(BitCounts.zeros(2, 64), _bloom(2.0), None, ["a"], threshold=1, alpha=0.0)
    assert err.value.field == "counts"
