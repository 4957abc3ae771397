"""Association of two variables through one pair metric (docs/decoding.md 9): unit, API and CLI round trips."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
from aggsupport import bearer, current_window, database_url, live_server, post_reports

from aggregator.analysis.association import (
    em_bit_counts,
    em_bit_counts_run,
    em_reports,
    em_reports_fit,
    estimate_joint,
    log_likelihoods,
    pair_domain,
    pair_value,
    project_simplex,
)
from aggregator.analysis.decoding import BitCounts
from aggregator.cli.main import main
from protocol.encodings import BloomEncoding, DirectEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.rng import SeededRandom
from protocol.wire import build_report

A, B = ("android", "ios"), ("de", "fr", "jp")
JOINT = np.array([[0.30, 0.15, 0.05], [0.10, 0.10, 0.30]])


def _pairs(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    cells = rng.choice(JOINT.size, size=n, p=JOINT.ravel())
    return [pair_value(A[c // len(B)], B[c % len(B)]) for c in cells]


def _counts(params: MetricParams, values: list[str], seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = SeededRandom(seed)
    cohorts = rng.integers(params.num_cohorts, (len(values),))
    bits = np.stack([params.encode(v, int(c)) for v, c in zip(values, cohorts, strict=True)])
    return params.randomizer().simulate(bits, rng), cohorts


def _direct(level: float = 6.0) -> MetricParams:
    return MetricParams(name="os-country", encoding=DirectEncoding(domain=pair_domain(A, B)), mode="symmetric",
                        level=level, value_kind="categorical", min_batch_size=10)


def test_pair_value_and_domain() -> None:
    assert pair_value("a", "b") == "a\x1fb"
    assert pair_domain(["a"], ["x", "y"]) == ("a\x1fx", "a\x1fy")
    for args, field in ((("a\x1f", "b"), "value_a"), (("a", "b\x1f"), "value_b")):
        with pytest.raises(ParameterError) as err:
            pair_value(*args)
        assert err.value.field == field
    with pytest.raises(ParameterError) as err:
        pair_domain(["a", "a"], ["x"])
    assert err.value.field == "values_a"
    assert project_simplex([0.7, 0.5, -0.2]).round(6).tolist() == [0.6, 0.4, 0.0]


@pytest.mark.parametrize("method", ["projection", "em"])
@pytest.mark.parametrize("encoding", ["direct", "bloom"])
def test_estimate_joint_recovers_a_known_joint(method: str, encoding: str) -> None:
    # 20,000 clients, per-report epsilon 2 x 2.9 (symmetric categorical). Each cell's share has a
    # standard error <= 0.006 (direct) / 0.01 (Bloom, collisions); TV <= 0.05 is > 5 standard errors
    # of the sum's noise away (false-failure rate < 1e-6 by a normal bound). Fixed seed.
    params = _direct() if encoding == "direct" else MetricParams(
        name="pair", encoding=BloomEncoding(num_bits=64, num_hashes=1, num_cohorts=8), mode="symmetric",
        level=6.0, value_kind="categorical")
    reports, cohorts = _counts(params, _pairs(20_000, seed=1), seed=2)
    fit = estimate_joint(BitCounts.from_reports(reports, cohorts, params.num_cohorts), params, None, A, B,
                         method=method)
    assert fit.joint.shape == (2, 3) and fit.joint.sum() == pytest.approx(1.0)
    assert 0.5 * np.abs(fit.joint - JOINT).sum() < 0.05
    assert np.all(np.isfinite(fit.std_errors)) and np.all(fit.std_errors > 0)
    # unbiased cells: within 4.5 standard errors of the truth (+ the draw's own noise, < 1%)
    assert np.all(np.abs(fit.estimates / 20_000 - JOINT) < 4.5 * fit.std_errors / 20_000 + 0.01)


def test_em_bit_counts_is_exact_without_noise_in_the_limit() -> None:
    # Trusted-like probabilities (p* = 0, q* = 1) on exact counts: the EM returns the truth.
    counts = BitCounts(ones=np.array([[600, 300, 100]]), totals=np.array([1000]))
    pi = em_bit_counts(counts, (0.0, 1.0), np.arange(3)[None, :, None], tolerance=1e-12)
    assert pi == pytest.approx([0.6, 0.3, 0.1], abs=1e-6)


def test_per_report_em_recovers_a_known_joint() -> None:
    # RAPPOR's design: two direct filters per report, level 8 each. 5,000 reports; TV < 0.05 is
    # > 5 standard errors away. Fixed seed.
    rng = np.random.default_rng(3)
    cells = rng.choice(JOINT.size, size=5000, p=JOINT.ravel())
    logs = []
    for size, value in ((2, cells // 3), (3, cells % 3)):
        params = MetricParams(name="v", encoding=DirectEncoding(domain=tuple(map(str, range(size)))),
                              mode="symmetric", level=8.0, value_kind="categorical")
        truth = np.zeros((5000, size), dtype=bool)
        truth[np.arange(5000), value] = True
        reports = params.randomizer().simulate(truth, SeededRandom(size))
        logs.append(log_likelihoods(reports, np.zeros(5000, dtype=np.int64), np.arange(size)[None, :, None],
                                    params.randomizer().probabilities()))
    joint, std_errors = em_reports(logs[0], logs[1])
    assert 0.5 * np.abs(joint - JOINT).sum() < 0.05
    assert np.all(std_errors > 0) and np.all(std_errors < 0.02)


# ---------------------------------------------------------------------------
# over HTTP and the CLI
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    folder: Path = tmp_path_factory.mktemp("association")
    with database_url("sqlite", folder) as url, live_server(url, folder) as srv:
        params = _direct()
        assert srv.register(params, srv.admin_token()).status_code == 201
        reports, cohorts = _counts(params, _pairs(2000, seed=4), seed=5)
        rng = SeededRandom(6)
        window = current_window(params)
        envelopes = [build_report(params_digest=params.digest(), metric=params.name, round=0, window=window,
                                  cohort=int(c), level=params.level, bits=r, seal_public=srv.keys.seal_public_raw,
                                  report_id=None, ephemeral_private=bytes(rng.integers(256, (32,)).astype(np.uint8)))
                     for r, c in zip(reports, cohorts, strict=True)]
        assert post_reports(srv.url, envelopes).status_code == 200
        yield srv.url, srv.analyst_token()


def test_association_over_http_and_cli(server: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    url, token = server
    answer = requests.get(f"{url}/v1/metrics/os-country/association",
                          params={"values_a": ",".join(A), "values_b": ",".join(B)}, headers=bearer(token), timeout=60)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["reason"] is None and body["reports"] == 2000
    cells = {(c["a"], c["b"]): c for c in body["joint"]["cells"]}
    joint = np.array([[cells[a, b]["share"] for b in B] for a in A])
    # 2,000 clients, per-cell share standard error ~0.012: TV < 0.1 is > 5 standard errors away.
    assert 0.5 * np.abs(joint - JOINT).sum() < 0.1
    posted = requests.post(f"{url}/v1/metrics/os-country/association", headers=bearer(token), timeout=60,
                           json={"values_a": list(A), "values_b": list(B), "method": "em"})
    assert posted.status_code == 200 and posted.json()["joint"]["method"] == "em"
    em = posted.json()["joint"]["em"]
    assert em["converged"] is True and 0 < em["gap"] <= 1e-3 and em["iterations"] >= 1
    assert body["joint"]["em"] is None  # the projection has no iterations
    assert main(["association", "--server", url, "--token", token, "os-country", "--values-a", ",".join(A),
                 "--values-b", ",".join(B), "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "a,b,share,estimate,std_error" and len(lines) == 1 + len(A) * len(B)
    assert main(["association", "--server", url, "--token", token, "os-country", "--values-a", "ios",
                 "--values-b", "de", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["joint"]["values_a"] == ["ios"]


@pytest.mark.parametrize(("query", "field"), [
    ({"values_b": "de"}, "values_a"),
    ({"values_a": "ios"}, "values_b"),
    ({"values_a": "ios", "values_b": "de", "method": "mle"}, "method"),
    ({"values_a": "ios", "values_b": "xx"}, "candidates"),
    ({"values_a": "ios", "values_b": "de", "round": "x"}, "round"),
    ({"values_a": "ios", "values_b": "de", "bogus": "1"}, "bogus"),
])
def test_bad_association_requests_answer_400_naming_the_field(server: tuple[str, str], query: dict[str, str],
                                                             field: str) -> None:
    url, token = server
    answer = requests.get(f"{url}/v1/metrics/os-country/association", params=query, headers=bearer(token),
                          timeout=30)
    assert answer.status_code == 400, answer.text
    assert answer.json()["field"] == field


# ---------------------------------------------------------------------------
# EM convergence: a certified stopping rule (the duality gap of a concave log-likelihood)
# ---------------------------------------------------------------------------


def _composite_loglik(counts: BitCounts, probabilities: tuple[float, float], pi: np.ndarray) -> float:
    """The composite log-likelihood of a direct one-cohort design (bit i is cell i), written out."""
    p_star, q_star = probabilities
    theta = p_star + (q_star - p_star) * pi
    ones, n = counts.ones[0].astype(float), float(counts.totals[0])
    return float(ones @ np.log(theta) + (n - ones) @ np.log1p(-theta))


def _small_direct_problem() -> tuple[BitCounts, tuple[float, float], np.ndarray]:
    params = _direct(level=3.0)  # p* 0.11, q* 0.89: the plain EM takes 360 steps to a 1e-4 gap here, SQUAREM 24
    reports, cohorts = _counts(params, _pairs(20_000, seed=11), seed=12)
    table = np.arange(JOINT.size)[None, :, None]
    return BitCounts.from_reports(reports, cohorts, 1), params.randomizer().probabilities(), table


def test_em_bit_counts_stops_at_the_maximum_it_certifies() -> None:
    from scipy import optimize

    counts, probs, table = _small_direct_problem()
    run = em_bit_counts_run(counts, probs, table, tolerance=1e-4)
    assert run.converged and run.gap <= 1e-4 and run.iterations < 2000
    # An independent maximizer of the same concave function (SLSQP on 6 shares): same point.
    scale = 1.0 / counts.num_reports
    best = optimize.minimize(lambda p: -scale * _composite_loglik(counts, probs, p), np.full(6, 1 / 6),
                             method="SLSQP", bounds=[(1e-12, 1.0)] * 6,
                             constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1.0}],
                             options={"ftol": 1e-14, "maxiter": 500})
    assert best.success
    assert _composite_loglik(counts, probs, run.shares) >= _composite_loglik(counts, probs, best.x) - 1e-4
    assert 0.5 * np.abs(run.shares - best.x).sum() < 1e-3
    # The plain EM (no extrapolation) reaches the same point, in more steps.
    plain = em_bit_counts_run(counts, probs, table, tolerance=1e-4, accelerate=False, newton=False,
                              max_iterations=200_000)
    assert plain.converged and plain.iterations > run.iterations
    assert 0.5 * np.abs(plain.shares - run.shares).sum() < 1e-3


def test_the_gap_bounds_the_distance_to_the_maximum_and_a_capped_em_says_it_did_not_converge() -> None:
    counts, probs, table = _small_direct_problem()
    top = _composite_loglik(counts, probs, em_bit_counts_run(counts, probs, table, tolerance=1e-6).shares)
    for steps in (1, 5, 20, 100):
        early = em_bit_counts_run(counts, probs, table, max_iterations=steps, accelerate=False, newton=False)
        assert early.iterations == steps and not early.converged and early.gap > 1e-3
        below = top - _composite_loglik(counts, probs, early.shares)
        assert 0.0 <= below <= early.gap + 1e-6  # the certificate holds at every iterate
    for kwargs, field in (({"max_iterations": 0}, "max_iterations"), ({"tolerance": 0.0}, "tolerance")):
        with pytest.raises(ParameterError) as err:
            em_bit_counts_run(counts, probs, table, **kwargs)
        assert err.value.field == field


def test_per_report_em_reports_its_convergence() -> None:
    rng = np.random.default_rng(13)
    cells = rng.choice(JOINT.size, size=3000, p=JOINT.ravel())
    p_star, q_star = 0.25, 0.75
    logs = []
    for size, value in ((2, cells // 3), (3, cells % 3)):
        truth = np.zeros((3000, size), dtype=bool)
        truth[np.arange(3000), value] = True
        reports = rng.random((3000, size)) < np.where(truth, q_star, p_star)
        logs.append(log_likelihoods(reports, np.zeros(3000, dtype=np.int64), np.arange(size)[None, :, None],
                                    (p_star, q_star)))
    done = em_reports_fit(logs[0], logs[1])
    assert done.converged and done.gap <= 1e-3 and done.joint.sum() == pytest.approx(1.0)
    capped = em_reports_fit(logs[0], logs[1], max_iterations=2)
    assert capped.iterations == 2 and not capped.converged and capped.gap > 1e-3
    plain = em_reports_fit(logs[0], logs[1], accelerate=False, newton=False, max_iterations=100_000)
    assert plain.converged and plain.iterations > done.iterations
    assert 0.5 * np.abs(plain.joint - done.joint).sum() < 0.01


def test_newton_steps_finish_a_maximum_on_the_boundary() -> None:
    # A joint with empty cells: the maximum has shares at 0, which the EM approaches geometrically
    # at a rate near 1 (the plain EM needs 19,283 steps to a 1e-6 gap here, SQUAREM 234). Newton
    # steps on the support end it in 3, at the same point. Fixed seeds: deterministic.
    joint = np.array([[0.45, 0.0, 0.05], [0.0, 0.2, 0.3]])
    rng = np.random.default_rng(21)
    values = [pair_value(A[c // 3], B[c % 3]) for c in rng.choice(6, size=20_000, p=joint.ravel())]
    params = _direct(level=3.0)
    reports, cohorts = _counts(params, values, seed=121)
    counts, table = BitCounts.from_reports(reports, cohorts, 1), np.arange(6)[None, :, None]
    probs = params.randomizer().probabilities()
    fast = em_bit_counts_run(counts, probs, table, tolerance=1e-6)
    assert fast.converged and fast.newton_steps >= 1 and fast.iterations < 100
    assert fast.shares[1] == 0.0  # exactly on the boundary
    squarem = em_bit_counts_run(counts, probs, table, tolerance=1e-6, newton=False)
    assert squarem.converged and squarem.newton_steps == 0 and squarem.iterations > fast.iterations
    capped = em_bit_counts_run(counts, probs, table, tolerance=1e-6, newton=False, accelerate=False,
                               max_iterations=2000)
    assert not capped.converged
    assert 0.5 * np.abs(fast.shares - squarem.shares).sum() < 1e-4
