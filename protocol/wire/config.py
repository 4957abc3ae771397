"""The signed config and the round announcements it carries."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..canonical import canonical_json
from ..crypto import (
    b64d,
    key_id,
    public_key_info,
    verify_document,
)
from ..errors import ParameterError, ReportRejected, SignatureError
from ..params import MetricParams
from ..randomizers import MAX_LEVEL
from .common import (
    CONFIG_VERSION,
    MAX_COHORT,
    MAX_ROUND,
    MAX_WINDOW,
    ROUND_VERSION,
    _digest,
    _int,
    _metric_name,
    _number,
    _object,
    _under,
)


@dataclass(frozen=True, kw_only=True)
class RoundAnnouncement:
    """A signed relaxation round (docs/wire.md 8.3). Errors name the field.

    ``irr_p``, ``irr_q``: the metric's instantaneous randomized response after the round
    (asymmetric mode: ``irr_q`` only), or both ``None``: the IRR is unchanged (and neither
    key is on the wire, so an announcement without them is byte for byte as before). A round
    that sets an IRR may keep the level (``level_to == level_from``); one that does not must
    raise it. Whether the IRR is a relaxation depends on the metric and on what the client
    sent before: :meth:`check_irr`.
    """

    round_id: int
    metric: str
    params_digest: str
    level_from: float
    level_to: float
    cohorts: tuple[int, ...] | None
    opened_at: int
    expires_at: int
    irr_p: float | None = None
    irr_q: float | None = None

    def __post_init__(self) -> None:
        _int(self.round_id, "round_id", 1, MAX_ROUND)
        _metric_name(self.metric, "metric")
        _digest(self.params_digest, "params_digest")
        low = _number(self.level_from, "level_from")
        high = _number(self.level_to, "level_to")
        if not 0 < low < math.inf:
            raise ReportRejected("level_from", f"must be > 0 and finite, got {low}")
        irr_only = self._check_irr_fields() and high == low  # the memoized bits kept, the IRR chain steps
        if not (low < high or irr_only) or high > MAX_LEVEL:  # the cap every client and the server share
            raise ReportRejected(
                "level_to", f"must be > level_from ({low}), or equal to it in a round that sets irr_q, and "
                f"<= {MAX_LEVEL:g} (MAX_LEVEL), got {high}"
            )
        if self.cohorts is not None:
            if not isinstance(self.cohorts, tuple) or not self.cohorts:
                raise ReportRejected("cohorts", "must be null or a non-empty list")
            for i, c in enumerate(self.cohorts):
                _int(c, f"cohorts[{i}]", 0, MAX_COHORT)
                if i and c <= self.cohorts[i - 1]:
                    raise ReportRejected(f"cohorts[{i}]", "cohorts must be strictly increasing")
        _int(self.opened_at, "opened_at", 0, MAX_WINDOW)
        if _int(self.expires_at, "expires_at", 0, MAX_WINDOW) <= self.opened_at:
            raise ReportRejected("expires_at", f"must be > opened_at ({self.opened_at})")

    def _check_irr_fields(self) -> bool:
        """The IRR fields alone: probabilities, ``irr_p`` only with ``irr_q``; ``True`` when set."""
        if self.irr_q is None:
            if self.irr_p is not None:
                raise ReportRejected("irr_q", "is required with irr_p")
            return False
        for name, value in (("irr_p", self.irr_p), ("irr_q", self.irr_q)):
            if value is not None and not 0.0 <= _number(value, name) <= 1.0:
                raise ReportRejected(name, f"must be a probability in [0, 1], got {value}")
        return True

    @property
    def irr(self) -> tuple[float | None, float | None] | None:
        """``(irr_p, irr_q)`` after the round, or ``None``: the round keeps the IRR."""
        return None if self.irr_q is None else (self.irr_p, self.irr_q)

    def check_irr(self, params: MetricParams, before: tuple[float | None, float | None] | None = None) -> None:
        """Refuse an IRR that is not one of the metric's mode or not a relaxation of ``before``.

        ``before``: the IRR the reports were made with so far (default: the
        metric's own ``(irr_p, irr_q)``). A round without an IRR passes.

        Raises:
            ReportRejected: field ``irr_p`` / ``irr_q`` (not an IRR of the mode),
                ``irr`` (``before`` is not a post-processing of it: the step would
                tighten the IRR), or ``mode`` (a mode without an IRR to relax).
        """
        if self.irr is None:
            return
        from ..irr_relaxation import check_irr_step

        held = (params.irr_p, params.irr_q) if before is None else before
        try:
            check_irr_step(params.mode, held, self.irr)
        except ParameterError as exc:
            raise ReportRejected(exc.field, exc.detail) from None

    def to_payload(self) -> dict[str, Any]:
        """The payload to sign with :func:`protocol.crypto.sign_document` (no IRR keys when it keeps the IRR)."""
        payload = {
            "version": ROUND_VERSION,
            "round_id": self.round_id,
            "metric": self.metric,
            "params_digest": self.params_digest,
            "level_from": self.level_from,
            "level_to": self.level_to,
            "cohorts": None if self.cohorts is None else list(self.cohorts),
            "opened_at": self.opened_at,
            "expires_at": self.expires_at,
        }
        if self.irr_q is not None:
            payload["irr_q"] = self.irr_q
            if self.irr_p is not None:
                payload["irr_p"] = self.irr_p
        return payload


ROUND_FIELDS = ("version", "round_id", "metric", "params_digest", "level_from", "level_to", "cohorts",
                "opened_at", "expires_at")
ROUND_IRR_FIELDS = ("irr_p", "irr_q")


def validate_round_announcement(payload: Any) -> RoundAnnouncement:
    """Validate a round announcement payload (already signature-checked)."""
    data = _object(payload, "", ROUND_FIELDS, ROUND_IRR_FIELDS)
    if isinstance(data["version"], bool) or data["version"] != ROUND_VERSION:
        raise ReportRejected("version", f"must be {ROUND_VERSION}, got {data['version']!r}")
    cohorts = data["cohorts"]
    if cohorts is not None and not isinstance(cohorts, list):
        raise ReportRejected("cohorts", "must be null or a list of integers")
    for name in ROUND_IRR_FIELDS:
        if name in data and data[name] is None:
            raise ReportRejected(name, "must be a number when present (leave it out to keep the IRR)")
    return RoundAnnouncement(
        round_id=data["round_id"],
        metric=data["metric"],
        params_digest=data["params_digest"],
        level_from=data["level_from"],
        level_to=data["level_to"],
        cohorts=None if cohorts is None else tuple(cohorts),
        opened_at=data["opened_at"],
        expires_at=data["expires_at"],
        irr_p=data.get("irr_p"),
        irr_q=data.get("irr_q"),
    )




@dataclass(frozen=True, kw_only=True)
class AggregatorInfo:
    """The aggregator's public keys as published in the config.

    ``next_sign_public`` is set only while the signing key is being rotated: the key that
    will sign configs after the switch, announced under the current one.
    """

    seal_public: bytes
    sign_public: bytes
    next_sign_public: bytes | None = None

    @classmethod
    def from_dict(cls, obj: Any) -> AggregatorInfo:
        fields = ("seal_public", "seal_key_id", "sign_public", "sign_key_id")
        data = _object(obj, "", fields, ("next_sign_public", "next_sign_key_id"))
        if ("next_sign_public" in data) != ("next_sign_key_id" in data):
            missing = "next_sign_key_id" if "next_sign_public" in data else "next_sign_public"
            raise ReportRejected(missing, "is required with the other next_sign field")
        keys: dict[str, bytes] = {}
        for name in ("seal", "sign", "next_sign"):
            if f"{name}_public" not in data:
                continue
            raw = b64d(data[f"{name}_public"], f"{name}_public")
            if len(raw) != 32:
                raise ReportRejected(f"{name}_public", "must be 32 bytes")
            if data[f"{name}_key_id"] != key_id(raw):
                raise ReportRejected(f"{name}_key_id", f"is not the key id of {name}_public")
            keys[f"{name}_public"] = raw
        return cls(**keys)

    def to_dict(self) -> dict[str, str]:
        return public_key_info(self.seal_public, self.sign_public, self.next_sign_public)


# Parsed metric parameters by their exact text (memory only): every sync of every client in a process
# reads the same parameters again, and a direct metric's domain makes a parse cost ~0.6 ms for 2,000
# names where the text costs ~0.1 ms. Keyed by the canonical text (``true`` is not ``1``, ``2.0`` is not
# ``2``), so a hit is exactly what the parse would return; the objects are frozen.
_PARSED: dict[bytes, MetricParams] = {}
_PARSED_MAX = 64


def _parsed_params(data: Any) -> MetricParams:
    """``MetricParams.from_dict(data)``, remembered for the last few texts (raises as it does)."""
    try:
        key = canonical_json(data)
    except (TypeError, ValueError):  # not JSON text (NaN, odd types): parsed, and refused, as ever
        return MetricParams.from_dict(data)
    held = _PARSED.get(key)
    if held is None:
        held = MetricParams.from_dict(data)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = held
    return held


@dataclass(frozen=True, kw_only=True)
class MetricEntry:
    """One metric in the config: its parameters, digest and current round and level."""

    params: MetricParams
    digest: str
    current_round: int
    current_level: float

    def __post_init__(self) -> None:
        if not isinstance(self.params, MetricParams):
            raise ReportRejected("params", "must be MetricParams")
        _digest(self.digest, "digest")
        _int(self.current_round, "current_round", 0, MAX_ROUND)
        if not _number(self.current_level, "current_level") > 0:
            raise ReportRejected("current_level", f"must be > 0, got {self.current_level}")

    @classmethod
    def of(cls, params: MetricParams, *, current_round: int = 0, current_level: float | None = None) -> MetricEntry:
        """An entry with the digest computed from ``params`` (aggregator side)."""
        level = params.level if current_level is None else current_level
        return cls(params=params, digest=params.digest(), current_round=current_round, current_level=level)

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": self.params.to_dict(),
            "digest": self.digest,
            "current_round": self.current_round,
            "current_level": None if math.isinf(self.current_level) else self.current_level,
        }

    @classmethod
    def from_dict(cls, obj: Any) -> MetricEntry:
        data = _object(obj, "", ("params", "digest", "current_round", "current_level"))
        try:
            params = _parsed_params(data["params"])
        except ParameterError as exc:
            raise ReportRejected(f"params.{exc.field}", exc.detail) from None
        level = math.inf if data["current_level"] is None else data["current_level"]
        return cls(params=params, digest=data["digest"], current_round=data["current_round"], current_level=level)


@dataclass(frozen=True, kw_only=True)
class ConfigPayload:
    """A verified config: keys, metrics, open rounds (and their signed documents, kept as sent).

    ``sync_interval`` (optional): the seconds the aggregator asks clients to wait before fetching the
    config again (:data:`SYNC_INTERVAL_RANGE`); ``None`` when it does not say.
    """

    issued_at: int
    aggregator: AggregatorInfo
    metrics: tuple[MetricEntry, ...]
    rounds: tuple[RoundAnnouncement, ...]
    round_documents: tuple[dict[str, Any], ...]
    sync_interval: int | None = None

    def metric(self, name: str) -> MetricEntry | None:
        return next((m for m in self.metrics if m.params.name == name), None)


# The re-sync schedule a config may announce: from a minute to a week.
SYNC_INTERVAL_RANGE = (60, 7 * 86_400)


def build_config_payload(
    *,
    issued_at: int,
    aggregator: dict[str, str],
    metrics: Sequence[MetricEntry],
    rounds: Sequence[dict[str, Any]],
    sync_interval: int | None = None,
) -> dict[str, Any]:
    """The config payload to sign (docs/wire.md 8.2).

    Args:
        issued_at: Unix seconds.
        aggregator: :meth:`protocol.crypto.AggregatorKeys.public_info`.
        metrics: one entry per metric.
        rounds: signed round announcement documents (open rounds).
        sync_interval: seconds clients should wait before fetching the config again (optional:
            left out when ``None``, so clients that predate the field accept the config).
    """
    payload = {
        "version": CONFIG_VERSION,
        "issued_at": issued_at,
        "aggregator": aggregator,
        "metrics": [m.to_dict() for m in metrics],
        "rounds": list(rounds),
    }
    if sync_interval is not None:
        payload["sync_interval"] = _int(sync_interval, "sync_interval", *SYNC_INTERVAL_RANGE)
    return payload


def _validate_metrics(items: Any) -> tuple[MetricEntry, ...]:
    if not isinstance(items, list):
        raise ReportRejected("metrics", "must be a list")
    entries: list[MetricEntry] = []
    for i, item in enumerate(items):
        try:
            entry = MetricEntry.from_dict(item)
        except ReportRejected as exc:
            raise _under(f"metrics[{i}]", exc) from None
        if any(e.params.name == entry.params.name for e in entries):
            raise ReportRejected(f"metrics[{i}].params.name", f"repeats metric {entry.params.name!r}")
        entries.append(entry)
    return tuple(entries)


def _validate_round_document(document: Any, sign_public: bytes, metrics: tuple[MetricEntry, ...]) -> RoundAnnouncement:
    """Verify one signed round and check it against the config's metrics (fields under ``payload``)."""
    payload = verify_document(sign_public, document)
    try:
        announcement = validate_round_announcement(payload)
    except ReportRejected as exc:
        raise _under("payload", exc) from None
    entry = next((m for m in metrics if m.params.name == announcement.metric), None)
    if entry is None:
        raise ReportRejected("payload.metric", f"{announcement.metric!r} is not a metric of this config")
    if entry.digest != announcement.params_digest:
        raise ReportRejected("payload.params_digest", "is not the metric's digest")
    for i, cohort in enumerate(announcement.cohorts or ()):
        if cohort >= entry.params.num_cohorts:
            raise ReportRejected(f"payload.cohorts[{i}]", f"must be < {entry.params.num_cohorts}, got {cohort}")
    try:  # a round's IRR relaxes the metric's own (the client checks it against what it sent, too)
        announcement.check_irr(entry.params)
    except ReportRejected as exc:
        raise _under("payload", exc) from None
    return announcement


def validate_config_payload(payload: Any, *, sign_public: bytes) -> ConfigPayload:
    """Validate a config payload and verify each round with ``sign_public``.

    Raises:
        ReportRejected: field by path (``metrics[0].params.mode``,
            ``rounds[1].payload.level_to``); ``SignatureError`` for a round
            that does not verify (field ``rounds[i].signature``...).
    """
    data = _object(payload, "", ("version", "issued_at", "aggregator", "metrics", "rounds"), ("sync_interval",))
    if isinstance(data["version"], bool) or data["version"] != CONFIG_VERSION:
        raise ReportRejected("version", f"must be {CONFIG_VERSION}, got {data['version']!r}")
    issued_at = _int(data["issued_at"], "issued_at", 0, MAX_WINDOW)
    try:
        aggregator = AggregatorInfo.from_dict(data["aggregator"])
    except ReportRejected as exc:
        raise _under("aggregator", exc) from None
    metrics = _validate_metrics(data["metrics"])
    if not isinstance(data["rounds"], list):
        raise ReportRejected("rounds", "must be a list")
    rounds = []
    for i, document in enumerate(data["rounds"]):
        try:
            rounds.append(_validate_round_document(document, sign_public, metrics))
        except SignatureError as exc:
            raise SignatureError(f"rounds[{i}].{exc.field}", exc.reason) from None
        except ReportRejected as exc:
            raise _under(f"rounds[{i}]", exc) from None
    sync_interval = data.get("sync_interval")
    return ConfigPayload(
        issued_at=issued_at,
        aggregator=aggregator,
        metrics=metrics,
        rounds=tuple(rounds),
        round_documents=tuple(data["rounds"]),
        sync_interval=None if sync_interval is None else _int(sync_interval, "sync_interval", *SYNC_INTERVAL_RANGE),
    )


def verify_config(document: Any, *, sign_public: bytes) -> ConfigPayload:
    """Verify a ``GET /v1/config`` body against the pinned Ed25519 key and validate it.

    Raises:
        SignatureError: the document does not verify, or
            ``aggregator.sign_public`` is not the pinned key.
        ReportRejected: the payload is malformed (field by path).
    """
    config = validate_config_payload(verify_document(sign_public, document), sign_public=sign_public)
    if config.aggregator.sign_public != sign_public:
        raise SignatureError("aggregator.sign_public", "is not the pinned signing key")
    return config
