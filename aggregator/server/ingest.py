"""Report ingestion: from a parsed batch to per-report results (docs/wire.md 7).

For each report, in this order (cheap checks before decryption):

1. the metric exists (``unknown_metric``, field ``metric``);
2. ``params_digest`` is the metric's (``outdated_config``);
3. ``window`` is a multiple of the metric's ``time_precision``
   (``invalid_message``), starts at most ``clock_skew_seconds`` in the future
   (``too_early``) and ended at most ``retention_seconds`` ago (``expired``):
   expired iff ``window + time_precision <= now - retention``, the same rule
   as ``Storage.purge_expired``, so a purged report id can never be replayed;
4. round ``r > 0`` is a round of this metric (``invalid_message``, field
   ``round``), open, closed or expired alike: a round's reports are accepted
   for every window step 3 accepts, the same lateness bounds as round 0's.
   Closing a round withdraws its announcement (no client joins it any more)
   and refuses nothing, since every report tagged with it comes from a client
   that joined while it was open and was charged for it: a window that
   started before the close was built while the round was open and may be
   delivered later (queues, retries, devices offline); in the windows after
   it the clients that joined keep reporting at its ``level_to``, tagged
   with it (a level never goes back down), until a later round;
5. the envelope opens with the aggregator's X25519 key, its metadata bound
   as AAD (``decrypt_error``); plaintext only if the operator allows it;
6. the payload is well formed (``invalid_message``, ``payload.*``), its
   level is the metric's base level (round 0) or the round's ``level_to``,
   and its cohort is one the round asked for;
7. a trusted metric's report keeps at most ``max_items * num_hashes`` ones
   (the contribution bound the central releases rely on), chosen uniformly
   at random with the server's secure RNG (:func:`clip_items`, as PipelineDP
   bounds ``max_partitions_contributed``); an accepted report that was
   clipped says so in its result's ``detail``.

The survivors are stored in one transaction (``Storage.store_reports``),
which adds ``accepted`` / ``replayed`` (and catches a metric or round that
changed meanwhile). Nothing of a rejected report is stored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from aggregator.server.opener import EnvelopeOpener
from aggregator.server.settings import Settings
from aggregator.server.storage import MetricBinding, MetricRecord, ReportRow, RoundRecord, Storage
from protocol.accounting import contribution_bound
from protocol.errors import ReportRejected
from protocol.exact import uniform_below
from protocol.params import MetricParams
from protocol.rng import RandomSource, as_rng
from protocol.wire import (
    PAYLOAD_HEADER,
    STATUS_ACCEPTED,
    STATUS_EXPIRED,
    STATUS_INVALID_MESSAGE,
    STATUS_OUTDATED_CONFIG,
    STATUS_REPLAYED,
    STATUS_TOO_EARLY,
    STATUS_UNKNOWN_METRIC,
    PayloadCheck,
    ReportEnvelope,
    ReportResult,
)

BODY_HASH_BYTES = 16


@dataclass(frozen=True, kw_only=True)
class BatchContext:
    """What the checks of one batch read from the database, once."""

    metrics: dict[str, MetricRecord]
    rounds: dict[int, RoundRecord]
    now: float


def _reject(field: str, reason: str, status: str) -> ReportRejected:
    return ReportRejected(field, reason, code=status)


def check_metadata(env: ReportEnvelope, ctx: BatchContext, settings: Settings) -> tuple[MetricRecord, RoundRecord | None]:
    """Steps 1 to 4: the clear metadata against the metric, the clock and the rounds.

    Raises:
        ReportRejected: with the status as its code and the field named.
    """
    metric = ctx.metrics.get(env.metric)
    if metric is None:
        raise _reject("metric", f"no metric named {env.metric!r}", STATUS_UNKNOWN_METRIC)
    if env.params_digest != metric.digest:
        raise _reject("params_digest", "is not the metric's current parameters digest; fetch /v1/config", STATUS_OUTDATED_CONFIG)
    precision = metric.params.time_precision
    if env.window % precision:
        raise _reject("window", f"must be a multiple of time_precision ({precision})", STATUS_INVALID_MESSAGE)
    if env.window > ctx.now + settings.clock_skew_seconds:
        raise _reject("window", "starts in the future", STATUS_TOO_EARLY)
    if env.window + precision <= ctx.now - settings.retention_seconds:
        raise _reject("window", "is older than the retention period", STATUS_EXPIRED)
    if env.round == 0:
        return metric, None
    round_ = ctx.rounds.get(env.round)
    if round_ is None or round_.metric != metric.name:
        raise _reject("round", f"no round {env.round} for metric {metric.name!r}", STATUS_INVALID_MESSAGE)
    return metric, round_


class Candidate(NamedTuple):
    """A report whose metadata passed steps 1 to 4, with what it was checked against.

    A named tuple: made for every report of a batch, a third of the cost of a frozen dataclass.
    """

    position: int
    envelope: ReportEnvelope
    metric: MetricRecord
    round: RoundRecord | None


def plain_payload(env: ReportEnvelope, allow_plain: bool) -> bytes:
    """Step 5 for a plain report: its payload, if the operator allows plaintext.

    Raises:
        ReportRejected: plaintext is not allowed (field ``plain``).
    """
    if not allow_plain:
        raise ReportRejected("plain", "plaintext reports are not accepted by this aggregator")
    return env.body


def check_payload(data: bytes, item: Candidate, check: PayloadCheck | None = None) -> ReportRow:
    """Step 6: parse the payload and check it against the metric or the round.

    ``check`` is the metric's :class:`~protocol.wire.PayloadCheck` (made
    once per batch and metric; default: made here): the same checks as
    :func:`~protocol.wire.unpack_payload`, without its bit array.

    Raises:
        ReportRejected: ``invalid_message`` with field ``payload``, ``payload.level``...
    """
    params, round_ = item.metric.params, item.round
    if check is None:
        check = PayloadCheck(params.num_bits, params.num_cohorts)
    cohort, level = check.header(data)
    expected = params.level if round_ is None else round_.level_to
    if level != expected:
        where = "the metric's level" if round_ is None else f"round {round_.id}'s level_to"
        raise ReportRejected("payload.level", f"must be {where} ({expected}), got {level}")
    if round_ is not None and round_.cohorts is not None and cohort not in round_.cohorts:
        raise ReportRejected("payload.cohort", f"round {round_.id} is for cohorts {list(round_.cohorts)}")
    env = item.envelope
    return ReportRow.checked(  # the parser checked report_id's 16 bytes
        metric_id=item.metric.id,
        report_id=env.report_id,
        round=env.round,
        window=env.window,
        cohort=cohort,
        bits=data[PAYLOAD_HEADER.size :],  # packed LSB first, padding checked by PayloadCheck.header
        body_hash=_sha256(env.body).digest()[:BODY_HASH_BYTES],
    )


_sha256 = hashlib.sha256


def item_limit(params: MetricParams) -> int | None:
    """The ones a report of ``params`` may keep (trusted metrics), else ``None``.

    :func:`protocol.accounting.contribution_bound`: the bound the central releases assume.
    """
    if params.local_mechanism.randomized:
        return None
    return contribution_bound(params).ones


def clip_items(bits: bytes, num_bits: int, limit: int, rng: RandomSource) -> tuple[bytes, int]:
    """Keep at most ``limit`` of the ones of packed ``bits`` (LSB first), a uniformly random subset.

    Exact: a partial Fisher-Yates shuffle with exact uniform integers
    (:func:`~protocol.exact.uniform_below`). Returns the packed bits and the
    number of ones dropped (0: ``bits`` unchanged).
    """
    vector = np.unpackbits(np.frombuffer(bits, dtype=np.uint8), bitorder="little")[:num_bits]
    ones = np.flatnonzero(vector)
    if ones.size <= limit:
        return bits, 0
    for i in range(limit):
        j = i + int(uniform_below(rng, int(ones.size) - i, 1)[0])
        ones[i], ones[j] = ones[j], ones[i]
    kept = np.zeros(len(bits) * 8, dtype=np.uint8)
    kept[ones[:limit]] = 1
    return np.packbits(kept, bitorder="little").tobytes(), int(ones.size) - limit


def clip_report(row: ReportRow, params: MetricParams, rng: RandomSource) -> tuple[ReportRow, int]:
    """Step 7: ``row`` with at most :func:`item_limit` ones, and how many were dropped."""
    limit = item_limit(params)
    if limit is None:
        return row, 0
    bits, dropped = clip_items(row.bits, params.num_bits, limit, rng)
    return (dataclasses.replace(row, bits=bits) if dropped else row), dropped


class RecordCache:
    """Metrics and finished rounds read by earlier batches of this process, so most batches read neither.

    Exact, not merely fresh enough: a metric is taken from here only when
    every report of the batch names it with the digest remembered (a digest
    is a hash of all the parameters, and a metric's id never changes), so the
    checks see exactly what the database holds or would be told apart by
    ``store_reports``, which re-reads the digest under lock in its
    transaction (``outdated_config``); any other digest, or an unknown name,
    reads the metric again. Only closed rounds are remembered (nothing of a
    closed round changes); open ones are read for every batch that names
    them. Saves a query and 25 us of parsing per batch (0.2 ms on SQLite).
    """

    def __init__(self) -> None:
        self._metrics: dict[str, MetricRecord] = {}
        self._closed_rounds: dict[int, RoundRecord] = {}
        self._lock = threading.Lock()

    def context(self, storage: Storage, envelopes: Sequence[ReportEnvelope], now: float) -> BatchContext:
        named = {(e.metric, e.params_digest) for e in envelopes}  # a batch names few (usually one of each)
        round_ids = {e.round for e in envelopes}
        with self._lock:
            metrics = {name: self._metrics[name] for name, _ in named if name in self._metrics}
            rounds = {i: self._closed_rounds[i] for i in round_ids if i in self._closed_rounds}
        stale = {name for name, digest in named if name not in metrics or metrics[name].digest != digest}
        if stale:
            fresh = storage.metrics_by_name(stale)
            for name in stale:
                metrics.pop(name, None)
            metrics.update(fresh)
        unread = {i for i in round_ids if i > 0 and i not in rounds}
        if unread:
            rounds.update(storage.rounds_by_id(unread))
        with self._lock:
            if stale:
                self._metrics.update(fresh)
            self._closed_rounds.update({i: r for i, r in rounds.items() if r.closed_at is not None})
        return BatchContext(metrics=metrics, rounds=rounds, now=now)


_records: weakref.WeakKeyDictionary[Storage, RecordCache] = weakref.WeakKeyDictionary()
_records_lock = threading.Lock()


def records_for(storage: Storage) -> RecordCache:
    """The :class:`RecordCache` of ``storage`` (one per open storage, shared by its requests)."""
    with _records_lock:
        cache = _records.get(storage)
        if cache is None:
            cache = _records[storage] = RecordCache()
        return cache


# One batch at a time per process while envelopes are opened in place (see ingest_turn).
_turn = threading.Lock()
TURN_WAIT_SECONDS = 30.0  # a turn not had by then is taken without the lock, as SQLite's busy timeout


@contextlib.contextmanager
def ingest_turn(opener: EnvelopeOpener, storage: Storage) -> Iterator[None]:
    """On SQLite, parse and ingest one batch at a time in this process while ``opener`` opens envelopes in place.

    Every step of such a batch holds Python's GIL but the database calls,
    and SQLite stores one batch at a time anyway: two batches at once in
    one process only traded the GIL back and forth (each SQLite call lets
    the other thread in, which then keeps it for the switch interval) and
    evicted each other's code from the CPU caches. Measured over HTTP, one
    worker, batches of 100 (benchmarks/ingest.py, alternated): 83-90 CPU-us a
    report in turns against 90-110 without. With decrypt helpers
    (``opener.processes > 0``) a batch waits on them without the GIL, and on
    PostgreSQL a batch's storing waits on the server: there batches overlap
    as before (turns measured fewer reports a second on PostgreSQL). A turn
    not had within :data:`TURN_WAIT_SECONDS` is taken without the lock.
    """
    if opener.processes or storage.dialect != "sqlite":
        yield
        return
    held = _turn.acquire(timeout=TURN_WAIT_SECONDS)
    try:
        yield
    finally:
        if held:
            _turn.release()


class Ingestor:
    """Turns parsed batches into stored reports and per-report results.

    ``rng`` draws the clipped items' subsets (default: the secure source).
    """

    def __init__(self, *, storage: Storage, opener: EnvelopeOpener, settings: Settings,
                 rng: RandomSource | None = None) -> None:
        self.storage = storage
        self.opener = opener
        self.settings = settings
        self.rng = as_rng(rng)

    def open_candidates(
        self, candidates: list[Candidate], results: list[ReportResult | None]
    ) -> list[tuple[Candidate, bytes]]:
        """Step 5 for the whole batch; failures go into ``results``.

        All envelopes are opened before any payload is parsed: interleaving the
        two measured 13 us per report slower (X25519 pushes numpy's code out of
        the CPU caches). Sealed ones go to the opener together (helper processes
        for large batches, if configured).
        """
        opened: list[tuple[Candidate, bytes]] = []
        sealed = [item for item in candidates if item.envelope.sealed is not None]
        plaintexts = self.opener.open_all([(item.envelope.body, item.envelope.aad()) for item in sealed])
        for item, data in zip(sealed, plaintexts, strict=True):
            if isinstance(data, bytes):
                opened.append((item, data))
            else:
                results[item.position] = ReportResult.from_error(item.envelope.report_id, data)
        for item in candidates:
            if item.envelope.plain is not None:
                try:
                    opened.append((item, plain_payload(item.envelope, self.settings.allow_plaintext)))
                except ReportRejected as exc:
                    results[item.position] = ReportResult.from_error(item.envelope.report_id, exc)
        return opened

    def context(self, envelopes: Sequence[ReportEnvelope], now: float) -> BatchContext:
        """The batch's metrics and rounds: remembered ones, and one query each for the rest."""
        return records_for(self.storage).context(self.storage, envelopes, now)

    def ingest(self, envelopes: Sequence[ReportEnvelope], *, now: float) -> list[ReportResult]:
        """Check, open and store a batch; one result per envelope, in order."""
        ctx = self.context(envelopes, now)
        results: list[ReportResult | None] = [None] * len(envelopes)
        candidates: list[Candidate] = []
        for i, env in enumerate(envelopes):
            try:
                metric, round_ = check_metadata(env, ctx, self.settings)
                candidates.append(Candidate(position=i, envelope=env, metric=metric, round=round_))
            except ReportRejected as exc:
                results[i] = ReportResult.from_error(env.report_id, exc)
        opened = self.open_candidates(candidates, results)
        rows: list[ReportRow] = []
        positions: list[int] = []
        clipped: dict[int, str] = {}
        checks: dict[int, tuple[PayloadCheck, int | None]] = {}  # per metric: made once per batch
        for item, data in opened:
            found = checks.get(item.metric.id)
            if found is None:
                params = item.metric.params
                found = checks[item.metric.id] = (PayloadCheck(params.num_bits, params.num_cohorts),
                                                  item_limit(params))
            check, limit = found
            try:
                row = check_payload(data, item, check)
            except ReportRejected as exc:
                results[item.position] = ReportResult.from_error(item.envelope.report_id, exc)
                continue
            if limit is not None:
                row, dropped = clip_report(row, item.metric.params, self.rng)
                if dropped:
                    clipped[item.position] = (f"clipped: {dropped} of the report's ones dropped at random, {limit} "
                                           "kept (max_items)")
            rows.append(row)
            positions.append(item.position)
        bindings = {
            m.id: MetricBinding(metric_id=m.id, digest=m.digest, num_bits=m.params.num_bits)
            for m in ctx.metrics.values()
        }
        statuses = self.storage.store_reports(rows, bindings, now=int(now))
        of = ReportResult.of
        for i, status in zip(positions, statuses, strict=True):
            if status not in _STORE_STATUSES:
                raise ValueError(f"store_reports answered {status!r}")  # a storage bug, not the client's
            detail = clipped.get(i) if status == STATUS_ACCEPTED else _STORE_DETAILS[status]
            results[i] = of(envelopes[i].report_id_text, status, detail)
        return [r for r in results if r is not None]


_STORE_DETAILS = {
    STATUS_REPLAYED: "a different report with this report_id was stored before",
    STATUS_OUTDATED_CONFIG: "the metric's parameters changed while this batch was processed",
    STATUS_EXPIRED: "the report's round no longer exists",
}
_STORE_STATUSES = frozenset((STATUS_ACCEPTED, *_STORE_DETAILS))
