"""``onesided serve``: run the aggregator under gunicorn.

* SQLite (the default, a file in the data directory): one worker process
  (threads inside it); SQLite has one writer at a time, so more worker
  processes would only queue on its lock. ``--workers N > 1`` is refused.
* PostgreSQL: ``N`` worker processes, each with its own connection pool;
  put several hosts behind a load balancer for more.

Before forking, the master migrates the schema once and checks the keys,
so workers start on a ready database. On SQLite a missing key directory is
created (``onesided keys init``) on first start; on PostgreSQL, where
several hosts must share one key pair, missing keys are an error.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import logging.config
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from typing import Any

from gunicorn import glogging, util
from gunicorn.app.base import BaseApplication
from gunicorn.workers.gthread import TConn, ThreadWorker

from aggregator.server.logs import access_log_from_env, logging_config
from aggregator.server.private_files import prepare_data_dir
from aggregator.server.settings import Settings
from aggregator.server.storage import Storage
from protocol.crypto import AggregatorKeys
from protocol.errors import ParameterError
from protocol.validation import check_int

log = logging.getLogger(__name__)


def check_workers(settings: Settings, workers: int) -> None:
    """Refuse several worker processes on SQLite.

    Raises:
        ParameterError: field ``workers``.
    """
    check_int("workers", workers, low=1)
    if settings.dialect == "sqlite" and workers > 1:
        raise ParameterError(
            "workers",
            f"SQLite allows one writer process: run with --workers 1, or use PostgreSQL "
            f"(--db postgresql+psycopg://user@host/dbname) for {workers} workers",
        )


def prepare(settings: Settings) -> AggregatorKeys:
    """Create missing keys (SQLite only) and migrate the schema; return the keys.

    Raises:
        ParameterError: no keys and the database is PostgreSQL (field ``key_dir``);
            a shared data directory (field ``data_dir``).
    """
    if settings.uses_data_dir:
        prepare_data_dir(settings.data_dir, allow_shared=settings.allow_shared_data_dir)
    if not settings.key_path.is_dir() and settings.dialect == "sqlite":
        keys = AggregatorKeys.generate()
        keys.save(settings.key_path)
        log.warning("created new aggregator keys in %s", settings.key_path)
    from aggregator.server.app import load_keys  # imports prometheus_client: after metrics_dir()

    keys = load_keys(settings)
    storage = Storage.open(settings.database_url, attempts=settings.db_retries)
    storage.close()
    return keys


class _DeadlineConn(TConn):
    """A gunicorn connection whose socket reads time out (``read_timeout`` seconds each).

    gunicorn's threaded worker hands a connection to a thread as soon as its
    first bytes arrive, then reads the request line, headers and body with
    blocking reads that never time out: four clients that send headers and
    stall held all four threads (``/v1/health`` timed out). With a timeout
    a stalled read raises, the thread closes the connection and moves on.
    """

    read_timeout: float = 30.0

    def init(self) -> None:
        super().init()  # after the worker's setblocking(True), which clears any timeout
        self.sock.settimeout(self.read_timeout)

    def close(self, graceful: bool = False) -> None:
        """Close without lingering: gunicorn's graceful close waits up to 2 s for the peer on the
        worker's main thread, so a few stalled clients froze every accept (measured: health 5 s)."""
        if graceful:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_WR)  # FIN after the response, then drain what has arrived
                self.sock.setblocking(False)
                while self.sock.recv(65536):
                    pass
        util.close(self.sock)


class DeadlineThreadWorker(ThreadWorker):
    """gunicorn's ``gthread`` worker with :class:`_DeadlineConn` connections."""

    read_timeout: float = 30.0

    def accept(self, listener: Any) -> None:
        try:
            client_sock, client_addr = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        client_sock.setblocking(True)
        conn = _DeadlineConn(self.cfg, client_sock, client_addr, listener.getsockname())
        conn.read_timeout = self.read_timeout
        self.enqueue_req(conn)


def deadline_worker(read_timeout: float) -> type[DeadlineThreadWorker]:
    """A worker class whose connections time out reads after ``read_timeout`` seconds."""
    return type("OnesidedThreadWorker", (DeadlineThreadWorker,), {"read_timeout": float(read_timeout)})


class SwitchedAccessLogger(glogging.Logger):
    """gunicorn's logger whose access log is on only when ``access_log`` says so.

    gunicorn turns its access log on whenever a logging configuration is
    given (ours always is, for the formats), whatever ``accesslog`` says, and
    then builds every request's line. Here the switch is ours alone: off, no
    line is built or written.
    """

    access_log_on: bool = False

    @property
    def access_log_enabled(self) -> bool:
        return self.access_log_on

    def _compute_access_log_enabled(self) -> bool:
        return self.access_log_on

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        if self.access_log_on:
            super().access(resp, req, environ, request_time)


def access_logger(access_log: bool) -> type[SwitchedAccessLogger]:
    """A logger class with the access log on or off."""
    return type("OnesidedLogger", (SwitchedAccessLogger,), {"access_log_on": bool(access_log)})


class GunicornServer(BaseApplication):
    """gunicorn without its command line: options from us, the app from :func:`create_app` per worker."""

    def __init__(self, settings: Settings, options: dict[str, Any]) -> None:
        self.settings = settings
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            if key in self.cfg.settings:  # settings newer than the installed gunicorn are skipped
                self.cfg.set(key, value)

    def load(self) -> Any:
        from aggregator.server.app import create_app

        return create_app(self.settings)


def _child_exit(_server: Any, worker: Any) -> None:
    from aggregator.server.monitoring import worker_exited

    worker_exited(worker.pid)


def gunicorn_options(
    *, host: str, port: int, workers: int, threads: int, read_timeout: float = 30.0,
    timeout: int = 120, graceful_timeout: int = 20, log_format: str = "text", access_log: bool = False,
) -> dict[str, Any]:
    """The gunicorn settings we use (threads let one worker overlap I/O and keep connections alive).

    ``read_timeout`` bounds each read of a client's socket; ``timeout`` is
    gunicorn's: a worker silent that long is killed and replaced;
    ``graceful_timeout``: how long a stopping worker may finish its requests;
    ``access_log``: one line per request in the log (default off).
    """
    return {
        "bind": f"{host}:{port}",
        "workers": workers,
        "worker_class": deadline_worker(read_timeout),
        "threads": threads,
        "timeout": timeout,
        "graceful_timeout": graceful_timeout,
        "keepalive": 5,
        "accesslog": None,  # lines go through logconfig_dict's handler when access_log is on
        "logger_class": access_logger(access_log),
        "errorlog": "-",
        "loglevel": "info",
        "proc_name": "onesided",
        "control_socket_disable": True,  # gunicorn >= 25 would share one socket in $HOME between servers
        "logconfig_dict": logging_config(log_format, access_log=access_log),
        "child_exit": _child_exit,  # a dead worker's live gauges leave /metrics
    }


@contextlib.contextmanager
def metrics_dir() -> Iterator[None]:
    """A fresh private ``PROMETHEUS_MULTIPROC_DIR`` for this server's processes, unless one is set.

    prometheus_client picks its multiprocess mode when it is imported, so
    this module imports the app (and with it prometheus_client) only inside
    this block: the master after the variable is set, the workers after the
    fork. The folder and the variable are removed when the server stops (by
    the master only: forked workers inherit the block but leave through
    ``os._exit``-like paths of gunicorn, and are checked by pid anyway).
    """
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        yield
        return
    folder = tempfile.mkdtemp(prefix="onesided-metrics-")
    master = os.getpid()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder
    try:
        yield
    finally:
        if os.getpid() == master:
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
            shutil.rmtree(folder, ignore_errors=True)


def serve(
    settings: Settings, *, host: str = "127.0.0.1", port: int = 8080, workers: int = 1, threads: int = 4,
    timeout: int = 120, graceful_timeout: int = 20, log_format: str = "text", access_log: bool | None = None,
) -> None:
    """Run until interrupted (SIGINT / SIGTERM stop gracefully).

    ``access_log``: gunicorn's line per request on or off; ``None`` reads
    ``ONESIDED_ACCESS_LOG`` (``1``/``true``/``yes``; default off).

    Raises:
        ParameterError: ``workers``, ``threads``, or ``access_log`` (a bad ``ONESIDED_ACCESS_LOG``).
    """
    if access_log is None:
        try:
            access_log = access_log_from_env(os.environ)
        except ValueError as exc:
            raise ParameterError("access_log", str(exc)) from exc
    logging.config.dictConfig(logging_config(log_format, access_log=access_log))
    check_workers(settings, workers)
    check_int("threads", threads, low=1, high=256)
    options = gunicorn_options(
        host=host, port=port, workers=workers, threads=threads, read_timeout=settings.read_timeout_seconds,
        timeout=timeout, graceful_timeout=graceful_timeout, log_format=log_format, access_log=access_log,
    )
    with metrics_dir():
        prepare(settings)
        GunicornServer(settings, options).run()
