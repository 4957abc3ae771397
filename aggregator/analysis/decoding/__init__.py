"""Decoding: bit counts -> unbiased estimates -> candidate counts (docs/decoding.md).

The aggregator stores :class:`BitCounts` per (metric, window, round) and
calls these pure functions; nothing here touches storage or HTTP. The
one-sided certificates live in :mod:`aggregator.analysis.certify`, RAPPOR's file
formats in :mod:`aggregator.analysis.rappor_io`. See ``docs/decoding.md``.
"""

from aggregator.analysis.decoding.counts import (
    BitCounts,
    bit_estimates,
    estimates_from_probabilities,
)
from aggregator.analysis.decoding.fit import (
    CandidateFit,
    direct_estimates,
    fit_bit_table,
    fit_candidates,
)
from aggregator.analysis.decoding.multiple_testing import CORRECTIONS, detect, one_sided_p_values

__all__ = [
    "CORRECTIONS",
    "BitCounts",
    "CandidateFit",
    "bit_estimates",
    "detect",
    "direct_estimates",
    "estimates_from_probabilities",
    "fit_bit_table",
    "fit_candidates",
    "one_sided_p_values",
]
