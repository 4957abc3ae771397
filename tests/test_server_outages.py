"""``onesided serve`` never exits because a dependency is away: workers replaced meanwhile boot and answer 503.

gunicorn's master exits when a worker fails to boot. A worker replaced
while PostgreSQL is down (reached through a TCP relay that the test cuts)
or while a key file is damaged (a SIGKILL, or the SIGHUP that reloads the
keys) must boot anyway, answer ``503 database_unavailable`` /
``keys_unavailable`` with ``Retry-After``, and serve again once the
dependency is back, without a restart. A SIGHUP with a damaged key keeps
the old workers and logs one line.

Timing assumptions: a worker boots in under 20 s on a loaded 2-core
machine; a dependency that is back is noticed within a second by each
worker (one retry a second), so recovery is waited for up to 30 s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import requests
from aggsupport import REPO, free_port, stop_server
from relaysupport import relayed_postgres

from protocol.crypto import SEAL_KEY_FILE, AggregatorKeys

PATIENCE = 30.0  # seconds: a worker's boot or a recovery on a loaded machine


@contextlib.contextmanager
def master(*args: str) -> Iterator[tuple[subprocess.Popen[bytes], str, Any]]:
    """``onesided serve ARGS`` as a child: (the master process, its URL, its log file)."""
    port = free_port()
    code = "import sys; from aggregator.cli.main import main; sys.exit(main())"
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--host", "127.0.0.1", "--port", str(port), "--timeout", "30",
         "--graceful-timeout", "2", *args], stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _status(f"{url}/v1/health") == 200, process, log)
        yield process, url, log
    finally:
        stop_server(process)
        log.close()


def _status(url: str) -> int | None:
    try:
        return requests.get(url, timeout=5).status_code
    except requests.RequestException:
        return None


def output(log: Any) -> str:
    log.seek(0)
    return str(log.read().decode("utf-8", "replace"))


def wait_for(condition: Callable[[], bool], process: subprocess.Popen[bytes], log: Any) -> None:
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the master exited with {process.returncode}:\n{output(log)}"
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {PATIENCE} s:\n{output(log)}")


def workers(process: subprocess.Popen[bytes]) -> list[int]:
    return [child.pid for child in psutil.Process(process.pid).children()]


def replace_workers(process: subprocess.Popen[bytes], log: Any) -> None:
    """SIGKILL every worker, then wait until new ones (other pids) run."""
    old = set(workers(process))
    for pid in old:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: bool(set(workers(process))) and not set(workers(process)) & old, process, log)


def answered_503(url: str, code: str) -> bool:
    try:
        answer = requests.get(url, timeout=5)
    except requests.RequestException:
        return False
    return (answer.status_code == 503 and answer.json()["error"] == code
            and int(answer.headers["Retry-After"]) > 0)


def test_workers_replaced_during_a_postgresql_outage_answer_503_and_recover(tmp_path: Path) -> None:
    AggregatorKeys.generate().save(tmp_path / "keys")
    with relayed_postgres() as (_direct, through, relay), master(
        "--db", through, "--key-dir", str(tmp_path / "keys"), "--workers", "2", "--db-wait", "1",
    ) as (process, url, log):
        relay.cut()
        replace_workers(process, log)  # the new workers cannot reach PostgreSQL: they boot anyway
        process.send_signal(signal.SIGHUP)  # and so do those of a reload
        wait_for(lambda: answered_503(f"{url}/v1/config", "database_unavailable"), process, log)
        time.sleep(2)  # longer than --db-wait: the master must still be there
        assert process.poll() is None, output(log)
        assert _status(f"{url}/v1/livez") == 200
        assert _status(f"{url}/v1/readyz") == 503

        relay.mend()
        wait_for(lambda: _status(f"{url}/v1/config") == 200 and _status(f"{url}/v1/readyz") == 200, process, log)
        assert "Worker failed to boot" not in output(log)


def test_damaged_key_keeps_old_workers_on_sighup_and_new_ones_answer_503(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    AggregatorKeys.generate().save(data / "keys")
    seal = data / "keys" / SEAL_KEY_FILE
    good = seal.read_bytes()
    with master("--data-dir", str(data)) as (process, url, log):
        seal.write_bytes(b"half-written")
        before = set(workers(process))
        process.send_signal(signal.SIGHUP)
        wait_for(lambda: "SIGHUP ignored" in output(log), process, log)
        assert output(log).count("SIGHUP ignored") == 1
        assert set(workers(process)) == before and _status(f"{url}/v1/config") == 200  # the old worker serves

        replace_workers(process, log)  # a worker dying meanwhile: its successor cannot read the keys
        wait_for(lambda: answered_503(f"{url}/v1/config", "keys_unavailable"), process, log)
        assert _status(f"{url}/v1/livez") == 200

        seal.write_bytes(good)
        wait_for(lambda: _status(f"{url}/v1/config") == 200, process, log)
        assert process.poll() is None
