"""Per-report results and the upload response."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..crypto import (
    b64e,
)
from ..errors import ReportRejected
from .common import (
    CLOCK_STATUSES,
    MAX_RETRY_AFTER,
    MAX_WINDOW,
    STATUS_ACCEPTED,
    STATUS_INVALID_MESSAGE,
    STATUSES,
    _int,
    _object,
    _under,
)

_STATUS_SET = frozenset(STATUSES)
_FINAL_KEYS = frozenset(("report_id", "status", "field", "detail"))  # a result without retry_after


@dataclass(frozen=True, kw_only=True)
class ReportResult:
    """The outcome of one report of a batch (``report_id`` in base64url).

    ``retry_after`` (seconds, ``1 <= retry_after <= MAX_RETRY_AFTER``) is set only on a
    clock status (``too_early``, ``expired``) the server does not hold final: the report
    was refused by a clock that may be wrong (the device's or the server's), so the client
    keeps it and resends it no sooner than that many seconds later. ``None`` (the key absent
    on the wire): the status is final, as every status was before the field existed.
    """

    report_id: str
    status: str
    field: str | None = None
    detail: str | None = None
    retry_after: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.report_id, str):
            raise ReportRejected("report_id", "must be a base64url string")
        if self.status not in STATUSES:
            raise ReportRejected("status", f"must be one of {STATUSES}, got {self.status!r}")
        for name in ("field", "detail"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise ReportRejected(name, "must be a string or null")
        if self.retry_after is not None:
            _int(self.retry_after, "retry_after", 1, MAX_RETRY_AFTER)
            if self.status not in CLOCK_STATUSES:
                raise ReportRejected("retry_after", f"only on {sorted(CLOCK_STATUSES)}, got {self.status!r}")

    @property
    def final(self) -> bool:
        """Whether the client is done with this report (``False``: keep it, resend later)."""
        return self.retry_after is None

    @classmethod
    def of(
        cls, report_id: str, status: str, detail: str | None = None, retry_after: int | None = None
    ) -> ReportResult:
        """A result the aggregator makes itself: ``status`` one of :data:`STATUSES`, ``report_id`` and
        ``detail`` strings (or ``detail`` ``None``), ``retry_after`` as the class says, taken as they
        are (no checks, no field)."""
        result = object.__new__(cls)
        result.__dict__.update(
            {"report_id": report_id, "status": status, "field": None, "detail": detail, "retry_after": retry_after}
        )
        return result

    @classmethod
    def from_error(cls, report_id: bytes, error: ReportRejected) -> ReportResult:
        """A rejection: the status is the error's code when it is a status, else ``invalid_message``."""
        status = error.code if error.code in STATUSES else STATUS_INVALID_MESSAGE
        return cls(report_id=b64e(report_id), status=status, field=error.field, detail=error.reason)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object; ``retry_after`` only when set (so final results are as before)."""
        item: dict[str, Any] = {"report_id": self.report_id, "status": self.status, "field": self.field, "detail": self.detail}
        if self.retry_after is not None:
            item["retry_after"] = self.retry_after
        return item

    @classmethod
    def from_dict(cls, obj: Any) -> ReportResult:
        if (type(obj) is dict and obj.keys() == _FINAL_KEYS and type(obj["report_id"]) is str
                and type(obj["status"]) is str and obj["status"] in _STATUS_SET and obj["field"] is None
                and obj["detail"] is None):
            return cls.of(obj["report_id"], obj["status"])  # the usual result, checked as the fields would be
        data = _object(obj, "", ("report_id", "status"), ("field", "detail", "retry_after"))
        return cls(
            report_id=data["report_id"], status=data["status"], field=data.get("field"), detail=data.get("detail"),
            retry_after=data.get("retry_after"),
        )


class UploadResults(list[ReportResult]):
    """The results of an upload answer, in batch order, with what the answer says of the whole batch.

    Attributes:
        server_time: the server's clock when it judged the batch (Unix seconds; wire version 2),
            or ``None`` when the answer has none.
        clipped: how many of the accepted reports the server clipped to their metric's
            ``max_items`` (wire version 3), or ``None`` when the answer does not say.
    """

    server_time: int | None = None
    clipped: int | None = None


def upload_response(
    results: Sequence[ReportResult], server_time: int | None = None, clipped: int | None = None
) -> dict[str, Any]:
    """``{"results": [...], "accepted": n}``, with ``"server_time"`` (Unix seconds of the server's
    clock when it judged the batch; wire version 2) and ``"clipped"`` (how many accepted reports
    kept only their metric's ``max_items`` items; wire version 3) when given."""
    items = [r.to_dict() for r in results]
    body: dict[str, Any] = {
        "results": items, "accepted": [item["status"] for item in items].count(STATUS_ACCEPTED)
    }
    if server_time is not None:
        body["server_time"] = server_time
    if clipped is not None:
        body["clipped"] = clipped
    return body


def parse_upload_response(obj: Any) -> UploadResults:
    """Validate a ``POST /v1/reports`` 200 body (client side): its results, with its optional
    ``server_time`` and ``clipped`` (``0 <= clipped <= accepted``) as attributes."""
    data = _object(obj, "", ("results", "accepted"), ("server_time", "clipped"))
    if not isinstance(data["results"], list):
        raise ReportRejected("results", "must be a list")
    results = UploadResults()
    for i, item in enumerate(data["results"]):
        try:
            results.append(ReportResult.from_dict(item))
        except ReportRejected as exc:
            raise _under(f"results[{i}]", exc) from None
    accepted = sum(r.status == STATUS_ACCEPTED for r in results)
    if _int(data["accepted"], "accepted", 0, len(results)) != accepted:
        raise ReportRejected("accepted", f"says {data['accepted']} but {accepted} results are accepted")
    results.server_time = upload_server_time(data)
    if data.get("clipped") is not None:
        results.clipped = _int(data["clipped"], "clipped", 0, accepted)
    return results


def upload_server_time(obj: Any) -> int | None:
    """The ``server_time`` of an upload response (Unix seconds), or ``None`` when absent."""
    if not isinstance(obj, dict) or obj.get("server_time") is None:
        return None
    return _int(obj["server_time"], "server_time", 0, MAX_WINDOW)
