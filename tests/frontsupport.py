"""The server's event-loop front (:class:`aggregator.server.front.Front`) in a thread, on a loopback socket.

For tests of connection handling without gunicorn: ``running_front`` yields
the port and an event; clearing the event makes the loop drain
(``Front.stop``) as a worker does on SIGTERM.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from aggregator.server.front import Front, FrontLimits


@contextlib.contextmanager
def running_front(app: Callable[..., Any], limits: FrontLimits, *, grace_seconds: float = 20.0,
                  ) -> Iterator[tuple[int, threading.Event, threading.Thread]]:
    """(port, an event that starts the drain when cleared, the loop's thread); stopped afterwards."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    front = Front(app, [listener], limits)
    running = threading.Event()
    running.set()

    def loop() -> None:
        while running.is_set():
            front.poll(0.05)
        front.stop(grace_seconds)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield port, running, thread
    finally:
        running.clear()
        thread.join(timeout=30)
        listener.close()
