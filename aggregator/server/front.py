"""The front of ``onesided serve``: one event loop reads whole requests before a thread sees them.

A thread per connection cannot survive the internet: a phone on a bad network
(or anyone) that sends its headers and then a byte every few seconds held a
request thread each, and 64 of them stopped the aggregator. Here the
connections belong to waitress's channels, driven by one poll loop per worker
process: a channel parses the request line, headers and body as bytes arrive
and hands the request to the worker threads only once it is complete (bodies
over 512 KiB wait in a temporary file). A client that trickles costs a buffer
and a slot in the poll set, never a thread.

On top of waitress this adds what a server on the open internet needs
(:class:`FrontLimits`):

* deadlines: a request's headers must arrive within ``header_seconds`` of its
  first byte and the whole request within ``body_seconds``; past either the
  client gets ``408 request_timeout`` and the connection is closed (waitress
  alone only closes connections that are idle, and a trickler never is);
* caps: at most ``max_connections`` open connections per worker process
  (above it the loop stops accepting and the kernel's backlog waits), and at
  most ``max_per_address`` from one client address (more are closed at once;
  ``0``: no cap, for a reverse proxy whose address every request shares);
* keep-alive: a connection idle between requests is closed after ``idle_seconds``;
* errors answered by the front itself (malformed HTTP, a body over the
  limit, headers over 64 KiB) are JSON like the app's.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import resource
import select
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, ThreadedTaskDispatcher, WSGITask

from protocol.validation import check_int, check_number

log = logging.getLogger(__name__)
MAX_HEADER_BYTES = 64 * 1024
# waitress counts a chunked body's framing towards its limit; the app then checks the
# de-chunked body against max_body_bytes exactly, so the front allows this much more.
CHUNK_FRAMING_ALLOWANCE = 1 / 8
ERROR_CODES = {
    400: "bad_request",
    408: "request_timeout",
    413: "payload_too_large",
    431: "request_header_fields_too_large",
    501: "not_implemented",
}
SPARE_FILES = 64  # descriptors beyond the connections: database, pipes, logs, helpers


@dataclass(frozen=True, kw_only=True)
class FrontLimits:
    """How the front treats connections (each a ``ParameterError`` naming it when out of range).

    Attributes:
        threads: request threads per worker process.
        max_body_bytes: largest request body the app accepts (the app answers
            ``413`` above it; the front refuses bodies well beyond it unread).
        header_seconds: the most a request line and headers may take from their first byte.
        body_seconds: the most a whole request may take from its first byte.
        idle_seconds: how long a kept-alive connection may wait for its next request.
        max_connections: open connections per worker process.
        max_per_address: open connections from one client address (0: no cap).
    """

    threads: int = 4
    max_body_bytes: int = 16 * 1024 * 1024
    header_seconds: float = 10.0
    body_seconds: float = 30.0
    idle_seconds: float = 15.0
    max_connections: int = 1000
    max_per_address: int = 64

    def __post_init__(self) -> None:
        check_int("threads", self.threads, low=1, high=256)
        check_int("max_body_bytes", self.max_body_bytes, low=1)
        check_int("max_connections", self.max_connections, low=1, high=100_000)
        check_int("max_connections_per_address", self.max_per_address, low=0, high=100_000)
        check_number("header_timeout_seconds", self.header_seconds, positive=True, high=3600)
        check_number("read_timeout_seconds", self.body_seconds, positive=True, high=3600)
        check_number("idle_timeout_seconds", self.idle_seconds, positive=True, high=3600)

    def adjustments(self, sockets: list[socket.socket]) -> Adjustments:
        """waitress's settings for these limits, serving the listening ``sockets``."""
        return Adjustments(
            sockets=sockets,
            threads=self.threads,
            connection_limit=self.max_connections * (1 + SHED_HEADROOM),
            channel_timeout=self.idle_seconds,
            cleanup_interval=min(1.0, self.header_seconds / 2),
            max_request_header_size=MAX_HEADER_BYTES,
            max_request_body_size=self.max_body_bytes + max(64 * 1024, int(self.max_body_bytes * CHUNK_FRAMING_ALLOWANCE)),
            asyncore_use_poll=True,  # select() stops at descriptor 1024
            recv_bytes=64 * 1024,  # a batch of 100 JSON reports (~25 KB) in one read, not four
            expose_tracebacks=False,
            ident="onesided",
        )


def _json_error(status: int, detail: str) -> bytes:
    return json.dumps({"error": ERROR_CODES.get(status, "bad_request"), "field": None, "detail": detail}).encode()


class _JsonErrorTask(ErrorTask):
    """waitress's own error answers (malformed HTTP, too large) as the app's JSON error body."""

    def execute(self) -> None:
        error = self.request.error
        body = _json_error(error.code, str(error.body))
        self.status = f"{error.code} {error.reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


def _host(addr: Any) -> str:
    return str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)


TIMEOUT_ANSWER = (
    b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s"
)
FRAMING_ANSWER = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s"
)
SHED_ANSWER = (
    b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nRetry-After: %d\r\nConnection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s"
)
SHED_RETRY_AFTER = {503: 1, 429: 5}
SHED_SECONDS = 2.0  # a shed connection that sends nothing this long is closed unanswered
FAIR_SHARE = 2  # at capacity, addresses with fewer connections open than this may use the reserve
RESERVE_MIN = 16  # the reserve: a tenth of max_connections, at least this many
SHED_HEADROOM = 2  # connections being shed, per served one, before the kernel's backlog holds the rest  # seconds: capacity frees quickly; one address's connections less so
# Most chunks one chunked body may come in. waitress de-chunks in the event loop at ~7 us a
# chunk whatever its size, so 400,000 one-byte chunks held the loop for 2.7 CPU-seconds; this
# bounds a request's framing work to ~0.1 s and still allows 1 KiB chunks for a 16 MiB body.
MAX_CHUNKS = 16_384


class _DrainingTask(WSGITask):
    """waitress's WSGI task: the header and the body's first piece in one send; ``Connection: close`` while draining."""

    def build_response_header(self) -> bytes:
        if self.channel.server.draining and not self.close_on_finish:
            self.set_close_on_finish()  # "Connection: close": the client goes to another worker next time
        return bytes(super().build_response_header())

    def write(self, data: bytes) -> None:
        """waitress's write; the first one holds the header back and sends it with ``data``.

        waitress flushes every write at once, so an answer went out as two
        sends (two system calls and two segments for the client to take in):
        the header, then the body. Only the framing of the bytes on the
        connection changes.
        """
        if self.wrote_header or not data:
            super().write(data)
            return
        channel = self.channel
        channel.hold_next_write = True
        try:
            super().write(data)
        finally:
            channel.release_held()


class _DeadlineChannel(HTTPChannel):
    """A waitress channel that knows when its current request began and counts its client's address."""

    error_task_class = _JsonErrorTask
    task_class = _DrainingTask
    request_started = 0.0
    framing_lines = 0  # line ends seen in the current chunked body
    _counted_host: str | None = None
    hold_next_write = False  # set by _DrainingTask.write: keep the next write (the header) for the one after it
    _held = b""

    def __init__(self, server: GuardedServer, sock: socket.socket, addr: Any, adj: Adjustments,
                 map: dict[int, Any] | None = None) -> None:
        super().__init__(server, sock, addr, adj, map)
        self._counted_host = _host(addr)
        server.per_address[self._counted_host] += 1
        server.open_connections += 1

    def received(self, data: bytes) -> bool:
        if self.request is None:
            self.request_started = time.monotonic()  # these bytes begin a new request
            self.framing_lines = 0
        elif self.request.chunked and self.request.headers_finished and self._too_many_chunks(data):
            return True
        return bool(super().received(data))

    def write_soon(self, data: Any) -> int:
        """waitress's ``write_soon``, except for a write held back to go out with the next one."""
        if self.hold_next_write and isinstance(data, bytes):
            self.hold_next_write = False
            self._held = data
            return len(data)
        if self._held:
            held, self._held = self._held, b""
            if isinstance(data, bytes):
                return int(super().write_soon(held + data)) - len(held)
            super().write_soon(held)
        return int(super().write_soon(data))

    def release_held(self) -> None:
        """Send what is still held back (a header whose body was not written), stop holding."""
        self.hold_next_write = False
        if self._held:
            held, self._held = self._held, b""
            super().write_soon(held)

    def _too_many_chunks(self, data: bytes) -> bool:
        """Count the body's line ends (two a chunk, at C speed); past :data:`MAX_CHUNKS` chunks answer 400, close."""
        self.framing_lines += data.count(b"\r\n")
        if self.framing_lines <= 2 * MAX_CHUNKS:
            return False
        if not self.requests:
            body = _json_error(400, f"the chunked body came in more than {MAX_CHUNKS} chunks; send larger chunks")
            with contextlib.suppress(OSError):
                self.write_soon(FRAMING_ANSWER % (len(body), body))
        with self.requests_lock:
            self.request = None
            self.close_when_flushed = True
        return True

    def del_channel(self, map: dict[int, Any] | None = None) -> None:
        super().del_channel(map)
        host, self._counted_host = self._counted_host, None
        if host is not None:
            self.server.open_connections -= 1
            counts = self.server.per_address
            counts[host] -= 1
            if counts[host] <= 0:
                del counts[host]

    def time_out(self, what: str) -> None:
        """Answer 408 (unless a response is already under way) and close once it is sent."""
        if not self.requests:
            body = _json_error(408, f"the request's {what} did not arrive in time")
            with contextlib.suppress(OSError):
                self.write_soon(TIMEOUT_ANSWER % (len(body), body))
        with self.requests_lock:  # a request thread may look at it while it flushes an earlier answer
            self.request = None
            self.close_when_flushed = True
        self.server.timed_out += 1


class _SheddingChannel(HTTPChannel):
    """A connection over a cap: its first bytes are answered 503 or 429 with Retry-After, then it closes.

    Answering at once (instead of leaving the connection in the kernel's
    backlog) tells the client to retry later or elsewhere; reading its
    first bytes before closing keeps the kernel from resetting the answer
    away. It never reaches a request thread.
    """

    def __init__(self, server: GuardedServer, sock: socket.socket, addr: Any, adj: Adjustments,
                 status: int, detail: str) -> None:
        super().__init__(server, sock, addr, adj, server._map)
        self.answer_status, self.answer_detail = status, detail
        self.started = time.monotonic()
        self.answered = False

    def received(self, data: bytes) -> bool:
        if not self.answered:
            self.answered = True
            body = _json_error(self.answer_status, self.answer_detail)
            reason = b"Service Unavailable" if self.answer_status == 503 else b"Too Many Requests"
            with contextlib.suppress(OSError):
                self.write_soon(SHED_ANSWER % (self.answer_status, reason, SHED_RETRY_AFTER[self.answer_status],
                                               len(body), body))
            self.close_when_flushed = True
        return True


class GuardedServer(TcpWSGIServer):
    """waitress's TCP server with request deadlines and a per-address cap."""

    channel_class = _DeadlineChannel

    def __init__(self, application: Callable[..., Any], task_map: dict[int, Any], sock: socket.socket,
                 dispatcher: ThreadedTaskDispatcher, adj: Adjustments, limits: FrontLimits) -> None:
        self.limits = limits
        self.per_address: collections.Counter[str] = collections.Counter()
        self.draining = False  # set by Front.stop
        self.open_connections = 0  # connections served (not those being shed)
        self.shed = 0
        self.timed_out = 0
        sockinfo = (sock.family, sock.type, sock.proto, sock.getsockname())
        super().__init__(application, task_map, True, sock, dispatcher=dispatcher, adj=adj,
                         bind_socket=False, sockinfo=sockinfo)

    def handle_accept(self) -> None:
        try:
            pair = self.accept()
            if pair is None:
                return
            conn, addr = pair
            self.set_socket_options(conn)
        except OSError:
            return  # the peer left before we got to it, or no descriptor is free right now
        host = _host(addr)
        cap = self.limits.max_per_address
        if cap and self.per_address[host] >= cap:
            self._shed(conn, addr, 429, f"{cap} connections are open from your address already; retry later")
        elif self.open_connections >= self.limits.max_connections and not self._reserved_for(host):
            self._shed(conn, addr, 503, "the server is at its connection capacity; retry later")
        else:
            self.channel_class(self, conn, addr, self.adj, map=self._map)

    def _reserved_for(self, host: str) -> bool:
        """At capacity, an address with (almost) no connection open may still use the reserve.

        Attacks hold many connections from each of their addresses; a device
        holds one or two. The reserve (a tenth of the cap) keeps room for them.
        """
        reserve = max(RESERVE_MIN, self.limits.max_connections // 10)
        return self.per_address[host] < FAIR_SHARE and self.open_connections < self.limits.max_connections + reserve

    def _shed(self, conn: socket.socket, addr: Any, status: int, detail: str) -> None:
        self.shed += 1
        if self.shed & (self.shed - 1) == 0:  # 1st, 2nd, 4th, 8th ...: bounded logging
            log.warning("shedding load: answered %d at once (%s; %d so far)", status, detail, self.shed)
        _SheddingChannel(self, conn, addr, self.adj, status, detail)

    def maintenance(self, now: float) -> None:
        """waitress's idle cut-off, then the request deadlines."""
        super().maintenance(now)
        clock = time.monotonic()
        for shed in [c for c in self.active_channels.values() if isinstance(c, _SheddingChannel)]:
            if clock - shed.started > SHED_SECONDS:
                with contextlib.suppress(OSError):
                    shed.close()
        for channel in list(self.active_channels.values()):
            request = channel.request
            if request is None or channel.will_close or channel.close_when_flushed:
                continue
            age = clock - channel.request_started
            if not request.headers_finished and age > self.limits.header_seconds:
                channel.time_out("headers")
            elif age > self.limits.body_seconds:
                channel.time_out("body")


class Front:
    """The event loop, its servers (one per listening socket) and the request threads of one process."""

    def __init__(self, app: Callable[..., Any], sockets: Iterable[socket.socket], limits: FrontLimits) -> None:
        sockets = list(sockets)
        raise_file_limit(limits.max_connections * (1 + SHED_HEADROOM) + SPARE_FILES)
        self.limits = limits
        self.map: dict[int, Any] = {}
        adj = limits.adjustments(sockets)
        self.dispatcher = ThreadedTaskDispatcher()
        self.dispatcher.set_thread_count(limits.threads)
        self.servers = [GuardedServer(app, self.map, sock, self.dispatcher, adj, limits) for sock in sockets]

    def poll(self, timeout: float) -> None:
        """Run the loop once: wait up to ``timeout`` seconds for events and handle them."""
        wasyncore.loop(timeout=timeout, map=self.map, use_poll=True, count=1)

    def busy(self) -> bool:
        """Some request is being served or waits for a thread."""
        return any(getattr(c, "requests", None) for c in list(self.map.values()))

    def stop(self, grace_seconds: float) -> None:
        """Stop listening, answer what was accepted (at most ``grace_seconds``), close the rest.

        Connections already in the kernel's queue are accepted and answered
        first; then this process's copy of the listening socket is closed, so
        a connection arriving later is refused at once (the client retries
        another instance) instead of being reset unanswered when the worker
        exits. While draining, every answer says ``Connection: close`` and an
        idle kept-alive connection is closed, so no client holds the worker.
        """
        for server in self.servers:
            server.draining = True
            _accept_queued(server)
            server.accepting = False
            with contextlib.suppress(OSError):
                server.del_channel()  # out of the poll set
            with contextlib.suppress(OSError):
                server.socket.close()  # our copy of gunicorn's listener: the kernel stops queueing for us
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline:
            self._close_idle()
            if not self.busy():
                break
            self.poll(0.1)
        self.dispatcher.shutdown(cancel_pending=True, timeout=1)
        for channel in list(self.map.values()):
            with contextlib.suppress(OSError):
                channel.close()

    def _close_idle(self) -> None:
        """Close the channels with no request in flight or arriving and nothing left to send."""
        for channel in list(self.map.values()):
            if (isinstance(channel, _DeadlineChannel) and not channel.requests and channel.request is None
                    and not channel.total_outbufs_len):
                with contextlib.suppress(OSError):
                    channel.close()


MAX_QUEUED_ACCEPTS = 10_000  # a stopping worker takes at most this many queued connections


def _accept_queued(server: GuardedServer) -> None:
    """Accept the connections waiting in the listening socket's queue (they are answered while draining)."""
    for _ in range(MAX_QUEUED_ACCEPTS):
        try:
            ready, _, _ = select.select([server.socket], [], [], 0)
        except (OSError, ValueError):
            return
        if not ready:
            return
        before = len(server._map)
        server.handle_accept()
        if len(server._map) == before:
            return  # taken by another worker, or refused by the caps


def raise_file_limit(wanted: int) -> None:
    """Raise this process's soft limit of open files towards ``wanted`` (up to the hard limit).

    A process at its limit cannot accept, and a poll loop would spin on the
    listening socket; the connection cap stays below what is available.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    if soft != resource.RLIM_INFINITY and soft < wanted:
        log.warning("open-file limit %d is below the %d the connection cap needs; raise `ulimit -n`", soft, wanted)
