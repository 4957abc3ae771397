"""Reading a request body with a size limit and a deadline, whatever its framing.

werkzeug refuses a ``Content-Length`` over ``MAX_CONTENT_LENGTH`` before
reading (413), but a chunked body has no length: ``request.get_data()``
silently cut it at the limit, and the truncated JSON answered 400. Here a
body of either framing is read in pieces, at most ``limit + 1`` bytes: more
than ``limit`` is 413 ``payload_too_large``; exactly ``limit`` is accepted.

Under ``onesided serve`` the front has read the whole body before the app
runs (:mod:`aggregator.server.front`), so these reads return at once. Under
a server that hands a thread a connection still arriving (werkzeug's, in
tests), a body that stalls or drips holds that thread: the whole body is
bounded by ``deadline_seconds`` (measured here) and a socket timeout, if the
server sets one, ends the request too; either is 408 ``request_timeout``.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from werkzeug.exceptions import ClientDisconnected, RequestEntityTooLarge, RequestTimeout

PIECE = 64 * 1024


class Readable(Protocol):
    """What a body is read from (``request.stream``, ``wsgi.input``)."""

    def read(self, size: int, /) -> bytes: ...


def _raw_stream(environ: dict[str, Any], content_length: int | None, fallback: Readable) -> Readable:
    """The de-chunked input of a chunked request (the server ends it), else werkzeug's limited stream."""
    if content_length is None and environ.get("wsgi.input_terminated"):
        stream: Readable = environ["wsgi.input"]
        return stream
    return fallback


def _timed_out(exc: BaseException) -> bool:
    """werkzeug reports a socket timeout under a Content-Length as a disconnection; find the timeout."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, TimeoutError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def read_body(
    environ: dict[str, Any], stream: Readable, content_length: int | None, *, limit: int, deadline_seconds: float
) -> bytes:
    """The whole body, at most ``limit`` bytes, read within ``deadline_seconds``.

    Args:
        environ: the WSGI environ (``wsgi.input`` for chunked bodies).
        stream: ``request.stream`` (bounded by ``Content-Length`` when there is one).
        content_length: the request's ``Content-Length``, or ``None`` (chunked).
        limit: the largest body accepted (``max_body_bytes``).
        deadline_seconds: the longest the whole body may take to arrive.

    Raises:
        RequestEntityTooLarge: more than ``limit`` bytes (413).
        RequestTimeout: the body did not arrive in time, or a read timed out (408).
    """
    if content_length is not None and content_length > limit:
        raise RequestEntityTooLarge()
    source = _raw_stream(environ, content_length, stream)
    # A body with a length is read to exactly that length: one read more would ask werkzeug's
    # stream, which servers mark as terminated, for a byte past MAX_CONTENT_LENGTH (413 for a
    # body of exactly the limit). Without a length, one byte past the limit tells "too large".
    wanted = limit + 1 if content_length is None else content_length
    pieces: list[bytes] = []
    size = 0
    started = time.monotonic()
    while size < wanted:
        try:
            piece = source.read(min(PIECE, wanted - size))
        except (OSError, ClientDisconnected) as exc:
            if isinstance(exc, ClientDisconnected) and not _timed_out(exc):
                raise  # the client went away: 400, nobody is listening anyway
            raise RequestTimeout("the request body did not arrive within the read timeout") from exc
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
        if size > limit:
            raise RequestEntityTooLarge()
        if time.monotonic() - started > deadline_seconds:
            raise RequestTimeout(f"the request body took longer than {deadline_seconds:g} s")
    return b"".join(pieces)
