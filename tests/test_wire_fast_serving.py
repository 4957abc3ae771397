"""Serving side of the ingestion fast paths: the access log switch, and the upload response."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests
from aggsupport import REPO, free_port

from aggregator.server.front import FrontLimits
from aggregator.server.logs import access_log_from_env, logging_config
from aggregator.server.serve import gunicorn_options
from protocol.errors import ReportRejected
from protocol.wire import STATUSES, ReportResult, parse_upload_response, upload_response


def _serve_log(tmp_path: Path, env: dict[str, str], *args: str) -> str:
    """Run ``onesided serve``, send three requests, stop it; its whole output."""
    port = free_port()
    code = "import sys; from aggregator.cli.main import main; sys.exit(main())"
    clean = {k: v for k, v in os.environ.items() if k != "ONESIDED_ACCESS_LOG"}
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-c", code, "serve", "--init", "--data-dir", str(tmp_path / "data"), "--port", str(port), *args],
            stdout=log, stderr=subprocess.STDOUT, env={**clean, **env}, cwd=REPO,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None, "the server exited"
                try:
                    if requests.get(f"http://127.0.0.1:{port}/v1/health", timeout=2).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
            for _ in range(3):
                requests.get(f"http://127.0.0.1:{port}/v1/health?probe=access-log-check", timeout=10)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
        log.seek(0)
        return log.read().decode("utf-8", "replace")


def test_access_log_is_off_by_default_and_on_when_asked(tmp_path: Path) -> None:
    quiet = _serve_log(tmp_path, {})
    assert "Booting worker" in quiet  # gunicorn's error log still writes
    assert "access-log-check" not in quiet
    loud = _serve_log(tmp_path, {"ONESIDED_ACCESS_LOG": "1"}, "--log-format", "json")
    lines = [json.loads(line) for line in loud.splitlines() if "access-log-check" in line]
    assert len(lines) == 3
    assert {entry["logger"] for entry in lines} == {"onesided.access"}
    assert all('"GET /v1/health?probe=access-log-check HTTP/1.1" 400' in entry["message"] for entry in lines)  # an undocumented query parameter: refused
    assert all(entry["message"].startswith("127.0.0.0/24 ") for entry in lines)  # truncated by default
    flagged = _serve_log(tmp_path, {}, "--access-log")  # the command-line switch, text lines
    assert sum("access-log-check" in line for line in flagged.splitlines()) == 3


def test_access_log_setting() -> None:
    assert access_log_from_env({}) is False
    assert access_log_from_env({"ONESIDED_ACCESS_LOG": "0"}) is False
    assert access_log_from_env({"ONESIDED_ACCESS_LOG": "True"}) is True
    with pytest.raises(ValueError, match="ONESIDED_ACCESS_LOG"):
        access_log_from_env({"ONESIDED_ACCESS_LOG": "maybe"})
    off, on = logging_config("text"), logging_config("json", access_log=True)
    assert off["loggers"]["onesided.access"]["handlers"] == [] and off["loggers"]["onesided.access"]["level"] == "WARNING"
    assert on["loggers"]["onesided.access"]["handlers"] == ["main"]
    options = gunicorn_options(host="127.0.0.1", port=1, workers=1, limits=FrontLimits(), access_log="none")
    assert options["worker_class"].access_log == "none"
    assert options["logconfig_dict"]["loggers"]["onesided.access"]["handlers"] == ["main"]
    quiet = gunicorn_options(host="127.0.0.1", port=1, workers=1, limits=FrontLimits())
    assert quiet["worker_class"].access_log is None  # no middleware: no line is built


def test_results_made_by_the_aggregator_answer_as_checked_ones() -> None:
    made = [ReportResult.of("AAAAAAAAAAAAAAAAAAAAAA", status, detail)
            for status in STATUSES for detail in (None, "why")]
    checked = [ReportResult(report_id=r.report_id, status=r.status, detail=r.detail) for r in made]
    assert made == checked
    body = upload_response(made)
    assert body == {"results": [r.to_dict() for r in checked], "accepted": 2}
    assert parse_upload_response(json.loads(json.dumps(body))) == checked
    with pytest.raises(ReportRejected):
        ReportResult(report_id="x", status="fine")
