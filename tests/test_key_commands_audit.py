"""``keys init|rotate|backup|restore`` and ``backup`` leave an audit entry (actor ``cli:USER``), never a secret.

Before, none of them recorded anything, so "who rotated the seal key, and when" had no answer. The order is: open
the database, change the files, write the entry; a database that cannot be opened changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from aggregator.cli.main import main
from aggregator.server.settings import Settings
from aggregator.server.storage import Storage
from protocol.crypto import AggregatorKeys, b64e

PASSPHRASE = "correct horse battery staple"


def _entries(data: Path) -> list[dict[str, Any]]:
    storage = Storage.open(Settings(data_dir=data).database_url)
    try:
        return [e.to_dict() for e in storage.audit_entries()]
    finally:
        storage.close()


def _secrets(keys: Path) -> list[str]:
    """Every key file's bytes in the forms an entry could leak them: raw text, hex and base64url of the raw key."""
    out = []
    for item in keys.rglob("*.key"):
        text = item.read_text().strip()
        out.append(text)
    loaded = AggregatorKeys.load(keys)
    for raw in (loaded.seal_private.private_bytes_raw(), loaded.sign_private.private_bytes_raw()):
        out += [raw.hex(), b64e(raw)]
    return [s for s in out if s]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    assert main(["keys", "init", "--data-dir", str(folder)]) == 0
    Storage.open(Settings(data_dir=folder).database_url).close()
    (tmp_path / "pw").write_text(PASSPHRASE + "\n")
    return folder


def test_each_command_records_its_key_ids_and_files_and_no_secret(
        data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d, pw = ["--data-dir", str(data)], ["--passphrase-file", str(tmp_path / "pw")]
    first = AggregatorKeys.load(data / "keys").public_info()
    assert main(["keys", "rotate", "--seal", *d, "--keep-old-days", "2"]) == 0
    seal_rotated = AggregatorKeys.load(data / "keys").public_info()
    assert main(["keys", "rotate", "--sign", *d]) == 0
    assert main(["keys", "rotate", "--sign", *d]) == 0
    switched = AggregatorKeys.load(data / "keys").public_info()
    assert main(["keys", "backup", str(tmp_path / "k.backup"), *d, *pw]) == 0
    assert main(["keys", "restore", str(tmp_path / "k.backup"), "--key-dir", str(tmp_path / "copy"), *d, *pw]) == 0
    assert main(["backup", *d, str(tmp_path / "db.backup")]) == 0
    capsys.readouterr()
    entries = _entries(data)
    assert [e["action"] for e in entries] == [
        "keys rotate --seal", "keys rotate --sign (announced)", "keys rotate --sign (switched)", "keys backup",
        "keys restore", "backup"]
    assert all(e["actor"].startswith("cli:") and e["role"] == "operator" and e["status"] == 0
               and e["address_class"] == "local" and e["address"] is None for e in entries)
    seal, announced, switch, backup, restore, db = (e["detail"] for e in entries)
    assert seal["old_seal_key_id"] == first["seal_key_id"] != seal["new_seal_key_id"] == seal_rotated["seal_key_id"]
    assert seal["old_opens_until"] * 1000 - entries[0]["at"] == pytest.approx(2 * 86400 * 1000, abs=5000)
    assert announced["next_sign_key_id"] == switched["sign_key_id"] != announced["sign_key_id"]
    assert switch == {"old_sign_key_id": first["sign_key_id"], "new_sign_key_id": switched["sign_key_id"]}
    assert entries[3]["target"] == str(tmp_path / "k.backup") and backup["files"] == 4
    assert entries[4]["target"] == str(tmp_path / "k.backup") and restore["key_dir"] == str(tmp_path / "copy")
    assert restore["seal_key_id"] == seal_rotated["seal_key_id"]
    assert entries[5]["target"] == str(tmp_path / "db.backup") and db["schema_version"] >= 4
    written = json.dumps(entries)
    assert PASSPHRASE not in written
    assert not [s for s in _secrets(data / "keys") if s in written]


def test_a_database_that_cannot_be_opened_stops_the_command_with_the_keys_untouched(
        data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = {p: p.read_bytes() for p in (data / "keys").rglob("*") if p.is_file()}
    missing = ["--data-dir", str(tmp_path / "elsewhere"), "--key-dir", str(data / "keys")]
    assert main(["keys", "rotate", "--seal", *missing]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --data-dir: no database at") and "nothing was changed" in err
    assert not (tmp_path / "elsewhere").exists()  # no stray database made for the entry
    unreachable = ["--db", f"sqlite:///{tmp_path / 'no-such-dir' / 'x.db'}", "--key-dir", str(data / "keys")]
    assert main(["keys", "rotate", "--sign", *unreachable]) == 2
    assert "error: --db:" in capsys.readouterr().err
    assert main(["keys", "backup", str(tmp_path / "k.backup"), *missing, "--passphrase-file",
                 str(tmp_path / "pw")]) == 2
    assert not (tmp_path / "k.backup").exists()
    assert {p: p.read_bytes() for p in (data / "keys").rglob("*") if p.is_file()} == files
    assert _entries(data) == []


def test_a_restore_checks_the_passphrase_first_and_replaces_keys_only_with_a_database(
        data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "backup", str(tmp_path / "k.backup"), "--data-dir", str(data), "--passphrase-file",
                 str(tmp_path / "pw")]) == 0
    (tmp_path / "wrong").write_text("not the passphrase at all")
    restore = ["keys", "restore", str(tmp_path / "k.backup"), "--passphrase-file"]
    new_disk = ["--data-dir", str(tmp_path / "new")]
    assert main([*restore, str(tmp_path / "wrong"), *new_disk]) == 2
    assert "passphrase: does not open" in capsys.readouterr().err and not (tmp_path / "new").exists()
    # a new disk: no key to replace and no database yet (its backup is restored next); the keys go back, and it
    # says the restore could not be recorded; no empty database is made for it
    assert main([*restore, str(tmp_path / "pw"), *new_disk]) == 0
    assert "not in the audit log" in capsys.readouterr().err
    assert (tmp_path / "new" / "keys").is_dir() and not (tmp_path / "new" / "onesided.db").exists()
    # replacing keys needs the database: without one, nothing is written
    files = {p: p.read_bytes() for p in (data / "keys").rglob("*") if p.is_file()}
    assert main([*restore, str(tmp_path / "pw"), "--key-dir", str(data / "keys"), "--data-dir",
                 str(tmp_path / "elsewhere"), "--force"]) == 2
    assert "no database at" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in (data / "keys").rglob("*") if p.is_file()} == files
    assert main([*restore, str(tmp_path / "pw"), "--data-dir", str(data), "--force"]) == 0
    (entry,) = [e for e in _entries(data) if e["action"] == "keys restore"]
    assert entry["detail"]["replaced_seal_key_id"] == entry["detail"]["seal_key_id"]  # the same keys went back


@pytest.mark.parametrize("command", [["rotate", "--seal"], ["init", "--force"]])
def test_an_entry_that_cannot_be_written_after_the_keys_changed_says_so_and_exits_1(
        command: list[str], data: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    before = AggregatorKeys.load(data / "keys").public_info()["seal_key_id"]

    def refuse(self: Storage, entry: object) -> None:
        raise OperationalError("INSERT INTO audit_log", {}, Exception("database is locked"))

    monkeypatch.setattr(Storage, "record_audit", refuse)
    assert main(["keys", *command, "--data-dir", str(data), "--json"]) == 1
    out, err = capsys.readouterr()
    after = AggregatorKeys.load(data / "keys").public_info()["seal_key_id"]
    assert after != before and json.loads(out)["seal_key_id"] == after  # the change is done and shown
    line = [x for x in err.splitlines() if x.startswith("error: audit_log:")]
    assert len(line) == 1 and "do not run the command again" in line[0] and before in line[0] and after in line[0]


def _files(keys: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in keys.rglob("*") if p.is_file()}


def test_a_first_init_goes_on_without_a_database_and_is_recorded_where_one_exists(
        data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a new install: `keys init` comes before the first `serve` makes the database; no empty database is made
    fresh = tmp_path / "fresh"
    assert main(["keys", "init", "--data-dir", str(fresh), "--json"]) == 0
    out, err = capsys.readouterr()
    made = json.loads(out)
    (note,) = [x for x in err.splitlines() if x.startswith("note:")]
    assert "this init is not in the audit log" in note and made["seal_key_id"] in note and made["sign_key_id"] in note
    assert (fresh / "keys").is_dir() and not (fresh / "onesided.db").exists()
    # keys made for a server whose database exists (here into a new key directory): one row, nothing replaced
    assert main(["keys", "init", "--data-dir", str(data), "--key-dir", str(tmp_path / "second")]) == 0
    assert "not in the audit log" not in capsys.readouterr().err
    (entry,) = _entries(data)
    new = AggregatorKeys.load(tmp_path / "second").public_info()
    assert entry["action"] == "keys init" and entry["target"] == str(tmp_path / "second")
    assert entry["actor"].startswith("cli:") and entry["role"] == "operator" and entry["status"] == 0
    assert entry["detail"] == {"seal_key_id": new["seal_key_id"], "sign_key_id": new["sign_key_id"]}
    assert not [s for s in _secrets(tmp_path / "second") if s in json.dumps(entry)]


def test_init_force_needs_the_database_and_records_the_replaced_key_ids(
        data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys = data / "keys"
    files, old = _files(keys), AggregatorKeys.load(keys).public_info()
    missing = ["--data-dir", str(tmp_path / "elsewhere"), "--key-dir", str(keys)]
    assert main(["keys", "init", "--force", *missing]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --data-dir: no database at") and "nothing was changed" in err
    assert not (tmp_path / "elsewhere").exists()
    unreachable = ["--db", f"sqlite:///{tmp_path / 'no-such-dir' / 'x.db'}", "--key-dir", str(keys)]
    assert main(["keys", "init", "--force", *unreachable]) == 2
    assert "error: --db:" in capsys.readouterr().err
    # without --force existing keys are refused before the database is even opened
    assert main(["keys", "init", *unreachable]) == 2
    assert "refusing to replace keys" in capsys.readouterr().err
    assert _files(keys) == files and _entries(data) == []
    assert main(["keys", "init", "--force", "--data-dir", str(data)]) == 0
    assert "every client must pin the new signing key" in capsys.readouterr().err
    new = AggregatorKeys.load(keys).public_info()
    assert new["sign_key_id"] != old["sign_key_id"] and new["seal_key_id"] != old["seal_key_id"]
    (entry,) = _entries(data)
    assert entry["action"] == "keys init --force" and entry["target"] == str(keys)
    assert entry["detail"] == {"seal_key_id": new["seal_key_id"], "sign_key_id": new["sign_key_id"],
                               "replaced_seal_key_id": old["seal_key_id"], "replaced_sign_key_id": old["sign_key_id"]}
    assert not [s for s in _secrets(keys) if s in json.dumps(entry)]


def test_init_force_over_a_damaged_directory_is_recorded_without_replaced_ids(
        data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (data / "keys" / "seal_x25519.key").write_text("not a key\n")
    assert main(["keys", "init", "--force", "--data-dir", str(data)]) == 0
    (entry,) = _entries(data)
    assert entry["action"] == "keys init --force" and set(entry["detail"]) == {"seal_key_id", "sign_key_id"}

