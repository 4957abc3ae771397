"""The runnable examples (``examples/*.py``) run end to end with small arguments and say what they should.

Each example starts its own aggregator on SQLite in a temporary folder and
runs as a subprocess, exactly as a reader would run it. The outputs are
deterministic (seeded populations, seeded or keyed client noise, no IRR),
and the checks are guarantees (a one-sided "safe" is never wrong) or gaps of
many standard errors, so none of them is a coin toss.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ("epidemic_safe_places", "url_telemetry_relaxation", "multi_analyst_releases")


def run_example(name: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / f"{name}.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("name", EXAMPLES)
def test_help(name: str) -> None:
    out = run_example(name, "--help")
    assert out.startswith("usage:") and "--seed" in out


def test_epidemic_safe_places_never_wrong() -> None:
    out = run_example("epidemic_safe_places", "--clients", "120", "--places", "30", "--threshold", "12")
    lines = re.findall(r"^safe places \((.+)\): (\d+); wrong: (\d+)$", out, re.MULTILINE)
    assert [name.split(",")[0] for name, _, _ in lines] == [
        "local certificate", "local certificate", "central AGeo", "central ALap"]
    assert all(wrong == "0" for _, _, wrong in lines), out  # alpha = 0 and ALap/AGeo: never wrong
    strict, relaxed, ageo, _ = (int(n) for _, n, _ in lines)
    truly = int(re.search(r"(\d+) of 30 places are truly safe", out).group(1))  # type: ignore[union-attr]
    # the strict level (q = e^-0.5: ~73 noise ones per place) certifies nothing at t = 12; the round's
    # level 8 (q = e^-4: ~2 noise ones) certifies places with a few visitors
    assert strict == 0 < relaxed <= truly and 0 < ageo <= truly
    assert re.search(r"round 1: level 1 -> 8; 0 clients refused it; a client's ledger: spent 4 of 5", out)
    assert "revealed: that an item is NOT in the set" in out


def test_url_telemetry_estimates_tighten_after_the_round() -> None:
    out = run_example("url_telemetry_relaxation", "--clients", "1500", "--sdk-clients", "5")
    found = dict(re.findall(r"^(strict|after the round) *: malware URL -?\d+ \+- (\d+) \(truth \d+\)", out, re.MULTILINE))
    assert set(found) == {"strict", "after the round"}, out
    # Laplace rate 1 -> 4: the standard error of a count falls about 3x (1/(q*-p*): 2.55 -> 1.16)
    assert int(found["after the round"]) < 0.6 * int(found["strict"])
    assert re.search(r"levels \[1\.0, 4\.0\], spent [\d.]+ of 8", out)
    assert "http://free-codecs.example/setup.exe" in out


def test_multi_analyst_releases_and_collusion_table() -> None:
    out = run_example("multi_analyst_releases", "--clients", "60", "--trials", "1000")
    rows = re.findall(r"^(alice|bob|carol) +([\d.]+) +([\d.]+) +(\d+) +(\d+)$", out, re.MULTILINE)
    assert [r[0] for r in rows] == ["alice", "bob", "carol"]
    assert all(r[4] == "0" for r in rows)  # AGeo: a "safe" answer is never wrong
    errors = [float(r[2]) for r in rows]
    assert errors[0] >= errors[1] >= errors[2]  # one-sided correlated chain: pointwise closer up the chain
    coalition = re.search(r"averaging: mean \|error\| ([\d.]+) \(its most trusted member alone: ([\d.]+)\); "
                          r"coalition epsilon 1 correlated, 1.75 if independent", out)
    assert coalition and float(coalition.group(1)) >= float(coalition.group(2))
    assert "alice asking for carol's release: HTTP 404" in out
    assert "the paper's i = max(30, 18 D^2/(m^2 eps^2)) = 72" in out
    for scheme in ("independent", "mechanism_a", "mechanism_a_calibrated", "correlated"):
        assert re.search(rf"^{scheme} +[\d.]+ P<m", out, re.MULTILINE), scheme
