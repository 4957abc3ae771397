"""A TCP relay to cut a dependency (PostgreSQL) away from a server under test and mend it again.

Cutting the relay closes every connection the app holds and refuses new
ones: what a database restart, a failover or a network partition looks
like from the app. The machine's PostgreSQL itself is never touched.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

from aggsupport import postgres_schema
from sqlalchemy.engine import make_url


class Relay:
    """Forwards TCP connections from a loopback port to ``target``; :meth:`cut` drops them all, :meth:`mend` listens again."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener = self._listen(0)
        self.port: int = self._listener.getsockname()[1]

    def _listen(self, port: int) -> socket.socket:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(16)
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return listener

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        """Refuse new connections and reset the open ones."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone does not)
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def mend(self) -> None:
        """Listen again on the same port."""
        self._listener = self._listen(self.port)

    def close(self) -> None:
        self.cut()


@contextlib.contextmanager
def relayed_postgres() -> Iterator[tuple[str, str, Relay]]:
    """(direct URL, URL through the relay, the relay) of a fresh schema; skips without PostgreSQL."""
    with postgres_schema() as direct:
        parsed = make_url(direct)
        relay = Relay((parsed.host or "127.0.0.1", parsed.port or 5432))
        try:
            through = parsed.set(port=relay.port).render_as_string(hide_password=False)
            yield direct, through, relay
        finally:
            relay.close()
