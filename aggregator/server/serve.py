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

import logging
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from aggregator.server.app import create_app, load_keys
from aggregator.server.settings import Settings
from aggregator.server.storage import Storage
from protocol.crypto import AggregatorKeys
from protocol.errors import ParameterError

log = logging.getLogger(__name__)


def check_workers(settings: Settings, workers: int) -> None:
    """Refuse several worker processes on SQLite.

    Raises:
        ParameterError: field ``workers``.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ParameterError("workers", f"must be an integer >= 1, got {workers!r}")
    if settings.dialect == "sqlite" and workers > 1:
        raise ParameterError(
            "workers",
            f"SQLite allows one writer process: run with --workers 1, or use PostgreSQL "
            f"(--db postgresql+psycopg://user@host/dbname) for {workers} workers",
        )


def prepare(settings: Settings) -> AggregatorKeys:
    """Create missing keys (SQLite only) and migrate the schema; return the keys.

    Raises:
        ParameterError: no keys and the database is PostgreSQL (field ``key_dir``).
    """
    if not settings.key_path.is_dir() and settings.dialect == "sqlite":
        keys = AggregatorKeys.generate()
        keys.save(settings.key_path)
        log.warning("created new aggregator keys in %s", settings.key_path)
    keys = load_keys(settings)
    storage = Storage.open(settings.database_url, attempts=settings.db_retries)
    storage.close()
    return keys


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

    def load(self) -> Flask:
        return create_app(self.settings)


def gunicorn_options(*, host: str, port: int, workers: int, threads: int) -> dict[str, Any]:
    """The gunicorn settings we use (threads let one worker overlap I/O and keep connections alive)."""
    return {
        "bind": f"{host}:{port}",
        "workers": workers,
        "worker_class": "gthread",
        "threads": threads,
        "timeout": 120,
        "graceful_timeout": 20,
        "keepalive": 5,
        "accesslog": None,
        "errorlog": "-",
        "loglevel": "info",
        "proc_name": "onesided",
        "control_socket_disable": True,  # gunicorn >= 25 would share one socket in $HOME between servers
    }


def serve(settings: Settings, *, host: str = "127.0.0.1", port: int = 8080, workers: int = 1, threads: int = 4) -> None:
    """Run until interrupted (SIGINT / SIGTERM stop gracefully)."""
    check_workers(settings, workers)
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 256:
        raise ParameterError("threads", f"must be an integer in [1, 256], got {threads!r}")
    prepare(settings)
    options = gunicorn_options(host=host, port=port, workers=workers, threads=threads)
    GunicornServer(settings, options).run()
