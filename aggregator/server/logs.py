"""Log formats of ``onesided serve``: plain text (default) or one JSON object per line.

``--log-format json`` gives every record (ours, gunicorn's error log and,
when enabled, its access log) as ``{"time", "level", "logger", "message"}``
plus ``exception`` with the traceback when there is one, for log shippers
that parse lines. Logs never carry report contents, tokens or keys.

gunicorn's access log (one line per request: address, request line, status,
size, user agent) is off unless the operator asks for it
(``ONESIDED_ACCESS_LOG=1``, :func:`aggregator.server.serve.serve`'s
``access_log``): the request metrics of ``/metrics`` count every request
already, and at small batches the line cost about 3% of the worker's CPU.

>>> import logging
>>> record = logging.LogRecord("onesided", logging.WARNING, __file__, 1, "disk %s", ("full",), None)
>>> entry = json.loads(JsonFormatter().format(record))
>>> entry["level"], entry["logger"], entry["message"]
('WARNING', 'onesided', 'disk full')
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "process": record.process,
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def logging_config(log_format: str, level: str = "INFO", *, access_log: bool = False) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` document for our loggers and gunicorn's.

    ``access_log``: whether ``gunicorn.access`` writes its lines (through the
    same handler and format as the rest); off, it has no handler and drops
    anything below ``WARNING``. (gunicorn also skips building the line then:
    ``serve`` gives it a logger class that follows the same switch.)

    Raises:
        ValueError: an unknown format.
    """
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    formatter: dict[str, Any] = (
        {"()": f"{__name__}.JsonFormatter"} if log_format == "json" else {"format": TEXT_FORMAT}
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
            "gunicorn.access": access,
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
