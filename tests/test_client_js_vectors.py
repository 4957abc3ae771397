"""The TypeScript client's vectors (tests/vectors/reports.json, charges.json, configs.json) are what Python writes.

``tests/js_vectors.py`` generates them from the reference code; this test fails when a committed
file differs (after a deliberate change: ``python -m tests.js_vectors`` and review the diff).
"""

from __future__ import annotations

import json

import pytest

from tests import js_vectors


@pytest.mark.parametrize("name", js_vectors.FILES)
def test_committed_vectors_match_the_reference(name: str) -> None:
    committed = (js_vectors.VECTORS / name).read_text(encoding="utf-8")
    assert committed == js_vectors.render(name), f"{name} is stale: run python -m tests.js_vectors"


def test_reports_cover_every_kind_in_both_modes() -> None:
    cases = json.loads((js_vectors.VECTORS / "reports.json").read_text(encoding="utf-8"))["cases"]
    kinds = set()
    for case in cases:
        mode = case["params"]["mode"]
        for i, report in enumerate(case["reports"]):
            irr_round = i > 0 and report["chain"][-1] == report["chain"][-2]
            kinds.add((mode, report["kind"], "irr" if irr_round else "level"))
    for mode in ("symmetric", "asymmetric"):
        for kind in (("first", "level"), ("fresh", "level"), ("relaxed", "level"), ("relaxed", "irr")):
            assert (mode, *kind) in kinds
