"""The TypeScript client's vectors (tests/vectors/reports.json, charges.json, configs.json, answers.json) are
what Python writes, and the Python client reads the shared upload answers as the TypeScript client must.

``tests/js_vectors.py`` generates them from the reference code; this test fails when a committed
file differs (after a deliberate change: ``python -m tests.js_vectors`` and review the diff).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocol.errors import ReportRejected
from protocol.wire import parse_upload_response
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


def _answers() -> dict[str, Any]:
    return json.loads((js_vectors.VECTORS / "answers.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_the_python_client_reads_every_answer_of_the_shared_vectors() -> None:
    """client-js/test/vectors.test.mjs reads the same file with the TypeScript parser."""
    cases = _answers()["cases"]
    assert {case["wire"] for case in cases} == {1, 2, 3}
    for case in cases:
        parsed = parse_upload_response(json.loads(case["text"]))
        got = {"accepted": sum(r.status == "accepted" for r in parsed), "server_time": parsed.server_time,
               "clipped": parsed.clipped,
               "results": [{"report_id": r.report_id, "status": r.status, "field": r.field, "detail": r.detail,
                            "retry_after": r.retry_after} for r in parsed]}
        assert got == case["expect"], case["why"]
        assert len(parsed) == case["count"]


def test_the_python_client_refuses_every_malformed_answer_naming_the_field() -> None:
    for case in _answers()["refused"]:
        with pytest.raises(ReportRejected) as info:
            parse_upload_response(json.loads(case["text"]))
        assert info.value.field == case["field"], (case["why"], info.value)
