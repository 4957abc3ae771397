"""Every log line of ``onesided serve`` carries its time as ISO-8601 UTC with the zone, never local time.

Our loggers and gunicorn's write through the formatter of
``aggregator.server.logs.logging_config`` (gunicorn gets it as its
``logconfig_dict``), in text and in JSON alike; a live server shows that
gunicorn's own lines and the access log follow it.
"""

from __future__ import annotations

import calendar
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from aggsupport import REPO, free_port

from aggregator.server.logs import logging_config

# 2026-11-26T15:20:01.542Z: seconds since 1970 chosen so that local time would show another hour in most zones
MOMENT = 1795706401.5421
STAMP = "2026-11-26T15:20:01.542Z"
LINE_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")


def _formatted(log_format: str, name: str, message: str) -> str:
    """A record of logger ``name`` made at ``MOMENT``, through the formatter ``logging_config`` configures."""
    spec = dict(logging_config(log_format)["formatters"]["main"])
    module, _, cls = spec.pop("()").rpartition(".")
    formatter = getattr(sys.modules[module], cls)(**spec)
    record = logging.LogRecord(name, logging.INFO, __file__, 1, message, None, None)
    record.created, record.msecs = MOMENT, 542.0
    return str(formatter.format(record))


@pytest.mark.parametrize("name", ["gunicorn.error", "onesided.access", "aggregator.server.serve"])
def test_text_and_json_lines_carry_the_same_utc_time(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Pacific/Kiritimati")  # UTC+14: a formatter using local time would show the next day
    time.tzset()
    try:
        assert _formatted("text", name, "Listening") == f"{STAMP} INFO {name}: Listening"
        assert json.loads(_formatted("json", name, "Listening"))["time"] == STAMP
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_live_server_writes_every_log_line_with_a_utc_time(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    code = "import sys; from aggregator.cli.main import main; sys.exit(main())"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", code, "serve", "--init", "--host", "127.0.0.1", "--port", str(port), "--data-dir",
             str(tmp_path / "data")],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
            env={**os.environ, "ONESIDED_ACCESS_LOG": "1", "TZ": "Pacific/Kiritimati"},
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and process.poll() is None:
                try:
                    if requests.get(f"http://127.0.0.1:{port}/v1/health", timeout=2).status_code == 200:
                        break
                except requests.RequestException:
                    time.sleep(0.1)
            assert requests.get(f"http://127.0.0.1:{port}/no-such-page", timeout=5).status_code == 404
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
    lines = log.read_text("utf-8").splitlines()
    assert lines[0].startswith("onesided serve: ") and lines[1].startswith("Ctrl-C")  # the start-up lines
    logged = lines[2:]
    assert logged and all(LINE_TIME.match(line) for line in logged), logged
    assert any(" INFO gunicorn.error: Listening at: " in line for line in logged), logged
    assert any(' INFO onesided.access: 127.0.0.0/24 "GET /no-such-page HTTP/1.1" 404 ' in line for line in logged)
    now = time.time()
    first = calendar.timegm(time.strptime(logged[0][:19], "%Y-%m-%dT%H:%M:%S"))
    assert abs(first - now) < 120  # UTC indeed: the child's local zone was UTC+14
