"""A stopping worker stops listening first, answers what it accepted, and lets no kept-alive client hold it.

The front runs in a thread here, on a listening socket of the test's, with
a WSGI app whose ``/slow`` takes 1.5 s (a request in flight while the
worker drains). Timing assumptions: the drain starts within 0.5 s of the
slow request; a refused or answered connection shows within 5 s on a
loaded machine (the grace period is 20 s, so a hang means it was not).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from frontsupport import running_front

from aggregator.server.front import FrontLimits

SLOW_SECONDS = 1.5


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    if environ["PATH_INFO"] == "/slow":
        time.sleep(SLOW_SECONDS)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


def request(port: int, path: str, *, keep_alive: bool = True) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    connection = "keep-alive" if keep_alive else "close"
    client.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: {connection}\r\n\r\n".encode())
    return client


def read_all(client: socket.socket) -> bytes:
    data = b""
    while chunk := client.recv(65536):
        data += chunk
    return data


@pytest.fixture
def front() -> Iterator[tuple[int, threading.Event, threading.Thread]]:
    """(port, an event that starts the drain when cleared, the loop's thread)."""
    with running_front(app, FrontLimits(threads=2)) as running:
        yield running


def test_a_draining_worker_refuses_new_connections_and_answers_accepted_ones(
    front: tuple[int, threading.Event, threading.Thread],
) -> None:
    port, running, thread = front
    idle = request(port, "/fast")  # kept alive: answered, then idle
    assert idle.recv(65536).startswith(b"HTTP/1.1 200")
    slow = request(port, "/slow")
    time.sleep(0.3)
    running.clear()  # SIGTERM: the loop drains
    time.sleep(0.3)
    try:
        late = request(port, "/fast")
    except ConnectionRefusedError:
        pass  # refused at once: nothing listens for this worker any more
    else:
        try:
            answer = late.recv(65536)
        except TimeoutError:
            answer = b"(no answer in 5 s)"
        late.close()
        pytest.fail(f"a connection made during the drain was accepted, then: {answer[:40]!r}")
    answer = read_all(slow)
    assert answer.startswith(b"HTTP/1.1 200") and b"Connection: close" in answer  # the accepted one: answered
    assert idle.recv(65536) == b""  # the idle kept-alive connection was closed, not left to hold the worker
    thread.join(timeout=SLOW_SECONDS + 5)
    assert not thread.is_alive()  # done long before the 20 s grace period
    for client in (idle, slow):
        client.close()
