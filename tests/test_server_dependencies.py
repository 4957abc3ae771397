"""Failing dependencies say one line and recover.

* A database unreachable at start: ``onesided serve`` retries (PostgreSQL)
  and exits non-zero with one line naming the host or file, never a
  traceback (before: 128 lines).
* A database lost mid-run: 503 ``database_unavailable`` with ``Retry-After``,
  and ``/v1/health`` says the database is the failing dependency (SQLite
  here; PostgreSQL in tests/test_server_postgres_lost.py).
* A full disk (SQLite's ``max_page_count``: the same ``SQLITE_FULL`` a full
  filesystem gives): 507 ``insufficient_storage`` with ``Retry-After``,
  nothing stored, health ``degraded``; ingestion works again once there is room.
* ``onesided backup`` on a full disk (a 16 KiB tmpfs where this machine lets
  us mount one, else an injected ``ENOSPC``) removes its partial file and
  says why in one line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from aggsupport import LiveServer, bearer, make_params, make_reports, post_reports, run_cli
from sqlalchemy import event

from aggregator.cli.main import main
from aggregator.server import backup as backup_module
from aggregator.server.settings import Settings
from aggregator.server.storage import Storage
from protocol.crypto import AggregatorKeys

PARAMS = make_params()


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, stderr
    return lines[0]


def test_postgresql_unreachable_at_start_is_one_line_naming_the_host(tmp_path: Path) -> None:
    AggregatorKeys.generate().save(tmp_path / "keys")
    url = "postgresql+psycopg://onesided:secret@127.0.0.1:1/telemetry"  # nothing listens on port 1
    done = run_cli("serve", "--db", url, "--key-dir", str(tmp_path / "keys"), "--db-wait", "1.5", "--port", "1")
    assert done.returncode == 2
    line = _one_error_line(done.stderr)
    assert "127.0.0.1:1/telemetry" in line and "database" in line and "secret" not in line, line
    assert done.stderr.count("trying again") >= 1  # it retried before giving up


def test_sqlite_file_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the database's folder should be")
    done = run_cli("serve", "--init", "--db", f"sqlite:///{blocker}/onesided.db", "--key-dir", str(tmp_path / "keys"),
                   "--port", "1")
    assert done.returncode == 2
    line = _one_error_line(done.stderr)
    assert str(blocker) in line and "SQLite" in line, line


@contextlib.contextmanager
def _server(tmp_path: Path) -> Iterator[tuple[LiveServer, str]]:
    url = f"sqlite:///{tmp_path / 'aggregator.db'}"
    storage = Storage.open(url)
    server = LiveServer(Settings(data_dir=tmp_path, db_url=url), AggregatorKeys.generate(), storage)
    try:
        admin = server.admin_token()
        assert server.register(PARAMS, admin).status_code == 201
        yield server, admin
    finally:
        server.close()
        storage.close()


def test_a_vanished_sqlite_file_is_503_and_health_names_the_database(tmp_path: Path) -> None:
    import requests

    with _server(tmp_path) as (server, admin):
        reports = make_reports(PARAMS, server.keys.seal_public_raw, 5, seed=1).envelopes
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_path / f"aggregator.db{suffix}")
        server.storage.engine.dispose()  # new connections find (and create) an empty file
        answer = post_reports(server.url, reports)
        assert answer.status_code == 503 and answer.json()["error"] == "database_unavailable", answer.text
        assert int(answer.headers["Retry-After"]) > 0
        health = requests.get(f"{server.url}/v1/health", timeout=10)
        assert health.status_code == 503 and health.json()["status"] == "unavailable"
        assert health.json()["problems"][0]["dependency"] == "database"
        assert "Retry-After" in health.headers
        listing = requests.get(f"{server.url}/v1/metrics", headers=bearer(admin), timeout=10)
        assert listing.status_code in (401, 503)  # the token table went with the file: no 500 either way


def _cap_pages(engine: sa.engine.Engine, extra_pages: int) -> Any:
    """Every new connection of ``engine`` may grow the file by ``extra_pages`` pages at most; the listener."""
    with engine.connect() as conn:
        pages = int(conn.exec_driver_sql("PRAGMA page_count").scalar() or 0)

    @event.listens_for(engine, "connect")
    def _cap(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute(f"PRAGMA max_page_count={pages + extra_pages}")

    engine.dispose()
    return _cap


def test_a_full_database_is_507_with_nothing_stored_and_health_degraded(tmp_path: Path) -> None:
    import requests

    with _server(tmp_path) as (server, _):
        cap = _cap_pages(server.storage.engine, 2)
        before = server.storage.table_counts()
        reports = make_reports(PARAMS, server.keys.seal_public_raw, 400, seed=2).envelopes
        answer = post_reports(server.url, reports)
        assert answer.status_code == 507 and answer.json()["error"] == "insufficient_storage", answer.text
        assert int(answer.headers["Retry-After"]) > 0
        assert server.storage.table_counts() == before  # nothing half-stored
        health = requests.get(f"{server.url}/v1/health", timeout=10).json()
        assert health["status"] == "degraded"
        assert [p["dependency"] for p in health["problems"]] == ["storage"]
        event.remove(server.storage.engine, "connect", cap)
        server.storage.engine.dispose()
        assert post_reports(server.url, reports).json()["accepted"] == 400  # room again: stored


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path | None]:
    """A 16 KiB tmpfs, or ``None`` where this machine does not let us mount one."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(folder)],
                             capture_output=True, check=False).returncode == 0
    try:
        yield folder if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", str(folder)], check=False)


def _fill_database(settings: Settings) -> None:
    storage = Storage.open(settings.database_url)
    for i in range(5):  # with the tables and indexes, ~100 KiB: more than the small disk holds
        storage.put_metric(make_params(f"m{i}"))
    storage.close()


@pytest.mark.parametrize("disk", ["small_disk", "injected"])
def test_backup_on_a_full_disk_leaves_nothing_and_says_why(
    disk: str, tmp_path: Path, small_disk: Path | None, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if disk == "small_disk" and small_disk is None:
        pytest.skip("this machine does not let the tests mount a tmpfs; the injected case runs instead")
    data = tmp_path / "data"
    settings = Settings(data_dir=data)
    _fill_database(settings)
    if disk == "injected":  # what a full disk does to the copy, wherever it happens
        real_copy = backup_module._copy

        def full(source: Path, partial: Path) -> tuple[str, int]:
            real_copy(source, partial)
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(backup_module, "_copy", full)
        folder = tmp_path / "copies"
        folder.mkdir()
    else:
        assert small_disk is not None
        folder = small_disk
    assert main(["backup", "--data-dir", str(data), str(folder / "copy.db")]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "full" in line and "copy.db" in line, line
    assert sorted(os.listdir(folder)) == []  # neither the copy nor its partial file
