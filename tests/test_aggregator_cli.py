"""The ``onesided`` command line: keys, tokens, metrics over HTTP, serve's checks, purge, settings."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from aggsupport import BACKENDS, database_url, live_server, make_params, run_cli

from aggregator.cli.main import build_parser, main
from aggregator.server.settings import Settings
from aggregator.server.storage import Storage
from protocol.crypto import SEAL_KEY_FILE, SIGN_KEY_FILE, AggregatorKeys
from protocol.errors import ParameterError


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(list(args)) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, dict)
    return data


def test_keys_init_writes_private_files_and_show_prints_public_halves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    created = cli_json(capsys, "keys", "init", "--data-dir", str(tmp_path), "--json")
    folder = tmp_path / "keys"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in (SEAL_KEY_FILE, SIGN_KEY_FILE):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600
    keys = AggregatorKeys.load(folder)
    assert created == {"key_dir": str(folder), **keys.public_info()}
    assert cli_json(capsys, "keys", "show", "--key-dir", str(folder), "--json") == created
    private_text = (folder / SEAL_KEY_FILE).read_text().strip()
    assert private_text not in json.dumps(created)
    assert main(["keys", "init", "--data-dir", str(tmp_path)]) == 2  # refuses to replace
    assert "refusing to replace keys" in capsys.readouterr().err
    assert main(["keys", "show", "--data-dir", str(tmp_path / "none")]) == 2
    assert "keys init" in capsys.readouterr().err


def test_console_entry_point_runs(tmp_path: Path) -> None:
    done = run_cli("keys", "init", "--data-dir", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sign_public"] == AggregatorKeys.load(tmp_path / "keys").public_info()["sign_public"]


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with database_url(request.param, tmp_path) as url:
        yield url


def test_tokens_are_managed_on_the_database(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "create", "--role", "admin", "--name", "ops", "--db", db_url]) == 0
    out = capsys.readouterr()
    secret = out.out.strip()
    assert secret.startswith("ons_") and "shown only now" in out.err
    storage = Storage.open(db_url)
    try:
        token = storage.authenticate(secret)
        assert token is not None and token.role == "admin"
        listed = cli_json(capsys, "token", "list", "--db", db_url, "--json")
        assert [t["name"] for t in listed["tokens"]] == ["ops"]
        assert secret not in json.dumps(listed)
        assert main(["token", "create", "--role", "admin", "--name", "ops", "--db", db_url]) == 2
        assert "exists" in capsys.readouterr().err
        assert cli_json(capsys, "token", "revoke", "--name", "ops", "--db", db_url, "--json")["revoked_at"] is not None
        assert storage.authenticate(secret) is None
    finally:
        storage.close()


def test_metric_commands_drive_the_api(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with live_server(f"sqlite:///{tmp_path}/a.db", tmp_path) as server:
        admin, analyst = server.admin_token(), server.analyst_token()
        flags = ["--name", "places", "--num-bits", "20", "--num-hashes", "2", "--num-cohorts", "4",
                 "--mode", "asymmetric", "--level", "2.0", "--time-precision", "3600"]
        created = cli_json(capsys, "metric", "create", "--server", server.url, "--token", admin, *flags, "--json")
        assert created["outcome"] == "created" and created["digest"] == make_params().digest()
        monkeypatch.setenv("ONESIDED_SERVER", server.url)
        monkeypatch.setenv("ONESIDED_TOKEN", analyst)
        listed = cli_json(capsys, "metric", "list", "--json")
        assert [m["name"] for m in listed["metrics"]] == ["places"]
        assert cli_json(capsys, "metric", "show", "places", "--json")["reports"] == 0
        assert main(["metric", "create", *flags]) == 2  # analyst token: forbidden
        assert "403 forbidden" in capsys.readouterr().err
        params_file = tmp_path / "other.json"
        params_file.write_text(json.dumps(make_params("other").to_dict()))
        monkeypatch.setenv("ONESIDED_TOKEN", admin)
        assert cli_json(capsys, "metric", "create", "--file", str(params_file), "--json")["name"] == "other"
        assert main(["metric", "create", *flags[:-2], "--time-precision", "0"]) == 2
        assert capsys.readouterr().err.startswith("error: --time-precision:")
        assert main(["metric", "create", "--mode", "asymmetric"]) == 2
        assert "error: --name" in capsys.readouterr().err
        assert main(["metric", "list", "--server", "http://127.0.0.1:9"]) == 2
        assert "ConnectionError" in capsys.readouterr().err
        health = requests.get(f"{server.url}/v1/health", timeout=10).json()
        assert health["status"] == "ok"


def test_serve_refuses_several_workers_on_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--data-dir", str(tmp_path), "--workers", "3"]) == 2
    err = capsys.readouterr().err
    assert "error: --workers:" in err and "SQLite" in err and "PostgreSQL" in err
    assert not (tmp_path / "keys").exists()  # refused before touching anything


def test_serve_on_postgresql_needs_existing_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = "postgresql+psycopg://nobody@127.0.0.1:5432/test"
    assert main(["serve", "--db", url, "--data-dir", str(tmp_path), "--workers", "2"]) == 2
    assert "keys init" in capsys.readouterr().err


def test_purge_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = cli_json(capsys, "purge", "--data-dir", str(tmp_path), "--retention", "3600", "--json")
    assert result == {"deleted_reports": 0, "retention_seconds": 3600}


def test_commands_come_from_registrars() -> None:
    from aggregator.cli.commands import keys

    parser = build_parser([keys.register])
    args = parser.parse_args(["keys", "show"])
    assert args.func.__name__ == "run_show"
    with pytest.raises(SystemExit):
        parser.parse_args(["serve"])


def test_settings_validate_and_read_the_environment(tmp_path: Path) -> None:
    env = {
        "ONESIDED_DATA_DIR": str(tmp_path),
        "ONESIDED_ALLOW_PLAINTEXT": "true",
        "ONESIDED_MAX_REPORTS": "77",
        "ONESIDED_DB": "postgresql+psycopg://u@h/db",
    }
    settings = Settings.from_env(env, max_reports=None, retention_seconds=7200)
    assert settings.allow_plaintext and settings.max_reports == 77 and settings.retention_seconds == 7200
    assert settings.dialect == "postgresql" and settings.key_path == tmp_path / "keys"
    assert Settings(data_dir=tmp_path).database_url == f"sqlite:///{tmp_path / 'onesided.db'}"
    for bad, field in (
        ({"max_reports": 0}, "max_reports"),
        ({"db_url": "mysql://x/y"}, "db_url"),
        ({"colour": 1}, "colour"),
        ({"allow_plaintext": "yes"}, "allow_plaintext"),
    ):
        with pytest.raises(ParameterError) as err:
            Settings.from_mapping(bad)
        assert err.value.field == field
    with pytest.raises(ParameterError) as err:
        Settings.from_env({"ONESIDED_RETENTION": "soon"})
    assert err.value.field == "retention_seconds"


def test_the_command_list_is_explicit_and_imports_nothing_heavy() -> None:
    # every command module is listed by import in aggregator.cli.main, and listing them (onesided --help)
    # loads neither the server (flask, SQLAlchemy), nor numpy or scipy, nor the client SDK
    import subprocess
    import sys

    from aggregator.cli.main import COMMANDS

    folder = Path(__file__).resolve().parents[1] / "aggregator" / "cli" / "commands"
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    assert modules == {c.__module__.rsplit(".", 1)[1] for c in COMMANDS}
    code = ("import sys; import aggregator.cli.main as m; m.build_parser(); "
            "print(sorted(n for n in ('flask', 'sqlalchemy', 'numpy', 'scipy', 'client_sdk', 'matplotlib', 'requests') "
            "if n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_onesided_help_does_not_import_numpy() -> None:
    # the whole `onesided --help` run, as a user types it: numpy is loaded only by the commands that compute
    import subprocess
    import sys

    code = ("import sys; sys.argv = ['onesided', '--help']\n"
            "from aggregator.cli.main import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('numpy' in sys.modules, 'protocol.central' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "usage" in out.stdout
    assert out.stderr.strip() == "False False"


def test_release_create_checks_the_mechanism_name_when_it_runs() -> None:
    from aggregator.cli.commands.release import request_from_args
    from aggregator.cli.main import build_parser

    args = build_parser().parse_args(["release", "create", "--metric", "m", "--window", "0", "--threshold", "1",
                                      "--mechanism", "nosuch"])
    with pytest.raises(ParameterError, match="ageo") as err:
        request_from_args(args)
    assert err.value.field == "mechanism"
    args.mechanism = "ageo"
    assert request_from_args(args)["mechanism"] == "ageo"
