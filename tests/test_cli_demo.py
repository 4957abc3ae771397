"""``onesided demo`` writes under the folder it names and leaves no private material behind unless asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from aggregator.cli.main import main

SMALL = ["--clients", "300", "--sdk-clients", "4", "--places", "40", "--no-progress"]


def test_the_demo_keeps_only_its_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    assert main(["demo", *SMALL, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["estimates.png", "summary.html"]
    lines = printed.splitlines()
    assert lines[0] == f"the demo writes under {out.resolve()}"
    assert lines[-1].startswith(f"summary: {out.resolve() / 'summary.html'}")
    assert "removed the aggregator's database, private keys and client states" in printed


def test_keep_leaves_the_data_and_a_second_run_refuses_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    assert main(["demo", *SMALL, "--out", str(out), "--keep"]) == 0
    data = out / "data"
    assert (data / "keys").is_dir() and len(list((data / "clients").glob("*.state"))) == 4
    assert any(data.glob("*.db"))
    capsys.readouterr()
    assert main(["demo", *SMALL, "--out", str(out)]) == 2
    assert "--keep" in capsys.readouterr().err  # says why the folder is not empty
    assert (data / "keys").is_dir()  # and touched nothing


def test_a_given_data_folder_is_emptied_not_removed(tmp_path: Path) -> None:
    data = tmp_path / "mine"
    data.mkdir()
    assert main(["demo", *SMALL, "--out", str(tmp_path / "demo"), "--data-dir", str(data)]) == 0
    assert data.is_dir() and not any(data.iterdir())


def test_off_a_terminal_each_step_writes_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A log gets one line per step (no carriage-return bar updates), each step one kind of client."""
    args = [a for a in SMALL if a != "--no-progress"]
    assert main(["demo", *args, "--out", str(tmp_path / "demo")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    assert err.splitlines() == [
        line for line in err.splitlines() if line.endswith(" s") and " of " in line
    ]
    steps = [line.split(":")[1].strip() for line in err.splitlines()]
    assert steps == ["SDK clients sync, report, send", "simulated clients report",
                     "SDK clients verify, relax, report, send", "simulated clients re-send"]
    assert err.splitlines()[0].startswith("level 1: SDK clients sync, report, send: 4 of 4 clients in ")
