"""Helpers for the months-in-the-field test: an aggregator that restarts on one data folder, on simulated time.

* :class:`Aggregator` is a WSGI app that forwards to the current ``create_app`` app (``None`` while the server is
  down: 503), so a restart swaps the app under the same address.
* :class:`AppSession` is the ``requests`` session interface the SDK's transport uses, answered in-process by that
  WSGI app (no sockets: thousands of daily uploads stay fast); it records what each client had accepted.
* :func:`operator` runs the ``onesided`` CLI in-process (the documented commands), with its output.
* :func:`seeded_secrets` makes the apps' client secrets (their memoized noise) come from a seed.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from werkzeug.serving import BaseWSGIServer, make_server
from werkzeug.test import Client as WsgiClient

from aggregator import create_app
from aggregator.cli.main import main
from client_sdk.state import ClientState
from client_sdk.testing import FakeResponse
from protocol.wire import encode_batch_json, parse_batch_binary, parse_batch_json


class Aggregator:
    """``onesided serve`` on one data folder, restartable, on an injected clock."""

    def __init__(self, data: Path, clock: Callable[[], float], **settings: Any) -> None:
        self.data, self.clock, self.settings = data, clock, settings
        self.app: Any = None
        self.starts = 0
        self.statuses: list[tuple[str, str, int]] = []  # (method, path, status) of every answer

    def start(self) -> None:
        assert self.app is None
        self.app = create_app({"data_dir": str(self.data), **self.settings}, clock=self.clock)
        self.starts += 1

    def stop(self) -> None:
        state = self.app.extensions["onesided"]
        state.opener.close()
        state.offloader.close()
        state.storage.close()
        self.app = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if self.app is None:
            start_response("503 Service Unavailable", [("Content-Type", "application/json"), ("Retry-After", "1")])
            return [b'{"error":"unavailable","field":null,"detail":"down"}']

        def recording(status: str, headers: Any, *rest: Any) -> Any:
            self.statuses.append((environ["REQUEST_METHOD"], environ["PATH_INFO"], int(status.split()[0])))
            return start_response(status, headers, *rest)

        return self.app(environ, recording)

    def upload(self, envelopes: Any) -> list[str]:
        """``POST /v1/reports`` of ``envelopes`` (JSON form): each report's status."""
        answer = self.app.test_client().post("/v1/reports", json=encode_batch_json(envelopes)).get_json()
        return [r["status"] for r in answer["results"]]

    @property
    def storage(self) -> Any:
        return self.app.extensions["onesided"].storage


@contextlib.contextmanager
def http_front(aggregator: Aggregator) -> Iterator[str]:
    """The aggregator on a loopback port (for the operator's CLI); yields its URL."""
    server: BaseWSGIServer = make_server("127.0.0.1", 0, aggregator, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@dataclass
class AppSession:
    """One app's network: answered by ``aggregator`` in-process; ``offline`` (or ``uploads_fail``) refuse to connect.

    ``accepted`` holds ``(metric, report id, window, round)`` of every report an upload answer called accepted or
    replayed: what the aggregator told this client it holds.
    """

    aggregator: Aggregator
    offline: bool = False
    uploads_fail: bool = False
    accepted: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    accepted_at: dict[str, float] = field(default_factory=dict)  # report id -> simulated time of the first answer
    answers: list[int] = field(default_factory=list)
    envelopes: dict[str, Any] = field(default_factory=dict)  # report id -> the envelope as first accepted

    def request(self, method: str, url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None,
                timeout: float | None = None, stream: bool = False, **_: Any) -> FakeResponse:
        path = urlsplit(url).path
        if self.offline or (self.uploads_fail and path == "/v1/reports"):
            raise requests.ConnectionError("offline")
        answer = WsgiClient(self.aggregator).open(path, method=method, data=data, headers=headers or {})
        self.answers.append(answer.status_code)
        if path == "/v1/reports" and answer.status_code == 200:
            self._record(data or b"", (headers or {}).get("Content-Type", ""), answer.get_json())
        return FakeResponse(answer.status_code, chunks=[answer.get_data()], headers=dict(answer.headers))

    def _record(self, data: bytes, content_type: str, body: dict[str, Any]) -> None:
        if content_type.startswith("application/vnd.onesided.batch"):
            batch = parse_batch_binary(data, max_reports=100_000)
        else:
            batch = parse_batch_json(json.loads(data), max_reports=100_000)
        for envelope, result in zip(batch, body["results"], strict=True):
            if result["status"] in ("accepted", "replayed"):
                rid = envelope.report_id_text
                self.accepted.setdefault(rid, (envelope.metric, envelope.window, envelope.round))
                self.envelopes.setdefault(rid, envelope)
                self.accepted_at.setdefault(rid, self.aggregator.clock())

    def close(self) -> None:
        """Nothing to close (the session interface)."""


def simulated_time(clock: Callable[[], float]) -> Any:
    """A stand-in for the ``time`` module whose ``time()`` reads ``clock`` (for the CLI's key commands)."""
    return type("SimulatedTime", (), {"time": staticmethod(clock)})


def operator(*argv: str) -> tuple[int, str, str]:
    """``onesided ARGV`` in-process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def seeded_secrets(monkeypatch: Any, seed: int) -> None:
    """New client states take their secrets from ``seed``, in the order they are created.

    With the apps' ``rng`` seeded too (their IRR draws), every report's bits are fixed, so a statistical check of
    the estimates is deterministic; otherwise the secrets come from the operating system and the check's outcome
    varies from run to run at its false-failure rate.
    """
    draws = random.Random(seed)
    monkeypatch.setattr(ClientState, "fresh", classmethod(lambda cls: cls(secret=draws.randbytes(32))))

