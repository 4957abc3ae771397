"""From a value to a queued report: the one pipeline every report of a client takes.

:class:`Reporter` turns a value into a queue item: the metric's
:class:`~client_sdk.memo.ReportPlan` (encode, memoized noise through the
window's chain of levels, fresh IRR, packed payload; made once per
metric, cohort and level and reused), an IRR drawn ahead
(:class:`~client_sdk.pools.IrrPool`) and an ephemeral X25519 key taken from
the pool (:class:`~client_sdk.pools.EphemeralPool`), which fixes the
report's id before it is sealed. A window's first report and a round's
re-send of it differ only in the chain they pass, and, when the round
relaxes the IRR, in drawing the re-send's IRR from the window's last
report (:meth:`~client_sdk.memo.ReportPlan.relaxed_payload`) instead of a
fresh one. The ledger's rules
(what may be reported, what it costs) are the client's; nothing here
charges anything.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from protocol.chain import Irr
from protocol.crypto import b64d
from protocol.encodings import Value, canonical_value, members_of_canonical
from protocol.errors import ParameterError, PolicyError
from protocol.params import MetricParams
from protocol.rng import RandomSource
from protocol.wire import PAYLOAD_HEADER, ConfigPayload, MetricEntry

from .ledger import MetricRecord, with_irr
from .memo import ReportPlan, noise_key, prepare_level
from .pools import EphemeralPool, HeldKeys, IrrPool
from .queue import Item, pending_item
from .status import iso_utc

log = logging.getLogger("onesided.client")


class AlreadyReported(PolicyError):
    """A metric takes one value per window: another value was already reported in this window."""

    code = "already_reported"


def check_kind(params: MetricParams, value_or_set: Value | tuple[Value, ...]) -> None:
    """A categorical metric takes one value, never a set."""
    if params.value_kind == "categorical" and not isinstance(value_or_set, str | bytes):
        raise ParameterError("value", f"{params.name!r} is categorical: report one value, not a set")


def repeat(record: MetricRecord, window: int, value: str) -> str:
    """A second report in the metric's current window: the same value is a no-op, another is refused.

    ``value`` is the base64url canonical value (:attr:`~client_sdk.ledger.WindowRelease.value`).
    """
    current = record.current
    assert current is not None  # noqa: S101 - the caller checked
    if current.value == value:
        return current.report_id
    raise AlreadyReported(
        "value", f"metric {record.params['name']!r} already reported another value in the window "
        f"starting {iso_utc(window)}; a metric takes one value per window (the next window starts at "
        f"{iso_utc(window + int(record.params['time_precision']))})",
    )


class Reporting(NamedTuple):
    """What a client reuses for a metric until the config, the record or its level changes."""

    entry: MetricEntry
    record: MetricRecord
    plan: ReportPlan
    irr: IrrPool  # the IRR drawn ahead for the metric's probabilities and size
    seal_public: bytes  # the config's X25519 key the sender seals to


class Queued(NamedTuple):
    """A report made for the queue.

    Attributes:
        item: its pending queue item (:func:`~client_sdk.queue.pending_item`: the one form it keeps
            until it is sealed).
        sent: the bits it carries (hex, packed as in the payload): what a later relaxed IRR step of
            the window draws from (:attr:`~client_sdk.ledger.WindowRelease.sent`).
        report_id: its id (base64url), the sealed report's.
    """

    item: Item
    sent: str
    report_id: str


class Reporter:
    """A client's report pipeline, with the randomness it makes ahead of time.

    Args:
        rng: the source of the IRR (the client's).

    Attributes:
        ephemeral: the pool of ephemeral X25519 keys (one per report).
        held: the key objects of queued reports, kept for the sender.
        irr: the IRR pools, by the IRR's probabilities and size.
        plans: each metric's :class:`Reporting`, by name (the client checks it is still current).
    """

    def __init__(self, rng: RandomSource) -> None:
        self._rng = rng
        self.ephemeral = EphemeralPool()
        self.held = HeldKeys()
        self.irr: dict[tuple[str, float | None, float | None, int], IrrPool] = {}
        self.plans: dict[str, Reporting] = {}  # by metric name

    def made(self, secret: bytes, entry: MetricEntry, record: MetricRecord, seal_public: bytes) -> Reporting:
        """The metric's plan at the record's level and IRR, kept for its next reports."""
        params = with_irr(entry.params, record.irr)
        plan = ReportPlan(secret, params, record.cohort, record.levels[-1])
        made = Reporting(entry, record, plan, self.irr_pool(params), seal_public)
        self.plans[entry.params.name] = made
        return made

    def forget_plans(self) -> None:
        """The config or the state changed: plans are made again."""
        self.plans.clear()

    def irr_pool(self, params: MetricParams) -> IrrPool:
        """The IRR pool of the metric's IRR and size (shared by metrics with the same)."""
        key = (params.mode, params.irr_p, params.irr_q, params.num_bits)
        pool = self.irr.get(key)
        if pool is None:
            pool = self.irr.setdefault(key, IrrPool(self._rng, params.randomizer(), params.num_bits))
        return pool

    def resend(self, secret: bytes, entry: MetricEntry, record: MetricRecord, level_to: float, round_id: int,
               seal_public: bytes, *, irr: Irr | None = None, relaxed: bool = False) -> Queued | None:
        """The current window's value relaxed to ``level_to`` for round ``round_id`` (``None``: no window).

        The same pipeline as the window's first report, through the window's chain of levels and ``level_to``,
        with the IRR ``irr`` (``None``: the record's). ``relaxed``: the re-send's IRR is drawn from the
        window's last report (:attr:`~client_sdk.ledger.WindowRelease.sent`, which must be kept) by the
        relaxed IRR step; otherwise it is a fresh IRR.
        """
        current = record.current
        if current is None:
            return None
        members = members_of_canonical(b64d(current.value, "value"))
        value: Value | tuple[bytes, ...] = members[0] if entry.params.value_kind == "categorical" else tuple(members)
        after = record.irr if irr is None else irr
        relaxed_record = MetricRecord(
            params=record.params, digest=record.digest, cohort=record.cohort,
            levels=[*record.levels, level_to], rounds=[*record.rounds, round_id], irrs=[*record.irrs, after],
        )
        params = with_irr(entry.params, after)
        made = Reporting(entry, relaxed_record, ReportPlan(secret, params, record.cohort, level_to),
                         self.irr_pool(params), seal_public)
        chain = tuple(relaxed_record.levels[current.first_step:])
        if not relaxed:
            return Queued(*self.item(made, value, current.window, canonical_value(value), chain))
        if current.sent is None:
            raise ValueError("a relaxed re-send needs the window's last report")
        before = with_irr(entry.params, record.irrs[current.last_step]).randomizer(record.levels[current.last_step])
        sent = int.from_bytes(bytes.fromhex(current.sent), "little")
        payload = made.plan.relaxed_payload(value, noise_key(current.window, canonical_value(value)), chain, sent,
                                            before, self._rng)
        return Queued(*self._queued(made, current.window, payload))

    def item(self, made: Reporting, value: Value | Iterable[Value], window: int, value_key: bytes,
             chain: tuple[float, ...] | None = None) -> tuple[Item, str, str]:
        """:class:`Queued`'s fields for ``value`` in ``window`` (``value_key``: its canonical encoding).

        ``chain``: ``None`` for the window's first report (a fresh draw at the plan's level), or the
        window's levels through a round's (the last is the plan's level). The item is pending with its
        own ephemeral key, sealed by the sender; its id is already the sealed report's.
        """
        payload = made.plan.payload(value, noise_key(window, value_key), made.irr.take(), chain=chain)
        return self._queued(made, window, payload)

    def _queued(self, made: Reporting, window: int, payload: bytes) -> tuple[Item, str, str]:
        """:class:`Queued`'s fields (a plain tuple on ``report()``'s path: building the named tuple costs
        more than the rest of the step): the pending queue item of ``payload``, with its own ephemeral key
        (its id is the sealed report's), the bits it carries, its id."""
        entry, record, _, _, seal_public = made
        ephemeral, private, _, report_id = self.ephemeral.take()
        self.held.put(report_id, ephemeral)
        item = pending_item(
            report_id=report_id, metric=entry.params.name, round=record.round, window=window,
            params_digest=entry.digest, payload=payload, ephemeral_private=private, seal_public=seal_public,
        )
        return item, payload[PAYLOAD_HEADER.size :].hex(), report_id

    def prepare(self, config: ConfigPayload | None, records: Mapping[str, MetricRecord]) -> None:
        """Work done ahead of reports, off their path: ephemeral keys, each metric's cuts at its level.

        Never raises (it runs after a flush and in the sender): a failure only
        leaves ``report()`` to do the work itself.
        """
        try:
            self.ephemeral.refill()
            for entry in () if config is None else config.metrics:
                record = records.get(entry.params.name)
                if record is None or record.digest == entry.digest:
                    prepare_level(entry.params, entry.params.level if record is None else record.levels[-1])
                if record is not None and record.digest == entry.digest:  # metrics this client reports
                    self.irr_pool(entry.params).refill()
        except Exception:  # work ahead of time only; report() redoes what is missing
            log.exception("preparing reports ahead of time failed")


__all__ = ["AlreadyReported", "Queued", "Reporter", "Reporting", "check_kind", "repeat"]
