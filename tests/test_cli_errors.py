"""The command line meets ordinary mistakes with one line and a non-zero exit, never a traceback.

A table of wrong inputs runs through ``main`` in this process (an uncaught
exception would fail the test), and a few through the console entry point in
a child process, where a traceback would show on stderr. A reader that stops
early (``| head``) ends the command quietly with exit code 141.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from aggsupport import REPO, run_cli

from aggregator.cli.main import EXIT_BROKEN_PIPE, main, missing_extra_line
from protocol.crypto import AggregatorKeys

UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens there
NOT_A_FOLDER = "/etc/hostname"  # a file, so nothing can be created under it, even by root


PASSPHRASE = "correct horse battery staple"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data folder with keys, a database (a token makes one), a key backup and three passphrase files."""
    folder = tmp_path_factory.mktemp("data")
    for name, text in (("pw", PASSPHRASE), ("wrong-pw", "not the passphrase at all"), ("short-pw", "short")):
        (folder / name).write_text(text + "\n", "utf-8")
    assert main(["keys", "init", "--data-dir", str(folder)]) == 0
    assert main(["token", "create", "--role", "admin", "--name", "ops", "--data-dir", str(folder)]) == 0
    assert main(["keys", "backup", str(folder / "keys.backup"), "--data-dir", str(folder),
                 "--passphrase-file", str(folder / "pw")]) == 0
    return folder


# (command line, a fragment its one line must contain); {data}: a data folder with keys and a database,
# {tmp}: an empty scratch folder, {badjson}: a file that is not JSON
WRONG_INPUTS: list[tuple[str, str]] = [
    ("backup --data-dir {data} {tmp}/missing/copy.db", "No such file or directory"),
    (f"backup --data-dir {{data}} {NOT_A_FOLDER}/copy.db", "Not a directory"),
    ("backup --data-dir {tmp}/empty {tmp}/copy.db", "--data-dir: no database"),
    (f"serve --init --data-dir {NOT_A_FOLDER}/data", "Not a directory"),
    (f"keys init --data-dir {NOT_A_FOLDER}/data", "Not a directory"),
    ("keys show --data-dir {tmp}/nothing", "keys init"),
    (f"token list --data-dir {NOT_A_FOLDER}/data", "error:"),
    ("metric create --file {tmp}/missing.json", "file"),
    ("metric create --file {badjson}", "file"),
    ("metric create --mode asymmetric", "name"),
    (f"metric list --server {UNREACHABLE}", "is it running?"),
    ("metric list --server ftp://example.org", "server"),
    (f"round status 7 --server {UNREACHABLE}", "is it running?"),
    (f"estimates places --server {UNREACHABLE} --candidates-file {{tmp}}/no.txt", "--candidates-file: cannot read"),
    ("decode-rappor --params {tmp}/p.csv --counts c.csv --map m.csv", "p.csv"),
    ("demo --clients 5 --out {tmp}/demo", "clients"),
    (f"demo --clients 100 --out {NOT_A_FOLDER}/demo", "Not a directory"),
    # tokens: an unknown name, a name taken
    ("token revoke --name nobody --data-dir {data}", "name: no token named 'nobody'"),
    ("token create --role analyst --name ops --data-dir {data}", "name: a token named 'ops' exists"),
    # keys: a wrong passphrase, unreadable files, a weak passphrase, a bad period, keys already there
    ("keys restore {data}/keys.backup --key-dir {tmp}/r --passphrase-file {data}/wrong-pw", "passphrase: does not open"),
    ("keys restore {tmp}/none.backup --key-dir {tmp}/r --passphrase-file {data}/pw", "backup: cannot read"),
    ("keys restore {badjson} --key-dir {tmp}/r --passphrase-file {data}/pw", "backup: cannot read"),
    ("keys backup {tmp}/b --data-dir {data} --passphrase-file {tmp}/none", "passphrase_file: cannot read"),
    ("keys backup {tmp}/b --data-dir {data} --passphrase-file {data}/short-pw", "passphrase: must be at least"),
    ("keys rotate --seal --data-dir {data} --keep-old-days 9999", "--keep-old-days: must be in"),
    ("keys rotate --sign --data-dir {tmp}/nothing", "keys init"),
    ("keys init --data-dir {data}", "refusing to replace keys"),
    # operations on the database
    ("purge --data-dir {data} --retention 5", "--retention: must be"),
    ("serve --data-dir {data} --workers 2", "workers: SQLite"),
    # releases: checked before anything is sent, or a server that does not answer
    ("release create --metric m --window 0 --threshold 1 --mechanism nope", "mechanism: must be one of"),
    ("release create --metric m --window 2026-11-20 --threshold 1 --analyst bob", "analyst: must be NAME=EPSILON"),
    (f"release list --server {UNREACHABLE}", "is it running?"),
    (f"release budget --metric m --window 0 --server {UNREACHABLE}", "is it running?"),
    (f"release show 3 --server {UNREACHABLE}", "is it running?"),
    # the client SDK by hand: no pinned key, a key that is not one, a bad ceiling, a state path it cannot use
    ("client ledger --state {tmp}/c.state", "--server-key: is required"),
    ("client flush --server-key AAAA --state {tmp}/c.state", "--server-key: must be a 32-byte"),
    ("client ledger --server-key {signkey} --state {tmp}/c.state --max-epsilon -1", "--max-epsilon: must be > 0"),
    (f"client ledger --server-key {{signkey}} --state {NOT_A_FOLDER}/c.state", "/etc/hostname"),
]


@pytest.mark.parametrize("command, fragment", WRONG_INPUTS)
def test_a_wrong_input_is_one_line_and_a_non_zero_exit(
    command: str, fragment: str, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ONESIDED_SERVER_KEY", raising=False)
    bad_json = tmp_path / "params.json"
    bad_json.write_text("{not json", "utf-8")
    sign_key = AggregatorKeys.load(data_dir / "keys").public_info()["sign_public"]
    code = main(command.format(data=data_dir, tmp=tmp_path, badjson=bad_json, signkey=sign_key).split())
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    assert fragment in err


def test_a_server_key_beginning_with_a_dash_is_a_value(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """One key in 64 begins with "-" in base64url: `--server-key KEY` must still read it as the value."""
    monkeypatch.delenv("ONESIDED_SERVER_KEY", raising=False)
    key = next(k for k in (AggregatorKeys.generate().public_info()["sign_public"] for _ in range(5000))
               if k.startswith("-"))
    code = main(["client", "ledger", "--server-key", key, "--state", str(tmp_path / "c.state"), "--max-epsilon", "-1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == "error: --max-epsilon: must be > 0, got -1.0", err  # parsed: the key was taken


@pytest.mark.parametrize("argv", [
    ["round", "open", "places", "--level-to", "2", "--cohorts", "1,x"],
    ["release", "create", "--metric", "m", "--window", "soon", "--threshold", "1"],
    ["release", "show", "third"],
    ["token", "create", "--role", "boss", "--name", "x"],
    ["token", "revoke"],
    ["keys", "rotate"],
    ["keys", "restore"],
    ["client", "report", "--metric", "m"],
    ["serve", "--log-format", "xml"],
    ["purge", "--retention", "a week"],
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


@pytest.mark.parametrize("argv", [
    ["estimates", "places", "--window", "soon"],
    ["certify", "places", "--threshold", "5", "--alpha", "0.05", "--window", "2026-13-01"],
    ["discover", "words", "--window", "1795705200.5"],
    ["association", "pairs", "--values-a", "a", "--values-b", "b", "--window", "26/11/2026"],
    ["release", "budget", "--metric", "m", "--window", "noon"],
    ["audit-log", "--since", "last tuesday"],
    ["audit-log", "--until", "tomorrow"],
])
def test_a_bad_time_names_its_flag_and_the_forms_it_takes(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Every time argument is read by one parser: Unix seconds or ISO-8601 UTC, else a usage error naming the flag."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    flag = next(a for a in argv if a in ("--window", "--since", "--until"))
    assert done.value.code == 2 and "Traceback" not in err
    assert f"error: argument {flag}: expected Unix seconds or an ISO-8601 UTC time" in err.splitlines()[-1], err


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


def test_every_missing_extra_of_a_command_is_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """demo needs server and research: a bare install hears of both in one line, not one after the other."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("flask", "scipy") else real(name, *a))
    line = missing_extra_line("demo", "flask")
    assert line == ("error: demo needs the Python packages 'flask' ('server' extra) and 'scipy' ('research' "
                    "extra): pip install 'onesided[server,research]'")


def test_a_missing_extra_at_run_time(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import aggregator.cli.commands.rounds as rounds

    def needs_scipy(_: object) -> int:
        raise ModuleNotFoundError("No module named 'scipy'", name="scipy")

    monkeypatch.setattr(rounds, "run_status", needs_scipy)
    assert main(["round", "status", "1"]) == 2
    assert capsys.readouterr().err == missing_extra_line("round", "scipy") + "\n"


# A bare install in miniature: every package of an optional extra fails to import, in a child process.
WITHOUT_EXTRAS = """
import importlib.abc, shlex, sys
from aggregator.cli.main import EXTRA_OF, main

class NoExtras(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in EXTRA_OF:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoExtras())
for line in sys.argv[1:]:
    print(main(shlex.split(line)), flush=True)
    print("--", file=sys.stderr, flush=True)
"""


def test_every_command_names_its_missing_extra_the_same_way(tmp_path: Path) -> None:
    """serve, audit, simulate, demo and the database commands, without their extra: the same one line each."""
    needs = {  # command line -> the extra it needs
        f"serve --data-dir {tmp_path}/d --port 0": "server",
        "audit --list": "research",
        f"simulate relaxation --out {tmp_path}/sim": "research",
        f"demo --out {tmp_path}/demo": "server,research",
        f"token list --data-dir {tmp_path}/d": "server",
        f"purge --data-dir {tmp_path}/d": "server",
        f"backup --data-dir {tmp_path}/d {tmp_path}/copy.db": "server",
        f"audit-log --data-dir {tmp_path}/d": "server",
    }
    done = subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, *needs], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    errors = done.stderr.split("--\n")[:-1]
    assert done.stdout.split() == ["2"] * len(needs) and len(errors) == len(needs), done.stderr
    for (line, extra), err in zip(needs.items(), errors, strict=True):
        command = line.split()[0]
        shape = rf"error: {command} needs the Python package '(\w+)' of the '{extra}' extra: pip install 'onesided\[{extra}\]'\n"
        if "," in extra:  # every extra still missing, in one line
            shape = (rf"error: {command} needs the Python packages '\w+' \('server' extra\) and '\w+' \('research' "
                     rf"extra\): pip install 'onesided\[{extra}\]'\n")
        assert re.fullmatch(shape, err), (line, err)
    assert not (tmp_path / "sim").exists() and not (tmp_path / "demo").exists()  # refused before writing


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


@pytest.mark.parametrize(("argv", "near"), [
    (["metrics"], "did you mean 'metric'?"),
    (["round", "stauts", "3"], "did you mean 'status'?"),
    (["metric", "create", "--name", "m", "--mode", "asymmetric", "--level", "abc"],
     "argument --level: invalid float value: 'abc' ('onesided metric create --help' shows the options)"),
])
def test_a_usage_error_is_one_line_with_a_hint(argv: list[str], near: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """No usage block before the error: the error, what was probably meant, where the options are."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and len(err.splitlines()) == 1, err
    assert near in err


@pytest.mark.parametrize(("argv", "line"), [
    (["metric", "create", "--name", "m", "--mode", "asymmetric", "--level", "1", "--dry-run"],
     "error: --num-bits is required here"),
    (["metric", "create", "--name", "m", "--mode", "asymmetric", "--level", "1", "--num-bits", "0",
      "--num-hashes", "2", "--dry-run"], "error: --num-bits: "),
    (["client", "ledger", "--server-key", "abc", "--state", "/nonexistent/x.state", "--server", UNREACHABLE],
     "error: --server-key: "),
])
def test_a_domain_error_names_the_flag_typed(argv: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and len(err.splitlines()) == 1, err
