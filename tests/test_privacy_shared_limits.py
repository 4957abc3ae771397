"""Limits both sides must agree on, each defined once.

* The highest level a round may relax to: ``protocol.randomizers.MAX_LEVEL``,
  checked by the round announcement itself (the server builds its
  announcements through it and every client parses them with it), so the
  server cannot announce a round that every client refuses.
* The contribution bound of a trusted report: ingestion keeps at most
  ``contribution_bound(params).ones`` ones and the central releases take
  their sensitivity from the same function; a release's epsilon is only
  true if the two agree, so the tests below compare what ingestion keeps
  with the sensitivity a release is computed at.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.server.ingest import clip_report, item_limit
from aggregator.server.services.releases import release_sensitivity
from aggregator.server.services.rounds import check_level_to
from aggregator.server.storage.reports import ReportRow
from protocol.accounting import contribution_bound
from protocol.encodings import BloomEncoding, DirectEncoding
from protocol.errors import ParameterError, ReportRejected
from protocol.params import MetricParams
from protocol.randomizers import MAX_LEVEL, Randomizer
from protocol.rng import SeededRandom
from protocol.wire import RoundAnnouncement, validate_round_announcement

ROUND: dict[str, Any] = {
    "version": 1, "round_id": 7, "metric": "places", "params_digest": "0" * 64, "level_from": 1.0,
    "level_to": 2.0, "cohorts": None, "opened_at": 1_700_000_000, "expires_at": 1_700_086_400,
}


# ---------------------------------------------------------------------------
# the level cap
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("level_to", [MAX_LEVEL * 1.0001, 80.0, 1e300])
def test_an_announcement_above_the_cap_is_refused_naming_level_to(level_to: float) -> None:
    with pytest.raises(ReportRejected) as info:
        validate_round_announcement(ROUND | {"level_to": level_to})
    assert info.value.field == "level_to" and f"{MAX_LEVEL:g}" in str(info.value)
    with pytest.raises(ReportRejected) as info:
        RoundAnnouncement(**{k: v for k, v in ROUND.items() if k != "version"} | {"level_to": level_to})
    assert info.value.field == "level_to"


def test_the_server_device_and_announcement_share_one_cap() -> None:
    """At the cap every side accepts; just above it every side refuses."""
    at_cap = validate_round_announcement(ROUND | {"level_to": MAX_LEVEL})
    assert at_cap.level_to == MAX_LEVEL
    check_level_to(MAX_LEVEL)  # the server's round opening
    Randomizer(mode="symmetric", level=MAX_LEVEL)  # the device's randomizer at that level
    Randomizer(mode="asymmetric", level=MAX_LEVEL)
    above = math.nextafter(MAX_LEVEL, math.inf)
    with pytest.raises(ParameterError) as server:
        check_level_to(above)
    with pytest.raises(ParameterError) as device:
        Randomizer(mode="asymmetric", level=above)
    with pytest.raises(ReportRejected) as wire:
        validate_round_announcement(ROUND | {"level_to": above})
    assert (server.value.field, device.value.field, wire.value.field) == ("level_to", "level", "level_to")


# ---------------------------------------------------------------------------
# the contribution bound
# ---------------------------------------------------------------------------


def _trusted(encoding: Any, max_items: int) -> MetricParams:
    return MetricParams(name="visits", encoding=encoding, mode="trusted", level=math.inf, max_items=max_items)


def _row(bits: np.ndarray) -> ReportRow:
    packed = np.packbits(bits.astype(np.uint8), bitorder="little").tobytes()
    return ReportRow(metric_id=1, report_id=bytes(16), round=0, window=0, cohort=0, bits=packed,
                     body_hash=bytes(16))


def _ones(row: ReportRow, num_bits: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(row.bits, dtype=np.uint8), bitorder="little")[:num_bits]


@settings(max_examples=60, deadline=None)
@given(
    num_bits=st.integers(4, 40),
    num_hashes=st.integers(1, 4),
    max_items=st.integers(1, 4),
    direct=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_what_ingestion_keeps_is_what_releases_assume(
    num_bits: int, num_hashes: int, max_items: int, direct: bool, seed: int
) -> None:
    """A full report clipped by ingestion moves the counts by exactly the release's sensitivity.

    If ingestion kept more ones than the releases assume, a release's epsilon
    would be understated; if fewer, overstated: either drift fails here.
    """
    if direct:
        encoding: Any = DirectEncoding(domain=tuple(f"p{i}" for i in range(num_bits)))
    else:
        encoding = BloomEncoding(num_bits=num_bits, num_hashes=min(num_hashes, num_bits), num_cohorts=1)
    params = _trusted(encoding, min(max_items, num_bits))
    row = _row(np.ones(num_bits, dtype=bool))  # every bit set: more than any bound keeps
    clipped, dropped = clip_report(row, params, SeededRandom(seed))
    kept = _ones(clipped, num_bits)
    l1 = int(kept.sum())
    bound = contribution_bound(params)
    assert l1 == min(num_bits, item_limit(params) or 0) and dropped == num_bits - l1
    for mechanism in ("alap", "ageo", "laplace", "geometric"):
        # L1 sensitivity: equal to what one report can move (when the bits allow that many)
        assert release_sensitivity(params, mechanism) == bound.ones >= l1
        if bound.ones <= num_bits:
            assert l1 == release_sensitivity(params, mechanism)
    # SALap's per-query bound: one report moves one count by at most its bit, 0 or 1
    assert int(kept.max()) <= release_sensitivity(params, "salap") == bound.per_count == 1


def test_a_drifted_ingestion_bound_would_be_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above fails when ingestion keeps one more one than releases assume (it can fail)."""
    import aggregator.server.ingest as ingest

    params = _trusted(DirectEncoding(domain=tuple(f"p{i}" for i in range(8))), 2)
    monkeypatch.setattr(ingest, "contribution_bound",
                        lambda p: dataclasses.replace(contribution_bound(p), ones=contribution_bound(p).ones + 1))
    clipped, _ = ingest.clip_report(_row(np.ones(8, dtype=bool)), params, SeededRandom(1))
    assert int(_ones(clipped, 8).sum()) == 3 != release_sensitivity(params, "alap")


def test_untrusted_reports_are_not_clipped() -> None:
    params = MetricParams(name="p", encoding=BloomEncoding(num_bits=16, num_hashes=2, num_cohorts=1),
                          mode="asymmetric", level=1.0)
    row = _row(np.ones(16, dtype=bool))
    assert item_limit(params) is None and clip_report(row, params, SeededRandom(0)) == (row, 0)
    assert contribution_bound(params).ones == 2  # the bound of one member; the device's noise protects it
