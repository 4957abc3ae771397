"""What a call told the app: :class:`ReportStatus` (the answer of ``report()``) and :class:`ClientEvent`.

``report()`` never raises for what the environment causes (a full or
read-only disk, the network, a metric the operator has not registered, a
device clock that is off, a server that misbehaves): it answers with a
:class:`ReportStatus`, and the reason goes to the ``onesided`` logger and to
the app's ``on_event`` hook as a :class:`ClientEvent`. Times a person reads
are ISO-8601 UTC (:func:`iso_utc`).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from protocol.errors import OnesidedError
from protocol.rounding import (
    epsilon_text,  # its home since it serves the CLI too; kept importable here
)

QUEUED = "queued"  # charged and queued: sent by the sender (later, in the background)
WAITING = "waiting"  # kept until the first verified config; charged and queued then
REFUSED = "refused"  # not charged, not queued: the budget, a second value in the window, a bad value
DROPPED = "dropped"  # could not be kept: the client's state is unavailable (a disk that refuses it)
DISABLED = "disabled"  # ``disabled=True``: nothing is done
STATUSES = (QUEUED, WAITING, REFUSED, DROPPED, DISABLED)


def iso_utc(unix_seconds: float) -> str:
    """``2026-11-28T00:40:00Z``: an instant as a person reads it (ISO-8601, UTC, whole seconds)."""
    try:
        moment = datetime.datetime.fromtimestamp(int(unix_seconds), tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return f"{unix_seconds!r} (Unix seconds)"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class ReportStatus(str):
    """The answer of ``Client.report()``: the report id (a ``str``, empty when there is none) and why.

    It compares and prints as the report id, so code that kept the id keeps
    working; ``bool(status)`` is ``True`` only when a report id was given.

    Attributes:
        status: one of :data:`STATUSES` (``queued``, ``waiting``, ``refused``, ``dropped``, ``disabled``).
        report_id: the id the aggregator will see, or ``None``.
        reason: a short sentence for a status other than ``queued`` (``None`` otherwise).
        error: the exception behind a ``refused`` or ``dropped`` status, when there was one.
    """

    status: str
    report_id: str | None
    reason: str | None
    error: Exception | None

    def __new__(cls, status: str, report_id: str | None = None, reason: str | None = None,
                error: Exception | None = None) -> ReportStatus:
        made = str.__new__(cls, report_id or "")
        made.status, made.report_id, made.reason, made.error = status, report_id, reason, error
        return made

    def __repr__(self) -> str:
        return f"ReportStatus({self.status!r}, report_id={self.report_id!r}, reason={self.reason!r})"

    @property
    def queued(self) -> bool:
        """Charged and queued: the sender delivers it."""
        return self.status == QUEUED


class ReportsClipped(OnesidedError):
    """The aggregator kept only ``max_items`` items of some delivered reports (a trusted set metric).

    Not an error of the client's: the reports were delivered and counted, each with at most its
    metric's ``max_items`` items (chosen at random by the aggregator). Told once per upload answer
    that says so (wire version 3's ``clipped``), as a ``reports_clipped`` event.
    """

    code = "reports_clipped"

    def __init__(self, count: int) -> None:
        super().__init__(f"{count} delivered report(s) kept only their metric's max_items items (clipped by the "
                         "aggregator); report fewer items per value, or ask the operator to raise --max-items")
        self.count = count


@dataclass(frozen=True)
class ClientEvent:
    """Something the app may want to know (``on_event``); the same line goes to the ``onesided`` logger.

    Attributes:
        kind: e.g. ``refused``, ``dropped``, ``disk_error``, ``clock_off``, ``budget_low``,
            ``transport_error``, ``rejected``, ``state_unavailable`` (docs/client.md lists them).
        detail: one line, no secrets, values or noise; times in ISO-8601 UTC.
        metric: the metric concerned, if any.
        at: when, ISO-8601 UTC (the client's corrected clock).
        error: the exception behind it, if any.
    """

    kind: str
    detail: str
    metric: str | None = None
    at: str = ""
    error: Exception | None = None


__all__ = ["DISABLED", "DROPPED", "QUEUED", "REFUSED", "STATUSES", "WAITING", "ClientEvent", "ReportStatus", "ReportsClipped",
           "epsilon_text", "iso_utc"]
