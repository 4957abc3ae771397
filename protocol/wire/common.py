"""The wire format's versions, limits, statuses and small validators, and the window of a timestamp."""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ParameterError, ReportRejected
from ..params import NAME_PATTERN

BoolArray = npt.NDArray[np.bool_]

WIRE_VERSION = 1
PAYLOAD_VERSION = 1
CONFIG_VERSION = 1
ROUND_VERSION = 1
REPORT_ID_BYTES = 16
DIGEST_BYTES = 32
MAX_BODY_BYTES = 2048
MAX_COHORT = 2**16 - 1
MAX_ROUND = 2**32 - 1
MAX_WINDOW = 2**63 - 1
PAYLOAD_HEADER = struct.Struct(">BHd")
REPORT_AAD_LABEL = b"onesided/report/v1"
CONTENT_TYPE_JSON = "application/json"
CONTENT_TYPE_BINARY = "application/vnd.onesided.batch"
BATCH_MAGIC = b"ONSB"
BODY_SEALED = 1
BODY_PLAIN = 2

STATUS_ACCEPTED = "accepted"
STATUS_REPLAYED = "replayed"
STATUS_INVALID_MESSAGE = "invalid_message"
STATUS_DECRYPT_ERROR = "decrypt_error"
STATUS_OUTDATED_CONFIG = "outdated_config"
STATUS_TOO_EARLY = "too_early"
STATUS_EXPIRED = "expired"
STATUS_UNKNOWN_METRIC = "unknown_metric"
#: Statuses a clock decides (the report's window against the server's clock). With a
#: ``retry_after`` they are not final: the client keeps the report and resends it later.
CLOCK_STATUSES: frozenset[str] = frozenset((STATUS_TOO_EARLY, STATUS_EXPIRED))
#: Request header a client sends to name the newest upload-answer version it reads (docs/wire.md
#: 7.4); without it the server answers as version 1 (clients that predate the later keys reject
#: unknown keys, so the server never sends them one). Versions only add keys.
WIRE_HEADER = "Onesided-Wire"
#: The value of :data:`WIRE_HEADER` that asks for ``server_time`` and ``retry_after``.
CLOCK_ANSWERS_VERSION = "2"
#: The value of :data:`WIRE_HEADER` that asks, besides, for ``clipped`` (reports of the batch the
#: server clipped to their metric's ``max_items``).
CLIPPED_ANSWERS_VERSION = "3"
#: The newest answer version: what this package's clients send and its server reads.
ANSWER_VERSION = CLIPPED_ANSWERS_VERSION


def answer_version(header: str | None) -> int:
    """The upload-answer version to send for a request's :data:`WIRE_HEADER` value: 1 without it
    (or for a value that is not a small decimal number), else the asked version capped at the newest
    this server knows (versions only add keys, so a newer client reads an older answer)."""
    if header is None:
        return 1
    text = header.strip()
    if not (text.isdecimal() and text.isascii() and len(text) <= 4):
        return 1
    return max(1, min(int(text), int(ANSWER_VERSION)))
#: Longest ``retry_after`` the wire carries (one year, in seconds); clients cap it lower.
MAX_RETRY_AFTER = 366 * 86400
STATUSES: tuple[str, ...] = (
    STATUS_ACCEPTED,
    STATUS_REPLAYED,
    STATUS_INVALID_MESSAGE,
    STATUS_DECRYPT_ERROR,
    STATUS_OUTDATED_CONFIG,
    STATUS_TOO_EARLY,
    STATUS_EXPIRED,
    STATUS_UNKNOWN_METRIC,
)
CODE_TOO_MANY_REPORTS = "too_many_reports"
CODE_DUPLICATE_REPORT_ID = "duplicate_report_id"

_HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")




def _int(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ReportRejected(field, f"must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise ReportRejected(field, f"must be in [{low}, {high}], got {value}")
    return int(value)


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
        raise ReportRejected(field, f"must be a number, got {type(value).__name__}")
    if math.isnan(value):
        raise ReportRejected(field, "must not be NaN")
    return float(value)


def _digest(value: Any, field: str) -> str:
    if not isinstance(value, str) or not _HEX_DIGEST.fullmatch(value):
        raise ReportRejected(field, "must be 64 lowercase hex characters (SHA-256)")
    return value


def _metric_name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise ReportRejected(field, f"must match {NAME_PATTERN.pattern}")
    return value


def _object(value: Any, field: str, required: Sequence[str], optional: Sequence[str] = ()) -> dict[str, Any]:
    """A JSON object with exactly the ``required`` keys and some of the ``optional`` ones."""
    if not isinstance(value, dict):
        raise ReportRejected(field, "must be a JSON object")
    prefix = f"{field}." if field else ""
    for name in required:
        if name not in value:
            raise ReportRejected(f"{prefix}{name}", "is required")
    unknown = sorted(set(value) - set(required) - set(optional))
    if unknown:
        raise ReportRejected(f"{prefix}{unknown[0]}", "is not a known field")
    return value


def _under(prefix: str, exc: ReportRejected) -> ReportRejected:
    """The same error with its field moved under ``prefix``."""
    field = ".".join(part for part in (prefix, exc.field) if part)
    return ReportRejected(field, exc.reason, exc.code)


def window_start(timestamp: float, time_precision: int) -> int:
    """``floor(timestamp / time_precision) * time_precision``: the report's ``window``."""
    if (type(time_precision) is not int  # an exact int is the usual case: one test
            and (isinstance(time_precision, bool) or not isinstance(time_precision, int))) or time_precision < 1:
        raise ParameterError("time_precision", f"must be an integer >= 1, got {time_precision!r}")
    return (math.floor(timestamp) // time_precision) * time_precision
