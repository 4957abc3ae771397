"""``Client``: the SDK a host app embeds.

Usage (``docs/client.md``)::

    client = Client("https://telemetry.example", "/var/lib/app/onesided.state",
                    server_public_keys=["<base64url Ed25519 key>"], max_epsilon=1.0, budget_period="day")
    client.report("places", {"cafe", "park"})  # encode, memoized noise, fresh IRR, queue; None while offline
    client.budget("places")                    # left today, when it renews, the total so far
    client.close()                             # sends what is queued, within exit_deadline

By default a background sender (:mod:`client_sdk.sender`) syncs the signed
config, re-syncs on its schedule, joins rounds within the ceiling and sends
batches; ``background=False`` leaves :meth:`sync` and :meth:`flush` to the
app. Foreground calls (:meth:`sync`, :meth:`report` once a config is known,
:meth:`relax`) raise on bad input, bad signatures and refused budgets.
:meth:`flush` and the background sender never raise (nor does :meth:`close`,
but for a disk that refuses its final save): errors go to ``on_error`` and
the ``onesided.client`` log, whose lines never hold secrets, values, bits
or noise. One client holds a state file at a time
(:mod:`client_sdk.lock`).

Storage: the state (ledger, secret, config; :mod:`client_sdk.state`) is
rewritten atomically on each change; the queue of reports is an
append-only encrypted file of its own (:mod:`client_sdk.queue`). The state
is always saved *before* a report is appended to the queue, so the ledger on
disk covers everything that can leave the device.

Sealing is off the caller's thread: :meth:`Client.report` queues the packed
report with its own ephemeral X25519 key (taken from a pool the sender
fills ahead of time) and returns the report's final id, derived from that
key; the sender seals it when it builds a batch (the same bytes on every
attempt).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from protocol.crypto import b64d, b64e, key_id
from protocol.encodings import Value, canonical_value, members_of_canonical
from protocol.errors import (
    BudgetExceeded,
    OnesidedError,
    ParameterError,
    PolicyError,
    ReportRejected,
    SignatureError,
)
from protocol.params import MetricParams
from protocol.randomizers import MAX_LEVEL
from protocol.rng import RandomSource, SecureRandom, as_rng
from protocol.validation import check_int, check_number
from protocol.wire import (
    ConfigPayload,
    MetricEntry,
    RoundAnnouncement,
    pack_payload_mask,
    verify_config,
    window_start,
)

from .ledger import (
    Budget,
    Ceiling,
    Ledger,
    LedgerEntry,
    LedgerEvent,
    MetricRecord,
    WindowRelease,
    check_new_window,
    check_relaxation,
    ledger_entry,
    period_of,
    unused_entry,
)
from .lock import StateLock
from .memo import (
    ReportPlan,
    apply_irr,
    encoded_mask,
    noise_key,
    permanent_mask,
    prepare_level,
)
from .pools import EphemeralPool, HeldKeys, IrrPool
from .queue import Item, QueueDamage, ReportQueue, pending_item
from .sender import FlushResult, Sender, SyncSchedule
from .state import ClientState, StateCorrupted, StateStore
from .transport import MAX_CONFIG_BYTES, MAX_RESPONSE_BYTES, RetryPolicy, Transport

log = logging.getLogger("onesided.client")

OnError = Callable[[Exception], None]
CORRUPT_POLICIES = ("raise", "reset")
BUDGET_REFUSALS = ("raise", "skip")
class ReportsDropped(OnesidedError):
    """Queued reports were discarded (queue full, or a batch the aggregator refuses as a whole)."""

    code = "reports_dropped"

    def __init__(self, count: int, reason: str) -> None:
        super().__init__(f"{count} queued report(s) dropped: {reason}")
        self.count = count
        self.reason = reason


def pinned_keys(keys: bytes | str | Iterable[bytes | str]) -> dict[str, bytes]:
    """Raw Ed25519 public keys (32 bytes, or base64url text) by key id."""
    items: Iterable[bytes | str] = [keys] if isinstance(keys, bytes | str) else keys
    out: dict[str, bytes] = {}
    for i, key in enumerate(items):
        try:
            raw = b64d(key, f"server_public_keys[{i}]") if isinstance(key, str) else key
        except ReportRejected as exc:
            raise ParameterError(exc.field, exc.reason) from None
        if not isinstance(raw, bytes) or len(raw) != 32:
            raise ParameterError(f"server_public_keys[{i}]", "must be a 32-byte Ed25519 public key")
        out[key_id(raw)] = raw
    if not out:
        raise ParameterError("server_public_keys", "must pin at least one Ed25519 public key")
    return out


def _secure_or_testing(rng: RandomSource | int | None, allowed: bool) -> RandomSource:
    """The OS CSPRNG, or a non-secure source when the testing switch says so."""
    if rng is None or isinstance(rng, SecureRandom):
        return SecureRandom()
    if not allowed:
        raise ParameterError(
            "rng", "a seeded or custom source makes the IRR predictable; pass insecure_rng_for_testing=True "
            "in tests and benchmarks, or leave rng=None (the OS CSPRNG)",
        )
    return as_rng(rng)


def _seconds(name: str, value: object) -> float:
    """A finite duration >= 0, for deadlines and intervals."""
    return check_number(name, value, nonnegative=True)


def _check_kind(params: MetricParams, value_or_set: Value | tuple[Value, ...]) -> None:
    """A categorical metric takes one value, never a set."""
    if params.value_kind == "categorical" and not isinstance(value_or_set, str | bytes):
        raise ParameterError("value", f"{params.name!r} is categorical: report one value, not a set")


class _Reporting(NamedTuple):
    """What :meth:`Client.report` reuses for a metric until the config, the record or its level changes."""

    entry: MetricEntry
    record: MetricRecord
    plan: ReportPlan
    irr: IrrPool


class AlreadyReported(PolicyError):
    """A metric takes one value per window: another value was already reported in this window."""

    code = "already_reported"


class Client:
    """One device's telemetry client.

    Args:
        server_url: the aggregator, e.g. ``https://telemetry.example``.
        state_path: this client's state file (one per client).
        server_public_keys: the pinned Ed25519 key(s) (raw or base64url); a
            config must be signed by one of them.
        max_epsilon: the ceiling per metric: a number, or a mapping by metric
            name with ``"*"`` as the default (unlisted metrics are refused).
        on_error: called with every error of background work (never raises into the app).
        state_key: the host app's AES key (16 or 32 bytes) for the state;
            ``None`` uses a key file (``key_path``, default ``<state_path>.key``, 0600).
        on_corrupt: ``"raise"`` (default) or ``"reset"``; see ``docs/client.md``.
        retry, session, batch_format: transport settings (:class:`Transport`).
        max_config_bytes, max_response_bytes: the largest config and upload
            answer read (4 MiB, 1 MiB); a larger one is refused (:class:`TransportError`).
        max_queue: bound of the offline queue; the oldest report goes first.
        batch_size: reports per upload.
        autosave: persist after every :meth:`report` (else at :meth:`flush`,
            :meth:`save` and :meth:`close`).
        background: start the background sender now (default; :meth:`start`
            with ``send_interval``): it syncs first, sends every
            ``send_interval`` seconds, re-syncs on the config's schedule. ``False``:
            the app drives :meth:`sync` and :meth:`flush` itself (tests,
            simulations, command-line tools).
        send_interval: seconds between background flushes.
        exit_deadline: the default deadline of :meth:`close`, and the overall
            deadline of the flush at interpreter exit (seconds).
        flush_at_exit: flush at interpreter exit (``atexit``) even without the
            background sender (which always does).
        rollback_keyring: record the state generation in the OS keyring (the
            optional ``keyring`` package) rather than next to the key file;
            the only rollback check with an app ``state_key``.
        clock, sleep, monotonic: injectable time (tests); ``sleep=None``
            waits interruptibly (a shutdown cuts a backoff short).
        rng: the source of cohorts, IRR and jitter (``None``: the OS CSPRNG).
            Any other source (a seed, :class:`~protocol.rng.SeededRandom`)
            makes the IRR predictable to whoever knows it and is refused
            unless ``insecure_rng_for_testing=True``.
        insecure_rng_for_testing: allow a non-secure ``rng`` (tests and benchmarks only).
        budget_period: a renewing budget: ``max_epsilon`` is then the ceiling
            per metric **per period** (``"day"``, ``"week"``, ``"month"`` = 30
            days, or seconds; periods aligned to the Unix epoch, UTC). ``None``
            (default): ``max_epsilon`` is the metric's lifetime ceiling.
        budget_warning: log a warning (once per metric and period) when what
            is left falls below this fraction of the ceiling.
        budget_refusals: ``"raise"`` (default): :meth:`report` raises
            :class:`BudgetExceeded`; ``"skip"``: it returns ``None``, logs, and
            passes the error to ``on_error`` (an app that wants no exception
            from telemetry).
        sync_interval: seconds between the background sender's syncs (the
            config's own ``sync_interval``, when it announces one, wins);
            a failed sync is retried sooner, with backoff.
        accept_round: the app's consent to a relaxation round (``None``: accept
            every round the ceiling allows). A refused round is not applied and
            nothing is sent for it: the aggregator sees non-participation.

    Raises:
        StateCorrupted: the state does not open and ``on_corrupt="raise"``.
    """

    def __init__(
        self,
        server_url: str,
        state_path: str | Path,
        *,
        server_public_keys: bytes | str | Iterable[bytes | str],
        max_epsilon: float | Mapping[str, float],
        on_error: OnError | None = None,
        state_key: bytes | None = None,
        key_path: str | Path | None = None,
        on_corrupt: str = "raise",
        retry: RetryPolicy | None = None,
        session: Any = None,
        batch_format: str = "json",
        max_config_bytes: int = MAX_CONFIG_BYTES,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        max_queue: int = 10_000,
        batch_size: int = 500,
        autosave: bool = True,
        background: bool = True,
        send_interval: float = 60.0,
        exit_deadline: float = 5.0,
        flush_at_exit: bool = False,
        rollback_keyring: bool = False,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], object] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        rng: RandomSource | int | None = None,
        accept_round: Callable[[RoundAnnouncement], bool] | None = None,
        insecure_rng_for_testing: bool = False,
        budget_period: str | int | None = None,
        budget_warning: float = 0.2,
        budget_refusals: str = "raise",
        sync_interval: float = 3600.0,
    ) -> None:
        if on_corrupt not in CORRUPT_POLICIES:
            raise ParameterError("on_corrupt", f"must be one of {CORRUPT_POLICIES}, got {on_corrupt!r}")
        for name, value in (("max_queue", max_queue), ("batch_size", batch_size)):
            check_int(name, value, low=1)
        self.exit_deadline = _seconds("exit_deadline", exit_deadline)
        if not _seconds("send_interval", send_interval) > 0:
            raise ParameterError("send_interval", f"must be > 0, got {send_interval!r}")
        self._keys = pinned_keys(server_public_keys)
        self._ceiling = Ceiling.of(max_epsilon, budget_period)
        self.budget_warning = check_number("budget_warning", budget_warning, nonnegative=True, high=1.0)
        if budget_refusals not in BUDGET_REFUSALS:
            raise ParameterError("budget_refusals", f"must be one of {BUDGET_REFUSALS}, got {budget_refusals!r}")
        self.budget_refusals = budget_refusals
        self._schedule = SyncSchedule(check_number("sync_interval", sync_interval, positive=True))
        self._warned: set[tuple[str, int]] = set()
        self._on_error = on_error
        self._accept_round = accept_round
        self._rng = _secure_or_testing(rng, insecure_rng_for_testing)
        self._clock = clock
        self._monotonic = monotonic
        self.max_queue = max_queue
        self.autosave = autosave
        self.transport = Transport(
            server_url, retry=retry, session=session, sleep=sleep, clock=clock, rng=self._rng,
            batch_format=batch_format, max_config_bytes=max_config_bytes, max_response_bytes=max_response_bytes,
            monotonic=monotonic,
        )
        self._lock = threading.RLock()
        self._sender = Sender(self, self.transport, batch_size=batch_size, clock=clock, monotonic=monotonic)
        self._exit_hook = False
        self._store = StateStore(state_path, key=state_key, key_path=key_path, rollback_keyring=rollback_keyring)
        self._on_corrupt = on_corrupt
        self._ephemeral = EphemeralPool()
        self._held = HeldKeys()
        self._irr: dict[tuple[str, float | None, float | None, int], IrrPool] = {}
        self._plans: dict[str, _Reporting] = {}
        self._dirty = False
        self._file_lock = StateLock(self._store.path)
        self._open()
        if background:
            self.start(send_interval)
        elif flush_at_exit:
            self._register_exit()

    # --- state ------------------------------------------------------------------

    def _open(self) -> None:
        """Take the state file's lock, then read the state, its queue and its config.

        Raises:
            StateLocked: another client holds the state file.
            StateCorrupted: the state does not open and ``on_corrupt="raise"``.
        """
        self._file_lock.acquire()
        try:
            self._queue = ReportQueue(self._store.queue_path, self._store.key)
            self._state = self._open_state(self._on_corrupt)
            self._config = self._stored_config()
            now = self._clock()
            for record in self._state.metrics.values():  # the budget policy may have changed since
                self._dirty = record.follow_period(self._ceiling.period, now) or self._dirty
        except BaseException:
            self._file_lock.release()
            raise
        self._plans.clear()

    def _reopen(self) -> None:
        """A closed client used again: take the lock back and read the state again (another
        client may have changed it meanwhile). Open (the usual case): nothing, no lock taken."""
        if self._file_lock.held:
            return
        with self._lock:
            if not self._file_lock.held:
                self._dirty = False
                self._open()

    def _open_state(self, on_corrupt: str) -> ClientState:
        try:
            state = self._store.load()
        except StateCorrupted as exc:
            if on_corrupt == "raise":
                raise
            return self._reset_after_loss(exc)
        if state is None:  # first run: written (with its key file) on the first change
            self._queue.discard()  # a queue without its state is charged by no ledger: never sent
            state = ClientState.fresh()
            state.queue = self._queue
            self._dirty = True
            return state
        state.queue = self._queue
        damage = self._queue.load(state.generation)
        for item in damage:
            self._report_damage(state, item)
        return state

    def _report_damage(self, state: ClientState, damage: QueueDamage) -> None:
        """A part of the queue file that could not be read: counted, in the ledger events, to ``on_error``."""
        state.dropped += damage.dropped
        state.record_event(LedgerEvent(at=self._clock(), kind="dropped", metric=None, detail=damage.detail))
        self._dirty = True
        self._notify(ReportsDropped(damage.dropped, damage.detail))

    def _reset_after_loss(self, error: StateCorrupted) -> ClientState:
        """The ``reset`` policy: keep the bad file, start over, charge the lost spend in full.

        The lost state may have spent up to the whole ceiling then in force on
        every metric, and the new secret's noise is independent of the old
        one, so every metric starts with ``prior`` = that ceiling.
        """
        now = self._clock()
        moved = self._store.quarantine(f"{int(now)}")
        self._queue.discard()
        state = ClientState.fresh()
        state.queue = self._queue
        state.lost.append({"at": now, "reason": error.reason, "ceiling": self._ceiling.to_dict()})
        state.record_event(LedgerEvent(
            at=now, kind="state_lost", metric=None,
            detail=f"{error.reason}; {'kept as ' + str(moved) if moved else 'no file kept'}; "
            "prior spend charged at the ceiling",
        ))
        self._store.save(state)
        log.warning("client state lost (%s); started a new state and charged the ceiling", error.reason)
        self._notify(error)
        return state

    def _stored_config(self) -> ConfigPayload | None:
        document = self._state.config
        if document is None:
            return None
        try:
            return self._verify(document)
        except ReportRejected as exc:
            log.warning("stored config no longer verifies (%s); call sync()", exc.field)
            return None

    def save(self) -> None:
        """Write the state if it changed (atomic, fsync'ed), then append the queue's changes.

        In this order: a report reaches the queue file only once a state
        charging it is on disk.
        """
        self._reopen()
        with self._lock:
            if self._dirty:
                self._store.save(self._state)
                self._dirty = False
            self._queue.persist(self._state.generation)

    def _commit(self) -> None:
        """Mark the state changed and write it."""
        with self._lock:
            self._dirty = True
            self.save()

    def _prior(self, metric: str, when: float | None = None) -> float:
        """Lost-state charges of ``metric``: all of them, or (renewing budget) those of the period holding ``when``."""
        if not self._state.lost:
            return 0.0
        period = self._ceiling.period
        return sum(
            Ceiling.from_dict(lost["ceiling"]).for_metric(metric) for lost in self._state.lost
            if when is None or period is None or period_of(float(lost["at"]), period) == period_of(when, period)
        )

    def _period_prior(self, metric: str, record: MetricRecord | None, when: float) -> float:
        """The ``prior`` a ceiling check takes: per period (renewing budget) or for the lifetime."""
        if record is not None and record.period is not None:
            return self._prior(metric, when)
        return self._prior(metric)

    def _relax_prior(self, metric: str, record: MetricRecord) -> float:
        """The ``prior`` of a relaxation's check: that of the current window's period (renewing budget)."""
        when = record.current.window if record.current is not None else self._clock()
        return self._period_prior(metric, record, when)

    def _warn_low(self, metric: str, record: MetricRecord, left: float, ceiling: float, when: float) -> None:
        """Log once per metric and period: what is left fell below ``budget_warning`` of the ceiling."""
        period = record.period
        start = 0 if period is None else period_of(when, period)
        if (metric, start) in self._warned:
            return
        self._warned.add((metric, start))
        renews = "" if period is None else f"; it renews at {start + period} (unix time)"
        log.warning("metric %s: %.6g of its privacy budget of %.6g left%s", metric, max(0.0, left), ceiling, renews)

    # --- config -----------------------------------------------------------------

    def _verify(self, document: Any) -> ConfigPayload:
        if not isinstance(document, dict) or "signature" not in document or "key_id" not in document:
            raise SignatureError("signature", "the config is not a signed document")
        seen = document["key_id"]
        public = self._keys.get(seen) if isinstance(seen, str) else None
        if public is None:
            raise SignatureError(
                "key_id", f"the config is signed by key id {str(seen)[:64]!r}, not by a pinned key "
                f"(pinned key ids: {', '.join(sorted(self._keys))}); pin the aggregator's sign_public, "
                "printed by `onesided keys show` on the aggregator",
            )
        return verify_config(document, sign_public=public)

    def sync(self) -> ConfigPayload:
        """Fetch ``GET /v1/config``, verify it against the pinned key(s), keep it.

        Open round announcements come verified with it (``config.rounds``);
        the latest one of each metric this client reports is then applied
        (:meth:`_apply_rounds`): later reports of the metric carry the round.

        Freshness: ``issued_at`` (the signing time) is the config's serial. A
        config older than the one kept (a replayed or stale signed document)
        is not taken: the kept one stays, a ``stale_config`` ledger event is
        recorded once, and the kept config is returned.

        Raises:
            SignatureError: unsigned, signed by another key, or tampered.
            ReportRejected: a malformed payload (field by path).
            TransportError: the aggregator could not be reached.
        """
        self._reopen()
        document = self.transport.fetch_config()
        config = self._verify(document)
        with self._lock:
            kept = self._config
            if kept is not None and config.issued_at < kept.issued_at:
                detail = f"config issued at {config.issued_at} is older than the kept one ({kept.issued_at}); kept"
                if not any(e.kind == "stale_config" and e.detail == detail for e in self._state.events):
                    self._event("stale_config", None, detail)
                    self._commit()
                log.warning("refused a config older than the kept one (issued %d < %d)", config.issued_at,
                            kept.issued_at)
                return kept
            self._state.config = document
            self._config = config
            self._plans.clear()
            for name, record in self._state.metrics.items():
                entry = config.metric(name)
                if entry is not None and entry.digest != record.digest:
                    detail = f"parameters changed to digest {entry.digest[:16]}; reports of the metric are refused"
                    if not any(e.metric == name and e.detail == detail for e in self._state.events):
                        self._event("params_changed", name, detail)
            self._commit()
            self._release_waiting()
            applied = self._apply_rounds(config)
            self._schedule.synced(self._clock(), config.sync_interval)
        self._prepare()
        log.info("config synced: %d metrics, %d open rounds, %d applied", len(config.metrics), len(config.rounds),
                 applied)
        return config

    def _prepare(self) -> None:
        """Work done ahead of reports, off their path: ephemeral keys, each metric's cuts at its level.

        Never raises (it runs after a flush and in the sender): a failure only
        leaves ``report()`` to do the work itself.
        """
        try:
            self._ephemeral.refill()
            config = self._config
            for entry in () if config is None else config.metrics:
                record = self._state.metrics.get(entry.params.name)
                if record is None or record.digest == entry.digest:
                    prepare_level(entry.params, entry.params.level if record is None else record.levels[-1])
                if record is not None and record.digest == entry.digest:  # metrics this client reports
                    self._irr_pool(entry.params).refill()
        except Exception:  # work ahead of time only; report() redoes what is missing
            log.exception("preparing reports ahead of time failed")

    def _apply_rounds(self, config: ConfigPayload) -> int:
        """Apply the latest open round of each metric this client reports (docs/client.md, rounds).

        The announcements were verified with the config (pinned Ed25519 key).
        A round is applied when it is for this metric's parameters and this
        client's cohort, unexpired, raises the level, the app consents and
        the ledger ceiling allows it; otherwise it is skipped with its reason
        in the ledger events and nothing is sent. A client that missed rounds
        jumps straight to the latest level (one lazy step, Markov property).
        """
        latest: dict[str, RoundAnnouncement] = {}
        for announcement in config.rounds:
            held = latest.get(announcement.metric)
            if held is None or announcement.round_id > held.round_id:
                latest[announcement.metric] = announcement
        applied = 0
        for name, announcement in sorted(latest.items()):
            record = self._state.metrics.get(name)
            if record is None or record.round >= announcement.round_id:
                continue
            reason = self._round_refusal(announcement, record)
            if reason is None:
                self.relax(name, announcement.level_to, announcement.round_id)
                applied += 1
                continue
            detail = f"round {announcement.round_id}: {reason}"
            if not any(e.metric == name and e.detail == detail for e in self._state.events):
                self._event("round_refused", name, detail)
                self._commit()
            log.info("round %d of metric %s not applied: %s", announcement.round_id, name, reason)
        return applied

    def _round_refusal(self, announcement: RoundAnnouncement, record: MetricRecord) -> str | None:
        """Why this client does not take part in a round, or ``None``."""
        if announcement.params_digest != record.digest:
            return "announced for other parameters than this client's"
        if announcement.expires_at <= self._clock():
            return "expired"
        if announcement.cohorts is not None and record.cohort not in announcement.cohorts:
            return "not for this client's cohort"
        if not announcement.level_to > record.levels[-1]:
            return f"does not raise the level ({record.levels[-1]:.6g} -> {announcement.level_to:.6g})"
        if self._accept_round is not None and not self._accept_round(announcement):
            return "declined by the app"
        self._settle(record, record.metric_params())
        try:  # the check relax() makes, asked first so a refusal is recorded once, as a round refusal
            check_relaxation(record, record.metric_params(), announcement.level_to,
                             self._ceiling.for_metric(announcement.metric),
                             self._relax_prior(announcement.metric, record))
        except OnesidedError as exc:
            return str(exc)
        return None

    @property
    def config(self) -> ConfigPayload | None:
        """The last verified config (``None`` before the first :meth:`sync`)."""
        return self._config

    def _entry(self, metric: str) -> MetricEntry:
        if self._config is None:
            raise ParameterError("metric", "no verified config yet: call sync() first")
        entry = self._config.metric(metric)
        if entry is None:
            raise ParameterError("metric", f"{metric!r} is not a metric of the signed config")
        return entry

    def _record(self, entry: MetricEntry) -> MetricRecord:
        """The metric's record, made on first use with a cohort drawn once, uniformly."""
        params = entry.params
        record = self._state.metrics.get(params.name)
        if record is None:
            cohort = int(self._rng.integers(params.num_cohorts, 1)[0])
            record = MetricRecord(
                params=params.to_dict(), digest=entry.digest, cohort=cohort, levels=[params.level], rounds=[0],
                period=self._ceiling.period,
            )
            self._state.metrics[params.name] = record
            self._dirty = True
        elif record.digest != entry.digest:
            raise PolicyError(
                "metric", f"{params.name!r} changed its parameters since this client first reported it"
            )
        return record

    # --- reporting ----------------------------------------------------------------

    def report(self, metric: str, value_or_set: Value | Iterable[Value]) -> str | None:
        """Encode, randomize (memoized noise, fresh IRR) and queue one report; the sender seals it.

        A metric takes one value per window (its ``time_precision``): the
        first report of a window fixes it. Reporting the same value again in
        the window sends nothing new and returns the same report id; another
        value raises :class:`AlreadyReported`. A round opened in the window
        re-sends the window's value at the new level (:meth:`relax`).

        On return the report is charged in the ledger and queued with its
        own ephemeral key; with ``autosave`` (the default) both are on disk
        (state first, then the encrypted queue file), so a crash loses
        nothing that was returned. It is sealed to the aggregator's key
        before upload, by the sender.

        Args:
            metric: a metric of the signed config.
            value_or_set: a value, or a set of values (e.g. the places visited today).

        Before the first verified config (an offline first launch) the
        value is kept in the encrypted state and ``None`` is returned; it is
        encoded, charged and queued, in the window of this call, when a
        config arrives (:meth:`sync`, or the background sender's).

        Returns:
            The report id (base64url): the id the aggregator will see,
            ``SHA-256("onesided/report-id/v1" || pkE)[:16]`` of the report's
            ephemeral key (docs/wire.md 1.3). ``None`` when the value waits
            for the first config, or was refused with ``budget_refusals="skip"``.

        Raises:
            BudgetExceeded: a new window's report would pass the ceiling (nothing is queued).
            AlreadyReported: another value was reported for the metric in this window.
            ParameterError: unknown metric (once a config is known), a value outside a
                direct domain, a set for a categorical metric, a value that is not str,
                bytes or an iterable of them.
            PolicyError: the metric's parameters changed since it was first used, or the
                clock is before the window of the metric's last report.
        """
        self._reopen()
        if not isinstance(value_or_set, str | bytes):
            if not isinstance(value_or_set, Iterable):
                raise ParameterError("value", "must be str, bytes or a set (any iterable) of them, got "
                                     f"{type(value_or_set).__name__}")
            value_or_set = tuple(value_or_set)  # read once: a generator would be empty the second time
        with self._lock:
            if self._config is None:
                self._wait_for_config(metric, value_or_set)
                return None
            try:
                return self._report_at(metric, value_or_set, self._clock())
            except BudgetExceeded as exc:
                if self.budget_refusals == "raise":
                    raise
                self._notify(exc)
                return None

    def _report_at(self, metric: str, value_or_set: Value | tuple[Value, ...], when: float) -> str:
        """:meth:`report` of a value given at the instant ``when`` (now, or when it waited for a config)."""
        entry, record, plan, irr = self._reporting(metric, value_or_set)
        params = entry.params
        window = window_start(when, params.time_precision)
        value_key = canonical_value(value_or_set)
        value_text = b64e(value_key)
        current = record.current
        if current is not None and window <= current.window:
            return self._repeat(record, window, value_text)
        ceiling = self._ceiling.for_metric(metric)
        try:
            after = check_new_window(record, params, ceiling, self._period_prior(metric, record, window),
                                     window=window)
        except OnesidedError as exc:
            self._event("refused", metric, str(exc))
            raise
        payload = plan.payload(value_or_set, noise_key(window, value_key), irr.take())
        item = self._item(entry, record, window, payload)
        record.close_window(params)
        report_id: str = item["report_id"]
        step = len(record.levels) - 1
        record.current = WindowRelease(
            window=window, value=value_text, first_step=step, last_step=step, report_id=report_id,
        )
        if record.first_window is None:
            record.first_window = window
        self._enqueue(item)
        self._dirty = True
        if self.autosave:
            self.save()
        if ceiling - after < self.budget_warning * ceiling:
            self._warn_low(metric, record, ceiling - after, ceiling, window)
        log.debug("queued a report for metric %s (round %d)", metric, record.round)
        return report_id

    def _wait_for_config(self, metric: str, value_or_set: Value | tuple[Value, ...]) -> None:
        """Keep a value reported before the first config, in the encrypted state, until one arrives.

        Nothing is encoded, charged or sent yet; :meth:`_release_waiting`
        does all three with the time of this call when a config is verified.
        """
        if not isinstance(metric, str) or not metric:
            raise ParameterError("metric", f"must be a metric name, got {metric!r}")
        kind = "one" if isinstance(value_or_set, str | bytes) else "set"
        self._state.waiting.append({"metric": metric, "value": b64e(canonical_value(value_or_set)),
                                    "kind": kind, "at": self._clock()})
        overflow = len(self._state.waiting) - self.max_queue
        if overflow > 0:
            del self._state.waiting[:overflow]
            self._event("dropped", None, f"{overflow} oldest value(s) waiting for a config dropped")
            self._notify(ReportsDropped(overflow, "too many values waiting for the first config; oldest dropped"))
        self._dirty = True
        if self.autosave:
            self.save()
        log.debug("metric %s: value kept until the first config", metric)

    def _release_waiting(self) -> int:
        """Report the values that waited for a config, each in the window of its own time.

        What the config makes impossible (an unknown metric, a set for a
        categorical metric, a second value in a window, the ceiling) is
        passed to ``on_error`` and dropped; it never raises.
        """
        waiting, self._state.waiting = self._state.waiting, []
        released = 0
        for held in waiting:
            members = members_of_canonical(b64d(held["value"], "value"))
            value: Value | tuple[Value, ...] = members[0] if held["kind"] == "one" and members else tuple(members)
            try:
                self._report_at(str(held["metric"]), value, float(held["at"]))
                released += 1
            except OnesidedError as exc:
                self._event("refused", str(held["metric"]), f"a value that waited for the config: {exc}")
                self._notify(exc)
        if waiting:
            self._commit()
            log.info("%d of %d value(s) that waited for the config reported", released, len(waiting))
        return released

    def _reporting(self, metric: str, value_or_set: Value | tuple[Value, ...]) -> _Reporting:
        """The metric's entry, record and report plan (made once per config, cohort and level), the value's kind checked.

        Raises what :meth:`_entry` and :meth:`_record` raise, and ``ParameterError`` (field
        ``value``) for a set given to a categorical metric.
        """
        cached = self._plans.get(metric)
        if cached is not None and cached.record is self._state.metrics.get(metric) \
                and cached.plan.level == cached.record.levels[-1]:
            _check_kind(cached.entry.params, value_or_set)
            return cached
        entry = self._entry(metric)
        _check_kind(entry.params, value_or_set)
        record = self._record(entry)
        made = _Reporting(
            entry=entry, record=record, irr=self._irr_pool(entry.params),
            plan=ReportPlan(self._state.secret, entry.params, record.cohort, record.levels[-1]),
        )
        self._plans[metric] = made
        return made

    def _irr_pool(self, params: MetricParams) -> IrrPool:
        """The IRR pool of the metric's IRR and size (shared by metrics with the same)."""
        key = (params.mode, params.irr_p, params.irr_q, params.num_bits)
        pool = self._irr.get(key)
        if pool is None:
            pool = self._irr.setdefault(key, IrrPool(self._rng, params.randomizer(), params.num_bits))
        return pool

    def _repeat(self, record: MetricRecord, window: int, value: str) -> str:
        """A second report in the metric's latest window: the same value is a no-op, another is refused.

        ``value`` is the base64url canonical value (:attr:`WindowRelease.value`).
        """
        current = record.current
        assert current is not None  # noqa: S101 - the caller checked
        if window < current.window:
            raise PolicyError(
                "window", f"the clock is before the window of this metric's last report ({current.window}); "
                "a past window cannot be reported again",
            )
        if current.value == value:
            return current.report_id
        raise AlreadyReported(
            "value", f"metric {record.params['name']!r} already reported another value in window {window}; "
            "a metric takes one value per window (the next window starts at "
            f"{window + int(record.params['time_precision'])})",
        )

    def _pending(
        self, entry: MetricEntry, record: MetricRecord, value: Value | Iterable[Value], window: int, first_step: int,
        value_key: bytes | None = None,
    ) -> Item:
        """The window's chain through the current level and fresh IRR, packed, with its ephemeral key.

        The queue item the sender seals to the config's X25519 key (:func:`client_sdk.queue.envelope_of`);
        its id is already the sealed report's.
        """
        params = entry.params
        levels = record.levels[first_step:]
        key = noise_key(window, canonical_value(value) if value_key is None else value_key)
        permanent = permanent_mask(self._state.secret, params, encoded_mask(params, value, record.cohort), key, levels)
        bits = apply_irr(params.randomizer(levels[-1]), permanent, self._irr_pool(params).take())
        payload = pack_payload_mask(cohort=record.cohort, level=levels[-1], mask=bits, num_bits=params.num_bits)
        return self._item(entry, record, window, payload)

    def _item(self, entry: MetricEntry, record: MetricRecord, window: int, payload: bytes) -> Item:
        """A packed payload queued pending with its own ephemeral key; its id is already the sealed report's."""
        config = self._config
        if config is None:  # pragma: no cover - _entry checked it under the same lock
            raise ParameterError("metric", "no verified config yet: call sync() first")
        key, private, _, report_id = self._ephemeral.take()
        self._held.put(report_id, key)
        return pending_item(
            report_id=report_id, metric=entry.params.name, round=record.round, window=window,
            params_digest=entry.digest, payload=payload, ephemeral_private=private,
            seal_public=config.aggregator.seal_public,
        )

    def _settle(self, record: MetricRecord, params: MetricParams) -> None:
        """Close the latest window's release once its window has passed: it can never be re-sent."""
        current = record.current
        if current is not None and current.window < window_start(self._clock(), params.time_precision):
            record.close_window(params)
            self._dirty = True

    def _check(self, check: Callable[[], float], metric: str) -> float:
        """Run a ceiling check; a refusal is recorded in the ledger events, then raised."""
        try:
            return check()
        except OnesidedError as exc:
            self._event("refused", metric, str(exc))
            raise

    def _enqueue(self, item: Item) -> None:
        """Queue in memory; the file gets it at the next :meth:`save`, after the state."""
        self._queue.append(item)
        overflow = len(self._queue) - self.max_queue
        if overflow > 0:
            self._drop(self._queue.oldest(overflow), f"queue full ({self.max_queue})",
                       f"offline queue full ({self.max_queue}); oldest dropped", oldest=True)

    def _drop(self, ids: Sequence[str], why: str, notice: str, *, oldest: bool = False) -> int:
        """Remove queued reports for good: counted, an event, ``ReportsDropped`` to ``on_error``."""
        with self._lock:
            count = self._queue.remove(ids)
            self._held.forget(ids)
            if count:
                self._state.dropped += count
                self._event("dropped", None, f"{count} {'oldest ' if oldest else ''}report(s) dropped: {why}")
        if count:
            self._notify(ReportsDropped(count, notice))
        return count

    def relax(self, metric: str, level_to: float, round_id: int) -> LedgerEntry:
        """Move the metric's memoized noise to ``level_to`` (the local part of a round).

        If the metric reported in the current window, that window's value is
        re-sent at ``level_to`` (its memoized noise relaxed by the lazy step)
        and charged as one more report of the window's chain; earlier windows
        are final. Later reports carry ``round_id``. Re-applying the same
        level is a no-op.

        Raises:
            TighteningRefused: ``level_to`` is below the current level.
            BudgetExceeded: the relaxation would pass the ceiling.
            ParameterError: bad ``round_id``, unknown metric, trusted mode.
        """
        check_int("round_id", round_id, low=1, high=2**32 - 1)
        check_number("level_to", level_to, positive=True, high=MAX_LEVEL)
        self._reopen()
        with self._lock:
            entry = self._entry(metric)
            params = entry.params
            if not params.local_mechanism.relaxable:
                raise ParameterError("metric", f"{metric!r} is trusted: there is no noise to relax")
            record = self._record(entry)
            self._settle(record, params)
            if level_to != record.levels[-1]:
                ceiling = self._ceiling.for_metric(metric)
                prior = self._relax_prior(metric, record)
                self._check(lambda: check_relaxation(record, params, float(level_to), ceiling, prior), metric)
                item = self._resend(entry, record, float(level_to), round_id)
                record.levels.append(float(level_to))
                record.rounds.append(round_id)
                if item is not None and record.current is not None:
                    record.current.last_step = record.step
                    record.current.report_id = item["report_id"]
                    self._enqueue(item)
                self._event("relax", metric, f"level {record.levels[-2]:.6g} -> {level_to:.6g} (round {round_id})")
                self._commit()
                log.info("metric %s relaxed to level %.6g for round %d", metric, level_to, round_id)
            return self._ledger_entry(metric, record)

    def _resend(self, entry: MetricEntry, record: MetricRecord, level_to: float, round_id: int) -> Item | None:
        """The current window's value relaxed to ``level_to`` for round ``round_id`` (``None``: no window)."""
        current = record.current
        if current is None:
            return None
        members = members_of_canonical(b64d(current.value, "value"))
        value: Value | tuple[bytes, ...] = members[0] if entry.params.value_kind == "categorical" else tuple(members)
        relaxed = MetricRecord(
            params=record.params, digest=record.digest, cohort=record.cohort,
            levels=[*record.levels, level_to], rounds=[*record.rounds, round_id],
        )
        return self._pending(entry, relaxed, value, current.window, current.first_step)

    # --- sending ----------------------------------------------------------------

    def flush(self, deadline: float | None = None) -> FlushResult:
        """Upload the queue in batches; never raises (errors go to ``on_error``).

        The state is saved before anything is sent (the ledger always covers
        what left the device). Delivered (``accepted`` or ``replayed``) and
        finally rejected reports leave the queue; on a network failure the
        rest stays for the next call. One call sends at most the reports
        queued when it starts.

        Args:
            deadline: seconds this call may take in all (``None``: only the
                retry policy bounds it). No backoff or request runs past it;
                a request's timeout is capped by the time left.
        """
        try:
            until = None if deadline is None else self._monotonic() + _seconds("deadline", deadline)
            self._reopen()
        except OnesidedError as exc:
            self._notify(exc)
            return FlushResult(remaining=len(self._queue), error=exc)
        result = self._sender.flush(until, wait=True)
        self._prepare()
        return result

    def start(self, interval: float = 60.0) -> None:
        """Flush in a background thread every ``interval`` seconds until :meth:`close`.

        Returns at once; a second call while the sender runs does nothing,
        a call after :meth:`close` (or after the thread died) starts a new
        one. Also registers the flush at interpreter exit (``exit_deadline``).
        """
        check_number("interval", interval, positive=True)
        self._reopen()
        self._sender.start(float(interval), self._background_tick, self._background_start)
        self._register_exit()

    def _background_tick(self) -> None:
        """One turn of the background sender: sync when due, send what is queued, make keys and IRR ahead."""
        self._sync_if_due()
        self._sender.flush(None, wait=False)
        self._prepare()

    def _background_start(self) -> None:
        """The background sender's first turn: the first sync (when due), then keys and IRR ahead."""
        self._sync_if_due()
        self._prepare()

    def _sync_if_due(self) -> None:
        """Sync when the schedule says so; a failure goes to ``on_error`` and is retried with backoff."""
        if not self._schedule.due(self._clock()):
            return
        try:
            self.sync()
        except Exception as exc:  # background work never raises into the app
            self._schedule.failed(self._clock(), float(self._rng.uniform(1)[0]))
            self._notify(exc)

    def _config_outdated(self) -> None:
        """An upload answer said the config changed: the background sender syncs at its next turn."""
        self._schedule.now()

    @property
    def batch_size(self) -> int:
        """Reports per upload (halved by the sender on a ``413``)."""
        return self._sender.batch_size

    def close(self, deadline: float | None = None, *, flush: bool = True) -> FlushResult:
        """Stop the background sender, send what is queued, save the state, close the HTTP session.

        Everything (waiting for a background flush in progress, then the
        final flush, its requests and backoffs) ends within ``deadline``.
        Reports not sent by then stay queued, on disk, for the next run; the
        result says how many (``remaining``), and so does the log.

        Args:
            deadline: seconds in all (default ``exit_deadline``).
            flush: ``False`` skips the final flush (queued reports wait for the next run).

        Returns:
            The final flush's result (an empty one with ``remaining`` set when
            ``flush=False``).
        """
        seconds = self.exit_deadline if deadline is None else _seconds("deadline", deadline)
        until = self._monotonic() + seconds
        self._sender.stop(until)
        self._unregister_exit()
        result = FlushResult(remaining=len(self._queue))
        if flush:
            self.transport.stop_by(until)
            result = self._sender.flush(until, wait=True)
        self.save()
        self._file_lock.release()
        self.transport.close()
        if result.remaining:
            log.info("closed with %d report(s) still queued; they are sent by the next run", result.remaining)
        return result
    def _register_exit(self) -> None:
        with self._lock:
            if not self._exit_hook:
                atexit.register(self._flush_at_exit)
                self._exit_hook = True

    def _unregister_exit(self) -> None:
        with self._lock:
            if self._exit_hook:
                atexit.unregister(self._flush_at_exit)
                self._exit_hook = False

    def _flush_at_exit(self) -> None:
        """At interpreter exit: stop the sender, flush, save, all within ``exit_deadline``; never raises."""
        try:
            self.close()
        except Exception as exc:  # the app is exiting: log, never raise
            self._notify(exc)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- ledger -------------------------------------------------------------------

    def _ledger_entry(self, metric: str, record: MetricRecord) -> LedgerEntry:
        now = self._clock()
        return ledger_entry(record, record.metric_params(), self._ceiling.for_metric(metric), self._prior(metric),
                            now=now, period_prior=self._period_prior(metric, record, now))

    def ledger(self) -> Ledger:
        """Per metric: levels released, exact cost, ceiling, remaining; plus events and drops."""
        with self._lock:
            config = self._config
            now, period = self._clock(), self._ceiling.period
            unused = () if config is None else tuple(
                unused_entry(e.params, self._ceiling.for_metric(e.params.name), self._prior(e.params.name),
                             period=period, now=now, period_prior=self._prior(e.params.name, now))
                for e in config.metrics if e.params.name not in self._state.metrics
            )
            return Ledger(
                entries=tuple(self._ledger_entry(m, r) for m, r in sorted(self._state.metrics.items())),
                events=tuple(self._state.events),
                dropped_reports=self._state.dropped,
                queued_reports=len(self._queue),
                unused=unused,
            )

    def budget(self, metric: str) -> Budget:
        """What is left of ``metric``'s privacy budget, and when it renews.

        Raises:
            KeyError: ``metric`` is neither used nor in the verified config.
        """
        return Budget.of(self.ledger()[metric])

    def _event(self, kind: str, metric: str | None, detail: str) -> None:
        self._state.record_event(LedgerEvent(at=self._clock(), kind=kind, metric=metric, detail=detail))
        self._dirty = True

    def _notify(self, error: Exception) -> None:
        log.warning("%s: %s", type(error).__name__, error)
        if self._on_error is None:
            return
        try:
            self._on_error(error)
        except Exception:  # a faulty callback must not break sending
            log.exception("on_error callback raised")


__all__ = ["AlreadyReported", "Client", "FlushResult", "ReportsDropped", "pinned_keys"]
