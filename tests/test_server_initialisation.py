"""Nothing acknowledged is lost silently, and a typo never starts a second aggregator.

* A SQLite file removed or replaced under a running server: 503
  ``database_unavailable`` naming the file (never ``accepted``), readiness
  503, liveness 200.
* ``onesided serve`` on a folder or database path that was never
  initialised: one line naming ``keys init`` / ``--init``, exit 2, nothing
  created; keys whose SQLite file vanished: refused unless ``--new-database``.
* A port in use: one line, exit 2 (gunicorn retried for 10 s and exited 1).

No timing assumptions: every refusal happens before the server starts.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from aggsupport import app_in, batch_json, bearer, free_port, make_params, make_reports

from aggregator.cli.main import main
from aggregator.server.serve import prepare
from aggregator.server.settings import Settings
from protocol.crypto import AggregatorKeys

PARAMS = make_params()


def _upload(client: object, keys: AggregatorKeys, seed: int) -> object:
    envelopes = make_reports(PARAMS, keys.seal_public_raw, 10, seed=seed).envelopes
    return client.post("/v1/reports", json=batch_json(envelopes))  # type: ignore[attr-defined]


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_sqlite_file_removed_or_replaced_while_serving_is_503_naming_it(tmp_path: Path, how: str) -> None:
    with app_in(tmp_path) as app:
        state = app.extensions["onesided"]
        client = app.test_client()
        admin = state.storage.create_token(role="admin", name="admin")[1]
        assert client.post("/v1/metrics", json=PARAMS.to_dict(), headers=bearer(admin)).status_code == 201
        assert _upload(client, state.keys, 1).get_json()["accepted"] == 10
        database = tmp_path / "onesided.db"
        if how == "removed":
            for suffix in ("", "-wal", "-shm"):
                Path(f"{database}{suffix}").unlink(missing_ok=True)
        else:
            other = tmp_path / "other.db"
            other.write_bytes(database.read_bytes())
            os.replace(other, database)
        answer = _upload(client, state.keys, 2)
        assert answer.status_code == 503, answer.get_json()
        assert answer.get_json()["error"] == "database_unavailable" and str(database) in answer.get_json()["detail"]
        assert int(answer.headers["Retry-After"]) > 0
        assert client.get("/v1/health").status_code == 503
        ready = client.get("/v1/readyz")
        assert ready.status_code == 503 and ready.get_json()["problems"][0]["dependency"] == "database"
        assert client.get("/v1/livez").status_code == 200


def _refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["serve", "--port", str(free_port()), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


def test_serve_refuses_a_data_folder_that_does_not_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    typo = tmp_path / "a" / "b"
    err = _refusal(capsys, "--data-dir", str(typo))
    assert "keys init" in err and "--init" in err
    assert not (tmp_path / "a").exists()  # no folder, no keys invented


def test_serve_refuses_a_sqlite_path_never_initialised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refusal(capsys, "--db", f"sqlite:///{tmp_path}/missing/x.db", "--key-dir", str(tmp_path / "k"))
    assert "keys init" in err and "--init" in err
    assert not (tmp_path / "missing").exists() and not (tmp_path / "k").exists()


def test_a_restart_whose_database_vanished_needs_new_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    first = prepare(settings, init=True)  # the first start creates keys and database
    for suffix in ("", "-wal", "-shm"):
        Path(f"{tmp_path}/data/onesided.db{suffix}").unlink(missing_ok=True)
    for argv in (["--data-dir", str(tmp_path / "data")], ["--init", "--data-dir", str(tmp_path / "data")]):
        err = _refusal(capsys, *argv)
        assert "error: database:" in err and "--new-database" in err and "onesided.db" in err
    assert not (tmp_path / "data" / "onesided.db").exists()
    again = prepare(settings, new_database=True)  # told so: an empty database beside the same keys
    assert again.seal_public_raw == first.seal_public_raw
    assert (tmp_path / "data" / "onesided.db").exists()


def test_keys_made_by_keys_init_start_a_database(tmp_path: Path) -> None:
    AggregatorKeys.generate().save(tmp_path / "keys")  # as `onesided keys init` leaves them
    prepare(Settings(data_dir=tmp_path))
    assert (tmp_path / "onesided.db").exists()


def test_a_port_in_use_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["serve", "--init", "--data-dir", str(tmp_path / "d"), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --port:") and "in use" in err, err
