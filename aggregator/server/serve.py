"""``onesided serve``: run the aggregator under gunicorn, each worker behind an event-loop front.

Each worker process reads whole requests in one event loop before a thread
sees them (:mod:`aggregator.server.front`: deadlines, connection caps,
keep-alive limits), so slow or idle clients cannot hold the request threads.

* SQLite (the default, a file in the data directory): one worker process
  (threads inside it); SQLite has one writer at a time, so more worker
  processes would only queue on its lock. ``--workers N > 1`` is refused.
* PostgreSQL: ``N`` worker processes, each with its own connection pool;
  put several hosts behind a load balancer for more.

Before forking, the master migrates the schema once and checks the keys,
so workers start on a ready database. A folder without keys is refused
unless ``init`` (SQLite only: on PostgreSQL several hosts must share one key
pair made by ``onesided keys init``), and so is a SQLite file that vanished
from beside the keys that served it, unless ``new_database``
(:mod:`aggregator.server.initialisation`).
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

from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.workers.base import Worker

from aggregator.server.front import Front, FrontLimits
from aggregator.server.initialisation import check_initialised, record_database
from aggregator.server.keyring import load_keyring
from aggregator.server.logs import (
    ADDRESS_POLICIES,
    access_log_from_env,
    access_log_middleware,
    address_policy_from_env,
    logging_config,
)
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


def prepare(settings: Settings, *, init: bool = False, new_database: bool = False) -> AggregatorKeys:
    """Check that this is an initialised aggregator, create what ``init`` allows, migrate; return the keys.

    Args:
        init: create the keys (SQLite only) when there are none.
        new_database: create an empty SQLite database even though these keys
            served one at that path before (see :mod:`aggregator.server.initialisation`).

    Raises:
        ParameterError: no keys and not ``init`` (or PostgreSQL; field
            ``key_dir``); a served SQLite file missing (field ``database``);
            a shared data directory (field ``data_dir``).
    """
    check_initialised(settings, init=init, new_database=new_database)
    if settings.uses_data_dir:
        prepare_data_dir(settings.data_dir, allow_shared=settings.allow_shared_data_dir)
    if not settings.key_path.is_dir() and settings.dialect == "sqlite":
        keys = AggregatorKeys.generate()
        keys.save(settings.key_path)
        log.warning("created new aggregator keys in %s", settings.key_path)
    from aggregator.server.app import load_keys  # imports prometheus_client: after metrics_dir()

    keys = load_keys(settings)
    storage = Storage.open(settings.database_url, attempts=settings.db_retries, wait_seconds=settings.db_wait_seconds)
    storage.close()
    record_database(settings)
    return keys


def check_port(host: str, port: int) -> None:
    """Refuse a port another process listens on, in one line (gunicorn would retry for 10 s, then exit 1).

    Raises:
        ParameterError: field ``port``.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds: TIME_WAIT is no conflict
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return  # gunicorn's own error says the rest (a bad address, no permission)
            raise ParameterError("port", f"{host}:{port} is already in use (another server?); stop it or choose "
                                         "another --port") from None


class FrontWorker(Worker):
    """A gunicorn worker whose connections belong to :class:`aggregator.server.front.Front`.

    gunicorn keeps what it is good at (the master: binding, forking,
    replacing a dead or silent worker, graceful stops); the worker's own loop
    is waitress's event loop, so a request reaches a thread only when it has
    arrived whole (gunicorn's threaded worker read each request in a thread).
    """

    limits: FrontLimits = FrontLimits()
    access_log: str | None = None  # the access log's address policy, None: no access log

    def run(self) -> None:
        app = self.wsgi if self.access_log is None else access_log_middleware(self.wsgi, self.access_log)
        front = Front(app, [listener.sock for listener in self.sockets], self.limits)
        try:
            while self.alive:
                front.poll(1.0)
                self.notify()
                if self.ppid != os.getppid():
                    self.log.info("parent changed, shutting down: %s", self)
                    break
        finally:
            front.stop(self.cfg.graceful_timeout)


def front_worker(limits: FrontLimits, access_log: str | None) -> type[FrontWorker]:
    """A worker class with these limits and access log (``None``: off, else the address policy)."""
    return type("OnesidedWorker", (FrontWorker,), {"limits": limits, "access_log": access_log})


class KeyCheckingArbiter(Arbiter):
    """gunicorn's master, except that SIGHUP first reads the keys: unreadable ones keep the old workers.

    A reload replaces every worker; with a damaged or half-written key file
    the new ones could only answer 503 ``keys_unavailable``, so the master
    logs one line and leaves the running workers (and their keys) alone.
    """

    def handle_hup(self) -> None:
        settings: Settings = self.app.settings
        try:
            load_keyring(settings.key_path)
        except (ParameterError, OSError, ValueError) as exc:
            self.log.error("SIGHUP ignored: cannot read the keys in %s (%s); the running workers keep serving "
                           "with the keys they loaded", settings.key_path, exc)
            return
        super().handle_hup()


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

        return create_app(self.settings, wait_for_dependencies=True)

    def run(self) -> None:
        KeyCheckingArbiter(self).run()


def _child_exit(_server: Any, worker: Any) -> None:
    from aggregator.server.monitoring import worker_exited

    worker_exited(worker.pid)


def gunicorn_options(
    *, host: str, port: int, workers: int, limits: FrontLimits, timeout: int = 120, graceful_timeout: int = 20,
    log_format: str = "text", access_log: str | None = None,
) -> dict[str, Any]:
    """The gunicorn settings we use: its master, and our :class:`FrontWorker` per process.

    ``timeout`` is gunicorn's: a worker silent that long is killed and
    replaced; ``graceful_timeout``: how long a stopping worker may finish its
    requests; ``access_log``: ``None`` (off, the default) or the address
    policy of the line per request.
    """
    return {
        "bind": f"{host}:{port}",
        "workers": workers,
        "worker_class": front_worker(limits, access_log),
        "threads": limits.threads,
        "timeout": timeout,
        "graceful_timeout": graceful_timeout,
        "accesslog": None,
        "errorlog": "-",
        "loglevel": "info",
        "proc_name": "onesided",
        "control_socket_disable": True,  # gunicorn >= 25 would share one socket in $HOME between servers
        "logconfig_dict": logging_config(log_format, access_log=access_log is not None),
        "child_exit": _child_exit,  # a dead worker's live gauges leave /metrics
    }


def front_limits(settings: Settings, threads: int) -> FrontLimits:
    """The front's limits from the settings.

    Raises:
        ParameterError: ``threads`` out of range.
    """
    return FrontLimits(
        threads=threads, max_body_bytes=settings.max_body_bytes, header_seconds=settings.header_timeout_seconds,
        body_seconds=settings.read_timeout_seconds, idle_seconds=settings.idle_timeout_seconds,
        max_connections=settings.max_connections, max_per_address=settings.max_connections_per_address,
    )


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
    access_log_addresses: str | None = None, init: bool = False, new_database: bool = False,
) -> None:
    """Run until interrupted (SIGINT / SIGTERM stop gracefully).

    ``access_log``: a line per request on or off; ``None`` reads
    ``ONESIDED_ACCESS_LOG`` (``1``/``true``/``yes``; default off).
    ``access_log_addresses``: ``truncated`` (default), ``full`` or ``none``;
    ``None`` reads ``ONESIDED_ACCESS_LOG_ADDRESSES``. ``init`` and
    ``new_database``: see :func:`prepare`.

    Raises:
        ParameterError: ``workers``, ``threads``, ``access_log`` or
            ``access_log_addresses`` (a bad environment value); ``port`` in
            use; ``key_dir`` / ``database``: see :func:`prepare`.
    """
    try:
        if access_log is None:
            access_log = access_log_from_env(os.environ)
        if access_log_addresses is None:
            access_log_addresses = address_policy_from_env(os.environ)
    except ValueError as exc:
        raise ParameterError("access_log", str(exc)) from exc
    if access_log_addresses not in ADDRESS_POLICIES:
        raise ParameterError("access_log_addresses", f"must be one of {', '.join(ADDRESS_POLICIES)}")
    logging.config.dictConfig(logging_config(log_format, access_log=access_log))
    check_workers(settings, workers)
    check_port(host, port)
    options = gunicorn_options(
        host=host, port=port, workers=workers, limits=front_limits(settings, threads), timeout=timeout,
        graceful_timeout=graceful_timeout, log_format=log_format,
        access_log=access_log_addresses if access_log else None,
    )
    with metrics_dir():
        prepare(settings, init=init, new_database=new_database)
        GunicornServer(settings, options).run()
