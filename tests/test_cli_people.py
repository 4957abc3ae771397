"""The operator and client commands speak to people: lines and tables by default, the same facts as ``--json``.

Each test runs a command twice, for people and with ``--json``, and checks
that the text shows what the JSON holds (times as ISO-8601 UTC), never a
secret. Releases and the client CLI run against one live aggregator with a
trusted metric (the world of ``test_aggregator_releases``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_aggregator_releases import make_world

from aggregator.cli.main import main
from aggregator.cli.render import iso_time
from aggregator.server.storage import Storage
from protocol.crypto import SEAL_KEY_FILE, SIGN_KEY_FILE, b64e

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def text_and_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, Any]:
    """The command's output for people, then its ``--json`` output parsed (both must succeed)."""
    assert main(list(argv)) == 0
    text = capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    return text, json.loads(capsys.readouterr().out)


def test_token_list_and_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path)]
    assert main(["token", "list", *data]) == 0
    assert capsys.readouterr().out.startswith("no tokens yet")
    for role, name in (("admin", "ops"), ("analyst", "alice")):
        assert main(["token", "create", "--role", role, "--name", name, *data]) == 0
    secret = capsys.readouterr().out.splitlines()[-1]
    assert main(["token", "revoke", "--name", "alice", *data]) == 0
    revoked = capsys.readouterr().out
    assert revoked.startswith("revoked analyst token 'alice' (created ") and len(ISO.findall(revoked)) == 2
    text, listed = text_and_json(capsys, "token", "list", *data)
    header, *rows = text.splitlines()
    assert header.split() == ["id", "name", "role", "state", "created_at", "revoked_at"]
    by_name = {row.split()[1]: row.split() for row in rows}
    assert by_name["ops"][2:4] == ["admin", "active"] and by_name["ops"][-1] == "-"
    assert by_name["alice"][2:4] == ["analyst", "revoked"]
    alice = next(t for t in listed["tokens"] if t["name"] == "alice")
    assert by_name["alice"][4:] == [iso_time(alice["created_at"]), iso_time(alice["revoked_at"])]
    assert secret not in text


def test_keys_show_rotate_backup_restore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys = ["--key-dir", str(tmp_path / "keys"), "--data-dir", str(tmp_path)]  # the database holds the audit log
    Storage.open(f"sqlite:///{tmp_path / 'onesided.db'}").close()
    assert main(["keys", "init", *keys]) == 0
    text, shown = text_and_json(capsys, "keys", "show", *keys)
    assert text.splitlines()[0] == f"key directory {tmp_path / 'keys'}"
    assert re.search(rf"^sealing \(X25519\) +{shown['seal_key_id']} +{shown['seal_public']}$", text, re.M)
    assert re.search(rf"^signing \(Ed25519\) +{shown['sign_key_id']} +{shown['sign_public']}$", text, re.M)
    assert f"ONESIDED_SERVER_KEY={shown['sign_public']}" in text and "retired" not in text
    for private in (SEAL_KEY_FILE, SIGN_KEY_FILE):
        assert (tmp_path / "keys" / private).read_text().strip() not in text
    assert main(["keys", "rotate", "--seal", *keys, "--keep-old-days", "7"]) == 0
    rotated = capsys.readouterr()
    assert "SIGHUP" in rotated.err
    retired = re.search(rf"^{shown['seal_key_id']} +({ISO.pattern}) +yes$", rotated.out, re.M)
    assert retired is not None and "opens reports until" in rotated.out
    assert main(["keys", "rotate", "--sign", *keys]) == 0
    assert re.search(r"^next signing \(announced\) +[0-9a-f]{16} ", capsys.readouterr().out, re.M)
    secret = tmp_path / "pw"
    secret.write_text("correct horse battery staple\n")
    backup = ["keys", "backup", str(tmp_path / "k.backup"), *keys, "--passphrase-file", str(secret)]
    assert main(backup) == 0
    assert capsys.readouterr().out.startswith(f"wrote 5 key files, encrypted with the passphrase, to {tmp_path}")
    restore = ["keys", "restore", str(tmp_path / "k.backup"), "--key-dir", str(tmp_path / "copy"), *keys[2:],
               "--passphrase-file", str(secret)]
    assert main(restore) == 0
    assert f"key directory {tmp_path / 'copy'}" in capsys.readouterr().out


def test_purge_and_backup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    text, purged = text_and_json(capsys, "purge", *data, "--retention", "86400")
    assert purged == {"deleted_reports": 0, "retention_seconds": 86400}
    assert text == "deleted 0 raw reports whose window ended more than 1 day (86,400 s) ago; aggregates are kept\n"
    assert main(["backup", *data, str(tmp_path / "copy.db")]) == 0
    text = capsys.readouterr().out
    assert re.fullmatch(rf"copied \S+ to {tmp_path / 'copy.db'} \(mode 0600\): \d+ KiB, schema version \d+, "
                        r"integrity check ok\n", text)


def test_serve_start_lines_hide_the_database_password() -> None:
    import argparse

    from aggregator.cli.commands.serve import start_lines
    from aggregator.server.settings import Settings

    settings = Settings(db_url="postgresql+psycopg://ops:hunter2@db:5432/onesided", key_dir="/etc/onesided/keys")
    args = argparse.Namespace(host="::", port=8080, workers=4, threads=8)
    lines = start_lines(settings, args)
    assert "hunter2" not in lines and "ops:***@db" in lines
    assert lines.startswith("onesided serve: http://[::]:8080 (4 workers x 8 threads)")
    assert "keys in /etc/onesided/keys" in lines


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with make_world("sqlite", tmp_path_factory.mktemp("world")) as w:
        yield w


def test_release_create_show_list_budget(world: Any, capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--server", world.srv.url, "--token", world.tokens["alice"]]
    window = iso_time(world.window)
    assert main(["release", "create", "--metric", "visits", "--window", window, "--epsilon", "1", "--threshold",
                 "60", "--places", "place-00,place-05", *common]) == 0
    made = capsys.readouterr().out
    first = made.splitlines()[0]
    assert re.fullmatch(rf"release (\d+): visits, window {window}, ageo at epsilon 1 \(levels 1\), analyst alice",
                        first)
    release_id = first.split()[1].rstrip(":")
    text, shown = text_and_json(capsys, "release", "show", release_id, *common)
    assert shown["certificate"] in text and "protects: " in text
    rows = dict(line.split()[:2] for line in text.splitlines() if line.startswith("place-"))
    assert rows == {a["place"]: f"{a['answer']:g}" for a in shown["answers"]}
    assert main(["release", "relax", release_id, "--epsilon", "2.5", *common]) == 0
    relaxed = capsys.readouterr().out
    assert "(levels 1 -> 2.5)" in relaxed and "budget: 2.5 of 10 spent, 7.5 left (analyst alice" in relaxed
    text, listed = text_and_json(capsys, "release", "list", "--metric", "visits", *common)
    assert text.splitlines()[0].split() == ["id", "metric", "window", "analyst", "mechanism", "epsilon", "places",
                                            "updated_at"]
    assert text.splitlines()[1].split()[:7] == [release_id, "visits", window, "alice", "ageo", "2.5", "2"]
    text, budget = text_and_json(capsys, "release", "budget", "--metric", "visits", "--window", window, *common)
    assert budget["remaining"] == 7.5 and text.startswith("budget: 2.5 of 10 spent, 7.5 left")


def test_client_report_and_ledger(world: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--server", world.srv.url, "--server-key", b64e(world.srv.keys.sign_public_raw),
              "--state", str(tmp_path / "cli.state")]
    assert main(["client", "report", *common, "--metric", "visits-noisy", "place-01", "place-02"]) == 0
    reported = capsys.readouterr().out
    assert re.match(r"report \S+ for 'visits-noisy'\nsent: 1 delivered, 0 rejected, 0 dropped; 0 still queued\n",
                    reported)
    assert re.search(r"^windows +1$", reported, re.M) and re.search(r"^epsilon_per_report +\d", reported, re.M)
    text, ledger = text_and_json(capsys, "client", "ledger", *common)
    header, row = text.splitlines()[:2]
    assert header.split()[:6] == ["metric", "mode", "windows", "spent", "ceiling", "remaining"]
    entry = next(e for e in ledger["entries"] if e["metric"] == "visits-noisy")
    assert row.split()[:3] == ["visits-noisy", "asymmetric", "1"] and f"{entry['spent']:.4g}" in row
    assert "0 reports queued, 0 dropped" in text


def test_correlated_releases_print_one_block_per_analyst(world: Any, capsys: pytest.CaptureFixture[str]) -> None:
    admin = ["--server", world.srv.url, "--token", world.tokens["admin"]]
    flags = ["release", "create", "--metric", "visits", "--window", str(world.window), "--threshold", "60",
             "--places", "place-01", "--analyst", "alice=0.5", "--analyst", "bob=1", *admin]
    assert main(flags) == 0
    blocks = capsys.readouterr().out.split("\n\n")
    heads = sorted(b.splitlines()[0].split(", analyst ")[1] for b in blocks)
    assert heads == ["alice", "bob"] and all("budget: " in b for b in blocks)
