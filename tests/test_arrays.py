"""The array-namespace engine (``--engine gpu``): exact bits, the relaxation block, and the clean skip without CuPy.

CI has no GPU: every law is tested with NumPy as the namespace (the same code
CuPy runs). The GPU comparison at the end runs only where CuPy and a CUDA
device are present, and says so when skipped.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
from dataclasses import replace
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats
from statsupport import P_MIN, binomial_ok, chisquare_p

from aggregator.cli.main import main
from aggregator.research import arrays
from aggregator.research.arrays import ArrayEngine, exact_bits, namespace
from aggregator.research.populations import SyntheticCity, make_population
from aggregator.research.scenarios.relaxation import (
    RELAXATION_SETUPS,
    _city_bits_array,
    _city_table,
    relaxation,
    relaxation_block,
)
from protocol.errors import ParameterError
from protocol.rng import SeededRandom

HAS_CUPY = importlib.util.find_spec("cupy") is not None


def test_exact_bits_have_their_probabilities() -> None:
    # one chi-square per probability at P_MIN (false-failure rate 1e-6 each), fixed seed
    probs: list[float | Fraction] = [0.3, Fraction(1, 3), 0.0, 1.0, 2.0**-20 + 0.25]
    choice = np.repeat(np.arange(len(probs), dtype=np.uint8), 200_000)
    gen = np.random.default_rng(np.random.SeedSequence(1))
    bits = exact_bits(np, gen, probs, choice, np.random.SeedSequence(2))
    for i, p in enumerate(probs):
        ones = int(bits[choice == i].sum())
        if p in (0.0, 1.0):
            assert ones == 200_000 * int(p)
        else:
            assert chisquare_p(np.array([200_000 - ones, ones]), np.array([1 - float(p), float(p)])) > P_MIN


class TiedGenerator:
    """A generator whose 32-bit words all equal the cut of ``p``: every bit is a tie."""

    def __init__(self, p: float | Fraction) -> None:
        self.cut, _ = arrays.word_cut(p)

    def integers(self, low: int, high: int, size: tuple[int, ...], dtype: Any) -> np.ndarray:
        return np.full(size, self.cut, dtype=np.int64)


@pytest.mark.parametrize(("p", "remainder"), [(Fraction(1, 3), Fraction(1, 3)), (1.0, Fraction(1)), (0.0, Fraction(0))])  # 2^32 = 1 mod 3
def test_ties_resolve_with_the_exact_remainder(p: float | Fraction, remainder: Fraction) -> None:
    cut, rest = arrays.word_cut(p)
    assert rest == remainder and Fraction(cut) + rest == Fraction(p) * 2**32
    bits = exact_bits(np, TiedGenerator(p), [p], np.zeros(50_000, dtype=np.uint8), np.random.SeedSequence(3))
    if remainder in (0, 1):
        assert int(bits.sum()) == 50_000 * int(remainder)
    else:
        assert binomial_ok(int(bits.sum()), 50_000, float(remainder))  # rate 1e-6


def test_city_bits_on_the_namespace_follow_the_cpu_population() -> None:
    # ones per client (1..24 here) from the namespace block and from make_population: a chi-square
    # test of homogeneity at P_MIN (false-failure rate 1e-6), fixed seeds
    setup = RELAXATION_SETUPS["small"]
    city, enc, n = SyntheticCity(num_places=setup.places), setup.encoding, 100_000
    cohorts = np.sort(np.random.default_rng(4).integers(0, enc.num_cohorts, n))
    array_bits = _city_bits_array(np, np.random.default_rng(5), city, _city_table(enc, city.num_places), cohorts,
                                  enc.num_bits)
    cpu_bits = make_population(city, n, enc, SeededRandom(6)).bits
    table = np.stack([np.bincount(b.sum(axis=1), minlength=25) for b in (array_bits, cpu_bits)])
    table = table[:, table.sum(axis=0) >= 10]
    assert stats.chi2_contingency(table).pvalue > P_MIN


def test_relaxation_on_the_array_engine_costs_no_accuracy() -> None:
    # The same checks and bounds as test_simulate's relaxation test (32,768 squared errors per point,
    # sd ~1.2%: 0.9-1.1 is > 5.8 sd, false-failure rate < 1e-7 per check), on one level pair.
    setup = replace(RELAXATION_SETUPS["small"], levels=(1.0, 4.0))
    f = relaxation(setup, SeededRandom(8), engine=ArrayEngine("numpy"))
    assert f["engine"] == "array-numpy"
    for c in f["grid"]:
        assert c["cells"] == 32_768
        assert 0.9 <= c["ratio"] <= 1.1, c
        assert 0.9 <= c["theory_ratio"] <= 1.1, c
        assert c["composition_ratio"] > c["ratio"]


def test_an_array_engine_sets_the_block_size() -> None:
    setup = replace(RELAXATION_SETUPS["small"], levels=(1.0, 4.0), repetitions=1)
    seen: list[str] = []
    f = relaxation(setup, SeededRandom(13), seen.append, engine=ArrayEngine("numpy", block_clients=1_000))
    assert f["clients"] == 5_000 and f["grid"][0]["cells"] == 8_192
    assert "array-numpy engine: 5/5 blocks" in seen  # 5,000 clients in blocks of 1,000
    with pytest.raises(ParameterError) as err:
        ArrayEngine("numpy", block_clients=0)
    assert err.value.field == "block_clients"


def test_cohort_sums_are_the_slices_sums() -> None:
    rng = np.random.default_rng(12)
    edges = [0, 0, 700, 701, 701, 2_000]  # empty cohorts at the start, in the middle and none at the end
    reports = rng.random((2_000, 7)) < 0.5
    expected = np.stack([reports[a:b].sum(axis=0) for a, b in zip(edges, edges[1:], strict=False)])
    assert np.array_equal(arrays.cohort_sums(np, reports, edges), expected)
    assert np.array_equal(arrays.scan_sums(np, reports, np.asarray(edges)), expected)  # the device's path


def test_the_engine_refuses_scenarios_without_array_blocks() -> None:
    def other_block(setup: Any, index: int, seed: np.random.SeedSequence) -> dict[str, np.ndarray]:
        return {}

    with pytest.raises(ParameterError) as err:
        ArrayEngine("numpy").run(other_block, None, [np.random.SeedSequence(1)], lambda _: None)
    assert err.value.field == "engine" and "relaxation" in str(err.value)
    assert arrays.array_block(relaxation_block) is not None
    with pytest.raises(ParameterError):
        namespace("jax")


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed here: the missing-CuPy message cannot be shown")
def test_gpu_engine_without_cupy_says_why_in_one_line() -> None:
    with pytest.raises(ParameterError) as err:
        namespace("cupy")
    assert err.value.field == "engine" and "onesided[gpu]" in str(err.value)
    out, errors = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(errors):
        code = main(["simulate", "relaxation", "--engine", "gpu"])
    assert code != 0 and out.getvalue() == ""
    assert len(errors.getvalue().strip().splitlines()) == 1 and "CuPy" in errors.getvalue()


@pytest.mark.skipif(not HAS_CUPY, reason="no CuPy here (CI has no GPU): the GPU engine is tested with NumPy above")
def test_gpu_engine_agrees_with_the_numpy_engine_in_law() -> None:
    try:
        xp = namespace("cupy")
    except ParameterError as exc:
        pytest.skip(str(exc))
    # exact bits on the device: chi-square at P_MIN per probability (rate 1e-6 each)
    probs: list[float | Fraction] = [0.3, Fraction(1, 3), 0.75]
    choice = xp.asarray(np.repeat(np.arange(3, dtype=np.uint8), 1_000_000))
    bits = exact_bits(xp, xp.random.default_rng(np.random.SeedSequence(9)), probs, choice, np.random.SeedSequence(10))
    host = arrays.to_host(xp, bits)
    host_choice = arrays.to_host(xp, choice)
    for i, p in enumerate(probs):
        ones = int(host[host_choice == i].sum())
        assert chisquare_p(np.array([1_000_000 - ones, ones]), np.array([1 - float(p), float(p)])) > P_MIN
    setup = replace(RELAXATION_SETUPS["small"], levels=(1.0, 4.0))
    for engine in (ArrayEngine("cupy"), ArrayEngine("cupy", fused=False)):  # the fused kernel, the array block
        gpu = relaxation(setup, SeededRandom(11), engine=engine)
        for c in gpu["grid"]:
            assert 0.9 <= c["ratio"] <= 1.1 and 0.9 <= c["theory_ratio"] <= 1.1, (engine.name, c)
