"""The command line meets ordinary mistakes with one line and a non-zero exit, never a traceback.

A table of wrong inputs runs through ``main`` in this process (an uncaught
exception would fail the test), and a few through the console entry point in
a child process, where a traceback would show on stderr. A reader that stops
early (``| head``) ends the command quietly with exit code 141.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from aggsupport import REPO, run_cli

from aggregator.cli.main import EXIT_BROKEN_PIPE, main, missing_extra_line

UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens there
NOT_A_FOLDER = "/etc/hostname"  # a file, so nothing can be created under it, even by root


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data folder with keys and a database (a token makes one)."""
    folder = tmp_path_factory.mktemp("data")
    assert main(["keys", "init", "--data-dir", str(folder)]) == 0
    assert main(["token", "create", "--role", "admin", "--name", "ops", "--data-dir", str(folder)]) == 0
    return folder


# (command line, a fragment its one line must contain); {data}: a data folder with keys and a database,
# {tmp}: an empty scratch folder, {badjson}: a file that is not JSON
WRONG_INPUTS: list[tuple[str, str]] = [
    ("backup --data-dir {data} {tmp}/missing/copy.db", "No such file or directory"),
    (f"backup --data-dir {{data}} {NOT_A_FOLDER}/copy.db", "Not a directory"),
    ("backup --data-dir {tmp}/empty {tmp}/copy.db", "data_dir"),
    (f"serve --data-dir {NOT_A_FOLDER}/data", "Not a directory"),
    (f"keys init --data-dir {NOT_A_FOLDER}/data", "Not a directory"),
    ("keys show --data-dir {tmp}/nothing", "keys init"),
    (f"token list --data-dir {NOT_A_FOLDER}/data", "error:"),
    ("metric create --file {tmp}/missing.json", "file"),
    ("metric create --file {badjson}", "file"),
    ("metric create --mode asymmetric", "name"),
    (f"metric list --server {UNREACHABLE}", "is it running?"),
    ("metric list --server ftp://example.org", "server"),
    (f"round status 7 --server {UNREACHABLE}", "is it running?"),
    (f"estimates places --server {UNREACHABLE} --candidates-file {{tmp}}/no.txt", "candidates_file"),
    ("decode-rappor --params {tmp}/p.csv --counts c.csv --map m.csv", "p.csv"),
    ("demo --clients 5 --out {tmp}/demo", "clients"),
    (f"demo --clients 100 --out {NOT_A_FOLDER}/demo", "Not a directory"),
]


@pytest.mark.parametrize("command, fragment", WRONG_INPUTS)
def test_a_wrong_input_is_one_line_and_a_non_zero_exit(
    command: str, fragment: str, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad_json = tmp_path / "params.json"
    bad_json.write_text("{not json", "utf-8")
    code = main(command.format(data=data_dir, tmp=tmp_path, badjson=bad_json).split())
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    assert fragment in err


@pytest.mark.parametrize("argv", [
    ["round", "open", "places", "--level-to", "2", "--cohorts", "1,x"],
    ["round", "status", "seven"],
    ["metric", "create", "--mode", "loud"],
    ["no-such-command"],
])
def test_a_malformed_command_line_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and "Traceback" not in err
    assert err.splitlines()[-1].startswith("onesided")  # argparse's one error line names the command


def test_the_console_script_prints_no_traceback(tmp_path: Path) -> None:
    for argv in (["serve", "--data-dir", f"{NOT_A_FOLDER}/data"], ["metric", "list", "--server", UNREACHABLE],
                 ["round", "open", "m", "--level-to", "2", "--cohorts", "a"]):
        done = run_cli(*argv)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr


def test_a_bug_is_one_line_unless_verbose(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import aggregator.cli.commands.rounds as rounds

    def broken(_: object) -> int:
        raise KeyError("oops")

    monkeypatch.setattr(rounds, "run_status", broken)
    assert main(["round", "status", "1"]) == 70
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "KeyError" in err and "-v" in err
    with pytest.raises(KeyError):
        main(["-v", "round", "status", "1"])


def test_a_missing_extra_has_one_message_for_every_command() -> None:
    assert missing_extra_line("serve", "flask.app") == (
        "error: serve needs the Python package 'flask' of the 'server' extra: pip install 'onesided[server]'")
    assert missing_extra_line("simulate", "matplotlib") .endswith("pip install 'onesided[research]'")
    assert "reinstall onesided" in missing_extra_line("demo", "mmh3")


def test_a_missing_extra_at_run_time(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import aggregator.cli.commands.rounds as rounds

    def needs_scipy(_: object) -> int:
        raise ModuleNotFoundError("No module named 'scipy'", name="scipy")

    monkeypatch.setattr(rounds, "run_status", needs_scipy)
    assert main(["round", "status", "1"]) == 2
    assert capsys.readouterr().err == missing_extra_line("round", "scipy") + "\n"


def _with_reader_gone(*argv: str) -> tuple[int, str]:
    """Run ``onesided ARGV`` with its stdout's read end closed before it writes: the first write meets EPIPE."""
    code = "import sys; from aggregator.cli.main import main; sys.exit(main())"
    with subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          cwd=REPO) as child:
        assert child.stdout is not None and child.stderr is not None
        child.stdout.close()
        err = child.stderr.read().decode()
        return child.wait(timeout=60), err


def test_a_reader_that_stops_early_ends_the_command_quietly() -> None:
    assert _with_reader_gone("audit", "--list") == (EXIT_BROKEN_PIPE, "")
    code, err = _with_reader_gone("--help")
    assert code in (0, EXIT_BROKEN_PIPE) and err == ""  # argparse ignores a failed write of its help
