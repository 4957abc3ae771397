"""The front sends an answer's header and body together: one send per answer, the bytes unchanged.

waitress flushes each write at once, so every answer left as two sends (the
header, then the body): two system calls on the server and two segments for
the client to take in, per request. The answers' bytes are checked whole,
for a body with a length, a chunked body, a body-less answer and an app that
fails before writing.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from frontsupport import running_front
from waitress import wasyncore

from aggregator.server.front import FrontLimits

BODY = b'{"accepted":100,"results":[' + b'{"status":"accepted"},' * 99 + b'{"status":"accepted"}]}'
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _with_length(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(BODY)))])
    return [BODY]


def _chunked(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "application/json")])
    return [BODY[:100], BODY[100:]]


def _no_content(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("204 No Content", [])
    return [b""]


def _exchange(port: int, request: bytes, until: bytes) -> bytes:
    """Send ``request`` and read until the answer ends with ``until``."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while not answer.endswith(until):
            piece = sock.recv(65536)
            if not piece:
                break
            answer += piece
        return answer


@pytest.fixture
def sends(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """What the front's channels hand to their sockets, one entry per send."""
    seen: list[bytes] = []
    original = wasyncore.dispatcher.send

    def counting(self: Any, data: bytes, do_close: bool = True) -> int:
        if isinstance(self, wasyncore.dispatcher) and hasattr(self, "requests"):
            seen.append(bytes(data))
        return int(original(self, data, do_close))

    monkeypatch.setattr(wasyncore.dispatcher, "send", counting)
    return seen


REQUEST = b"GET /x HTTP/1.1\r\nHost: test\r\n\r\n"


def test_an_answer_with_a_length_goes_out_in_one_send(sends: list[bytes]) -> None:
    with running_front(_with_length, FrontLimits(threads=1)) as (port, _, _):
        answer = _exchange(port, REQUEST, BODY)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"\r\n\r\n" + BODY)
    assert f"Content-Length: {len(BODY)}\r\n".encode() in answer
    assert sends == [answer]  # before: [header, body]


def test_two_answers_on_one_connection_are_one_send_each(sends: list[bytes]) -> None:
    with running_front(_with_length, FrontLimits(threads=1)) as (port, _, _), \
            socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        answers = []
        for _ in range(2):
            sock.sendall(REQUEST)
            answer = b""
            while not answer.endswith(BODY):
                answer += sock.recv(65536)
            answers.append(answer)
    assert sends == answers


def test_a_chunked_answer_keeps_its_framing(sends: list[bytes]) -> None:
    with running_front(_chunked, FrontLimits(threads=1)) as (port, _, _):
        answer = _exchange(port, REQUEST, b"0\r\n\r\n")
    head, _, framed = answer.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head
    assert framed == b"64\r\n" + BODY[:100] + b"\r\n" + f"{len(BODY) - 100:X}".encode() + b"\r\n" + BODY[100:] \
        + b"\r\n0\r\n\r\n"
    assert sends[0] == head + b"\r\n\r\n64\r\n" + BODY[:100] + b"\r\n"  # the header with the first chunk
    assert b"".join(sends) == answer


def test_an_answer_without_a_body_is_sent_whole(sends: list[bytes]) -> None:
    with running_front(_no_content, FrontLimits(threads=1)) as (port, _, _):
        answer = _exchange(port, REQUEST, b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 204 No Content\r\n")
    assert b"".join(sends) == answer


def test_an_app_that_fails_still_gets_the_500_answer(sends: list[bytes]) -> None:
    def failing(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        raise RuntimeError("boom")

    with running_front(failing, FrontLimits(threads=1)) as (port, _, _):
        answer = _exchange(port, REQUEST, b"error")
    assert answer.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert b"".join(sends) == answer
