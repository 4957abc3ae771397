"""Six months (and three weeks of a RAPPOR metric) in the field, on simulated time, as an operator and an app
developer live with it.

The operator bootstraps by the documented commands (``keys init``, ``token create``, ``metric create`` over HTTP),
restarts the aggregator on the same SQLite data folder several times, rotates the sealing key (month 2) and the
signing key, opens a relaxation round (month 3), backs up and loses the data folder (month 4) and restores it.
Thirty real ``client_sdk.Client`` instances (the README's policy: 1.0 a day per metric, renewed daily, 2.0 for the
IRR metric; a first launch offline) report a daily set metric and a categorical metric every day, and a set metric
with an instantaneous randomized response (IRR) whose IRR the operator relaxes by two rounds: an IRR-only round
keeping the level (month 4, opened at noon between an app restart and an aggregator restart, with some apps offline
and one app declining it) and a round relaxing the level and the IRR (month 5). The background sender's turns are
driven by hand, one in the evening of each simulated day (the sender's thread runs the same function), so the run
is deterministic. A shorter run takes a symmetric (RAPPOR) metric through the same two kinds of IRR round.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aggsupport import bearer, make_reports
from clocks import Clock
from fieldsupport import (
    Aggregator,
    AppSession,
    http_front,
    operator,
    seeded_secrets,
    simulated_time,
)

import aggregator.cli.commands.keys as keys_command
import aggregator.server.keyring as keyring
from aggregator.server.keyring import load_keyring
from client_sdk import Client, RetryPolicy
from client_sdk.ledger import window_cost
from protocol.crypto import b64e, verify_document
from protocol.encodings import DirectEncoding
from protocol.errors import DecryptError
from protocol.params import MetricParams
from protocol.wire import open_report

DAY = 86_400
T0 = 1_790_000_000 // DAY * DAY  # simulated day 0 (UTC midnight)
CLIENTS = 30
DAYS = 182
PLACES_DOMAIN = ("cafe", "park", "museum", "library")
OS_DOMAIN = ("linux", "mac", "win")
PASSPHRASE = "field test passphrase, long enough"
# the operator's calendar (simulated days)
RESTARTS = (20, 75, 140)
SEAL_ROTATION, OLD_SEAL_DAYS = 40, 30
SIGN_ANNOUNCE, SIGN_SWITCH, APP_UPDATE = 60, 67, 70
ROUND_OPEN, ROUND_CLOSE = 85, 88
BACKUP, LOSS = 110, 115
# the IRR metric's rounds: IRR-only (day IRR_ROUND, noon), closed on IRR_CLOSE; level and IRR (LEVEL_ROUND, morning)
APPS_DOMAIN = ("mail", "maps", "chat", "news", "game")
APPS_LEVEL, APPS_IRR_Q = 2.0, 0.5
IRR_ROUND, IRR_CLOSE, IRR_Q_TO = 95, 100, 0.2
LEVEL_ROUND, LEVEL_CLOSE, LEVEL_TO, LEVEL_IRR_Q_TO = 150, 153, 4.0, 0.05
LATE = range(25, 29)  # offline from the noon the IRR round opens until the morning of day IRR_ROUND + 2
LATE_BACK = IRR_ROUND + 2
DECLINES = 7  # this app's accept_round declines the IRR metric's rounds
STUCK = range(5)  # these apps cannot upload from day 38 to 44 (their queues were sealed before the rotation)
STUCK_DAYS = range(38, 45)


def places_of(client: int, day: int) -> set[str]:
    """A client's places of the day: the truth the estimates are checked against (fixed, no randomness)."""
    picked = {PLACES_DOMAIN[(client + day) % 4]}
    if client % 3 == 0:
        picked.add("park")
    if (client * 7 + day) % 5 == 0:
        picked.add("library")
    return picked


def os_of(client: int) -> str:
    return OS_DOMAIN[client % 3]


def apps_of(client: int, day: int) -> set[str]:
    """A client's apps used that day (the IRR metric's truth)."""
    used = {APPS_DOMAIN[(client * 3 + day) % 5]}
    if client % 4 == 1:
        used.add("mail")
    if (client + 2 * day) % 7 == 0:
        used.add("game")
    return used


def test_six_months_in_the_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    # durability across power loss is tested elsewhere; ~20,000 fsyncs of the apps' states would dominate the run
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    seeded_secrets(monkeypatch, 1)  # with the apps' rng seeds: every report's bits are fixed
    clock = Clock(T0 + 8 * 3600.0)
    data, backups = tmp_path / "srv", tmp_path / "offsite"
    backups.mkdir(mode=0o700)
    # the CLI's key commands read the wall clock: give them the simulated one (the server gets it by create_app)
    monkeypatch.setattr(keys_command, "time", simulated_time(clock))
    monkeypatch.setattr(keyring, "time", simulated_time(clock))
    server = Aggregator(data, clock, sync_interval=DAY // 2)

    # --- day 0, the operator: keys, a token, the server, two metrics, a signed config --------------------------
    assert operator("keys", "init", "--data-dir", str(data))[0] == 0
    code, token, _ = operator("token", "create", "--role", "admin", "--name", "ops", "--data-dir", str(data))
    assert code == 0
    monkeypatch.setenv("ONESIDED_TOKEN", token.strip())
    server.start()
    pinned = server.app.extensions["onesided"].keys.sign_public_raw
    errors: list[tuple[int, str, str]] = []  # (simulated day, type, text) of everything the apps' on_error got
    sessions = [AppSession(server, offline=True) for _ in range(CLIENTS)]

    def launch(i: int, *keys: bytes) -> Client:
        return Client(
            "http://telemetry.test", tmp_path / "apps" / f"{i}" / "onesided.state", background=False,
            server_public_keys=[b64e(k) for k in keys], session=sessions[i], clock=clock, monotonic=clock,
            max_epsilon={"places": 1.0, "os": 1.0, "apps": 2.0},  # the IRR metric's second round needs 1.72 a day
            budget_period="day", retry=RetryPolicy(max_attempts=1), rng=1000 + i, insecure_rng_for_testing=True,
            on_error=lambda e: errors.append((int((clock.now - T0) // DAY), type(e).__name__, str(e))),
            accept_round=(lambda a: a.metric != "apps") if i == DECLINES else None,
        )

    with http_front(server) as url:
        monkeypatch.setenv("ONESIDED_SERVER", url)
        code, out, err = operator("metric", "create", "--name", "places", "--encoding", "direct", "--domain",
                                  ",".join(PLACES_DOMAIN), "--mode", "asymmetric", "--level", "1.0",
                                  "--time-precision", str(DAY), "--min-batch-size", "20", "--json")
        assert code == 0, err
        code, out, err = operator("metric", "create", "--name", "os", "--encoding", "direct", "--domain",
                                  ",".join(OS_DOMAIN), "--mode", "symmetric", "--level", "0.5", "--value-kind",
                                  "categorical", "--time-precision", str(DAY), "--min-batch-size", "20", "--json")
        assert code == 0, err
        code, out, err = operator("metric", "create", "--name", "apps", "--encoding", "direct", "--domain",
                                  ",".join(APPS_DOMAIN), "--mode", "asymmetric", "--level", str(APPS_LEVEL),
                                  "--irr-q", str(APPS_IRR_Q), "--time-precision", str(DAY), "--min-batch-size",
                                  "20", "--json")
        assert code == 0, err
        document = server.app.test_client().get("/v1/config").get_json()
        assert {m["params"]["name"] for m in verify_document(pinned, document)["metrics"]} == {"places", "os", "apps"}
        params = {m.name: m for m in (MetricParams.from_dict(e["params"])
                                      for e in verify_document(pinned, document)["metrics"])}

        # --- the apps' first launch is offline ------------------------------------------------------------------
        clients = [launch(i, pinned) for i in range(CLIENTS)]
        for client in clients:
            client._background.first()  # the sender's first turn: the first sync fails, nothing raises
        waited = 0
        keys: tuple[bytes, ...] = (pinned,)
        irr_round = level_round = 0  # the IRR metric's rounds, once opened
        apps_spent: dict[int, list[float]] = {}  # day -> each app's charge of the IRR metric that day, at evening
        round_window = T0 + ROUND_OPEN * DAY
        backup_at = loss_at = 0.0
        for day in range(DAYS):
            clock.now = T0 + day * DAY + 8 * 3600.0
            if day == 2:  # the network comes back
                for session in sessions:
                    session.offline = False
            for i in STUCK:
                sessions[i].uploads_fail = day in STUCK_DAYS
            if day in RESTARTS:
                server.restart()
            if day == SEAL_ROTATION:
                assert operator("keys", "rotate", "--seal", "--data-dir", str(data),
                                "--keep-old-days", str(OLD_SEAL_DAYS))[0] == 0
                server.restart()  # the documented step after a rotation
            if day in (SIGN_ANNOUNCE, SIGN_SWITCH):
                assert operator("keys", "rotate", "--sign", "--data-dir", str(data))[0] == 0
                server.restart()
            if day == APP_UPDATE:
                # the apps followed the announced signing key on their own (test_clients_follow_a_signing_key_
                # rotation); an app update pinning both keys changes nothing for them
                new_sign = server.app.extensions["onesided"].keys.sign_public_raw
                keys = (pinned, new_sign)
                for i, client in enumerate(clients):
                    client.close()
                    clients[i] = launch(i, *keys)
            if day == ROUND_OPEN:
                code, out, err = operator("round", "open", "places", "--level-to", "1.5", "--json")
                assert code == 0, err
                round_id = json.loads(out)["id"]
            if day == LATE_BACK:
                for i in LATE:
                    sessions[i].offline = False
            if day == IRR_CLOSE:
                assert operator("round", "close", str(irr_round))[0] == 0
            if day == LEVEL_ROUND:  # before the apps report: they report at the IRR round's level, then join
                code, out, err = operator("round", "open", "apps", "--level-to", str(LEVEL_TO), "--irr-q",
                                          str(LEVEL_IRR_Q_TO), "--json")
                assert code == 0, err
                level_round = json.loads(out)["id"]
            if day == LEVEL_CLOSE:
                assert operator("round", "close", str(level_round))[0] == 0
            if day == BACKUP:
                code, out, err = operator("backup", "--data-dir", str(data), str(backups / "onesided.db"), "--json")
                assert code == 0 and json.loads(out)["integrity_check"] == "ok", err
                (backups / "pass").write_text(PASSPHRASE)
                assert operator("keys", "backup", str(backups / "keys.backup"), "--data-dir", str(data),
                                "--passphrase-file", str(backups / "pass"))[0] == 0
                backup_at = clock.now
            if day == LOSS:  # the disk dies in the morning; the operator restores in the afternoon
                server.stop()
                shutil.rmtree(data)
                loss_at = clock.now
            if day == LOSS + 1:  # the next morning
                assert operator("keys", "restore", str(backups / "keys.backup"), "--data-dir", str(data),
                                "--passphrase-file", str(backups / "pass"))[0] == 0
                shutil.copyfile(backups / "onesided.db", data / "onesided.db")
                server.start()
            for i, client in enumerate(clients):
                rid = client.report("places", places_of(i, day))
                client.report("os", os_of(i))
                client.report("apps", apps_of(i, day))
                waited += rid.status == "waiting"
            if day == IRR_ROUND:  # noon: some apps go offline, every app restarts (its state reloaded from disk),
                clock.now = T0 + day * DAY + 12 * 3600.0  # the operator opens an IRR-only round, the server restarts
                for i in LATE:
                    sessions[i].offline = True
                for i, client in enumerate(clients):
                    client.close()
                    clients[i] = launch(i, *keys)
                code, out, err = operator("round", "open", "apps", "--level-to", str(APPS_LEVEL), "--irr-q",
                                          str(IRR_Q_TO), "--json")
                assert code == 0, err
                opened = json.loads(out)
                assert (opened["level_from"], opened["level_to"], opened["irr_q"]) == (APPS_LEVEL, APPS_LEVEL, IRR_Q_TO)
                irr_round = opened["id"]
                server.restart()
            clock.now = T0 + day * DAY + 20 * 3600.0  # evening: the sender's turn (sync when due, send)
            for client in clients:
                client._background.tick()
            if day in (IRR_ROUND, IRR_ROUND + 1, LATE_BACK, LEVEL_ROUND, LEVEL_ROUND + 1):
                apps_spent[day] = [c.ledger()["apps"].spent_this_period for c in clients]  # type: ignore[misc]
            if day == ROUND_CLOSE:  # late in the evening: a report of this window tagged with the round, delivered
                clock.now += 3 * 3600.0  # after the close, would be refused (test_a_round_closing_window_...)
                assert operator("round", "close", str(round_id))[0] == 0
        results = [client.close() for client in clients]

        # --- what the operator sees at the end ------------------------------------------------------------------
        health = server.app.test_client().get("/v1/health")
        assert health.status_code == 200 and health.get_json()["status"] == "ok"
        code, out, err = operator("estimates", "places", "--round", str(round_id), "--window", str(round_window),
                                  "--json")
        assert code == 0, err
        estimates = json.loads(out)
        apps_estimates = {}
        for rnd, day in ((irr_round, IRR_ROUND), (level_round, LEVEL_ROUND)):
            code, out, err = operator("estimates", "apps", "--round", str(rnd), "--window", str(T0 + day * DAY),
                                      "--json")
            assert code == 0, err
            apps_estimates[rnd] = json.loads(out)
        round_reports = {}  # what `round status` counts for each round of the IRR metric (all its windows)
        for rnd in (irr_round, level_round):
            code, out, err = operator("round", "status", str(rnd), "--json")
            assert code == 0, err
            shown = json.loads(out)
            assert (shown["metric"], shown["open"]) == ("apps", False)
            round_reports[rnd] = (shown["level_to"], shown["irr_p"], shown["irr_q"], shown["reports"])
        code, out, err = operator("audit-log", "--data-dir", str(data), "--json", "--limit", "1000")
        assert code == 0, err
        audit = json.loads(out)
    server.stop()

    # every report queued by every client left the device; nothing raised into the apps
    assert waited == 3 * CLIENTS  # days 0 and 1, and day 2 until the evening's sync, waited for a config
    assert all(r.remaining == 0 and r.error is None for r in results)
    assert {kind for _, kind, _ in errors} == {"TransportError"}, sorted({e for e in errors if e[1] != "TransportError"})[:8]

    # the data: what the aggregator told the apps it holds, less what arrived between the backup and the loss
    stored = _stored_reports(data, server)
    told = {rid: where for s in sessions for rid, where in s.accepted.items()}
    lost = {rid for s in sessions for rid, at in s.accepted_at.items() if backup_at < at < loss_at}
    assert lost and len(lost) == 3 * CLIENTS * (LOSS - BACKUP)  # the documented loss: days 110-114's reports
    assert set(stored) == set(told) - lost
    assert all(stored[rid] == told[rid] for rid in stored)  # metric, window and round as sent
    for rnd, level_irr in ((irr_round, (APPS_LEVEL, None, IRR_Q_TO)), (level_round, (LEVEL_TO, None, LEVEL_IRR_Q_TO))):
        assert round_reports[rnd] == (*level_irr, sum(where[2] == rnd for where in stored.values())), rnd
    # one report per client, metric and window, and each round member's re-send: none lost, none twice
    per_window: dict[tuple[str, int, int], int] = defaultdict(int)
    for metric, window, rnd in told.values():
        per_window[(metric, window, rnd)] += 1
    days = [T0 + d * DAY for d in range(DAYS)]
    # (the round's level stays in force: places reports carry the round from the day after it opened)
    # the IRR metric: the apps that joined a round re-send the window's report once and report later windows
    # tagged with the round; the late apps join two days late, the declining app reports at round 0 throughout
    joined, late = CLIENTS - len(LATE) - 1, len(LATE)
    apps_windows = {
        **{("apps", w, 0): CLIENTS for w in days[:IRR_ROUND + 1]},
        **{("apps", w, 0): late + 1 for w in days[IRR_ROUND + 1:LATE_BACK + 1]},
        **{("apps", w, 0): 1 for w in days[LATE_BACK + 1:]},
        ("apps", days[IRR_ROUND], irr_round): joined, ("apps", days[IRR_ROUND + 1], irr_round): joined,
        **{("apps", w, irr_round): joined + late for w in days[LATE_BACK:LEVEL_ROUND + 1]},
        **{("apps", w, level_round): joined + late for w in days[LEVEL_ROUND:]},
    }
    assert per_window == {**{("os", w, 0): CLIENTS for w in days},
                          **{("places", w, 0): CLIENTS for w in days[:ROUND_OPEN + 1]},
                          **{("places", w, round_id): CLIENTS for w in days[ROUND_OPEN:]}, **apps_windows}
    # the stuck apps' reports of days 38-44 were sealed to the retired key, and counted after the rotation
    ring = load_keyring(data / "keys")  # as restored from the key backup
    (retired,) = ring.retired
    assert retired.until == T0 + (SEAL_ROTATION + OLD_SEAL_DAYS) * DAY + 8 * 3600
    sealed_before = [(sessions[i], rid) for i in STUCK for rid, (_, w, _) in sessions[i].accepted.items()
                     if w in days[STUCK_DAYS[0]:SEAL_ROTATION]]
    assert len(sealed_before) == len(STUCK) * 3 * (SEAL_ROTATION - STUCK_DAYS[0])
    for session, rid in sealed_before:
        assert session.accepted_at[rid] > T0 + STUCK_DAYS[-1] * DAY  # delivered after the rotation
        kind = params[session.accepted[rid][0]]
        opened = open_report(session.envelopes[rid], seal_private=retired.private, num_bits=kind.num_bits,
                             num_cohorts=kind.num_cohorts, allow_plain=False)  # sealed to the retired key
        assert opened.level == kind.level
        with pytest.raises(DecryptError):
            open_report(session.envelopes[rid], seal_private=ring.keys.seal_private, num_bits=kind.num_bits,
                        num_cohorts=kind.num_cohorts, allow_plain=False)

    # every client's ledger is what the aggregator can infer from what it was sent
    level = {0: 1.0, round_id: 1.5}
    for i, client in enumerate(clients):
        for name in ("places", "os"):
            chains: dict[int, list[float]] = defaultdict(list)
            for metric, window, rnd in sessions[i].accepted.values():
                if metric == name:
                    chains[window].append(level[rnd] if name == "places" else 0.5)
            inferred = sum(window_cost(params[name], sorted(levels))[0] for levels in chains.values())
            entry = client.ledger()[name]
            assert entry.windows == DAYS and math.isclose(entry.spent, inferred, rel_tol=1e-6), (i, name)
            assert entry.spent_this_period is not None and entry.spent_this_period <= 1.0
        declined = [(e.kind, e.metric, e.detail) for e in client.ledger().events
                    if e.kind in ("refused", "round_refused", "dropped")]
        assert declined == ([("round_refused", "apps", f"round {r}: declined by the app")
                             for r in (irr_round, level_round)] if i == DECLINES else []), (i, declined)
    _check_irr_metric(clients, sessions, params["apps"], apps_spent, irr_round, level_round, ring.keys.seal_private)

    # the rounds' estimates agree with the truth within their stated error bars
    truth = {v: sum(v in places_of(i, ROUND_OPEN) for i in range(CLIENTS)) for v in PLACES_DOMAIN}
    _check_estimates(estimates, truth, level=1.5, reports=CLIENTS, max_std_error=CLIENTS / 4)
    members = [i for i in range(CLIENTS) if i not in LATE and i != DECLINES]  # the IRR round's re-senders
    truth = {v: sum(v in apps_of(i, IRR_ROUND) for i in members) for v in APPS_DOMAIN}
    _check_estimates(apps_estimates[irr_round], truth, level=APPS_LEVEL, reports=len(members),
                     max_std_error=len(members) / 3)
    members = [i for i in range(CLIENTS) if i != DECLINES]
    truth = {v: sum(v in apps_of(i, LEVEL_ROUND) for i in members) for v in APPS_DOMAIN}
    _check_estimates(apps_estimates[level_round], truth, level=LEVEL_TO, reports=len(members),
                     max_std_error=len(members) / 3)

    # the audit log holds every operator action; no log line carries a traceback; no answer was a 5xx but the outage
    _check_audit(audit)
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert not [s for s in server.statuses if s[2] >= 500]
    down = [a for s in sessions for a in s.answers if a >= 500]
    assert down == [503] * 2 * CLIENTS  # the evening it was down (sync and upload); sent the next day


def _stored_reports(data: Path, server: Aggregator) -> dict[str, tuple[str, int, int]]:
    """Every raw report in the restored database: report id -> (metric, window, round)."""
    import sqlalchemy as sa

    from aggregator.server.storage import schema

    server.start()
    try:
        storage = server.storage
        with storage.engine.connect() as conn:
            names = dict(conn.execute(sa.select(schema.metrics.c.id, schema.metrics.c.name)).all())
            rows = conn.execute(sa.select(schema.reports.c.metric_id, schema.reports.c.report_id,
                                          schema.reports.c.window_start, schema.reports.c.round_id)).all()
    finally:
        server.stop()
    from protocol.crypto import b64e as text

    return {text(bytes(r.report_id)): (names[r.metric_id], int(r.window_start), int(r.round_id)) for r in rows}


Z_LIMIT = 4.5


def _check_estimates(estimates: Any, truth: dict[str, int], *, level: float, reports: int,
                     max_std_error: float) -> None:
    """Each candidate's estimate within ``Z_LIMIT`` of its standard errors (each below ``max_std_error``) of the truth.

    The runs are deterministic (seeded secrets and IRR draws). Over seeds, the check fails at the rate measured by
    simulating the rounds' windows 8,000 times with fresh secrets through the same decoder: the places round 0.6%,
    the IRR metric's IRR round 1.6% and level round 0.3%, the RAPPOR rounds 0 and 2 of 8,000. At 25-30 reports the
    one-sided decoder's standard errors are plug-in values with heavy tails (at 3 standard errors those rates are
    3.8%, 7.9%, 4.7% and 1.2%), hence the wide limit.
    """
    assert (estimates["level"], estimates["reports"]) == (level, reports)
    rows = {row["candidate"]: row for row in estimates["rows"]}
    assert set(rows) == set(truth)
    for value, count in truth.items():
        row = rows[value]
        assert 0 < row["std_error"] < max_std_error, row
        assert abs(row["estimate"] - count) <= Z_LIMIT * row["std_error"], (value, count, row)


def _check_audit(audit: list[dict[str, Any]]) -> None:
    """The operator's actions on the restored database, in order (the backups of day BACKUP are recorded after the
    copy, so not in it; the keys restore of the next morning came before the database was back)."""
    seen = [(e["actor"], e["role"], e["action"], e["target"], e["status"]) for e in audit]
    keys = audit[4]["target"]
    opened = ("ops", "admin", "POST /v1/metrics/<name>/rounds", "/v1/metrics/apps/rounds", 201)
    assert seen == [
        (seen[0][0], "operator", "token create", "ops", 0),
        *[("ops", "admin", "POST /v1/metrics", "/v1/metrics", 201)] * 3,
        (seen[0][0], "operator", "keys rotate --seal", keys, 0),
        (seen[0][0], "operator", "keys rotate --sign (announced)", keys, 0),
        (seen[0][0], "operator", "keys rotate --sign (switched)", keys, 0),
        ("ops", "admin", "POST /v1/metrics/<name>/rounds", "/v1/metrics/places/rounds", 201),
        ("ops", "admin", "POST /v1/rounds/<id:round_id>/close", "/v1/rounds/1/close", 200),
        opened, ("ops", "admin", "POST /v1/rounds/<id:round_id>/close", "/v1/rounds/2/close", 200),
        opened, ("ops", "admin", "POST /v1/rounds/<id:round_id>/close", "/v1/rounds/3/close", 200),
        ("ops", "admin", "GET /v1/metrics/<name>/estimates",
         f"/v1/metrics/places/estimates?window={T0 + ROUND_OPEN * DAY}&round=1", 200),
        *[("ops", "admin", "GET /v1/metrics/<name>/estimates",
           f"/v1/metrics/apps/estimates?window={T0 + day * DAY}&round={rnd}", 200)
          for rnd, day in ((2, IRR_ROUND), (3, LEVEL_ROUND))],
        *[("ops", "admin", "GET /v1/rounds/<id:round_id>", f"/v1/rounds/{rnd}", 200) for rnd in (2, 3)],
    ], seen
    assert seen[0][0].startswith("cli:")
    assert [e["detail"]["name"] for e in audit[1:4]] == ["places", "os", "apps"]
    assert audit[7]["detail"]["level_to"] == 1.5
    assert [(e["detail"]["level_to"], e["detail"].get("irr_q")) for e in (audit[9], audit[11])] == [
        (APPS_LEVEL, IRR_Q_TO), (LEVEL_TO, LEVEL_IRR_Q_TO)], (audit[9], audit[11])


def _check_irr_metric(clients: list[Client], sessions: list[AppSession], params: MetricParams,
                      spent: dict[int, list[float]], irr_round: int, level_round: int, seal_private: Any) -> None:
    """The IRR metric's ledgers and re-sends, as each app lived the two rounds.

    Each window is charged ``window_cost`` of the levels and IRRs its reports were made with, every re-send drawn by
    the relaxed step from the window's kept report (the apps that joined the IRR-only round at noon were restarted
    in between: the kept bits came from disk); later windows one report at the round's IRR; the declining app one
    report at the metric's own IRR every window and nothing re-sent.
    """
    irr_a, irr_b = (None, IRR_Q_TO), (None, LEVEL_IRR_Q_TO)
    made_with = {0: (APPS_LEVEL, None), irr_round: (APPS_LEVEL, irr_a), level_round: (LEVEL_TO, irr_b)}
    for i, client in enumerate(clients):
        chains: dict[int, list[int]] = defaultdict(list)
        for metric, window, rnd in sessions[i].accepted.values():
            if metric == "apps":
                chains[window].append(rnd)
        inferred = 0.0
        for rounds in chains.values():
            levels, irrs = zip(*(made_with[r] for r in sorted(rounds)), strict=True)
            inferred += window_cost(params, levels, irrs, [True] * (len(rounds) - 1))[0]
        entry = client.ledger()["apps"]
        assert entry.windows == DAYS and math.isclose(entry.spent, inferred, rel_tol=1e-6), (i, entry.spent, inferred)
        if i == DECLINES:
            assert all(r == [0] for r in chains.values())  # nothing re-sent, every window at round 0
            assert entry.levels == (APPS_LEVEL,) and entry.irrs == (None,)
        else:
            assert entry.levels == (APPS_LEVEL, APPS_LEVEL, LEVEL_TO) and entry.irrs == (None, irr_a, irr_b)
    # the day-by-day charges (the budget renews daily, so the day's charge is its window's)
    base = window_cost(params, [APPS_LEVEL])[0]
    relaxed_a = window_cost(params, [APPS_LEVEL] * 2, [None, irr_a], [True])[0]
    relaxed_b = window_cost(params, [APPS_LEVEL, LEVEL_TO], [irr_a, irr_b], [True])[0]
    assert relaxed_a < window_cost(params, [APPS_LEVEL] * 2, [None, irr_a], [False])[0]  # fresh: 0.841435
    assert relaxed_b < window_cost(params, [APPS_LEVEL, LEVEL_TO], [irr_a, irr_b], [False])[0]  # fresh: 1.875465
    one_a, one_b = window_cost(params, [APPS_LEVEL], [irr_a])[0], window_cost(params, [LEVEL_TO], [irr_b])[0]
    late = set(LATE)
    wanted = {
        IRR_ROUND: [base if i in late else relaxed_a for i in range(CLIENTS)],
        IRR_ROUND + 1: [base if i in late else one_a for i in range(CLIENTS)],
        LATE_BACK: [relaxed_a if i in late else one_a for i in range(CLIENTS)],
        LEVEL_ROUND: [relaxed_b] * CLIENTS,
        LEVEL_ROUND + 1: [one_b] * CLIENTS,
    }
    for day, charges in wanted.items():
        charges[DECLINES] = base
        assert spent[day] == charges, (day, spent[day], charges)
    # the re-sends of the IRR-only round were drawn from the kept bits: a sent 0 stays 0 (a fresh IRR at q = 0.2
    # would turn each of the re-senders' 30-odd zeros into a 1 with probability 0.2: at most 0.8^25 = 0.4% to pass)
    kept_zeros = dropped_ones = 0
    for i in (i for i in range(CLIENTS) if i != DECLINES):
        day = LATE_BACK if i in late else IRR_ROUND
        sent = {rnd: env for rid, env in sessions[i].envelopes.items()
                if sessions[i].accepted[rid] in (("apps", T0 + day * DAY, 0), ("apps", T0 + day * DAY, irr_round))
                for rnd in (sessions[i].accepted[rid][2],)}
        first, again = (open_report(sent[r], seal_private=seal_private, num_bits=params.num_bits,
                                    num_cohorts=params.num_cohorts, allow_plain=False).bits for r in (0, irr_round))
        assert not (again & ~first).any(), (i, first, again)
        kept_zeros += int((~first).sum())
        dropped_ones += int((first & ~again).sum())
    assert kept_zeros >= 25 and dropped_ones > 0, (kept_zeros, dropped_ones)  # the check has power; the IRR relaxed


# --- defects the months in the field found, pinned for the owners of the code (strict: they fail until fixed) ---

PLACES = MetricParams(name="places", encoding=DirectEncoding(domain=PLACES_DOMAIN), mode="asymmetric", level=1.0,
                      time_precision=DAY, min_batch_size=20)


def _small_deployment(tmp_path: Path) -> tuple[Aggregator, Clock, str]:
    """Keys, an admin token and the places metric on a data folder; the aggregator started on a simulated clock."""
    clock = Clock(T0 + 8 * 3600.0)
    data = tmp_path / "srv"
    assert operator("keys", "init", "--data-dir", str(data))[0] == 0
    code, token, _ = operator("token", "create", "--role", "admin", "--name", "ops", "--data-dir", str(data))
    server = Aggregator(data, clock)
    server.start()
    server.storage.put_metric(PLACES)
    return server, clock, token.strip()


def test_clients_follow_a_signing_key_rotation(tmp_path: Path) -> None:
    server, clock, _ = _small_deployment(tmp_path)
    pinned = server.app.extensions["onesided"].keys.sign_public_raw
    client = Client("http://telemetry.test", tmp_path / "app.state", background=False, server_public_keys=b64e(pinned),
                    session=AppSession(server), clock=clock, max_epsilon=1.0, budget_period="day")
    try:
        client.sync()
        assert operator("keys", "rotate", "--sign", "--data-dir", str(server.data))[0] == 0  # announced
        server.restart()
        client.sync()  # verified with the pinned key; it announces the next one
        assert operator("keys", "rotate", "--sign", "--data-dir", str(server.data))[0] == 0  # switched
        server.restart()
        client.sync()  # signed by the announced key: the client should follow without the app's help
    finally:
        client.close()
        server.stop()


def test_a_report_of_the_window_a_round_closed_in_is_counted(tmp_path: Path) -> None:
    server, clock, token = _small_deployment(tmp_path)
    try:
        http = server.app.test_client()
        opened = http.post("/v1/metrics/places/rounds", json={"level_to": 1.5}, headers=bearer(token)).get_json()
        clock.advance(DAY)  # the next day: clients that joined report tagged with the round
        seal = server.app.extensions["onesided"].keys.seal_public_raw
        queued = make_reports(PLACES, seal, 3, seed=5, window=T0 + DAY, round=opened["id"], level=1.5).envelopes
        clock.advance(4 * 3600.0)  # the operator closes the round at noon; the apps send in the evening
        assert http.post(f"/v1/rounds/{opened['id']}/close", headers=bearer(token)).status_code == 200
        clock.advance(8 * 3600.0)
        assert server.upload(queued) == ["accepted"] * 3
    finally:
        server.stop()


def test_key_and_backup_commands_are_audited(tmp_path: Path) -> None:
    server, _, _ = _small_deployment(tmp_path)
    server.stop()
    data = str(server.data)
    (tmp_path / "pass").write_text(PASSPHRASE)
    assert operator("keys", "rotate", "--seal", "--data-dir", data)[0] == 0
    assert operator("keys", "rotate", "--sign", "--data-dir", data)[0] == 0
    assert operator("keys", "backup", str(tmp_path / "k.backup"), "--data-dir", data, "--passphrase-file",
                    str(tmp_path / "pass"))[0] == 0
    assert operator("backup", "--data-dir", data, str(tmp_path / "db.backup"))[0] == 0
    code, out, _ = operator("audit-log", "--data-dir", data, "--json")
    actions = [e["action"] for e in json.loads(out)]
    assert actions[0] == "token create"  # what is recorded today
    for wanted in ("rotate", "rotate", "keys backup", "backup"):
        assert any(wanted in a for a in actions[1:]), actions


def test_a_retired_seal_key_stops_opening_at_its_date_without_a_restart(tmp_path: Path) -> None:
    server, clock, _ = _small_deployment(tmp_path)
    old_seal = server.app.extensions["onesided"].keys.seal_public_raw
    server.stop()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keyring, "time", simulated_time(clock))
        assert operator("keys", "rotate", "--seal", "--data-dir", str(server.data), "--keep-old-days", "1")[0] == 0
    server.start()
    try:
        def upload(day: int, seed: int) -> list[str]:
            clock.now = T0 + day * DAY + 9 * 3600.0
            return server.upload(make_reports(PLACES, old_seal, 2, seed=seed, window=T0 + day * DAY).envelopes)

        assert upload(0, 1) == ["accepted"] * 2  # before its date
        assert upload(3, 2) == ["decrypt_error"] * 2  # two days past it, the server never restarted
    finally:
        server.stop()


def test_background_senders_ride_out_a_restart(tmp_path: Path) -> None:
    """The sender threads as an app runs them (wall clock): the first sync, sends and retries happen without the
    app calling ``sync()`` or ``flush()``; a restart with a down time in between loses and repeats nothing."""
    import time

    os_metric = MetricParams(name="os", encoding=DirectEncoding(domain=OS_DOMAIN), mode="symmetric", level=0.5,
                             value_kind="categorical", time_precision=DAY, min_batch_size=20)
    data = tmp_path / "srv"
    assert operator("keys", "init", "--data-dir", str(data))[0] == 0
    server = Aggregator(data, time.time)
    server.start()
    server.storage.put_metric(PLACES)
    server.storage.put_metric(os_metric)
    pinned = b64e(server.app.extensions["onesided"].keys.sign_public_raw)
    sessions = [AppSession(server) for _ in range(8)]
    errors: list[Exception] = []
    clients = [Client("http://telemetry.test", tmp_path / f"app{i}.state", server_public_keys=pinned,
                      session=sessions[i], max_epsilon=1.0, budget_period="day", send_interval=0.05,
                      retry=RetryPolicy(max_attempts=1), on_error=errors.append) for i in range(8)]

    def within_30s(condition: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.02)
        return False

    def delivered(count: int) -> bool:
        return within_30s(lambda: sum(len(s.accepted) for s in sessions) >= count)

    try:
        for i, client in enumerate(clients):
            client.report("places", places_of(i, 0))  # before any config: waits, then goes out
        assert delivered(8)
        server.stop()  # down: the senders' uploads get 503 and keep the reports queued
        for i, client in enumerate(clients):
            client.report("os", os_of(i))
        assert within_30s(lambda: all(503 in s.answers for s in sessions))  # every app's sender met the outage
        server.start()
        assert delivered(16)
    finally:
        results = [client.close() for client in clients]
        server.stop()
    stored = _stored_reports(data, server)
    assert all(r.remaining == 0 and r.error is None for r in results)
    assert set(stored) == {rid for s in sessions for rid in s.accepted} and len(stored) == 16
    assert {type(e).__name__ for e in errors} <= {"TransportError"}


RAPPOR_LEVEL = 2 * math.log(2)  # RAPPOR's f = 0.5
BROWSERS = MetricParams(name="browsers", encoding=DirectEncoding(domain=("firefox", "chrome", "safari", "edge")),
                        mode="symmetric", level=RAPPOR_LEVEL, irr_p=0.5, irr_q=0.75, time_precision=DAY,
                        min_batch_size=20)


def test_a_symmetric_round_relaxing_level_and_irr_charges_no_more_than_a_fresh_irr(tmp_path: Path) -> None:
    """A symmetric round that raises the level far (1 -> 5) and relaxes the IRR (0.5, 0.75) -> (0.25, 0.75).

    The relaxed chain then costs more than fresh reports, both charged their proven law: 1.283063 against 1.243596.
    The client drew the re-send by the relaxed step regardless (found by
    the months in the field, when the ledger still charged such chains the longitudinal bound: 2.036882 against
    1.124931 for RAPPOR's level doubled); it now draws a fresh IRR where that is charged less.
    """
    server, clock, token = _small_deployment(tmp_path)
    metric = dataclasses.replace(BROWSERS, name="level1", level=1.0)
    server.storage.put_metric(metric)
    pinned = server.app.extensions["onesided"].keys.sign_public_raw
    client = Client("http://telemetry.test", tmp_path / "app.state", background=False, server_public_keys=b64e(pinned),
                    session=AppSession(server), clock=clock, max_epsilon=10.0, rng=5, insecure_rng_for_testing=True)
    try:
        client.sync()
        client.report("level1", "firefox")
        irr = (0.25, 0.75)
        opened = server.app.test_client().post(
            "/v1/metrics/level1/rounds", json={"level_to": 5.0, "irr_p": irr[0], "irr_q": irr[1]},
            headers=bearer(token))
        assert opened.status_code == 201, opened.get_json()
        client.sync()  # joins the round: the window's value re-sent
        assert client.flush().delivered == 2
        levels, irrs = [1.0, 5.0], [None, irr]
        relaxed, fresh = (window_cost(metric, levels, irrs, [flag])[0] for flag in (True, False))
        assert relaxed > fresh  # (1.283063 > 1.243596) the case
        assert client.ledger()["level1"].spent == fresh
        current = client._state.metrics["level1"].current
        assert current is not None and current.relaxed == []  # drawn fresh, and so marked
    finally:
        client.close()
        server.stop()



BROWSERS_DOMAIN = ("firefox", "chrome", "safari", "edge")
R_DAYS, R_IRR_ROUND, R_LATE_BACK, R_LEVEL_ROUND = 21, 5, 7, 12
R_IRR_TO, R_LEVEL_IRR_TO = (0.25, 0.75), (0.1, 0.9)


def browser_of(client: int, day: int) -> str:
    """A client's browser that day (it changes now and then): the RAPPOR metric's truth."""
    return BROWSERS_DOMAIN[(client + (day // 4) * (client % 2)) % 4]


def test_three_weeks_of_a_rappor_metric_through_irr_rounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """The symmetric mode: RAPPOR's f = 0.5 level and IRR ``(0.5, 0.75)``, reported daily by the 30 apps (a set of
    one browser). An IRR-only round to ``(0.25, 0.75)`` opens at noon of day 5 between an app restart and a server
    restart, with the late apps offline until day 7 and one app declining; a round doubling the level with IRR
    ``(0.1, 0.9)`` opens on day 12. Each window is charged as its reports were drawn (the IRR-only round's re-sends
    by the relaxed step from the kept bits; the second round's by whichever of the relaxed step and a fresh IRR is
    charged less), the estimates are within their error bars, every report is counted once."""
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    seeded_secrets(monkeypatch, 2)
    clock = Clock(T0 + 8 * 3600.0)
    data = tmp_path / "srv"
    monkeypatch.setattr(keys_command, "time", simulated_time(clock))
    assert operator("keys", "init", "--data-dir", str(data))[0] == 0
    code, token, _ = operator("token", "create", "--role", "admin", "--name", "ops", "--data-dir", str(data))
    monkeypatch.setenv("ONESIDED_TOKEN", token.strip())
    server = Aggregator(data, clock)
    server.start()
    pinned = b64e(server.app.extensions["onesided"].keys.sign_public_raw)
    sessions = [AppSession(server) for _ in range(CLIENTS)]
    errors: list[tuple[int, str]] = []

    def launch(i: int) -> Client:
        return Client("http://telemetry.test", tmp_path / "apps" / f"{i}.state", background=False,
                      server_public_keys=pinned, session=sessions[i], clock=clock, monotonic=clock, max_epsilon=2.0,
                      budget_period="day", retry=RetryPolicy(max_attempts=1), rng=2000 + i,
                      insecure_rng_for_testing=True, on_error=lambda e: errors.append((i, type(e).__name__)),
                      accept_round=(lambda a: False) if i == DECLINES else None)

    spent: dict[int, list[float]] = {}
    estimates: dict[int, Any] = {}
    with http_front(server) as url:
        monkeypatch.setenv("ONESIDED_SERVER", url)
        code, out, err = operator("metric", "create", "--name", "browsers", "--encoding", "direct", "--domain",
                                  ",".join(BROWSERS_DOMAIN), "--mode", "symmetric", "--level", repr(RAPPOR_LEVEL),
                                  "--irr-p", "0.5", "--irr-q", "0.75", "--time-precision", str(DAY),
                                  "--min-batch-size", "20", "--json")
        assert code == 0, err
        params = MetricParams.from_dict(json.loads(out)["params"])
        clients = [launch(i) for i in range(CLIENTS)]
        rounds: dict[str, int] = {}
        for day in range(R_DAYS):
            clock.now = T0 + day * DAY + 8 * 3600.0
            if day == R_LATE_BACK:
                for i in LATE:
                    sessions[i].offline = False
            if day == R_LEVEL_ROUND:
                code, out, err = operator("round", "open", "browsers", "--level-to", repr(2 * RAPPOR_LEVEL),
                                          "--irr-p", str(R_LEVEL_IRR_TO[0]), "--irr-q", str(R_LEVEL_IRR_TO[1]),
                                          "--json")
                assert code == 0, err
                rounds["level"] = json.loads(out)["id"]
            for i, client in enumerate(clients):
                client.report("browsers", {browser_of(i, day)})
            if day == R_IRR_ROUND:  # noon: the late apps go offline, every app restarts, the round, a restart
                clock.now = T0 + day * DAY + 12 * 3600.0
                for i in LATE:
                    sessions[i].offline = True
                for i, client in enumerate(clients):
                    client.close()
                    clients[i] = launch(i)
                code, out, err = operator("round", "open", "browsers", "--level-to", repr(RAPPOR_LEVEL), "--irr-p",
                                          str(R_IRR_TO[0]), "--irr-q", str(R_IRR_TO[1]), "--json")
                assert code == 0, err
                rounds["irr"] = json.loads(out)["id"]
                server.restart()
            clock.now = T0 + day * DAY + 20 * 3600.0
            for client in clients:
                client._background.tick()
            spent[day] = [c.ledger()["browsers"].spent_this_period for c in clients]  # type: ignore[misc]
        results = [client.close() for client in clients]
        for name, day in (("irr", R_IRR_ROUND), ("level", R_LEVEL_ROUND)):
            code, out, err = operator("estimates", "browsers", "--round", str(rounds[name]), "--window",
                                      str(T0 + day * DAY), "--json")
            assert code == 0, err
            estimates[day] = json.loads(out)
    server.stop()

    assert all(r.remaining == 0 and r.error is None for r in results)
    assert {kind for _, kind in errors} <= {"TransportError"} and {i for i, _ in errors} <= set(LATE)
    # every report counted once: what the apps were told is stored, as sent
    told = {rid: where for s in sessions for rid, where in s.accepted.items()}
    assert _stored_reports(data, server) == told
    # the windows' charges, day by day (the budget renews daily: the day's charge is its window's)
    irr_a, irr_b, level_b = R_IRR_TO, R_LEVEL_IRR_TO, 2 * RAPPOR_LEVEL
    base = window_cost(params, [RAPPOR_LEVEL])[0]
    one_a, one_b = window_cost(params, [RAPPOR_LEVEL], [irr_a])[0], window_cost(params, [level_b], [irr_b])[0]
    chain_a = ([RAPPOR_LEVEL] * 2, [None, irr_a])
    chain_b = ([RAPPOR_LEVEL, level_b], [irr_a, irr_b])
    relaxed_a, fresh_a = (window_cost(params, *chain_a, [flag])[0] for flag in (True, False))
    relaxed_b, fresh_b = (window_cost(params, *chain_b, [flag])[0] for flag in (True, False))
    assert relaxed_a < fresh_a  # the IRR-only round: the relaxed step from the kept bits is the cheaper
    charged_b = min(relaxed_b, fresh_b)  # the level round: whichever draw is charged less
    late = set(LATE)
    for day in range(R_DAYS):
        for i in range(CLIENTS):
            if i == DECLINES or day < R_IRR_ROUND or (i in late and day < R_LATE_BACK):
                wanted = base
            elif day == (R_LATE_BACK if i in late else R_IRR_ROUND):
                wanted = relaxed_a
            elif day < R_LEVEL_ROUND:
                wanted = one_a
            else:
                wanted = charged_b if day == R_LEVEL_ROUND else one_b
            assert spent[day][i] == wanted, (day, i, spent[day][i], wanted)
    for i, client in enumerate(clients):  # the declining app refused both rounds, and only it refused anything
        refused = [(e.kind, e.detail) for e in client.ledger().events if e.kind in ("refused", "round_refused")]
        assert refused == ([("round_refused", f"round {r}: declined by the app") for r in (rounds["irr"],
                           rounds["level"])] if i == DECLINES else []), (i, refused)
    # what was sent: one report per app and window, and one re-send per round joined, in the round's windows
    per_window: dict[tuple[int, int], int] = defaultdict(int)
    for _, window, rnd in told.values():
        per_window[((window - T0) // DAY, rnd)] += 1
    a, b = rounds["irr"], rounds["level"]
    joined, n_late = CLIENTS - len(LATE) - 1, len(LATE)
    assert per_window == {
        **{(d, 0): CLIENTS for d in range(R_IRR_ROUND + 1)},
        **{(d, 0): n_late + 1 for d in range(R_IRR_ROUND + 1, R_LATE_BACK + 1)},
        **{(d, 0): 1 for d in range(R_LATE_BACK + 1, R_DAYS)},
        (R_IRR_ROUND, a): joined, (R_IRR_ROUND + 1, a): joined,
        **{(d, a): joined + n_late for d in range(R_LATE_BACK, R_LEVEL_ROUND + 1)},
        **{(d, b): joined + n_late for d in range(R_LEVEL_ROUND, R_DAYS)},
    }
    # the estimates of the rounds' windows, decoded with the rounds' IRR, within their error bars
    for day, members in ((R_IRR_ROUND, [i for i in range(CLIENTS) if i not in late and i != DECLINES]),
                         (R_LEVEL_ROUND, [i for i in range(CLIENTS) if i != DECLINES])):
        truth = {v: sum(browser_of(i, day) == v for i in members) for v in BROWSERS_DOMAIN}
        level = RAPPOR_LEVEL if day == R_IRR_ROUND else level_b
        # RAPPOR's noise on 25-29 reports: a standard error near 10 at the first level
        _check_estimates(estimates[day], truth, level=level, reports=len(members), max_std_error=len(members) / 2)
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert not [s for s in server.statuses if s[2] >= 500]
