"""A sample RAPPOR data set to try ``onesided decode-rappor`` on (``--write-sample DIR``).

The shape of google/rappor's ``demo`` data: parameters ``k=16, h=2, m=64,
p=0.1, q=0.9, f=0.2`` (its ``tests/params.csv``), 20 true strings ``v1 ..
v20`` with Zipf-like sizes (``v1`` the most frequent) and 20 decoys ``v21 ..
v40`` in the map that nobody reported, each client randomized once with
RAPPOR's permanent and instantaneous randomized response. Seeded, so the
same seed writes the same files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from aggregator.analysis.decoding import BitCounts
from aggregator.analysis.decoding.simulation import simulate_counts, true_bits
from aggregator.analysis.rappor_io import RapporParams, write_counts, write_map, write_params
from protocol.rng import SeededRandom

SAMPLE_PARAMS = RapporParams(k=16, h=2, m=64, p=0.1, q=0.9, f=0.2)  # google/rappor tests/params.csv
TRUE_STRINGS = 20  # v1 .. v20 reported; v21 .. v40 only in the map


@dataclass(frozen=True)
class RapporSample:
    """A simulated RAPPOR collection: the map's strings, their true counts and the bit counts."""

    candidates: list[str]
    truth: npt.NDArray[np.int64]
    counts: BitCounts


def sample_collection(clients: int, seed: int, params: RapporParams = SAMPLE_PARAMS) -> RapporSample:
    """``clients`` reports of ``v1 .. v20`` (sizes proportional to 1/rank), randomized once each."""
    metric = params.to_metric_params()
    candidates = [f"v{i}" for i in range(1, 2 * TRUE_STRINGS + 1)]
    weights = 1.0 / np.arange(1, TRUE_STRINGS + 1)
    sizes = np.floor(clients * weights / weights.sum()).astype(np.int64)
    items = np.repeat(np.arange(TRUE_STRINGS), sizes)
    rng = SeededRandom(seed)
    cohorts = rng.integers(params.m, items.size)
    bits = true_bits(metric, items, cohorts, metric.encoding.bit_table(candidates))
    counts = simulate_counts(metric, None, bits, cohorts, rng)
    truth = np.concatenate([sizes, np.zeros(TRUE_STRINGS, dtype=np.int64)])
    return RapporSample(candidates=candidates, truth=truth, counts=counts)


def write_sample(folder: Path, sample: RapporSample, params: RapporParams = SAMPLE_PARAMS) -> dict[str, Path]:
    """Write ``params.csv``, ``counts.csv``, ``map.csv`` (and ``truth.csv``) into ``folder``, made if absent."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / f"{name}.csv" for name in ("params", "counts", "map", "truth")}
    write_params(paths["params"], params)
    write_counts(paths["counts"], sample.counts)
    table = params.to_metric_params().encoding.bit_table(sample.candidates)
    write_map(paths["map"], sample.candidates, table, params.k)
    lines = ["string,true_count", *(f"{s},{int(n)}" for s, n in zip(sample.candidates, sample.truth, strict=True))]
    paths["truth"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths
