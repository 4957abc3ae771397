"""SQLite: a process's writers take turns on one connection whose page cache stays valid.

Before, the pool handed out connections oldest first and a second writer
took another connection and waited in SQLite's busy handler (sleeps of 1, 2,
5 ... ms, whatever the moment the lock freed). A connection discards its
whole page cache when another connection has written, so with two request
threads each batch read its pages again (``pread`` about 65 times a batch of
100 into 20,000 reports; 615 reads for 211 batches after, under ``strace``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from aggregator.server.storage import Storage
from aggregator.server.storage import engine as engine_module
from aggregator.server.storage.engine import run_transaction


def _driver(conn: Connection) -> Any:
    return conn.connection.driver_connection


def _storage(tmp_path: Path) -> Storage:
    return Storage.open(f"sqlite:///{tmp_path / 'db.sqlite'}")


def test_transactions_one_after_another_use_the_connection_that_wrote_last(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    try:
        with storage.engine.connect() as first, storage.engine.connect() as second:  # the pool holds two now
            assert _driver(first) is not _driver(second)
        used = [run_transaction(storage.engine, _driver) for _ in range(4)]
        assert all(conn is used[0] for conn in used)  # before: the two alternated (oldest first)
    finally:
        storage.close()


def test_a_second_writer_waits_its_turn_and_takes_the_same_connection(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    inside, release = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def first(conn: Connection) -> None:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        conn.exec_driver_sql("INSERT INTO t VALUES (1)")
        seen["first"] = _driver(conn)
        inside.set()
        assert release.wait(10)

    def second(conn: Connection) -> None:
        seen["second"] = _driver(conn)
        seen["rows"] = conn.exec_driver_sql("SELECT count(*) FROM t").scalar()

    try:
        a = threading.Thread(target=run_transaction, args=(storage.engine, first))
        a.start()
        assert inside.wait(10)
        b = threading.Thread(target=run_transaction, args=(storage.engine, second))
        b.start()
        b.join(0.3)
        assert b.is_alive()  # waiting for the first writer
        assert "second" not in seen  # before: it had a connection of its own, in SQLite's busy handler
        release.set()
        a.join(10)
        b.join(10)
        assert seen["second"] is seen["first"]
        assert seen["rows"] == 1  # it saw the first transaction's row
    finally:
        release.set()
        storage.close()


def test_a_failing_transaction_frees_the_turn(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    try:
        def failing(conn: Connection) -> None:
            conn.exec_driver_sql("SELECT no_such_column FROM sqlite_master")

        try:
            run_transaction(storage.engine, failing)
        except sa.exc.OperationalError:
            pass
        done = threading.Event()
        threading.Thread(target=lambda: (run_transaction(storage.engine, _driver), done.set())).start()
        assert done.wait(10)
    finally:
        storage.close()


def test_a_turn_not_had_within_the_busy_timeout_is_taken_without_the_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "SQLITE_BUSY_MS", 200)
    storage = _storage(tmp_path)
    inside, release, started = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def holder(conn: Connection) -> None:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        seen["holder"] = _driver(conn)
        inside.set()
        assert release.wait(10)

    def waiter(conn: Connection) -> None:
        seen["waiter"] = _driver(conn)
        started.set()

    try:
        a = threading.Thread(target=run_transaction, args=(storage.engine, holder))
        a.start()
        assert inside.wait(10)
        b = threading.Thread(target=run_transaction, args=(storage.engine, waiter))
        b.start()
        b.join(1.0)
        assert b.is_alive() and not started.is_set()  # in SQLite's busy handler on a connection of its own
        release.set()
        a.join(10)
        b.join(10)
        assert started.is_set()
        assert seen["waiter"] is not seen["holder"]
    finally:
        release.set()
        storage.close()
