"""Operations: Prometheus metrics at /metrics, JSON logs, and ``onesided backup``."""

from __future__ import annotations

import json
import logging
import re
import stat
import sys
from pathlib import Path

import numpy as np
import pytest
import requests
from aggsupport import bearer, make_params, make_reports, post_reports, serve_subprocess

from aggregator.cli.main import main
from aggregator.server.logs import JsonFormatter, logging_config
from aggregator.server.settings import Settings
from aggregator.server.storage import Storage


def _sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in the exposition text (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match and ",".join(sorted((match.group(1) or "").split(","))) == wanted:
            return float(match.group(2))
    return 0.0


@pytest.mark.slow
def test_metrics_count_reports_rejections_and_latency(tmp_path: Path) -> None:
    params = make_params()
    storage = Storage.open(Settings(data_dir=tmp_path).database_url)
    admin = storage.create_token(role="admin", name="ops")[1]
    storage.close()
    env = {"ONESIDED_ALLOW_PLAINTEXT": "1"}
    with serve_subprocess("--data-dir", str(tmp_path), "--log-format", "json", env=env) as url:
        assert requests.post(f"{url}/v1/metrics", json=params.to_dict(), headers=bearer(admin),
                             timeout=10).status_code == 201
        reports = make_reports(params, None, 7, seed=3).envelopes
        assert post_reports(url, reports).json()["accepted"] == 7
        assert post_reports(url, reports[:2]).json()["accepted"] == 2  # a retry: accepted again
        wrong = requests.post(f"{url}/v1/reports", data=b"x", headers={"Content-Type": "text/plain"}, timeout=10)
        assert wrong.status_code == 415
        text = requests.get(f"{url}/metrics", timeout=10).text
    assert _sample(text, "onesided_reports_total", status="accepted") == 9
    assert _sample(text, "onesided_batches_rejected_total", reason="unsupported_media_type") == 1
    assert _sample(text, "onesided_request_seconds_count", endpoint="/v1/reports", method="POST", status="200") == 2
    assert "onesided_requests_in_flight" in text and "onesided_decode_pending" in text


def test_json_logs_are_one_object_per_line() -> None:
    config = logging_config("json")
    formatter = JsonFormatter()
    assert config["formatters"]["main"]["()"].endswith(".JsonFormatter")
    assert {"gunicorn.error", "gunicorn.access"} <= set(config["loggers"])
    record = logging.LogRecord("gunicorn.error", logging.ERROR, __file__, 1, "worker %s failed", (3,), None)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record.exc_info = sys.exc_info()
    line = formatter.format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert (entry["level"], entry["logger"], entry["message"]) == ("ERROR", "gunicorn.error", "worker 3 failed")
    assert "RuntimeError: boom" in entry["exception"]
    with pytest.raises(ValueError):
        logging_config("xml")


def test_backup_copies_a_consistent_private_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    settings = Settings(data_dir=data)
    data.mkdir(mode=0o700)
    params = make_params()
    storage = Storage.open(settings.database_url)
    record, _ = storage.put_metric(params)
    batch = make_reports(params, None, 25, seed=4)
    from aggregator.server.storage import MetricBinding, ReportRow

    rows = [
        ReportRow(metric_id=record.id, report_id=e.report_id, round=0, window=e.window, cohort=int(c),
                  bits=np.packbits(b, bitorder="little").tobytes(), body_hash=bytes(16))
        for e, b, c in zip(batch.envelopes, batch.bits, batch.cohorts, strict=True)
    ]
    binding = {record.id: MetricBinding(metric_id=record.id, digest=record.digest, num_bits=params.num_bits)}
    assert storage.store_reports(rows, binding) == ["accepted"] * 25
    copy = tmp_path / "copy.db"
    assert main(["backup", "--data-dir", str(data), str(copy), "--json"]) == 0  # the source stays open meanwhile
    summary = json.loads(capsys.readouterr().out)
    assert summary["integrity_check"] == "ok" and summary["schema_version"] == storage.schema_version()
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    restored = Storage.open(f"sqlite:///{copy}", migrate=False)
    for got, want in zip(restored.bit_counts("places"), storage.bit_counts("places"), strict=True):
        np.testing.assert_array_equal(got, want)
    restored.close()
    storage.close()


def test_backup_refuses_postgresql_and_names_pg_dump(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = "postgresql+psycopg://nobody@127.0.0.1:5432/test"
    assert main(["backup", "--db", url, "--key-dir", str(tmp_path), str(tmp_path / "x.db")]) == 2
    assert "pg_dump" in capsys.readouterr().err
    assert not (tmp_path / "x.db").exists()
