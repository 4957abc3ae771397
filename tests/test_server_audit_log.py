"""The audit log: every admin and analyst route leaves an entry; the table is append-only.

Before, nothing recorded who opened a round, created or revoked a token,
created a metric or released a central answer.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from aggsupport import BACKENDS, app_in, bearer, database_url, make_params
from flask import Flask

from aggregator.cli.main import main
from aggregator.cli.render import iso_time
from aggregator.server.logs import JsonFormatter
from aggregator.server.settings import Settings
from aggregator.server.storage import Storage

PARAMS = make_params()
PATH_ARGUMENT = re.compile(r"<(?:([a-z_]+):)?([a-z_]+)>")


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    with app_in(tmp_path) as app:
        yield app


def _audited_routes(app: Flask) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(method, rule, roles)`` of every route that needs a token."""
    routes = []
    for rule in app.url_map.iter_rules():
        roles = getattr(app.view_functions[rule.endpoint], "required_roles", None)
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            if roles is not None:
                routes.append((method, rule.rule, roles))
    return routes


def _path(rule: str) -> str:
    return PATH_ARGUMENT.sub(lambda m: "1" if m.group(1) == "id" else PARAMS.name, rule)


def test_every_admin_and_analyst_route_leaves_an_entry(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    storage = app.extensions["onesided"].storage
    admin = bearer(storage.create_token(role="admin", name="ops")[1])
    analyst = bearer(storage.create_token(role="analyst", name="alice")[1])
    client = app.test_client()
    assert client.post("/v1/metrics", json=PARAMS.to_dict(), headers=admin).status_code == 201
    opened = client.post(f"/v1/metrics/{PARAMS.name}/rounds", json={"level_to": 3.0}, headers=admin)
    assert opened.status_code == 201, opened.get_json()
    routes = _audited_routes(app)
    assert {rule for _, rule, roles in routes if roles == ("admin",)} >= {
        "/v1/metrics", "/v1/metrics/<name>/rounds", "/v1/rounds/<id:round_id>/close"}
    already = len(caplog.records)  # the set-up's events, if the level let them through
    with caplog.at_level(logging.INFO, logger="onesided.audit"):
        for method, rule, _ in routes:
            client.open(_path(rule), method=method, json={} if method == "POST" else None, headers=admin)
        client.post("/v1/metrics", json=PARAMS.to_dict(), headers=analyst)  # refused: 403, still recorded
        client.post("/v1/metrics", json=PARAMS.to_dict(), headers=bearer("ons_unknown"))  # 401: not recorded
    entries = storage.audit_entries()
    actions = [(e.actor, e.action) for e in entries]
    for method, rule, _ in routes:
        assert ("ops", f"{method} {rule}") in actions, (method, rule)
    first_round = next(e for e in entries if e.action == "POST /v1/metrics/<name>/rounds")
    assert first_round.target == "/v1/metrics/places/rounds" and first_round.status == 201
    assert first_round.detail == {"level_to": 3.0}
    assert (first_round.address_class, first_round.address) == ("loopback", "127.0.0.0/24")
    refused = entries[-1]
    assert (refused.actor, refused.role, refused.status) == ("alice", "analyst", 403)
    assert not any(e.actor not in ("ops", "alice") for e in entries)
    events = [r for r in caplog.records[already:] if r.name == "onesided.audit"]
    assert len(events) == len(entries) - 2  # one per entry but the two set-up requests
    logged = json.loads(JsonFormatter().format(events[-1]))
    assert logged["audit"]["actor"] == "alice" and logged["audit"]["status"] == 403


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_table_refuses_updates_and_deletes(backend: str, tmp_path: Path) -> None:
    from aggregator.server.storage.audit import operator_entry

    with database_url(backend, tmp_path) as url:
        storage = Storage.open(url)
        try:
            storage.record_audit(operator_entry("token create", "ops", {"role": "admin"}))
            for statement in ("UPDATE audit_log SET actor = 'someone else'", "DELETE FROM audit_log"):
                with pytest.raises(sa.exc.DBAPIError, match="append-only"), storage.engine.begin() as conn:
                    conn.execute(sa.text(statement))
            assert [e.actor.startswith("cli:") for e in storage.audit_entries()] == [True]
        finally:
            storage.close()


def test_commands_are_recorded_and_audit_log_filters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path)]
    assert main(["token", "create", "--role", "analyst", "--name", "bob", *data]) == 0
    assert main(["token", "revoke", "--name", "bob", *data]) == 0
    assert main(["purge", *data]) == 0
    capsys.readouterr()
    assert main(["audit-log", *data, "--action", "token", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(e["action"], e["target"], e["role"], e["address_class"]) for e in listed] == [
        ("token create", "bob", "operator", "local"), ("token revoke", "bob", "operator", "local")]
    assert main(["audit-log", *data, "--since", "2000-01-01", "--until", "2000-01-02", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["audit-log", *data, "--since", "0", "--json"]) == 0  # Unix seconds work as well
    everything = json.loads(capsys.readouterr().out)
    assert main(["audit-log", *data]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["when", "actor", "role", "action", "target", "status", "address_class", "network",
                              "detail"]
    assert len(rows) == len(everything) == 3  # a header, then one aligned row per entry, oldest first
    purge = everything[-1]
    assert rows[-1].split()[:6] == [iso_time(purge["at"] / 1000), purge["actor"], "operator", "purge", "-", "0"]
    assert rows[-1].endswith('{"deleted_reports":0,"retention_seconds":7776000}')
    assert rows[0].split()[3:5] == ["token", "create"] and rows[0].index("local") == header.index("address_class")
    with pytest.raises(SystemExit) as refused:
        main(["audit-log", *data, "--since", "last tuesday"])
    assert refused.value.code == 2 and "argument --since: expected Unix seconds or an ISO-8601" in capsys.readouterr().err
    storage = Storage.open(Settings(data_dir=tmp_path).database_url)
    assert len(storage.audit_entries(limit=2)) == 2  # the most recent two
    storage.close()
