"""Log formats of ``onesided serve``: plain text (default) or one JSON object per line.

Every line's time is ISO-8601 UTC with milliseconds and the zone
(``2026-11-26T15:20:01.542Z``, :func:`utc_timestamp`), in text
(``TIME LEVEL LOGGER: MESSAGE``) and in JSON (``time``) alike, for our
loggers and for gunicorn's, which gunicorn configures from
:func:`logging_config` (its ``logconfig_dict``).

``--log-format json`` gives every record (ours, gunicorn's error log and,
when enabled, its access log) as ``{"time", "level", "logger", "message"}``
plus ``exception`` with the traceback when there is one, for log shippers
that parse lines. Logs never carry report contents, tokens or keys.

The access log (logger ``onesided.access``, one line per request: client
address, request line, status, size, milliseconds) is off unless the operator
asks for it (``ONESIDED_ACCESS_LOG=1``, :func:`aggregator.server.serve.serve`'s
``access_log``): the request metrics of ``/metrics`` count every request
already, and at small batches the line cost about 3% of the worker's CPU.
Client addresses in it are personal data: by default they are truncated to
their network (IPv4 /24, IPv6 /48); ``full`` keeps them, ``none`` drops them
(``ONESIDED_ACCESS_LOG_ADDRESSES``).

>>> import logging
>>> record = logging.LogRecord("onesided", logging.WARNING, __file__, 1, "disk %s", ("full",), None)
>>> entry = json.loads(JsonFormatter().format(record))
>>> entry["level"], entry["logger"], entry["message"]
('WARNING', 'onesided', 'disk full')
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

LOG_FORMATS = ("text", "json")
ADDRESS_POLICIES = ("truncated", "full", "none")
ACCESS_LOGGER = "onesided.access"
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def utc_timestamp(seconds: float) -> str:
    """A record's time as ISO-8601 UTC with milliseconds and the zone, the form of every log line.

    >>> utc_timestamp(1795706401.5421)
    '2026-11-26T15:20:01.542Z'
    """
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER: MESSAGE`` with the time as :func:`utc_timestamp` writes it (never local time),
    and ``[request ID]`` at the end of a line written while a request runs
    (:func:`aggregator.server.request_context.stamp_log_records`)."""

    def __init__(self, fmt: str = TEXT_FORMAT) -> None:
        super().__init__(fmt)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 (logging's name)
        return utc_timestamp(record.created)

    def format(self, record: logging.LogRecord) -> str:
        line = scrub_tokens(super().format(record))
        request_id = getattr(record, "request_id", None)
        return line if request_id is None else f"{line} [request {request_id}]"


class JsonFormatter(logging.Formatter):
    """One JSON object per record (``time`` as :func:`utc_timestamp` writes it)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "level": record.levelname,
            "logger": record.name,
            "message": scrub_tokens(record.getMessage()),
            "time": utc_timestamp(record.created),
            "process": record.process,
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            entry["request_id"] = request_id  # the X-Request-Id of the request being answered
        audit = getattr(record, "audit", None)
        if isinstance(audit, dict):
            entry["audit"] = audit  # an audit-log event: the whole entry, for log shippers
        if record.exc_info:
            entry["exception"] = scrub_tokens(self.formatException(record.exc_info))
        return json.dumps(entry)


def logging_config(log_format: str, level: str = "INFO", *, access_log: bool = False) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` document for our loggers and gunicorn's.

    ``access_log``: whether ``onesided.access`` writes its lines (through the
    same handler and format as the rest); off, it has no handler and drops
    anything below ``WARNING`` (``serve`` then installs no access middleware,
    so no line is even built). waitress's per-request queue warnings are kept
    out: ``onesided_requests_in_flight`` measures the same backlog.

    Raises:
        ValueError: an unknown format.
    """
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    formatter: dict[str, Any] = (
        {"()": f"{__name__}.JsonFormatter" if log_format == "json" else f"{__name__}.TextFormatter"}
    )
    handler = {"class": "logging.StreamHandler", "formatter": "main", "stream": "ext://sys.stderr"}
    access: dict[str, Any] = (
        {"level": level, "handlers": ["main"], "propagate": False}
        if access_log
        else {"level": "WARNING", "handlers": [], "propagate": False}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"main": formatter},
        "handlers": {"main": handler},
        "root": {"level": level, "handlers": ["main"]},
        "loggers": {
            "gunicorn.error": {"level": level, "handlers": ["main"], "propagate": False},
            ACCESS_LOGGER: access,
            "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": False},
            "waitress.queue": {"level": "ERROR", "handlers": ["main"], "propagate": False},
        },
    }


def access_log_from_env(environ: Mapping[str, str]) -> bool:
    """``ONESIDED_ACCESS_LOG``: ``1``/``true``/``yes`` turns gunicorn's access log on (default off).

    Raises:
        ValueError: another non-empty value (``0``/``false``/``no`` are off).
    """
    value = environ.get("ONESIDED_ACCESS_LOG", "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ValueError(f"ONESIDED_ACCESS_LOG must be 1/true/yes or 0/false/no, got {value!r}")


def address_policy_from_env(environ: Mapping[str, str]) -> str:
    """``ONESIDED_ACCESS_LOG_ADDRESSES``: ``truncated`` (default), ``full`` or ``none``.

    Raises:
        ValueError: another value.
    """
    value = environ.get("ONESIDED_ACCESS_LOG_ADDRESSES", "").strip().lower() or "truncated"
    if value not in ADDRESS_POLICIES:
        raise ValueError(f"ONESIDED_ACCESS_LOG_ADDRESSES must be one of {', '.join(ADDRESS_POLICIES)}, got {value!r}")
    return value


def logged_address(address: str | None, policy: str) -> str:
    """A client address as the access log shows it under ``policy``.

    >>> logged_address("203.0.113.77", "truncated"), logged_address("2001:db8:1:2::5", "truncated")
    ('203.0.113.0/24', '2001:db8:1::/48')
    >>> logged_address("203.0.113.77", "none"), logged_address("203.0.113.77", "full")
    ('-', '203.0.113.77')
    """
    if policy == "none" or not address:
        return "-"
    if policy == "full":
        return address
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "-"
    prefix = 24 if ip.version == 4 else 48
    return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))


def _printable(text: str, limit: int = 300) -> str:
    """``text`` with control characters escaped and cut at ``limit`` (a request line is client input)."""
    cut = text[:limit]
    return cut if cut.isprintable() else cut.encode("unicode_escape").decode("ascii")


# A bearer token (``ons_`` and 43 base64url characters), also percent-encoded or cut short; and the
# value of any query parameter whose name says it holds a secret.
_TOKEN = re.compile(r"ons(?:_|%5[fF])[A-Za-z0-9_%-]{8,}")
_SECRET_PARAMETER = re.compile(r"(?i)((?:^|[?&;])[^=&;]*(?:token|secret|password|key)[^=&;]*=)[^&;]*")
REDACTED = "[redacted]"


def scrub_tokens(text: str) -> str:
    """``text`` with bearer tokens redacted (every log line: a token may turn up in any message)."""
    return _TOKEN.sub(REDACTED, text) if "ons" in text else text


def scrub_secrets(text: str) -> str:
    """``text`` (a request target, a logged value) with tokens and secret-looking query values redacted.

    >>> scrub_secrets("/v1/metrics/ons_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA?token=abc&x=1")
    '/v1/metrics/[redacted]?token=[redacted]&x=1'
    """
    return _SECRET_PARAMETER.sub(rf"\1{REDACTED}", _TOKEN.sub(REDACTED, text))


def access_log_middleware(app: WsgiApp, policy: str = "truncated") -> WsgiApp:
    """Wrap a WSGI app so that each request logs one line to ``onesided.access``.

    ``ADDRESS "METHOD PATH?QUERY PROTOCOL" STATUS BYTES MS`` (the address
    under ``policy``, see :func:`logged_address`; tokens pasted into the
    target are redacted, see :func:`scrub_secrets`).

    Raises:
        ValueError: an unknown ``policy``.
    """
    if policy not in ADDRESS_POLICIES:
        raise ValueError(f"address policy must be one of {', '.join(ADDRESS_POLICIES)}, got {policy!r}")
    logger = logging.getLogger(ACCESS_LOGGER)

    def logged(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        started = time.perf_counter()

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            size = next((value for name, value in headers if name.lower() == "content-length"), "-")
            query = environ.get("QUERY_STRING")
            target = scrub_secrets(environ.get("PATH_INFO", "") + (f"?{query}" if query else ""))
            logger.info(
                '%s "%s %s %s" %s %s %.1f', logged_address(environ.get("REMOTE_ADDR"), policy),
                _printable(environ.get("REQUEST_METHOD", "")), _printable(target),
                _printable(environ.get("SERVER_PROTOCOL", "")), status.split(" ", 1)[0], size,
                1000 * (time.perf_counter() - started),
            )
            return start_response(status, headers, exc_info)

        return app(environ, start)

    return logged
