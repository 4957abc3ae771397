"""Aggregator settings: one frozen record, validated once at start-up.

Every knob an operator can turn lives here (docs/operations.md lists them).
``Settings.from_mapping`` reads a plain dict (flask-style config, tests);
``Settings.from_env`` fills what the command line left out from
``ONESIDED_*`` environment variables.

>>> s = Settings(data_dir="/srv/onesided")
>>> s.database_url
'sqlite:////srv/onesided/onesided.db'
>>> s.dialect
'sqlite'
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from aggregator.server.request_context import parse_networks
from protocol.errors import ParameterError
from protocol.validation import check_int
from protocol.wire import SYNC_INTERVAL_RANGE

DEFAULT_DATA_DIR = "onesided-data"
DB_FILE = "onesided.db"
KEY_DIR = "keys"
MiB = 1024 * 1024
DAY = 86400
DEFAULT_MAX_DECODE_CELLS = 4_000_000  # ~1 s of OLS at 2,048 rows (m=128, 16 cohorts); LASSO more


def _check_int(name: str, value: Any, low: int, high: int) -> None:
    check_int(name, value, low=low, high=high)


def _check_seconds(name: str, value: Any, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ParameterError(name, f"must be a number of seconds in [{low:g}, {high:g}], got {value!r}")


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What an aggregator process needs to run.

    Attributes:
        data_dir: folder for the embedded SQLite database and, by default, the keys.
        db_url: SQLAlchemy URL; ``None`` means SQLite (WAL) at ``data_dir/onesided.db``.
            PostgreSQL: ``postgresql+psycopg://user@host:5432/dbname``.
        key_dir: folder of the aggregator's private keys; ``None`` means ``data_dir/keys``.
        allow_plaintext: accept unsealed (``plain``) reports. For simulations only:
            a plaintext report is readable by anyone on the path.
        max_body_bytes: largest request body; larger ones get ``413 payload_too_large``.
        max_reports: most reports in one batch; more get ``413 too_many_reports``.
        clock_skew_seconds: how far in the future a window may start before
            its reports are ``too_early``.
        retention_seconds: raw reports (the replay set) are kept this long after
            their window ends; older windows are ``expired`` and purged.
        db_retries: attempts of a batch transaction after a unique-violation or
            serialization race between processes.
        db_wait_seconds: how long start-up waits for an unreachable PostgreSQL
            server (retrying with backoff) before it exits with one line
            naming the host (SQLite files are not waited for).
        decrypt_processes: helper processes that open the sealed reports of
            large batches (0: open them in the worker). Useful with SQLite,
            whose single worker process is otherwise bound to one core.
        decode_processes: helper processes that run analysts' fits (estimates,
            certificates), so a long fit does not hold the worker's GIL
            (0: run them in the request's thread).
        max_decode_cells: the most work one estimate or certificate request
            may ask for: candidates x (cohort, bit) rows of a Bloom metric's
            design matrix; more is 422 ``too_costly`` (field ``candidates``).
        allow_shared_data_dir: serve from a data directory that group or others
            may use (refused by default: it holds the keys and raw reports;
            see ``aggregator.server.private_files``).
        read_timeout_seconds: the longest a whole request may take to arrive,
            from its first byte (``onesided serve``'s front; the app also
            bounds reading a body by it), after which the client gets 408
            ``request_timeout`` and the connection is closed.
        header_timeout_seconds: the longest a request line and headers may
            take to arrive under ``onesided serve`` (408 and closed after).
        idle_timeout_seconds: how long ``onesided serve`` keeps an idle
            connection open between requests (keep-alive).
        max_connections: open connections per ``onesided serve`` worker process;
            above it new connections are answered 503 with ``Retry-After`` at once
            (an address holding fewer than 2 may still use a reserve of a tenth).
        max_connections_per_address: open connections from one client address
            per worker process (more are answered 429 at once); 0: no cap (behind a
            reverse proxy, every connection comes from the proxy).
        sync_interval: seconds the signed config asks clients to wait before
            fetching it again (``None``, the default: the config does not say
            and clients keep their own schedule, hourly for the SDK). Clients
            older than this field refuse a config that carries it, so set it
            once every deployed client reads it.
        rate_limit_per_address, rate_limit_per_token: requests a second one
            client address (after ``trusted_proxies``) or one bearer token
            may make on average, per worker process, in bursts of twice that;
            more get 429 with ``Retry-After`` (0, the default: no limit).
        trusted_proxies: comma-separated addresses or networks of reverse
            proxies whose ``X-Forwarded-For`` (and ``X-Request-Id``) is
            believed (default none: the socket's address is the client's).
    """

    data_dir: str | os.PathLike[str] = DEFAULT_DATA_DIR
    db_url: str | None = None
    key_dir: str | os.PathLike[str] | None = None
    allow_plaintext: bool = False
    max_body_bytes: int = 16 * MiB
    max_reports: int = 10_000
    clock_skew_seconds: int = 300
    retention_seconds: int = 90 * DAY
    db_retries: int = 5
    db_wait_seconds: float = 30.0
    decrypt_processes: int = 0
    read_timeout_seconds: float = 30.0
    header_timeout_seconds: float = 10.0
    idle_timeout_seconds: float = 15.0
    max_connections: int = 1000
    max_connections_per_address: int = 64
    sync_interval: int | None = None
    allow_shared_data_dir: bool = False
    max_decode_cells: int = DEFAULT_MAX_DECODE_CELLS
    decode_processes: int = 1
    trusted_proxies: str = ""
    rate_limit_per_address: float = 0.0
    rate_limit_per_token: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.data_dir, str | os.PathLike) or not str(self.data_dir):
            raise ParameterError("data_dir", "must be a non-empty path")
        if self.db_url is not None and (not isinstance(self.db_url, str) or "://" not in self.db_url):
            raise ParameterError("db_url", f"must be a SQLAlchemy URL like sqlite:///path, got {self.db_url!r}")
        if self.db_url is not None and self.dialect not in ("sqlite", "postgresql"):
            raise ParameterError("db_url", f"dialect must be sqlite or postgresql, got {self.dialect!r}")
        if self.key_dir is not None and not isinstance(self.key_dir, str | os.PathLike):
            raise ParameterError("key_dir", "must be a path")
        if not isinstance(self.trusted_proxies, str):
            raise ParameterError("trusted_proxies", "must be comma-separated addresses or networks")
        parse_networks(self.trusted_proxies)
        for name in ("rate_limit_per_address", "rate_limit_per_token"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1e6:
                raise ParameterError(name, f"must be requests a second in [0, 1e6] (0: off), got {value!r}")
        for flag in ("allow_plaintext", "allow_shared_data_dir"):
            if not isinstance(getattr(self, flag), bool):
                raise ParameterError(flag, "must be true or false")
        _check_int("max_body_bytes", self.max_body_bytes, 1024, 1024 * MiB)
        _check_int("max_reports", self.max_reports, 1, 1_000_000)
        _check_int("clock_skew_seconds", self.clock_skew_seconds, 0, DAY)
        _check_int("retention_seconds", self.retention_seconds, 60, 100 * 365 * DAY)
        _check_int("db_retries", self.db_retries, 1, 100)
        _check_seconds("db_wait_seconds", self.db_wait_seconds, 0.0, 3600.0)
        _check_int("decrypt_processes", self.decrypt_processes, 0, 64)
        _check_int("decode_processes", self.decode_processes, 0, 64)
        _check_int("max_decode_cells", self.max_decode_cells, 1_000, 10**11)
        _check_seconds("read_timeout_seconds", self.read_timeout_seconds, 0.05, 3600.0)
        _check_seconds("header_timeout_seconds", self.header_timeout_seconds, 0.05, 3600.0)
        _check_seconds("idle_timeout_seconds", self.idle_timeout_seconds, 0.05, 3600.0)
        _check_int("max_connections", self.max_connections, 1, 100_000)
        _check_int("max_connections_per_address", self.max_connections_per_address, 0, 100_000)
        if self.sync_interval is not None:
            _check_int("sync_interval", self.sync_interval, *SYNC_INTERVAL_RANGE)

    @property
    def database_url(self) -> str:
        """The effective SQLAlchemy URL."""
        if self.db_url is not None:
            return self.db_url
        return f"sqlite:///{Path(self.data_dir).absolute() / DB_FILE}"

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql`` (the part of the URL before ``+`` or ``:``)."""
        return self.database_url.split(":", 1)[0].split("+", 1)[0]

    @property
    def uses_data_dir(self) -> bool:
        """The data directory holds the SQLite database or the keys (else it is not touched)."""
        return self.db_url is None or self.key_dir is None

    @property
    def key_path(self) -> Path:
        """The effective key directory."""
        return Path(self.key_dir) if self.key_dir is not None else Path(self.data_dir) / KEY_DIR

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> Settings:
        """Build from a dict of field names; unknown names are an error (typos)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ParameterError(unknown[0], "is not a known setting")
        return cls(**dict(config))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``ONESIDED_DATA_DIR``, ``ONESIDED_DB``, ``ONESIDED_KEY_DIR``,
        ``ONESIDED_ALLOW_PLAINTEXT`` (``1``/``true``), ``ONESIDED_MAX_BODY_BYTES``,
        ``ONESIDED_MAX_REPORTS``, ``ONESIDED_CLOCK_SKEW``, ``ONESIDED_RETENTION``,
        ``ONESIDED_DECRYPT_PROCESSES``, ``ONESIDED_MAX_DECODE_CELLS``, ``ONESIDED_DECODE_PROCESSES``,
        ``ONESIDED_READ_TIMEOUT``, ``ONESIDED_HEADER_TIMEOUT``, ``ONESIDED_IDLE_TIMEOUT``, ``ONESIDED_DB_WAIT`` (seconds),
        ``ONESIDED_MAX_CONNECTIONS``, ``ONESIDED_MAX_CONNECTIONS_PER_ADDRESS``, ``ONESIDED_SYNC_INTERVAL``,
        ``ONESIDED_ALLOW_SHARED_DATA_DIR``, ``ONESIDED_TRUSTED_PROXIES``,
        ``ONESIDED_RATE_LIMIT_PER_ADDRESS``, ``ONESIDED_RATE_LIMIT_PER_TOKEN`` (requests a second);
        ``overrides`` that are not ``None`` win (command-line flags)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        text_vars = {"data_dir": "ONESIDED_DATA_DIR", "db_url": "ONESIDED_DB", "key_dir": "ONESIDED_KEY_DIR",
                     "trusted_proxies": "ONESIDED_TRUSTED_PROXIES"}
        for name, var in text_vars.items():
            if env.get(var):
                values[name] = env[var]
        int_vars = {
            "max_body_bytes": "ONESIDED_MAX_BODY_BYTES",
            "max_reports": "ONESIDED_MAX_REPORTS",
            "clock_skew_seconds": "ONESIDED_CLOCK_SKEW",
            "retention_seconds": "ONESIDED_RETENTION",
            "decrypt_processes": "ONESIDED_DECRYPT_PROCESSES",
            "max_decode_cells": "ONESIDED_MAX_DECODE_CELLS",
            "decode_processes": "ONESIDED_DECODE_PROCESSES",
            "max_connections": "ONESIDED_MAX_CONNECTIONS",
            "max_connections_per_address": "ONESIDED_MAX_CONNECTIONS_PER_ADDRESS",
            "sync_interval": "ONESIDED_SYNC_INTERVAL",
        }
        for name, var in int_vars.items():
            if env.get(var):
                try:
                    values[name] = int(env[var])
                except ValueError as exc:
                    raise ParameterError(name, f"{var} must be an integer, got {env[var]!r}") from exc
        for name, var in (("allow_plaintext", "ONESIDED_ALLOW_PLAINTEXT"),
                          ("allow_shared_data_dir", "ONESIDED_ALLOW_SHARED_DATA_DIR")):
            if env.get(var):
                values[name] = env[var].lower() in ("1", "true", "yes")
        for name, var in (("read_timeout_seconds", "ONESIDED_READ_TIMEOUT"),
                          ("header_timeout_seconds", "ONESIDED_HEADER_TIMEOUT"),
                          ("idle_timeout_seconds", "ONESIDED_IDLE_TIMEOUT"),
                          ("db_wait_seconds", "ONESIDED_DB_WAIT"),
                          ("rate_limit_per_address", "ONESIDED_RATE_LIMIT_PER_ADDRESS"),
                          ("rate_limit_per_token", "ONESIDED_RATE_LIMIT_PER_TOKEN")):
            if env.get(var):
                try:
                    values[name] = float(env[var])
                except ValueError as exc:
                    raise ParameterError(name, f"{var} must be a number") from exc
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_mapping(values)
