"""``onesided doctor`` checks a set-up in one go: server reachable, the token's role, the pinned key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from aggsupport import LiveServer, live_server

from aggregator.cli.main import main
from protocol.crypto import AggregatorKeys, b64e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    folder = tmp_path_factory.mktemp("doctor")
    with live_server(f"sqlite:///{folder / 'agg.db'}", folder / "agg") as srv:
        yield srv


def _doctor(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, str]]:
    code = main(["doctor", *argv])
    lines = capsys.readouterr().out.splitlines()
    return code, {line.split()[0]: line for line in lines}


def test_a_ready_set_up_passes_every_check(server: LiveServer, capsys: pytest.CaptureFixture[str]) -> None:
    key = b64e(server.keys.sign_public_raw)
    code, lines = _doctor(capsys, "--server", server.url, "--token", server.admin_token("doc-admin"),
                          "--server-key", key)
    assert code == 0, lines
    assert lines["server"].split()[1] == "ok" and "role admin" in lines["token"]
    assert lines["key"].split()[1] == "ok"
    code, lines = _doctor(capsys, "--server", server.url, "--token", server.analyst_token("doc-analyst"),
                          "--server-key", key)
    assert code == 0 and "role analyst" in lines["token"]


def test_each_fault_is_named_with_what_to_do(server: LiveServer, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ONESIDED_SERVER_KEY", raising=False)
    monkeypatch.delenv("ONESIDED_TOKEN", raising=False)
    other = b64e(AggregatorKeys.generate().sign_public_raw)  # a key from another set-up (or before a rotation)
    code, lines = _doctor(capsys, "--server", server.url, "--token", "not-a-token", "--server-key", other)
    assert code == 1
    assert "FAIL" in lines["token"] and "does not know this token" in lines["token"]
    assert "FAIL" in lines["key"] and "keys show" in lines["key"]
    code, lines = _doctor(capsys, "--server", server.url)
    assert code == 0 and lines["token"].split()[1] == "skip" and lines["key"].split()[1] == "skip"
    code, lines = _doctor(capsys, "--server", "http://127.0.0.1:9")  # nothing listens on the discard port
    assert code == 1 and "is it running?" in lines["server"] and lines["token"].split()[1] == "skip"


def test_doctor_is_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "doctor" in capsys.readouterr().out
