"""benchmarks/RESULTS.md's accuracy and privacy tables whose command runs in under a minute, rerun.

Each test reruns one table's command at the seed the page states and reads
the figures to compare from the page itself, so the page cannot drift from
the code unnoticed. Every command here is seeded, so a rerun on the same
code gives the same numbers: a figure must match to its last printed digit
(half a unit of that digit either way), which is the only noise a seeded
rerun has. Timings are never compared. The tables whose commands take
longer are listed at the top of RESULTS.md as re-run by hand. About 25 s
of CPU in all (the audit is 17 of them).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aggregator.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
NUM = r"(\d+(?:\.\d+)?)"


def _section(title: str) -> str:
    """The text of the RESULTS.md section headed ``## title``, up to the next section."""
    text = RESULTS.read_text("utf-8")
    assert f"\n## {title}\n" in text, f"no section {title!r} in benchmarks/RESULTS.md"
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _line(text: str, start: str) -> str:
    found = [line for line in text.splitlines() if line.startswith(start)]
    assert len(found) == 1, f"expected one line starting {start!r} in benchmarks/RESULTS.md, found {len(found)}"
    return found[0]


def _figures(text: str, pattern: str) -> list[str]:
    found = re.search(pattern, text)
    assert found, f"benchmarks/RESULTS.md no longer states {pattern!r}"
    return list(found.groups())


def _as_printed(ours: float, shown: str, what: str) -> None:
    """``ours`` rounds to ``shown``: within half a unit of its last printed digit."""
    decimals = len(shown.split(".", 1)[1]) if "." in shown else 0
    assert abs(ours - float(shown)) <= 0.5 * 10.0**-decimals + 1e-12, f"{what}: page {shown}, rerun {ours:.6g}"


def test_research_simulations_small_scale_table() -> None:
    # `onesided simulate SCENARIO`, seed 2026, small scale: the function the command calls, in process
    from aggregator.research.scenarios import run_scenario

    table = _section("Research simulations (`onesided simulate`)").split("Paper scale", 1)[0]

    row = _line(table, "| relaxation (")
    low, high = _figures(row, rf"relaxed/one-shot MSE {NUM}-{NUM} \(3 seeds")
    (composition,) = _figures(row, rf"composition baseline {NUM}-")
    got = run_scenario("relaxation", scale="small", seed=2026)
    _as_printed(got["ratio_min"], low, "relaxation: smallest relaxed/one-shot MSE")
    _as_printed(got["ratio_max"], high, "relaxation: largest relaxed/one-shot MSE")
    _as_printed(got["composition_ratio_min"], composition, "relaxation: smallest composition/one-shot MSE")

    row = _line(table, "| asymmetric-advantage")
    measured, predicted, epsilons = (part.split(" / ") for part in _figures(
        row, r"measured variance ratio ([\d. /]+) vs predicted `1 - e\^-eps` ([\d. /]+) at eps = ([\d. /]+) \("))
    got = run_scenario("asymmetric-advantage", scale="small", seed=2026)
    assert [float(e) for e in epsilons] == [r["epsilon"] for r in got["rows"]]
    for r, ratio, theory in zip(got["rows"], measured, predicted, strict=True):
        _as_printed(r["ratio"], ratio, f"asymmetric-advantage at eps {r['epsilon']}")
        _as_printed(r["predicted"], theory, f"1 - e^-eps at eps {r['epsilon']}")

    row = _line(table, "| certificates")
    alap, ageo, dp = (_figures(row, p)[0] for p in (rf"safe share ALap {NUM} ", rf"AGeo {NUM},",
                                                     rf"\(eps, 1e-4\)-DP bound {NUM}:"))
    got = run_scenario("certificates", scale="small", seed=2026)
    at = next(r for r in got["by_threshold"] if r["epsilon"] == 1.0 and r["threshold"] == 5)
    for key, shown in (("alap", alap), ("ageo", ageo), ("dp", dp)):
        _as_printed(at[key]["safe_fraction"], shown, f"certificates: {key} safe share at eps 1, t 5")

    row = _line(table, "| collusion")
    first, at72 = _figures(row, rf"RMSE {NUM} \(i = 1\) -> {NUM} \(i = 72")
    (within,) = _figures(row, rf"P\(within margin\) = {NUM}\)")
    (mech_a,) = _figures(row, rf"Mechanism A stays near {NUM} \({NUM} at i = 256\)")[1:]
    corr_first, corr_last = _figures(row, rf"correlated releases {NUM} -> {NUM} \(i = 256\)")
    (best,) = _figures(row, rf"most trusted member \({NUM}\)")
    got = run_scenario("collusion", scale="small", seed=2026)
    sizes, schemes = got["colluders"], got["schemes"]
    assert sizes[0] == 1 and sizes[-1] == 256 and 72 in sizes
    _as_printed(schemes["independent"]["rmse"][0], first, "collusion: independent RMSE at i = 1")
    _as_printed(schemes["independent"]["rmse"][sizes.index(72)], at72, "collusion: independent RMSE at i = 72")
    _as_printed(got["independent_within_margin_at_paper_colluders"], within, "collusion: P(within margin) at 72")
    _as_printed(schemes["mechanism_a"]["rmse"][-1], mech_a, "collusion: Mechanism A RMSE at i = 256")
    _as_printed(schemes["correlated"]["rmse"][0], corr_first, "collusion: correlated RMSE at i = 1")
    _as_printed(schemes["correlated"]["rmse"][-1], corr_last, "collusion: correlated RMSE at i = 256")
    _as_printed(got["theory"]["correlated"][-1], best, "collusion: the most trusted member's RMSE")


def test_privacy_audit_table(capsys: pytest.CaptureFixture[str]) -> None:
    # `onesided audit TARGET ...` at its default seed (1) and samples; each lower bound to its 6 decimals
    table = _section("Privacy audit (issue 10)").split("Planted (must be caught)", 1)[0]
    rows = re.findall(r"^\| ([a-z-]+) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| (.+?) \| (\w+) \|$", table, re.M)
    assert len(rows) >= 10, "the audit table of benchmarks/RESULTS.md is no longer readable"
    assert main(["audit", *(r[0] for r in rows), "--json"]) == 0
    got = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    for name, samples, claimed, lower, event, verdict in rows:
        ours = got[name]
        assert ours["samples"] == int(samples) and ours["verdict"] == verdict, name
        assert f"[{ours['ratio']}] {ours['event']}" == event, name
        _as_printed(ours["claimed"], claimed, f"audit {name}: claimed epsilon")
        _as_printed(ours["lower_bound"], lower, f"audit {name}: audited lower bound")


def test_rounds_accuracy_table() -> None:
    # `python benchmarks/rounds.py` (seed 7, 100,000 clients, 4 repetitions); only its accuracy lines are read
    table = _section("Rounds (issue 6)").split("Accuracy over", 1)[1]
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rounds.py")], capture_output=True, text=True,
                         check=True, timeout=300).stdout
    measured = re.findall(rf"relaxed/one-shot MSE = {NUM}, composition/one-shot = {NUM}, "
                          rf"first collection/one-shot = {NUM}", out)
    for start, ours in zip(("| asymmetric 1 -> 6 |", "| symmetric 1 -> 4 |"), measured, strict=True):
        shown = _figures(_line(table, start), rf"\| {NUM} \| {NUM} \| {NUM} \|$")
        for what, mine, page in zip(("relaxed", "composition", "first"), ours, shown, strict=True):
            _as_printed(float(mine), page, f"rounds {start.strip('| ')}: {what} / one-shot MSE")


def test_central_release_certificate_probabilities() -> None:
    # closed forms (`python benchmarks/central.py`, its accuracy lines): eps 1, t 5, alpha 0; the DP bound at 1e-3
    from aggregator.research.bounds import dp_beta_upper_bound
    from protocol.mechanisms import AGeoMechanism, ALapMechanism

    text = " ".join(_section("Central releases (issue 7)").split())
    cert0, paper0, ageo0, dp0 = _figures(
        text, rf"a count of 0 is certified safe with probability {NUM} \(ALap's certificate on integer counts, "
              rf"answer < t \+ 1; {NUM} with the paper's answer <= t\), {NUM} \(AGeo\) and at best {NUM} for a "
              r"\(1, 1e-4\)-DP sanitizer at alpha = 1e-3")
    cert5, paper5 = _figures(text, rf"a count of 5 \(= t\): {NUM} \(ALap < t \+ 1, AGeo\) against {NUM} \(ALap <= t\)")
    alap, ageo, t = ALapMechanism(epsilon=1.0), AGeoMechanism(epsilon=1.0, n_max=10**6), 5
    _as_printed(alap.certificate_probability(0, t), cert0, "ALap certificate at count 0")
    _as_printed(alap.safe_probability(0, t), paper0, "ALap, the paper's rule, at count 0")
    _as_printed(ageo.certificate_probability(0, t), ageo0, "AGeo certificate at count 0")
    _as_printed(dp_beta_upper_bound(alpha=1e-3, epsilon=1.0, delta=1e-4, k=t + 1), dp0, "DP bound at count 0")
    _as_printed(alap.certificate_probability(5, t), cert5, "ALap certificate at count t")
    _as_printed(ageo.certificate_probability(5, t), cert5, "AGeo certificate at count t")
    _as_printed(alap.safe_probability(5, t), paper5, "ALap, the paper's rule, at count t")
