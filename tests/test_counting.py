"""BitCounts.from_reports: integer column sums, exactly the plain per-cohort loop's counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.analysis.decoding import BitCounts
from aggregator.analysis.decoding import counts as counts_module
from aggregator.analysis.decoding.counts import _BLOCK, _RUN
from protocol.errors import ParameterError


def reference(reports: np.ndarray, cohorts: np.ndarray, num_cohorts: int) -> tuple[np.ndarray, np.ndarray]:
    """The counts by their definition: one masked int64 sum per cohort."""
    ones = np.array([reports[cohorts == j].sum(axis=0, dtype=np.int64) for j in range(num_cohorts)])
    return ones.reshape(num_cohorts, reports.shape[1]), np.array([np.sum(cohorts == j) for j in range(num_cohorts)])


def check(reports: np.ndarray, cohorts: np.ndarray, num_cohorts: int) -> None:
    counts = BitCounts.from_reports(reports, cohorts, num_cohorts)
    ones, totals = reference(reports, cohorts, num_cohorts)
    assert counts.ones.dtype == np.int64
    assert np.array_equal(counts.ones, ones)
    assert np.array_equal(counts.totals, totals)


@pytest.mark.parametrize("rows", [0, 1, _RUN - 1, _RUN, _RUN + 1, _BLOCK, 2 * _BLOCK + 3 * _RUN + 7])
def test_one_cohort_every_run_boundary(rows: int) -> None:
    rng = np.random.default_rng(rows)
    check(rng.random((rows, 37)) < 0.4, np.zeros(rows, dtype=np.int64), 1)


@pytest.mark.parametrize("accumulator", [1, 64, 1000])
@pytest.mark.parametrize("bits", [1, 7, 64, 100])
@pytest.mark.parametrize("rows", [254, 255, 256, 3 * _RUN + 1, 10 * _RUN + 254, 23 * _RUN])
def test_grouped_runs_every_group_boundary(monkeypatch: pytest.MonkeyPatch, accumulator: int, bits: int,
                                           rows: int) -> None:
    # A small accumulator makes the (255, groups x bits) views take every shape on small inputs: one group
    # (accumulator < bits), several, a last span with fewer groups, and fewer than 255 rows left over.
    monkeypatch.setattr(counts_module, "_ACCUMULATOR_BYTES", accumulator)
    reports = np.random.default_rng(rows * bits + accumulator).random((rows, bits)) < 0.5
    check(reports, np.zeros(rows, dtype=np.int64), 1)
    check(np.ones((rows, bits), dtype=bool), np.zeros(rows, dtype=np.int64), 1)


def test_all_ones_fill_every_uint8_partial_sum() -> None:
    # 255 ones per run is the uint8 partial sum's maximum: an overflow would show here.
    rows = 2 * _BLOCK + _RUN
    check(np.ones((rows, 9), dtype=bool), np.zeros(rows, dtype=np.int64), 1)
    check(np.ones((rows, 9), dtype=bool), np.arange(rows) % 3, 3)


def test_sorted_and_unsorted_cohorts_give_the_plain_loop_counts() -> None:
    rng = np.random.default_rng(7)
    reports = rng.random((40_000, 24)) < 0.3
    cohorts = rng.integers(0, 5, 40_000)
    check(reports, cohorts, 5)  # unsorted: gathered cohort by cohort
    check(reports, np.sort(cohorts), 5)  # sorted: summed in place
    check(reports, cohorts, 9)  # cohorts 5..8 empty


def test_many_cohorts_past_the_16_bit_sort_key() -> None:
    rng = np.random.default_rng(8)
    cohorts = rng.integers(0, 70_000, 3_000)
    cohorts[:2] = (69_999, 65_536)
    check(rng.random((3_000, 3)) < 0.5, cohorts, 70_000)


def test_strided_and_fortran_ordered_reports() -> None:
    rng = np.random.default_rng(9)
    base = rng.random((20_000, 40)) < 0.5
    cohorts = rng.integers(0, 4, 10_000)
    check(base[::2, ::3], cohorts, 4)
    check(np.asfortranarray(base[:10_000]), cohorts, 4)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(0, 700),
    bits=st.integers(1, 12),
    cohorts=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
    density=st.floats(0.0, 1.0),
)
def test_matches_the_reference_on_any_shape(rows: int, bits: int, cohorts: int, seed: int, density: float) -> None:
    rng = np.random.default_rng(seed)
    check(rng.random((rows, bits)) < density, rng.integers(0, cohorts, rows), cohorts)


def test_bad_input_names_its_field() -> None:
    with pytest.raises(ParameterError) as err:
        BitCounts.from_reports(np.zeros((3, 2), dtype=np.uint8), np.zeros(3, dtype=np.int64), 1)
    assert err.value.field == "reports"
    with pytest.raises(ParameterError) as err:
        BitCounts.from_reports(np.zeros((3, 2), dtype=bool), np.array([0, 1, 2]), 2)
    assert err.value.field == "cohorts"
    with pytest.raises(ParameterError) as err:
        BitCounts.from_reports(np.zeros((3, 2), dtype=bool), np.zeros(3), 1)
    assert err.value.field == "cohorts"
