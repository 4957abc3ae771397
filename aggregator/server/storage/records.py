"""Read models returned by :class:`aggregator.server.storage.Storage` (frozen, keyword-only)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from aggregator.server.roles import ROLES
from protocol.params import MetricParams

__all__ = ["ROLES"]  # re-exported with the records


@dataclass(frozen=True, kw_only=True)
class MetricRecord:
    """A registered metric: its id, parameters and their digest."""

    id: int
    params: MetricParams
    digest: str
    created_at: int
    updated_at: int

    @property
    def name(self) -> str:
        return self.params.name


@dataclass(frozen=True, kw_only=True)
class RoundRecord:
    """A relaxation round with its signed announcement document (``irr_p``, ``irr_q``: see :attr:`irr`)."""

    id: int
    metric: str
    level_from: float
    level_to: float
    cohorts: tuple[int, ...] | None
    opened_at: int
    expires_at: int
    closed_at: int | None
    announcement: dict[str, Any]
    irr_p: float | None = None
    irr_q: float | None = None

    @property
    def irr(self) -> tuple[float | None, float | None] | None:
        """The metric's IRR ``(irr_p, irr_q)`` after this round, or ``None``: the metric's own."""
        return None if self.irr_q is None else (self.irr_p, self.irr_q)

    def is_open(self, now: float) -> bool:
        """Not closed and not expired at ``now``: its announcement is served and clients may join it."""
        return self.closed_at is None and now < self.expires_at

    def to_dict(self, now: float) -> dict[str, Any]:
        return {
            "id": self.id,
            "metric": self.metric,
            "level_from": self.level_from,
            "level_to": self.level_to,
            "cohorts": None if self.cohorts is None else list(self.cohorts),
            "opened_at": self.opened_at,
            "expires_at": self.expires_at,
            "closed_at": self.closed_at,
            "irr_p": self.irr_p,
            "irr_q": self.irr_q,
            "open": self.is_open(now),
            "announcement": self.announcement,
        }


@dataclass(frozen=True, kw_only=True)
class TokenRecord:
    """A bearer token's identity (never its secret)."""

    id: int
    name: str
    role: str
    created_at: int
    revoked_at: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "role": self.role,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
        }


@dataclass(frozen=True, kw_only=True)
class ReleaseRecord:
    """A central release to one analyst; ``body`` belongs to the releases module."""

    id: int
    analyst: str
    metric: str
    body: dict[str, Any]
    created_at: int
    updated_at: int


@dataclass(frozen=True, kw_only=True)
class Collection:
    """Reports stored for one (window, round) of a metric."""

    window: int
    round: int
    reports: int

    def to_dict(self) -> dict[str, int]:
        return {"window": self.window, "round": self.round, "reports": self.reports}


def level_to_json(level: float) -> float | None:
    """``inf`` (the trusted mode) is ``null`` in JSON."""
    return None if math.isinf(level) else level


def loads(text: str) -> Any:
    """Parse a JSON column."""
    return json.loads(text)
