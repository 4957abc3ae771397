"""Key management: folders 0700, ``--key-dir`` honoured, passphrase backups, seal and sign rotation."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aggsupport import bearer, make_params, make_reports
from flask import Flask

from aggregator import create_app
from aggregator.cli.main import main
from aggregator.server.keyring import load_keyring
from aggregator.server.storage import Storage
from protocol.crypto import AggregatorKeys, verify_document
from protocol.wire import AggregatorInfo

PARAMS = make_params()
PASSPHRASE = "correct horse battery staple"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _json_out(capsys: pytest.CaptureFixture[str]) -> Any:
    return json.loads(capsys.readouterr().out)


def test_init_makes_private_folders_and_honours_key_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "init", "--data-dir", str(tmp_path / "data")]) == 0
    assert _mode(tmp_path / "data") == 0o700 and _mode(tmp_path / "data" / "keys") == 0o700
    capsys.readouterr()
    assert main(["keys", "init", "--data-dir", str(tmp_path / "other"), "--key-dir", str(tmp_path / "k"), "--json"]) == 0
    shown = _json_out(capsys)
    assert shown["key_dir"] == str(tmp_path / "k") and _mode(tmp_path / "k") == 0o700
    assert not (tmp_path / "other").exists()  # the keys went where --key-dir said
    assert main(["keys", "show", "--key-dir", str(tmp_path / "k"), "--json"]) == 0
    assert _json_out(capsys)["seal_key_id"] == shown["seal_key_id"]


def test_backup_and_restore_with_a_passphrase(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys, copy, backup = tmp_path / "keys", tmp_path / "restored", tmp_path / "keys.backup"
    secret = tmp_path / "passphrase"
    secret.write_text(PASSPHRASE + "\n")
    AggregatorKeys.generate().save(keys)
    Storage.open(f"sqlite:///{tmp_path / 'onesided.db'}").close()  # the audit log the key commands write to
    db = ["--data-dir", str(tmp_path)]
    assert main(["keys", "rotate", "--seal", "--key-dir", str(keys), *db, "--json"]) == 0  # a retired key travels too
    before = _json_out(capsys)
    assert main(["keys", "backup", str(backup), "--key-dir", str(keys), *db, "--passphrase-file", str(secret)]) == 0
    capsys.readouterr()
    assert _mode(backup) == 0o600
    assert AggregatorKeys.load(keys).seal_private.private_bytes_raw().hex() not in backup.read_text()
    wrong = tmp_path / "wrong"
    wrong.write_text("not the passphrase at all")
    assert main(["keys", "restore", str(backup), "--key-dir", str(copy), *db, "--passphrase-file", str(wrong)]) == 2
    assert "passphrase" in capsys.readouterr().err and not (copy / "seal_x25519.key").exists()
    assert main(["keys", "restore", str(backup), "--key-dir", str(copy), *db, "--passphrase-file", str(secret), "--json"]) == 0
    after = _json_out(capsys)
    assert {k: v for k, v in after.items() if k != "key_dir"} == {k: v for k, v in before.items() if k != "key_dir"}
    assert _mode(copy) == 0o700 and all(_mode(f) == 0o600 for f in copy.rglob("*") if f.is_file())
    assert main(["keys", "restore", str(backup), "--key-dir", str(copy), *db, "--passphrase-file", str(secret)]) == 2
    assert "--force" in capsys.readouterr().err  # keys are never replaced silently
    short = tmp_path / "short"
    short.write_text("short")
    assert main(["keys", "backup", str(tmp_path / "b2"), "--key-dir", str(keys), *db, "--passphrase-file", str(short)]) == 2
    assert not (tmp_path / "b2").exists()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A SQLite database with the metric and an admin token; keys in a separate ``--key-dir``."""
    from aggregator.server.storage import Storage

    (tmp_path / "keys").parent.mkdir(exist_ok=True)
    AggregatorKeys.generate().save(tmp_path / "keys")
    storage = Storage.open(f"sqlite:///{tmp_path / 'data' / 'onesided.db'}")
    storage.put_metric(PARAMS)
    token = storage.create_token(role="admin", name="ops")[1]
    storage.close()
    yield tmp_path, token


def _app(folder: Path) -> Flask:
    return create_app({"data_dir": str(folder / "data"), "key_dir": str(folder / "keys")})


def _close(app: Flask) -> None:
    state = app.extensions["onesided"]
    state.opener.close()
    state.offloader.close()
    state.storage.close()


def _upload(app: Flask, seal_public: bytes, seed: int) -> list[str]:
    from protocol.wire import encode_batch_json

    envelopes = make_reports(PARAMS, seal_public, 3, seed=seed).envelopes
    answer = app.test_client().post("/v1/reports", json=encode_batch_json(envelopes))
    return [r["status"] for r in answer.get_json()["results"]]


def test_a_rotated_seal_key_opens_old_reports_until_its_date(served: tuple[Path, str]) -> None:
    folder, token = served
    old_public = AggregatorKeys.load(folder / "keys").seal_public_raw
    assert main(["keys", "rotate", "--seal", "--key-dir", str(folder / "keys"), "--data-dir", str(folder / "data"), "--keep-old-days", "7"]) == 0
    new_public = AggregatorKeys.load(folder / "keys").seal_public_raw
    assert new_public != old_public
    app = _app(folder)
    try:
        config = app.test_client().get("/v1/config").get_json()["payload"]
        assert AggregatorInfo.from_dict(config["aggregator"]).seal_public == new_public
        assert _upload(app, new_public, seed=1) == ["accepted"] * 3
        assert _upload(app, old_public, seed=2) == ["accepted"] * 3  # a device's queue sealed before the rotation
        assert _upload(app, AggregatorKeys.generate().seal_public_raw, seed=3) == ["decrypt_error"] * 3
    finally:
        _close(app)
    assert main(["keys", "rotate", "--seal", "--key-dir", str(folder / "keys"), "--data-dir", str(folder / "data"), "--keep-old-days", "0"]) == 0
    app = _app(folder)
    try:  # the first old key's date is 7 days away, the second's has passed
        assert _upload(app, old_public, seed=4) == ["accepted"] * 3
        assert _upload(app, new_public, seed=5) == ["decrypt_error"] * 3
    finally:
        _close(app)
    ring = load_keyring(folder / "keys")
    assert sorted(r.until > 0 for r in ring.retired) == [True, True] and len(ring.open_until(0)) == 2


def test_signing_key_rotation_is_announced_in_the_config_then_switched(served: tuple[Path, str]) -> None:
    folder, _ = served
    pinned = AggregatorKeys.load(folder / "keys").sign_public_raw
    assert main(["keys", "rotate", "--sign", "--key-dir", str(folder / "keys"), "--data-dir", str(folder / "data")]) == 0
    app = _app(folder)
    try:
        document = app.test_client().get("/v1/config").get_json()
        payload = verify_document(pinned, document)  # still signed by the pinned key
        info = AggregatorInfo.from_dict(payload["aggregator"])
        assert info.next_sign_public is not None and info.sign_public == pinned
    finally:
        _close(app)
    assert main(["keys", "rotate", "--sign", "--key-dir", str(folder / "keys"), "--data-dir", str(folder / "data")]) == 0
    app = _app(folder)
    try:
        document = app.test_client().get("/v1/config").get_json()
        payload = verify_document(info.next_sign_public, document)  # the announced key signs now
        assert "next_sign_public" not in payload["aggregator"]
        assert app.test_client().get("/v1/metrics", headers=bearer("ons_x")).status_code == 401
    finally:
        _close(app)
