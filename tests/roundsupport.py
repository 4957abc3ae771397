"""Round announcements for the client's round tests (import as ``from roundsupport import ...``)."""

from __future__ import annotations

from typing import Any

from protocol.params import MetricParams
from protocol.wire import RoundAnnouncement

NOW = 1_800_000_000.0  # the clients' clock in these tests


def announce(params: MetricParams, round_id: int, level_from: float, level_to: float, **extra: Any) -> RoundAnnouncement:
    """A round of ``params`` opened just before :data:`NOW` for an hour, every cohort; ``extra`` overrides fields."""
    fields: dict[str, Any] = dict(round_id=round_id, metric=params.name, params_digest=params.digest(),
                                  level_from=level_from, level_to=level_to, cohorts=None,
                                  opened_at=int(NOW) - 10, expires_at=int(NOW) + 3600)
    fields.update(extra)
    return RoundAnnouncement(**fields)
