"""The small-fit path (NumPy alone) against the general sparse/SciPy path.

Both fit the same OLS model, so on every data set where the dense path
answers they must agree to rounding: estimates and standard errors to a
relative 1e-9 of the largest estimate. Data are simulated with fixed seeds;
no statistical claim is tested here.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from aggregator.analysis.decoding import CandidateFit, dense, fit_bit_table, fit_candidates
from aggregator.analysis.decoding import fit as fit_module
from aggregator.analysis.decoding.simulation import simulate_counts, true_bits
from protocol import BloomEncoding, MetricParams, SeededRandom, laplace_rate_from_f


def _demo3_params() -> MetricParams:
    # RAPPOR's demo3 case: 16 bits x 2 hashes x 64 cohorts, p .1, q .9, f .2, MD5 as RAPPOR's client.
    enc = BloomEncoding(num_bits=16, num_hashes=2, num_cohorts=64, hashing="rappor-md5")
    return MetricParams(name="demo3", encoding=enc, mode="symmetric", level=laplace_rate_from_f(0.2),
                        irr_p=0.1, irr_q=0.9)


def _small_params(mode: str, level: float, **kw: float) -> MetricParams:
    enc = BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4)
    return MetricParams(name="m", encoding=enc, mode=mode, level=level, **kw)  # type: ignore[arg-type]


CASES = {
    # 190 candidates (100 held, exponential popularity; 90 held by nobody), 10,194 reports
    "demo3": (_demo3_params(), [int(400 * math.exp(-i / 20)) + 1 for i in range(100)], 90, 4),
    # the shapes of tests/test_decoding.py's OLS tests
    "asym": (_small_params("asymmetric", 2.0, irr_q=0.05),
             [1200, 1000, 800, 800, 600, 600, 400, 400, 400, 200, 200, 200], 12, 23),
    "sym": (_small_params("symmetric", laplace_rate_from_f(0.3), irr_p=0.2, irr_q=0.8), [2000, 1500, 800], 60, 8),
    "few": (_small_params("asymmetric", 3.0), [3000, 2000, 1000], 20, 3),
}


def _fit(case: str, method: str = "auto") -> CandidateFit:
    params, sizes, absent, seed = CASES[case]
    candidates = [f"v{i + 1}" for i in range(len(sizes) + absent)]
    items = np.concatenate([np.full(n, i) for i, n in enumerate(sizes)] + [np.full(2000, -1)])
    rng = SeededRandom(seed)
    cohorts = rng.integers(params.num_cohorts, items.size)
    counts = simulate_counts(params, None, true_bits(params, items, cohorts, params.encoding.bit_table(candidates)),
                             cohorts, rng)
    return fit_candidates(counts, params, None, candidates, method=method)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("method", ["auto", "ols"])
def test_dense_and_general_paths_agree(case: str, method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[object] = []

    def recording(*args: object) -> object:
        answers.append(dense.small_ols(*args))  # type: ignore[arg-type]
        return answers[-1]

    monkeypatch.setattr(fit_module, "small_ols", recording)
    small = _fit(case, method)
    assert len(answers) == 1 and answers[0] is not None  # the dense path answered
    monkeypatch.setattr(dense, "MAX_ENTRIES", 0)  # the general path
    general = _fit(case, method)
    assert small.method == general.method == "ols"
    scale = float(np.max(np.abs(general.estimates)))
    np.testing.assert_allclose(small.estimates, general.estimates, rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(small.std_errors, general.std_errors, rtol=0, atol=1e-9 * scale)
    assert small.detected.tolist() == general.detected.tolist()
    assert np.any(small.estimates < 0) and np.any(small.detected)  # the cases hold both kinds


def test_dense_path_is_taken_and_skips_unidentifiable_candidates() -> None:
    params, _, _, _ = CASES["few"]
    table = np.asarray(params.encoding.bit_table(["a", "b"]), dtype=np.int64)
    items, cohorts = np.array([0, 0, 1, -1]), np.array([0, 1, 2, 3])
    counts = simulate_counts(params, None, true_bits(params, items, cohorts, table), cohorts, SeededRandom(1))
    answer = dense.small_ols(counts, 0.25, 0.75, table)
    assert answer is not None and answer[0].tolist() == [0, 1]
    twin = np.concatenate([table, table[:, :1]], axis=1)  # a third candidate with a's bits
    assert dense.small_ols(counts, 0.25, 0.75, twin) is None
    fit = fit_bit_table(counts, (0.25, 0.75), twin, ["a", "b", "a2"])
    assert fit.method == "lasso"  # the general path, as before the dense path existed


def test_a_small_fit_does_not_import_scipy() -> None:
    code = (
        "import sys\n"
        "from tests.test_decoding_dense import _fit\n"
        "assert _fit('demo3').method == 'ols'\n"
        "print(sorted(m for m in sys.modules if m == 'scipy' or m.startswith('scipy.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
