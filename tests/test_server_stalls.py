"""Clients that stall mid-request do not starve ``onesided serve`` of threads.

Before: four connections that sent their headers (or part of them) and then
nothing held all four gunicorn threads, and ``/v1/health`` timed out. Now
the front's event loop reads whole requests before a thread sees them and a
request must arrive within ``--read-timeout`` (408 ``request_timeout``);
tests/test_server_front.py has the trickling connections and the caps.

The stalled sockets live in a context manager that closes them (bounded:
at most ``STALL_SECONDS``), on loopback only.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from aggsupport import serve_subprocess

THREADS = 4
READ_TIMEOUT = 0.4
STALL_SECONDS = 8.0


@contextlib.contextmanager
def stalled_connections(url: str, heads: list[bytes]) -> Iterator[list[socket.socket]]:
    """Open one connection per head, send it, and send nothing more until the block ends."""
    host, port = url.removeprefix("http://").split(":")
    sockets = []
    try:
        for head in heads:
            sock = socket.create_connection((host, int(port)), timeout=STALL_SECONDS)
            sock.sendall(head)
            sockets.append(sock)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def _heads() -> list[bytes]:
    body_stall = (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100000\r\n\r\n{\"version\": 1, ")
    chunked_stall = (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n10\r\n{\"version\": 1,  \r\n")
    header_stall = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: "
    return [body_stall, chunked_stall, header_stall, body_stall, header_stall, chunked_stall][: THREADS + 2]


def _health_seconds(url: str) -> float:
    started = time.monotonic()
    answer = requests.get(f"{url}/v1/health", timeout=5)
    assert answer.status_code == 200
    return time.monotonic() - started


@pytest.mark.slow
def test_health_answers_within_a_second_while_clients_stall(tmp_path: Path) -> None:
    with serve_subprocess("--data-dir", str(tmp_path), "--threads", str(THREADS),
                          "--read-timeout", str(READ_TIMEOUT)) as url:
        with stalled_connections(url, _heads()) as sockets:
            time.sleep(0.1)  # let the server hand them to its threads
            latencies = [_health_seconds(url) for _ in range(5)]
            assert max(latencies) < 1.0, latencies
            # the stalled body readers were answered 408 (or cut) rather than left waiting
            sockets[0].settimeout(5)
            answer = sockets[0].recv(4096)
            assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer[:80]


class _Drip:
    """A body that arrives a byte per read, each read "taking" a second on a fake clock."""

    def __init__(self, clock: list[float], size: int) -> None:
        self.clock, self.left = clock, size

    def read(self, _n: int) -> bytes:
        self.clock[0] += 1.0
        self.left -= 1
        return b"x" if self.left >= 0 else b""


def test_a_dripping_body_meets_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    from werkzeug.exceptions import RequestTimeout

    from aggregator.server import request_body

    clock = [0.0]
    monkeypatch.setattr(request_body.time, "monotonic", lambda: clock[0])
    environ: dict[str, object] = {}
    assert request_body.read_body(environ, _Drip(clock, 5), 5, limit=100, deadline_seconds=10) == b"xxxxx"
    with pytest.raises(RequestTimeout):
        request_body.read_body(environ, _Drip(clock, 50), 50, limit=100, deadline_seconds=10)
