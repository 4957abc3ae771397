"""Log formats of ``onesided serve``: plain text (default) or one JSON object per line.

``--log-format json`` gives every record (ours, gunicorn's error log and,
when enabled, its access log) as ``{"time", "level", "logger", "message"}``
plus ``exception`` with the traceback when there is one, for log shippers
that parse lines. Logs never carry report contents, tokens or keys.

>>> import logging
>>> record = logging.LogRecord("onesided", logging.WARNING, __file__, 1, "disk %s", ("full",), None)
>>> entry = json.loads(JsonFormatter().format(record))
>>> entry["level"], entry["logger"], entry["message"]
('WARNING', 'onesided', 'disk full')
"""

from __future__ import annotations

import json
import logging
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


def logging_config(log_format: str, level: str = "INFO") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` document for our loggers and gunicorn's.

    Raises:
        ValueError: an unknown format.
    """
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    formatter: dict[str, Any] = (
        {"()": f"{__name__}.JsonFormatter"} if log_format == "json" else {"format": TEXT_FORMAT}
    )
    handler = {"class": "logging.StreamHandler", "formatter": "main", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"main": formatter},
        "handlers": {"main": handler},
        "root": {"level": level, "handlers": ["main"]},
        "loggers": {
            "gunicorn.error": {"level": level, "handlers": ["main"], "propagate": False},
            "gunicorn.access": {"level": level, "handlers": ["main"], "propagate": False},
        },
    }
