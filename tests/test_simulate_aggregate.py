"""The aggregate-level simulation (aggregator/research/aggregate.py) against the per-client path and theory.

The per-client path draws every client's bits and memoized noise through the
protocol's functions; the aggregate path draws the cells' counts directly.
At 10^5 clients both run: their cell counts must agree in distribution.
Every statistical check states its false-failure rate; the seeds are fixed,
so each outcome is deterministic (the rates say how unlucky a seed would
have to be).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats
from test_simulate import simulate

from aggregator.research.aggregate import (
    bloom_bit_truth,
    bloom_hit_probabilities,
    count_generator,
    pattern_counts,
    permanent_pattern_probabilities,
    place_holders,
    released_ones,
    report_pattern_probabilities,
)
from aggregator.research.populations import SyntheticCity, cohort_bit_counts, make_population
from aggregator.research.scenarios import run_scenario
from protocol.encodings import BloomEncoding, DirectEncoding
from protocol.errors import ParameterError
from protocol.randomizers import Randomizer
from protocol.rng import SeededRandom

ALPHA = 1e-4  # false-failure rate of each statistical test below


# --------------------------------------------------------------------------
# exact: the pattern probabilities
# --------------------------------------------------------------------------


@pytest.mark.parametrize("randomizer", [
    Randomizer(mode="symmetric", level=1.0),
    Randomizer(mode="symmetric", level=1.0, irr_p=0.25, irr_q=0.75),
    Randomizer(mode="asymmetric", level=1.0),
    Randomizer(mode="asymmetric", level=1.0, irr_q=0.2),
])
def test_pattern_marginals_are_the_one_shot_probabilities(randomizer: Randomizer) -> None:
    levels = (1.0, 2.5)
    p0, p1 = report_pattern_probabilities(randomizer, levels)
    assert p0.sum() == pytest.approx(1.0, abs=1e-15) and p1.sum() == pytest.approx(1.0, abs=1e-15)
    # release i alone is a one-shot collection at levels[i]: P(report 1 | b) = (p*, q*) there
    for i, level in enumerate(levels):
        ones = [y[i] == 1 for y in ((0, 0), (0, 1), (1, 0), (1, 1))]
        expected = randomizer.with_level(level).probabilities()
        assert (p0[ones].sum(), p1[ones].sum()) == pytest.approx(expected, abs=1e-12)
    single = report_pattern_probabilities(randomizer, (1.0,))
    assert single[0][1] == pytest.approx(randomizer.probabilities()[0], abs=1e-15)
    assert single[1][1] == pytest.approx(randomizer.probabilities()[1], abs=1e-15)


def test_asymmetric_chain_closed_form() -> None:
    levels = (0.5, 1.0, 4.0)
    p0, p1 = permanent_pattern_probabilities("asymmetric", levels)
    e = [math.exp(-lv / 2) for lv in levels]
    # patterns in binary order: 000 -> 0, 100 -> 4, 110 -> 6, 111 -> 7; the noise only decreases
    assert p0[0] == pytest.approx(1 - e[0]) and p0[4] == pytest.approx(e[0] - e[1])
    assert p0[6] == pytest.approx(e[1] - e[2]) and p0[7] == pytest.approx(e[2])
    assert p0[[1, 2, 3, 5]].tolist() == [0.0] * 4 and p1.tolist() == [0.0] * 7 + [1.0]
    s0, s1 = permanent_pattern_probabilities("symmetric", (1.0, 2.0))
    assert s1 == pytest.approx(s0[::-1], abs=1e-15)  # P(y | 1) = P(not y | 0)
    with pytest.raises(ParameterError):
        permanent_pattern_probabilities("trusted", (1.0,))


# --------------------------------------------------------------------------
# the round's cell counts: per-client path vs the exact multinomial
# --------------------------------------------------------------------------


def _per_client_round(bits: np.ndarray, cohorts: np.ndarray, cells: int, base: Randomizer, level_to: float,
                      rng: SeededRandom, path: str) -> np.ndarray:
    """Per (cell, true bit): client counts of each (report 1, report 2) pattern, shape (2, cohorts, bits, 4).

    ``path="noise"``: the device's memoized noise, relaxed (``relax_noise``); ``"bits"``: the permanent
    bits relaxed without their noise (``relax_permanent``), the simulations' path.
    """
    relaxed = base.with_level(level_to)
    if path == "noise":
        noise = base.draw_noise(bits.shape, rng)
        r1 = base.report(bits, noise, rng)
        r2 = relaxed.report(bits, base.relax_noise(noise, level_to, rng), rng)
    else:
        permanent = base.sample_permanent(bits, rng)
        r1 = base.sample_instantaneous(permanent, rng)
        r2 = relaxed.sample_instantaneous(base.relax_permanent(bits, permanent, level_to, rng), rng)
    code = 2 * r1.astype(np.int64) + r2
    out = np.zeros((2, cells, bits.shape[1], 4), dtype=np.int64)
    for b in (0, 1):
        for y in range(4):
            out[b, :, :, y] = cohort_bit_counts((code == y) & (bits == b), cohorts, cells)[0]
    return out


def _pearson(observed: np.ndarray, expected: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic and degrees of freedom over groups (last axis: categories) with every E >= 5."""
    obs, exp = observed.reshape(-1, observed.shape[-1]), expected.reshape(-1, expected.shape[-1])
    live = exp.sum(axis=0) > 0  # impossible patterns: checked exactly by the caller
    obs, exp = obs[:, live], exp[:, live]
    keep = (exp >= 5).all(axis=1)
    return float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum()), int(keep.sum()) * (int(live.sum()) - 1)


@pytest.mark.parametrize(("randomizer", "encoding"), [
    (Randomizer(mode="symmetric", level=1.0, irr_p=0.3, irr_q=0.7),
     BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=8)),
    (Randomizer(mode="asymmetric", level=1.0), DirectEncoding(domain=tuple(SyntheticCity(num_places=64).names()))),
])
@pytest.mark.parametrize("path", ["noise", "bits"])
def test_round_counts_per_client_and_aggregate_agree(randomizer: Randomizer, encoding: Any, path: str) -> None:
    city = SyntheticCity(num_places=64)
    rng = SeededRandom(101)
    pop = make_population(city, 100_000, encoding, rng)
    cells = encoding.num_cohorts
    per_client = _per_client_round(pop.bits, pop.cohorts, cells, randomizer, 4.0, rng, path)
    n = per_client.sum(axis=3)  # (2, cohorts, bits): true zeros and ones per cell
    p = report_pattern_probabilities(randomizer, (1.0, 4.0))
    expected = np.stack([n[b][..., None] * p[b] for b in (0, 1)])
    # impossible patterns never happen (asymmetric: a true 1 always reads 1; the noise only decreases)
    assert per_client[expected == 0].sum() == 0
    # 1. per-client counts against the exact multinomials: chi-square goodness of fit, rate ALPHA
    stat, df = _pearson(per_client, expected)
    assert df > 100 and stats.chi2.sf(stat, df) > ALPHA, (stat, df)
    # 2. the aggregate path from the same truth: two-sample homogeneity per group, rate ALPHA
    gen = count_generator(SeededRandom(202))
    aggregate = np.stack([pattern_counts(n[b] * b, n[b], randomizer, (1.0, 4.0), gen) for b in (0, 1)])
    assert (aggregate.sum(axis=3) == n).all() and aggregate[expected == 0].sum() == 0
    pooled = (per_client + aggregate) / 2.0
    stat2, df2 = _pearson(np.concatenate([per_client, aggregate]), np.concatenate([pooled, pooled]))
    assert stats.chi2.sf(stat2, df2 // 2) > ALPHA, (stat2, df2)  # 2 samples: half the groups' df
    # 3. the aggregator's counts (released ones), standardized per cell, one KS for both paths, rate ALPHA
    t, total = n[1], n.sum(axis=0)
    z = []
    for counts in (per_client, aggregate):
        ones2 = counts[..., [1, 3]].sum(axis=(0, 3))
        p_star, q_star = randomizer.with_level(4.0).probabilities()
        mean = t * q_star + (total - t) * p_star
        sd = np.sqrt(t * q_star * (1 - q_star) + (total - t) * p_star * (1 - p_star))
        z.append(((ones2 - mean) / sd).ravel())
    assert stats.ks_2samp(z[0], z[1]).pvalue > ALPHA


def test_released_ones_is_the_aggregators_count() -> None:
    gen = count_generator(SeededRandom(3))
    r = Randomizer(mode="asymmetric", level=2.0)
    truth = np.array([[0, 5, 10]])
    ones = released_ones(truth, 10, r, (2.0, 6.0), gen)
    assert ones.shape == (2, 1, 3)
    assert (ones >= truth).all() and (ones[1] <= ones[0]).all()  # one-sided; the relaxed noise only drops
    assert ones[:, 0, 2].tolist() == [10, 10]
    with pytest.raises(ParameterError):
        released_ones(np.array([11]), 10, r, (2.0,), gen)


# --------------------------------------------------------------------------
# population truth at the count level
# --------------------------------------------------------------------------


def test_size_pmf_is_the_law_of_draw_sets_sizes() -> None:
    city = SyntheticCity(num_places=5000, zipf_exponent=0.01, mean_places=3.0, max_places=6)
    sets = city.draw_sets(100_000, SeededRandom(9))
    # with 5,000 places repeats are rare: distinct sizes ~ draws; the pmf itself is checked exactly
    pmf = city.size_pmf()
    lam = 2.0
    assert pmf[0] == pytest.approx(math.exp(-lam)) and pmf[2] == pytest.approx(math.exp(-lam) * lam**2 / 2)
    assert pmf.sum() == pytest.approx(1.0) and pmf[-1] == pytest.approx(stats.poisson.sf(4, lam))
    sizes = (sets >= 0).sum(axis=1)
    assert abs(sizes.mean() - (np.arange(1, 7) * pmf).sum()) < 0.02


def test_place_holders_have_the_joint_law_of_per_client_sets() -> None:
    """The chain is exact, joint law included: per place and for the total of distinct visits."""
    city = SyntheticCity(num_places=20, zipf_exponent=1.3, mean_places=4.0, max_places=8)
    clients, draws = 500, 400
    rng = SeededRandom(5)
    gen = count_generator(rng)
    per_client = np.stack([make_population(city, clients, DirectEncoding(domain=tuple(city.names())), rng)
                           .true_counts(city.num_places) for _ in range(draws)])
    aggregate = np.stack([place_holders(city, clients, gen) for _ in range(draws)])
    # P(client holds place i) = sum_k P(k) (1 - (1 - p_i)^k): both means within 5 sd (rate 1e-5 over 40)
    pi = (city.size_pmf()[None, :] * -np.expm1(np.arange(1, 9)[None, :] * np.log1p(-city.popularity()[:, None]))).sum(1)
    sd = np.sqrt(clients * pi * (1 - pi) / draws)
    for sample in (per_client, aggregate):
        assert (np.abs(sample.mean(axis=0) - clients * pi) < 5 * sd).all()
    # the joint law: total distinct visits (repeats dropped within a client), KS at rate ALPHA
    assert stats.ks_2samp(per_client.sum(axis=1), aggregate.sum(axis=1)).pvalue > ALPHA
    # and the most popular pair's covariance sign (holders compete for a client's draws): both negative
    for sample in (per_client, aggregate):
        assert np.corrcoef(sample[:, 0], sample[:, 1])[0, 1] < 0


def test_bloom_cells_have_the_per_client_marginals() -> None:
    city = SyntheticCity(num_places=300)
    enc = BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4)
    rng = SeededRandom(8)
    pop = make_population(city, 100_000, enc, rng)
    per_client, totals = cohort_bit_counts(pop.bits, pop.cohorts, enc.num_cohorts)
    ones, agg_totals = bloom_bit_truth(city, 100_000, enc, count_generator(rng))
    assert agg_totals.sum() == 100_000
    hit = bloom_hit_probabilities(city, enc)
    pk = city.size_pmf()
    pi = (pk[None, None, :] * -np.expm1(np.arange(1, pk.size + 1) * np.log1p(-hit[..., None]))).sum(-1)
    z = [((x - t[:, None] * pi) / np.sqrt(t[:, None] * pi * (1 - pi))).ravel()
         for x, t in ((per_client, totals), (ones, agg_totals))]
    # the 128 cells' standardized truths: same law on both paths (KS, rate ALPHA), centred (5 sd, rate 1e-6)
    assert stats.ks_2samp(z[0], z[1]).pvalue > ALPHA
    assert abs(z[0].mean()) < 5 / math.sqrt(z[0].size) and abs(z[1].mean()) < 5 / math.sqrt(z[1].size)


# --------------------------------------------------------------------------
# the scenarios at 10^9 clients, against their closed forms
# --------------------------------------------------------------------------


def test_relaxation_at_a_billion_clients_matches_theory() -> None:
    f = run_scenario("relaxation", clients=10**9, method="aggregate", seed=7)
    assert f["clients"] == 10**9 and f["method"] == "aggregate"
    for c in f["grid"]:
        # 4 x 8,192 squared errors per point, as the small per-client run (sd 0.6-1.7% per cell):
        # 0.9-1.1 is over 5.8 sd, rate below 1e-7 over the 24 checks.
        assert 0.9 <= c["ratio"] <= 1.1 and 0.9 <= c["theory_ratio"] <= 1.1, c
        assert c["composition_ratio"] > c["ratio"]


def test_advantage_and_certificates_at_a_billion_clients() -> None:
    f = run_scenario("asymmetric-advantage", clients=10**9, method="aggregate", seed=7)
    for r in f["rows"]:  # 6,400 squared errors per variance (sd <= 2.5%): 10% is 4 sd, rate < 1e-3 over 10
        assert r["ratio"] == pytest.approx(r["predicted"], rel=0.15)
        for mode in ("symmetric", "asymmetric"):
            assert r[f"{mode}_variance"] == pytest.approx(r[f"{mode}_theory"], rel=0.10)
    g = run_scenario("certificates", clients=10**9, method="aggregate", seed=7)
    assert g["clients"] == 10**9 and g["never_wrong_errors"] == 0
    assert g["by_threshold"][0]["threshold"] == 10**9 // 10_000  # the small setup's 1 of 10,000 clients, scaled


def test_city_at_a_billion_clients_and_the_cli_record(tmp_path: Path) -> None:
    code, text = simulate(tmp_path, "city", "--clients", "1e9", "--method", "aggregate", "--json", "--seed", "7")
    assert code == 0
    doc = json.loads(text)
    assert (doc["clients"], doc["method"], doc["engine"]) == (10**9, "aggregate", "local")
    assert doc["seconds"] > 0 and doc["peak_rss_mib"] > 0 and doc["peak_traced_mib"] > 0
    assert Path(doc["plot"]).read_bytes()[:4] == b"\x89PNG"
    f = doc["figures"]
    assert sum(f["truth"]) == f["visits"] and f["willing"] < f["clients"]
    # 2,000 squared errors per MSE (relative sd ~3% with these unequal variances): 15% is 5 sd
    assert f["round0"]["ratio"] == pytest.approx(1.0, abs=0.15)
    assert f["round"]["ratio"] == pytest.approx(1.0, abs=0.15)
    assert f["certificates"]["alpha0"]["false_safe"] == 0
    assert f["certificates"]["threshold"] == 2_500_000  # the demo's 50 of 20,000, scaled


def test_same_seed_same_counts_and_bad_arguments() -> None:
    a = run_scenario("city", clients=10**6, method="aggregate", seed=1)
    assert run_scenario("city", clients=10**6, method="aggregate", seed=1) == a
    assert run_scenario("city", clients=10**6, method="aggregate", seed=2)["truth"] != a["truth"]
    for kwargs, field in (({"method": "exact"}, "method"), ({"clients": 0}, "clients")):
        with pytest.raises(ParameterError) as err:
            run_scenario("city", **kwargs)
        assert err.value.field == field
    with pytest.raises(ParameterError) as err:
        run_scenario("collusion", method="aggregate")
    assert err.value.field == "method"
    with pytest.raises(ParameterError) as err:
        run_scenario("relaxation", method="aggregate", engine=object())
    assert err.value.field == "engine"
