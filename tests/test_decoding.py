"""Decoding: bit counts, unbiased bit estimates, candidate fits, detections.

Statistical tests use fixed seeds; each states its false-failure rate (the
probability that a correct implementation fails it, for a fresh seed).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from aggregator.analysis.decoding import (
    BitCounts,
    bit_estimates,
    detect,
    direct_estimates,
    fit_bit_table,
    fit_candidates,
    one_sided_p_values,
)
from aggregator.analysis.decoding.simulation import balanced_cohorts, simulate_counts, true_bits
from protocol import (
    BloomEncoding,
    DirectEncoding,
    MetricParams,
    Randomizer,
    SeededRandom,
    bit_epsilon,
    laplace_rate_from_f,
)
from protocol.errors import ParameterError

RANDOMIZERS = [
    Randomizer(mode="symmetric", level=laplace_rate_from_f(0.5), irr_p=0.25, irr_q=0.75),
    Randomizer(mode="symmetric", level=1.5),
    Randomizer(mode="asymmetric", level=2.0, irr_q=0.1),
]


def _bloom(mode: str, level: float, **kw: float) -> MetricParams:
    enc = BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4)
    return MetricParams(name="m", encoding=enc, mode=mode, level=level, **kw)  # type: ignore[arg-type]


def _direct(size: int, mode: str, level: float, **kw: float) -> MetricParams:
    enc = DirectEncoding(domain=tuple(f"item{i}" for i in range(size)))
    return MetricParams(name="d", encoding=enc, mode=mode, level=level, **kw)  # type: ignore[arg-type]


# --- BitCounts ------------------------------------------------------------


def test_from_reports_matches_a_plain_loop() -> None:
    rng = SeededRandom(1)
    reports = rng.uniform((40_000, 24)) < 0.3
    cohorts = rng.integers(5, 40_000)
    counts = BitCounts.from_reports(reports, cohorts, 5)
    for j in range(5):
        assert np.array_equal(counts.ones[j], reports[cohorts == j].sum(axis=0))
        assert counts.totals[j] == np.sum(cohorts == j)
    assert counts.num_reports == 40_000


def test_from_rows_and_addition() -> None:
    counts = BitCounts.from_rows(
        num_cohorts=2,
        num_bits=3,
        cohort=[0, 1, 1, 0],
        bit=[2, 0, 0, 1],
        ones=[4, 1, 2, 5],
        report_totals=[9, 3],
    )
    assert counts.ones.tolist() == [[0, 5, 4], [3, 0, 0]]
    total = counts + counts
    assert total.ones.tolist() == [[0, 10, 8], [6, 0, 0]] and total.totals.tolist() == [18, 6]
    with pytest.raises(ParameterError) as err:
        counts + BitCounts.zeros(2, 4)
    assert err.value.field == "counts"


@pytest.mark.parametrize(
    ("ones", "totals", "field"),
    [
        ([[1, 2]], [1], "ones"),  # more ones than reports
        ([[1, -2]], [3], "ones"),
        ([1, 2], [3], "ones"),  # not 2-D
        ([[1, 2]], [3, 4], "totals"),
        ([[1.5, 2]], [3], "ones"),
        ([[True, False]], [3], "ones"),
        (np.zeros((0, 3)), np.zeros(0), "ones"),
    ],
)
def test_bit_counts_validation_names_the_field(ones: object, totals: object, field: str) -> None:
    with pytest.raises(ParameterError) as err:
        BitCounts(ones=ones, totals=totals)  # type: ignore[arg-type]
    assert err.value.field == field


def test_bit_counts_are_read_only() -> None:
    counts = BitCounts(ones=[[1, 2]], totals=[3])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="read-only"):
        counts.ones[0, 0] = 0


# --- bit estimates ---------------------------------------------------------


@pytest.mark.parametrize("randomizer", RANDOMIZERS, ids=["sym-irr", "sym", "asym-irr"])
def test_bit_estimates_unbiased_with_honest_variances(randomizer: Randomizer) -> None:
    rng = SeededRandom(11)
    clients, bits, cohorts_n, reps = 2000, 32, 2, 250
    truth = rng.uniform((clients, bits)) < np.linspace(0.0, 0.5, bits)  # fixed population
    cohorts = np.arange(clients) % cohorts_n
    true_counts = np.stack([truth[cohorts == j].sum(axis=0) for j in range(cohorts_n)])
    errors, variances = [], []
    for _ in range(reps):
        counts = BitCounts.from_reports(randomizer.simulate(truth, rng), cohorts, cohorts_n)
        est, var = bit_estimates(counts, randomizer)
        errors.append(est - true_counts)
        variances.append(var)
    err, var = np.array(errors), np.array(variances)
    sd = err.std(axis=0, ddof=1)
    # Pooled bias over the 64 (cohort, bit) cells: |z| <= 3 fails w.p. 0.27%.
    pooled_z = (err / sd).mean() * math.sqrt(err.size)
    assert abs(pooled_z) <= 3.0
    # Per cell within 4.5 SE: family false-failure < 64 * 6.8e-6 = 4.4e-4.
    assert np.all(np.abs(err.mean(axis=0)) <= 4.5 * sd / math.sqrt(reps))
    # Reported SE vs empirical spread within 10%; the pooled variance ratio has
    # relative sd ~ sqrt(2/16000) = 1.1%, so a 10% miss is > 8 sigma (rate < 1e-15).
    ratio = math.sqrt(var.mean() / (err.var(axis=0, ddof=1)).mean())
    assert 0.9 <= ratio <= 1.1
    # 95% intervals cover at 95% +- 2% (16,000 intervals, sd 0.17%: > 10 sigma).
    coverage = np.mean(np.abs(err) <= 1.959964 * np.sqrt(var))
    assert 0.93 <= coverage <= 0.97


def test_bit_estimates_closed_form_on_a_tiny_case() -> None:
    r = Randomizer(mode="asymmetric", level=2 * math.log(2))  # q = 1/2
    counts = BitCounts(ones=[[60, 30]], totals=[100])  # type: ignore[arg-type]
    est, var = bit_estimates(counts, r)
    # t = (c - N/2) / (1/2); Var = (N - t) * (1/2)(1/2) / (1/2)^2 with t clamped to [0, N].
    assert est.tolist() == [[20.0, -40.0]]
    assert var.tolist() == [[80.0, 100.0]]


def test_trusted_mode_estimates_are_exact() -> None:
    counts = BitCounts(ones=[[3, 0, 7]], totals=[9])  # type: ignore[arg-type]
    est, var = bit_estimates(counts, Randomizer(mode="trusted", level=math.inf))
    assert est.tolist() == [[3.0, 0.0, 7.0]] and not var.any()


# --- the asymmetric advantage -------------------------------------------


@pytest.mark.parametrize("eps", [0.5, 1.0])
def test_asymmetric_rare_item_variance_is_one_minus_exp_minus_eps_of_symmetric(eps: float) -> None:
    size, clients, holders, reps = 64, 2000, 10, 80
    symmetric = _direct(size, "symmetric", laplace_rate_from_f(2.0 / (1.0 + math.exp(eps))))
    asymmetric = _direct(size, "asymmetric", 2.0 * eps)
    assert bit_epsilon("symmetric", symmetric.level) == pytest.approx(eps)
    assert bit_epsilon("asymmetric", asymmetric.level) == pytest.approx(eps)
    truth = np.zeros((clients, size), dtype=bool)
    truth[:holders, :] = True  # every item rare: 0.5% of the clients
    cohorts = np.zeros(clients, dtype=np.int64)
    rng = SeededRandom(int(eps * 1000))
    measured = {}
    for params in (symmetric, asymmetric):
        errs = [
            direct_estimates(
                simulate_counts(params, None, truth, cohorts, rng), params, None
            ).estimates
            - holders
            for _ in range(reps)
        ]
        measured[params.mode] = np.var(np.array(errs), ddof=1)
    ratio = measured["asymmetric"] / measured["symmetric"]
    # Each variance pools 5,120 estimates (relative sd 2%), the ratio ~2.8%:
    # a 10% miss is > 3.5 sigma, false-failure rate < 5e-4.
    assert ratio == pytest.approx(1.0 - math.exp(-eps), rel=0.10)


# --- candidate fits ----------------------------------------------------------


def _bloom_population(
    params: MetricParams, sizes: list[int], absent: int
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Candidates (present first), per-client item, balanced cohorts."""
    candidates = [f"value-{i}" for i in range(len(sizes) + absent)]
    items = np.concatenate([np.full(n, i) for i, n in enumerate(sizes)] + [np.full(2000, -1)])
    return candidates, items, balanced_cohorts(items, params.num_cohorts)


@pytest.mark.parametrize(
    "params",
    [
        _bloom("asymmetric", 2.0, irr_q=0.05),
        _bloom("symmetric", laplace_rate_from_f(0.3), irr_p=0.2, irr_q=0.8),
    ],
    ids=["asym", "sym"],
)
def test_ols_fit_is_unbiased_with_honest_errors_and_coverage(params: MetricParams) -> None:
    sizes = [1200, 1000, 800, 800, 600, 600, 400, 400, 400, 200, 200, 200]
    candidates, items, _ = _bloom_population(params, sizes, absent=12)
    table = params.encoding.bit_table(candidates)
    truth = np.array(sizes + [0] * 12, dtype=float)
    rng = SeededRandom(23)
    reps = 120
    fits = []
    for _ in range(reps):
        # Fixed population; each repetition draws the cohorts (uniform, as clients do) and the noise.
        cohorts = rng.integers(params.num_cohorts, items.size)
        bits = true_bits(params, items, cohorts, table)
        fits.append(
            fit_candidates(
                simulate_counts(params, None, bits, cohorts, rng), params, None, candidates
            )
        )
    assert {f.method for f in fits} == {"ols"}
    err = np.array([f.estimates for f in fits]) - truth
    se = np.array([f.std_errors for f in fits])
    sd = err.std(axis=0, ddof=1)
    # Pooled bias over 24 candidates: |z| <= 3 fails w.p. 0.27%; per candidate 4.5 SE: 24 * 6.8e-6.
    assert abs((err / sd).mean() * math.sqrt(err.size)) <= 3.0
    assert np.all(np.abs(err.mean(axis=0)) <= 4.5 * sd / math.sqrt(reps))
    # SE within 10% of the spread: pooled variance ratio from 2,880 errors has
    # relative sd 2.6%; a 10% SE miss (19% in variance) is > 7 sigma.
    assert 0.9 <= math.sqrt((se**2).mean() / (sd**2).mean()) <= 1.1
    # 95% intervals: 2,880 of them, sd 0.4%; +-2.5% is > 6 sigma.
    fit_lower = np.array([f.lower for f in fits])
    fit_upper = np.array([f.upper for f in fits])
    coverage = np.mean((fit_lower <= truth) & (truth <= fit_upper))
    assert 0.925 <= coverage <= 0.975
    # Bonferroni at 5% over 24 candidates: reps with a false detection among the 12 absent.
    false_reps = sum(bool(f.detected[12:].any()) for f in fits)
    # One-sided binomial test against 0.05 at level 1e-3: fails (falsely) w.p. <= 1e-3.
    from scipy import stats

    assert stats.binom.sf(false_reps - 1, reps, 0.05) > 1e-3
    # ... and the largest items are found (power; each has z > 9, miss rate < 1e-15).
    assert all(f.detected[:3].all() for f in fits)


def test_lasso_regime_finds_the_present_candidates() -> None:
    params = _bloom("asymmetric", 3.0)
    sizes = [3000, 2500, 2000, 2000, 1500, 1500, 1200, 1000]
    candidates, items, _ = _bloom_population(params, sizes, absent=292)
    rng = SeededRandom(5)
    cohorts = rng.integers(params.num_cohorts, items.size)  # uniform cohorts, not balanced
    bits = true_bits(params, items, cohorts, params.encoding.bit_table(candidates))
    counts = simulate_counts(params, None, bits, cohorts, rng)
    fit = fit_candidates(counts, params, None, candidates)
    assert fit.method == "lasso"  # 300 candidates > 0.8 x 128 rows
    # Every present item is selected and detected (z > 8: miss rate < 1e-15 each).
    assert fit.detected[: len(sizes)].all()
    # Post-selection, so no exact rate; over 100 seeds of this setting the largest |z| of the
    # 8 present items was 3.4 and 4 runs had one false detection, none had two: we allow
    # |z| <= 4.5 and at most one false detection (estimated false-failure rate < 1%).
    z = (fit.estimates[: len(sizes)] - np.array(sizes)) / fit.std_errors[: len(sizes)]
    assert np.all(np.abs(z) <= 4.5)
    assert fit.detected[len(sizes) :].sum() <= 1
    assert fit.selected.sum() <= int(0.8 * 128)


def test_nnls_method_and_forced_ols() -> None:
    params = _bloom("asymmetric", 3.0)
    candidates, items, cohorts = _bloom_population(params, [3000, 2000, 1000], absent=20)
    bits = true_bits(params, items, cohorts, params.encoding.bit_table(candidates))
    counts = simulate_counts(params, None, bits, cohorts, SeededRandom(3))
    nnls = fit_candidates(counts, params, None, candidates, method="nnls")
    ols = fit_candidates(counts, params, None, candidates, method="ols")
    assert nnls.method == "nnls" and ols.method == "ols"
    assert nnls.selected[:3].all() and ols.selected.all()
    # Unselected candidates: estimate 0, no standard error, p-value 1.
    out = ~nnls.selected
    assert out.any()  # about half the 20 absent candidates get a zero NNLS coefficient
    assert np.all(nnls.estimates[out] == 0.0) and np.isnan(nnls.std_errors[out]).all()
    assert np.all(nnls.p_values[out] == 1.0)
    # Both recover the three present counts (z > 15 each): within 4.5 SE (false failure < 6 * 6.8e-6).
    for fit in (nnls, ols):
        assert np.all(np.abs(fit.estimates[:3] - [3000, 2000, 1000]) <= 4.5 * fit.std_errors[:3])
    many = [f"x{i}" for i in range(200)]  # more candidates than rows: OLS cannot identify them
    with pytest.raises(ParameterError) as err:
        fit_candidates(counts, params, None, many, method="ols")
    assert err.value.field == "candidates"


def test_fit_is_deterministic() -> None:
    params = _bloom("symmetric", 2.0, irr_p=0.3, irr_q=0.7)
    candidates, items, cohorts = _bloom_population(params, [2000, 1500, 800], absent=200)
    bits = true_bits(params, items, cohorts, params.encoding.bit_table(candidates))
    counts = simulate_counts(params, None, bits, cohorts, SeededRandom(8))
    one = fit_candidates(counts, params, None, candidates)
    two = fit_candidates(
        BitCounts(ones=counts.ones.copy(), totals=counts.totals.copy()), params, None, candidates
    )
    for name in ("estimates", "std_errors", "p_values", "detected", "selected"):
        assert np.array_equal(getattr(one, name), getattr(two, name), equal_nan=True)


def test_round_level_is_an_argument() -> None:
    params = _direct(16, "asymmetric", 1.0)
    truth = np.zeros((4000, 16), dtype=bool)
    truth[:400, :] = True
    cohorts = np.zeros(4000, dtype=np.int64)
    counts = simulate_counts(params, 3.0, truth, cohorts, SeededRandom(4))  # a round relaxed 1 -> 3
    names = [f"item{i}" for i in range(16)]
    right = fit_candidates(counts, params, 3.0, names)
    wrong = fit_candidates(counts, params, None, names)
    # With the round's level: 16 z-scores, all within 4.5 (false failure < 16 * 6.8e-6).
    assert np.all(np.abs((right.estimates - 400) / right.std_errors) <= 4.5)
    # Decoding at the initial level subtracts too much noise: every estimate far too low.
    assert np.all(wrong.estimates < 400 - 10 * right.std_errors)


def test_direct_estimates_are_the_bit_estimates() -> None:
    params = _direct(5, "symmetric", 2.0, irr_p=0.1, irr_q=0.9)
    counts = BitCounts(ones=[[500, 300, 100, 250, 900]], totals=[1000])  # type: ignore[arg-type]
    fit = direct_estimates(counts, params, None, ["item4", "item0"])
    est, var = bit_estimates(counts, params.randomizer())
    assert fit.candidates == ("item4", "item0")
    assert np.array_equal(fit.estimates, est[0, [4, 0]])
    assert np.array_equal(fit.std_errors, np.sqrt(var[0, [4, 0]]))
    assert np.allclose(fit.upper - fit.estimates, 1.959964 * fit.std_errors)
    via_fit = fit_candidates(counts, params, None, ["item4", "item0"])
    assert via_fit.method == "direct" and np.array_equal(via_fit.estimates, fit.estimates)
    with pytest.raises(ParameterError) as err:
        direct_estimates(counts, params, None, ["nope"])
    assert err.value.field == "value"


def test_trusted_fit_recovers_exact_counts() -> None:
    enc = BloomEncoding(num_bits=64, num_hashes=2, num_cohorts=2)
    params = MetricParams(name="t", encoding=enc, mode="trusted", level=math.inf)
    candidates = ["a", "b", "c", "d"]
    items = np.repeat([0, 1, 2, -1], [30, 20, 10, 40])
    cohorts = balanced_cohorts(items, 2)
    counts = simulate_counts(
        params,
        None,
        true_bits(params, items, cohorts, enc.bit_table(candidates)),
        cohorts,
        SeededRandom(1),
    )
    fit = fit_candidates(counts, params, None, candidates)
    assert np.allclose(fit.estimates, [30, 20, 10, 0], atol=1e-6)
    assert fit.detected.tolist() == [True, True, True, False]


# --- multiple testing ---------------------------------------------------------


def _bh_by_definition(p: np.ndarray, alpha: float) -> np.ndarray:
    m = p.size
    order = np.argsort(p)
    k = 0
    for i in range(1, m + 1):
        if p[order[i - 1]] <= i * alpha / m:
            k = i
    out = np.zeros(m, dtype=bool)
    out[order[:k]] = True
    return out


@pytest.mark.parametrize("seed", range(20))
def test_bh_matches_its_definition(seed: int) -> None:
    rng = SeededRandom(seed)
    p = np.concatenate([rng.uniform(30) * 0.01, rng.uniform(70)])
    assert np.array_equal(detect(p, 0.1, "bh"), _bh_by_definition(p, 0.1))
    assert np.array_equal(detect(p, 0.1, "bonferroni"), p <= 0.1 / p.size)


def test_bh_step_up_example() -> None:
    # m = 5, alpha = 0.05: thresholds 0.01, 0.02, 0.03, 0.04, 0.05; the 4th p (0.039) passes,
    # so the step-up rejects the four smallest although the 3rd (0.031) misses its own.
    p = np.array([0.039, 0.001, 0.031, 0.2, 0.012])
    assert detect(p, 0.05, "bh").tolist() == [True, True, True, False, True]
    assert detect(p, 0.05, "bonferroni").tolist() == [False, True, False, False, False]


def test_p_values() -> None:
    p = one_sided_p_values(
        np.array([1.959964, 0.0, 3.0, 1.0, -1.0]), np.array([1.0, 1.0, np.nan, 0.0, 0.0])
    )
    assert p[0] == pytest.approx(0.025, abs=1e-6) and p[1] == 0.5
    assert p[2:].tolist() == [1.0, 0.0, 1.0]


# --- errors and output ----------------------------------------------------------


def test_errors_name_the_field() -> None:
    params = _bloom("asymmetric", 2.0)
    counts = BitCounts(ones=np.ones((4, 32), np.int64), totals=np.full(4, 10))
    cases = [
        (lambda: fit_candidates(BitCounts.zeros(3, 32), params, None, ["a"]), "counts"),
        (lambda: fit_candidates(BitCounts.zeros(4, 32), params, None, ["a"]), "counts"),
        (lambda: fit_candidates(counts, params, None, ["a", "a"]), "candidates"),
        (lambda: fit_candidates(counts, params, None, []), "candidates"),
        (lambda: fit_candidates(counts, params, None, "abc"), "candidates"),
        (lambda: fit_candidates(counts, params, None, ["a"], alpha=0.0), "alpha"),
        (lambda: fit_candidates(counts, params, None, ["a"], correction="holm"), "correction"),
        (lambda: fit_candidates(counts, params, None, ["a"], confidence=1.0), "confidence"),
        (lambda: fit_candidates(counts, params, None, ["a"], method="ridge"), "method"),
        (lambda: fit_candidates(counts, params, -1.0, ["a"]), "level"),
        (lambda: direct_estimates(counts, params, None), "encoding"),
        (
            lambda: fit_bit_table(counts, (0.5, 0.5), np.zeros((4, 1, 2), np.int64), ["a"]),
            "probabilities",
        ),
        (
            lambda: fit_bit_table(counts, (0.1, 0.9), np.zeros((4, 2, 2), np.int64), ["a"]),
            "bit_table",
        ),
        (lambda: fit_bit_table(counts, (0.1, 0.9), np.full((4, 1, 2), 32), ["a"]), "bit_table"),
    ]
    for call, field in cases:
        with pytest.raises(ParameterError) as err:
            call()
        assert err.value.field == field, field


def test_rows_are_json_ready() -> None:
    params = _bloom("asymmetric", 3.0)
    candidates, items, cohorts = _bloom_population(params, [3000, 1000], absent=150)
    bits = true_bits(params, items, cohorts, params.encoding.bit_table(candidates))
    fit = fit_candidates(
        simulate_counts(params, None, bits, cohorts, SeededRandom(2)), params, None, candidates
    )
    text = json.dumps(fit.to_dict(), allow_nan=False)
    rows = json.loads(text)["candidates"]
    assert len(rows) == len(candidates) and rows[0]["candidate"] == "value-0"
    assert [r["estimate"] for r in rows] == sorted((r["estimate"] for r in rows), reverse=True)
    assert {r["candidate"] for r in fit.rows(detected_only=True)} == {
        c for c, d in zip(candidates, fit.detected, strict=True) if d
    }
