"""The data directory is 0700 and the SQLite files 0600 whatever the umask; shared folders are refused.

Before: under umask 022 the data directory came out 0755 and the database
0644 (readable by every local user: keys and raw reports), though the docs
promise 0700.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from aggsupport import make_params

from aggregator import create_app
from aggregator.cli.main import main
from protocol.crypto import AggregatorKeys
from protocol.errors import ParameterError


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o000])
def test_a_new_data_dir_and_its_database_are_private(tmp_path: Path, mask: int) -> None:
    folder = tmp_path / "fresh" / "data"
    with umask(mask):
        app = create_app({"data_dir": folder}, keys=AggregatorKeys.generate())
        storage = app.extensions["onesided"].storage
        storage.put_metric(make_params())  # a write: the -wal and -shm files exist now
        db = folder / "onesided.db"
        assert mode(folder) == 0o700
        for name in ("onesided.db", "onesided.db-wal", "onesided.db-shm"):
            assert (folder / name).exists() and mode(folder / name) == 0o600, name
        storage.close()
    assert db.exists()


def test_existing_files_are_made_private_again(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    with umask(0o022):
        app = create_app({"data_dir": tmp_path}, keys=AggregatorKeys.generate())
        app.extensions["onesided"].storage.close()
        for name in ("onesided.db", "onesided.db-wal", "onesided.db-shm"):
            path = tmp_path / name
            if path.exists():
                path.chmod(0o644)
        again = create_app({"data_dir": tmp_path}, keys=AggregatorKeys.generate())
        again.extensions["onesided"].storage.close()
    assert mode(tmp_path / "onesided.db") == 0o600
    for name in ("onesided.db-wal", "onesided.db-shm"):
        assert not (tmp_path / name).exists() or mode(tmp_path / name) == 0o600


def test_our_own_loose_data_dir_is_made_private_again(tmp_path: Path) -> None:
    own = tmp_path / "own"
    (own / "keys").mkdir(parents=True)
    own.chmod(0o755)  # mkdir under umask 022, or an earlier version
    app = create_app({"data_dir": own}, keys=AggregatorKeys.generate())
    app.extensions["onesided"].storage.close()
    assert mode(own) == 0o700 and mode(own / "onesided.db") == 0o600


def test_a_shared_data_dir_is_refused_unless_allowed(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "notes.txt").write_text("someone else's file")
    shared.chmod(0o755)
    with pytest.raises(ParameterError) as err:
        create_app({"data_dir": shared}, keys=AggregatorKeys.generate())
    assert err.value.field == "data_dir"
    assert str(shared) in str(err.value) and "0755" in str(err.value) and "--allow-shared-data-dir" in str(err.value)
    assert not (shared / "onesided.db").exists()  # refused before anything was written
    app = create_app({"data_dir": shared, "allow_shared_data_dir": True}, keys=AggregatorKeys.generate())
    app.extensions["onesided"].storage.close()
    assert mode(shared / "onesided.db") == 0o600  # the files are private even then


def test_serve_refuses_a_shared_data_dir_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shared = tmp_path / "world"
    shared.mkdir()
    (shared / "other").mkdir()
    shared.chmod(0o750)
    assert main(["serve", "--data-dir", str(shared)]) == 2
    assert str(shared) in capsys.readouterr().err
    assert not (shared / "keys").exists()  # no keys were made in it
