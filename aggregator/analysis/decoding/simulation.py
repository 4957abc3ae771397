"""Simulated aggregates for tests, benchmarks and research runs.

One path: :func:`protocol.encodings.encode_population` for the true bits,
:meth:`protocol.randomizers.Randomizer.simulate` for the reports (fresh
memoized noise and IRR, one report per client), :meth:`BitCounts.from_reports`
for the aggregates: the same functions the client and the aggregator use.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from aggregator.analysis.decoding.counts import BitCounts
from protocol.encodings import encode_population
from protocol.params import MetricParams
from protocol.rng import RandomSource

IntArray = npt.NDArray[np.int64]


def balanced_cohorts(items: npt.ArrayLike, num_cohorts: int) -> IntArray:
    """Cohorts that spread every item's holders evenly (the design's model holds exactly).

    Clients are ranked within their item (first column of ``items``, stable
    order) and client of rank ``r`` goes to cohort ``r mod num_cohorts``.
    """
    first = np.asarray(items).reshape(len(np.asarray(items)), -1)[:, 0]
    order = np.argsort(first, kind="stable")
    ranks = np.empty(first.size, dtype=np.int64)
    starts = np.searchsorted(first[order], first[order], side="left")
    ranks[order] = np.arange(first.size) - starts
    return ranks % num_cohorts


def true_bits(
    params: MetricParams, items: npt.ArrayLike, cohorts: npt.ArrayLike, bit_table: IntArray
) -> npt.NDArray[np.bool_]:
    """``(clients, num_bits)`` true bits; ``items`` ``(n,)`` or ``(n, w)`` indices into the table (-1: none)."""
    item_array = np.asarray(items, dtype=np.int64)
    padded = item_array[:, None] if item_array.ndim == 1 else item_array
    return encode_population(
        params.encoding, padded, np.asarray(cohorts, dtype=np.int64), bit_table
    )


def simulate_counts(
    params: MetricParams,
    level: float | None,
    bits: npt.NDArray[np.bool_],
    cohorts: npt.ArrayLike,
    rng: RandomSource,
) -> BitCounts:
    """Randomize ``bits`` once per client at ``level`` and aggregate them."""
    reports = params.randomizer(level).simulate(bits, rng)
    return BitCounts.from_reports(reports, np.asarray(cohorts, dtype=np.int64), params.num_cohorts)
