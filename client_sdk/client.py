"""``Client``: the SDK a host app embeds.

Usage (``docs/client.md``)::

    client = Client("https://telemetry.example", "/var/lib/app/onesided.state",
                    server_public_keys=["<base64url Ed25519 key>"], max_epsilon=1.0, budget_period="day")
    client.report("places", {"cafe", "park"})  # charged and queued in memory: a ReportStatus
    client.budget("places")                    # left today, when it renews, the total so far
    client.close()                             # sends what is queued, within exit_deadline

Nothing the environment causes (a full or read-only disk, the network, a
metric the operator has not registered, a device clock that is off, a
server that misbehaves) raises into the app: :meth:`~Client.report`
answers with a :class:`~client_sdk.status.ReportStatus`, and the reason
goes to ``on_event``, ``on_error`` and the ``onesided`` logger (a
``NullHandler``: silent unless the app configures logging), whose lines
never hold secrets, values, bits or noise. Programmer errors (a wrong type,
a value outside a declared domain, a second value in a window) raise only
with ``strict=True``; :meth:`~Client.relax` (an explicit round step) raises
as documented.

``Client`` keeps the public API and the ledger's rules (what may be reported,
what it costs); it holds one collaborator per job: its settings
(:mod:`~client_sdk.options`), its open state and queue
(:mod:`~client_sdk.storage`), the accountant (:mod:`~client_sdk.spending`),
the signed config and its rounds (:mod:`~client_sdk.following`), the report
pipeline (:mod:`~client_sdk.reporting`), values waiting for the first config
(:mod:`~client_sdk.waiting`), the sender (:mod:`~client_sdk.sender`) and its
background turns (:mod:`~client_sdk.background`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from protocol.chain import Irr, IrrPair, RoundRepeats, RoundStep
from protocol.crypto import b64e
from protocol.encodings import Value, canonical_value
from protocol.errors import (
    BudgetExceeded,
    OnesidedError,
    ParameterError,
    PolicyError,
)
from protocol.randomizers import MAX_LEVEL
from protocol.validation import check_int, check_number
from protocol.wire import ConfigPayload, MetricEntry, window_start

from . import status as st
from .background import Background, weak_call
from .following import Following, Joining
from .ledger import (
    Budget,
    Ledger,
    LedgerEntry,
    MetricRecord,
    WindowRelease,
    with_irr,
)
from .options import ClientOptions, pinned_keys, seconds
from .outbox import Outbox
from .queue import ReportQueue
from .reporting import AlreadyReported, Reporter, Reporting, check_kind, repeat
from .sender import FlushResult, Sender, SyncSchedule
from .servertime import OFF_THRESHOLD, ServerClock
from .spending import Accountant
from .state import ClientState, StateStore
from .status import ClientEvent, ReportStatus, iso_utc
from .storage import ReportsDropped, Storage, weak_callback
from .transport import Transport, TransportError
from .waiting import hold, released

log = logging.getLogger("onesided.client")

FLUSH_DEADLINE = 60.0  # flush() without a deadline: at most this long, in all (seconds)


class ClockBehind(PolicyError):
    """Kept importable for apps that catch it; no longer raised. A device clock before a window the
    metric already reported, in an earlier period of a renewing budget, once refused reports until
    the clock caught up; such a window is now charged to its own period, whose total the record
    keeps (:class:`~client_sdk.ledger.PeriodTotals`, docs/client.md E)."""

    code = "clock_behind"


class Client:
    """One device's telemetry client.

    Args:
        server_url: the aggregator, e.g. ``https://telemetry.example``.
        state_path: this client's state file (one per client).
        options: the settings as one :class:`~client_sdk.options.ClientOptions`, or
        **keywords: the same settings one by one (``server_public_keys`` and
            ``max_epsilon`` are required; the others are described there).

    Raises:
        ParameterError: a bad setting (named).
        StateLocked: another client holds the state file.
        StateCorrupted: the state does not open and ``on_corrupt="raise"``.
    """

    def __init__(self, server_url: str, state_path: str | Path, *, options: ClientOptions | None = None,
                 **keywords: Any) -> None:
        if options is not None and keywords:
            raise ParameterError("options", "pass a ClientOptions or keywords, not both")
        o = ClientOptions(**keywords) if options is None else options
        self.options = o
        self.strict = o.strict
        self._on_error, self._on_event = o.on_error, o.on_event
        self._off: ReportStatus | None = None  # disabled, or the state could not be opened: every call a no-op
        if o.disabled:
            self._off = ReportStatus(st.DISABLED, reason="the client is disabled")
            return
        self.exit_deadline, self.max_queue, self.autosave = o.exit_deadline, o.max_queue, o.autosave
        self.budget_refusals, self.budget_warning = o.budget_refusals, o.budget_warning
        self._rng, self._monotonic = o.random, o.monotonic
        self.server_clock = ServerClock(o.clock, o.monotonic, on_off=weak_callback(self._clock_off))
        self._clock = self.server_clock.now  # windows, periods and events: the corrected clock
        self.transport = Transport(
            server_url, retry=o.retry, session=o.session, sleep=o.sleep, clock=self._clock, rng=o.random,
            batch_format=o.batch_format, max_config_bytes=o.max_config_bytes,
            max_response_bytes=o.max_response_bytes, monotonic=o.monotonic, server_time=self.server_clock.learn,
        )
        self._lock = threading.RLock()
        store = StateStore(state_path, key=o.state_key, key_path=o.key_path, rollback_keyring=o.rollback_keyring)
        self._disk = Storage(store, on_corrupt=o.on_corrupt, ceiling=o.ceiling, clock=self._clock,
                             notify=weak_callback(self._notify), lock=self._lock)
        self._store, self._file_lock = store, self._disk.lock
        self._accountant = Accountant(o.ceiling, o.budget_warning, self._disk, self._clock)
        self._following = Following(o.keys, o.accept_round, disk=self._disk, accountant=self._accountant,
                                    clock=self._clock)
        self._reporter = Reporter(o.random)
        self._ephemeral, self._held, self._irr = self._reporter.ephemeral, self._reporter.held, self._reporter.irr
        self._outbox = Outbox(self._disk, self._held, self._lock, max_queue=o.max_queue,
                              event=weak_callback(self._dropped), notify=weak_callback(self._notify))
        schedule = SyncSchedule(o.sync_interval)
        self._sender = Sender(self._outbox, self.transport, schedule=schedule, save=weak_call(self._save),
                              notify=weak_callback(self._notify), batch_size=o.batch_size, monotonic=o.monotonic,
                              clock_retry_cap=o.clock_retry_cap)
        self._background = Background(
            self._sender, schedule, sync=weak_call(self._sync), write=weak_call(self._write),
            release_held=weak_call(self._release_held), prepare=weak_call(self._prepare), close=weak_call(self.close),
            notify=weak_callback(self._notify), monotonic=o.monotonic, rng=o.random, flush_at=o.flush_at)
        self._plans = self._reporter.plans
        self._disk_failing = False
        try:
            self._open()
        except OnesidedError:  # StateLocked, StateCorrupted: documented
            raise
        except OSError as exc:  # an unwritable folder, a full disk: no ledger, so nothing may be charged
            if self.strict:
                raise
            self.transport.close()
            self._off = ReportStatus(st.DROPPED, reason=f"the client's state is unavailable ({exc.strerror or exc})",
                                     error=exc)
            self._emit("state_unavailable", str(self._off.reason), error=exc, level=logging.WARNING)
            return
        if o.background:
            self.start(o.send_interval)
        elif o.flush_at_exit:
            self._background.register_exit()

    # --- state ------------------------------------------------------------------

    def _open(self) -> None:
        """Take the state file's lock, read the state, its queue and its config (:class:`Storage`)."""
        self._disk.open()
        self._state: ClientState = self._disk.state  # the same objects, bound here for report()'s path
        if self._state.clock is not None:  # never before the time trusted at the last write (servertime)
            self.server_clock.restore(*self._state.clock)
        self._state.clock_source = self.server_clock.checkpoint
        self._queue: ReportQueue = self._disk.queue
        self._following.load()
        self._reporter.forget_plans()

    def _reopen(self) -> None:
        """A closed client used again: take the lock back and read the state again (another
        client may have changed it meanwhile). Open (the usual case): nothing, no lock taken."""
        if self._file_lock.held:
            return
        with self._lock:
            if not self._file_lock.held:
                self._disk.dirty = False
                self._open()

    def save(self) -> None:
        """Write the state if it changed (atomic, fsync'ed), then append the queue's changes.

        In this order: a report reaches the queue file only once a state
        charging it is on disk. A disk that refuses the write (full,
        read-only) raises only with ``strict``; otherwise the change stays in
        memory, a ``disk_error`` event says why, and the next write retries it
        (nothing is sent before it is on disk).
        """
        if self._off is not None:
            return
        try:
            self._reopen()
            with self._lock:
                self._disk.save()
        except OSError as exc:
            self._disk_error(exc)
            if self.strict:
                raise
        else:
            self._disk_back()

    def _save(self) -> list[str]:
        """The sender's write (outside the client's lock, so ``report()`` never waits for it): raises,
        so nothing leaves before it is on disk. Returns the ids of the reports now on disk."""
        self._reopen()
        try:
            durable = self._disk.write_behind()
        except OSError as exc:
            self._disk_error(exc)
            raise
        self._disk_back()
        return durable

    def _write(self) -> int:
        """The background sender's write of what ``report()`` queued (a group commit, outside the
        client's lock); never raises. Returns how many reports are queued."""
        if self.autosave:
            with contextlib.suppress(OSError):  # _save told on_event; the next write tries again
                self._save()
        return len(self._queue)

    def _disk_error(self, exc: OSError) -> None:
        """A write the disk refused: one event per run of failures (the change stays in memory)."""
        if not self._disk_failing:
            self._disk_failing = True
            self._emit("disk_error", f"the state could not be written ({exc.strerror or exc}); kept in memory, "
                       "retried at the next write, nothing sent before it is on disk", error=exc,
                       level=logging.WARNING)

    def _disk_back(self) -> None:
        if self._disk_failing:
            self._disk_failing = False
            self._emit("disk_ok", "the state is written again")

    def _commit(self) -> None:
        """Mark the state changed and write it."""
        with self._lock:
            self._disk.dirty = True
            self.save()

    # --- config -----------------------------------------------------------------

    def sync(self) -> ConfigPayload:
        """Fetch ``GET /v1/config``, verify it against the trusted (pinned or learned) keys, keep it.

        The app asked for it, so it raises (the background sender's syncs
        never do: their errors go to ``on_event`` and ``on_error``).

        Open round announcements come verified with it (``config.rounds``);
        the latest one of each metric this client reports is then applied
        (docs/client.md, rounds): later reports of the metric carry the round.

        Freshness: ``issued_at`` (the signing time) is the config's serial. A
        config older than the one kept (a replayed or stale signed document)
        is not taken: the kept one stays, a ``stale_config`` ledger event is
        recorded once, and the kept config is returned.

        Raises:
            SignatureError: unsigned, signed by another key, or tampered.
            ReportRejected: a malformed payload (field by path).
            TransportError: the aggregator could not be reached.
            ParameterError: the client is disabled or its state is unavailable (field ``client``).
        """
        if self._off is not None:
            raise ParameterError("client", f"no config can be kept: {self._off.reason}")
        return self._sync()

    def _sync(self) -> ConfigPayload:
        """:meth:`sync`, raising."""
        self._reopen()
        document = self.transport.fetch_config()
        config = self._following.verify(document)
        if self.transport.last_date is not None:  # a verified config's answer: the aggregator's Date
            self.server_clock.learn(self.transport.last_date)
        self.server_clock.learn_at_least(float(config.issued_at))  # the server's clock was at least this
        with self._lock:
            if not self._following.adopt(document, config):
                self.save()  # its stale_config event, if new
                return self._following.verified()  # the kept one, newer
            self._reporter.forget_plans()
            self._commit()
            self._release_waiting()
            joining = self._following.decide_rounds(config)
            for join in joining:
                self._join(join)
            self.save()  # the refusals' events
            applied = len(joining)
            self._background.schedule.synced(self._monotonic(), config.sync_interval)
        self._prepare()
        log.info("config synced: %d metrics, %d open rounds, %d applied", len(config.metrics), len(config.rounds),
                 applied)
        return config

    def _prepare(self) -> None:
        """Keys, IRR and cut tables made ahead of reports (:meth:`Reporter.prepare`); never raises."""
        self._reporter.prepare(self._following.config, self._state.metrics)

    @property
    def config(self) -> ConfigPayload | None:
        """The last verified config (``None`` before the first :meth:`sync`, or when disabled)."""
        return None if self._off is not None else self._following.config

    def _record(self, entry: MetricEntry) -> MetricRecord:
        """The metric's record, made on first use with a cohort drawn once, uniformly."""
        params = entry.params
        record = self._state.metrics.get(params.name)
        if record is None:
            cohort = int(self._rng.integers(params.num_cohorts, 1)[0])
            record = MetricRecord(
                params=params.to_dict(), digest=entry.digest, cohort=cohort, levels=[params.level], rounds=[0],
                period=self._accountant.ceiling.period,
            )
            self._state.metrics[params.name] = record
            self._disk.dirty = True
        elif record.digest != entry.digest:
            raise PolicyError(
                "metric", f"{params.name!r} changed its parameters since this client first reported it"
            )
        return record

    # --- reporting ----------------------------------------------------------------

    def report(self, metric: str, value_or_set: Value | Iterable[Value]) -> ReportStatus:
        """Encode, randomize (memoized noise, fresh IRR) and queue one report; the sender seals it.

        A metric takes one value per window (its ``time_precision``): the
        first report of a window fixes it. Reporting the same value again in
        the window sends nothing new and returns the same report id; another
        value raises :class:`AlreadyReported`. A round opened in the window
        re-sends the window's value at the new level (:meth:`relax`).

        On return the report is charged in the ledger and queued in memory
        with its own ephemeral key; nothing on this thread waits for a disk.
        With ``autosave`` (the default) the background sender writes both
        soon after (state first, then the encrypted queue file; a burst in
        one write), and nothing is sent before they are on disk: a crash
        before the write loses an unsent report and its charge, never
        privacy. Without the background sender the write happens here. It is
        sealed to the aggregator's key before upload, by the sender.

        Args:
            metric: a metric of the signed config.
            value_or_set: a value, or a set of values (e.g. the places visited today).

        Before the first verified config (an offline first launch) the
        value is kept in the encrypted state and ``None`` is returned; it is
        encoded, charged and queued, in the window of this call, when a
        config arrives (:meth:`sync`, or the background sender's).

        Returns:
            A :class:`~client_sdk.status.ReportStatus`: a ``str``, the report id
            (base64url) the aggregator will see, ``SHA-256("onesided/report-id/v1"
            || pkE)[:16]`` of the report's ephemeral key (docs/wire.md 1.3), or
            ``""`` when there is none; ``.status`` says what happened: ``queued``,
            ``waiting`` (for the first config), ``refused`` (the budget, a second
            value in the window, an unknown metric or a bad value: ``.reason``),
            ``dropped`` (the state is unavailable) or ``disabled``.

        Raises:
            Only with ``strict`` (or ``budget_refusals="raise"`` for the budget):
            BudgetExceeded: a new window's report would pass the ceiling (nothing is queued).
            AlreadyReported: another value was reported for the metric in this window.
            ParameterError: unknown metric (once a config is known), a value outside a
                direct domain, a set for a categorical metric, a value that is not str,
                bytes or an iterable of them.
            PolicyError: the metric's parameters changed since it was first used.
        """
        if self._off is not None:
            return self._off
        try:
            return self._report(metric, value_or_set)
        except Exception as exc:  # the app's thread: what is not a programmer error in strict mode never leaves
            return self._refused(metric, exc)

    def _report(self, metric: str, value_or_set: Value | Iterable[Value]) -> ReportStatus:
        self._reopen()
        if not isinstance(value_or_set, str | bytes):
            if not isinstance(value_or_set, Iterable):
                raise ParameterError("value", "must be str, bytes or a set (any iterable) of them, got "
                                     f"{type(value_or_set).__name__}")
            value_or_set = tuple(value_or_set)  # read once: a generator would be empty the second time
        with self._lock:
            if self._following.config is None:
                self._wait_for_config(metric, value_or_set)
                return ReportStatus(st.WAITING, reason="kept until the first verified config")
            now = self._clock()
            if self.server_clock.suspect(now):  # never charge a window the server may refuse as too early
                self._wait_for_config(metric, value_or_set)
                self._background.schedule.now()  # the next turn asks the server's time
                if self._sender.running:
                    self._sender.nudge()
                return ReportStatus(st.WAITING, reason="the device clock moved ahead of the server's time; kept, "
                                    "uncharged, until the server's next answer confirms the time")
            return ReportStatus(st.QUEUED, self._report_at(metric, value_or_set, now))

    def _refused(self, metric: object, exc: Exception) -> ReportStatus:
        """What ``report()`` answers for an error: raised (strict, programmer errors), or a status."""
        environment = isinstance(exc, ClockBehind | OSError | TransportError)
        if isinstance(exc, BudgetExceeded):
            if self.budget_refusals == "raise":
                raise exc
        elif self.strict and not environment:
            raise exc
        status = st.REFUSED if isinstance(exc, OnesidedError) else st.DROPPED
        if status == st.DROPPED and not isinstance(exc, OSError):
            log.error("report() failed unexpectedly", exc_info=exc)
        self._notify(exc, metric=metric if isinstance(metric, str) else None)
        return ReportStatus(status, reason=str(exc), error=exc)

    def _report_at(self, metric: str, value_or_set: Value | tuple[Value, ...], when: float) -> str:
        """:meth:`report` of a value given at the instant ``when`` (now, or when it waited for a config)."""
        made = self._reporting(metric, value_or_set)
        entry, record, *_ = made
        params = entry.params
        window = window_start(when, params.time_precision)
        value_key = canonical_value(value_or_set)
        value_text = b64e(value_key)
        current = record.current
        if current is not None and window == current.window:
            return repeat(record, window, value_text)
        # a window before the latest (a clock that went back): a new window, charged as any other; with a
        # renewing budget to its own period's total (PeriodTotals)
        try:
            after = self._accountant.check_spend(metric, record, params, window)
        except OnesidedError as exc:
            self._event("refused", metric, str(exc))
            raise
        item, sent, report_id = self._reporter.item(made, value_or_set, window, value_key)
        step = record.step
        self._accountant.spend(metric, record, params, WindowRelease(
            window=window, value=value_text, first_step=step, last_step=step, report_id=report_id,
            sent=sent if made.plan.randomizer.has_irr else None,  # a round may relax the IRR from it
        ), after)
        self._outbox.put(item, report_id)
        self._persist()
        log.debug("queued a report for metric %s", metric)
        return report_id

    def _persist(self) -> None:
        """After ``report()``: wake the background sender (it writes, then sends a full queue), or, without
        one, write here (``autosave``). Never raises."""
        if self._sender.running:
            self._sender.nudge()
        elif self.autosave:
            try:
                self._disk.save()
            except OSError as exc:  # kept in memory: written (before anything is sent) at the next save
                self._disk_error(exc)
            else:
                self._disk_back()

    def _wait_for_config(self, metric: str, value_or_set: Value | tuple[Value, ...]) -> None:
        """Keep a value reported before the first config, in the encrypted state, until one arrives.

        Nothing is encoded, charged or sent yet; :meth:`_release_waiting`
        does all three with the time of this call when a config is verified.
        """
        overflow = hold(self._state.waiting, metric, value_or_set, self._clock(), self.options.max_waiting,
                        offset=self.server_clock.offset)
        if overflow < 0:
            return  # the same value of the metric is already waiting
        if overflow:
            self._event("dropped", None, f"{overflow} oldest value(s) waiting for a config dropped")
            self._notify(ReportsDropped(overflow, "too many values waiting for the first config; oldest dropped"))
        self._disk.dirty = True
        self._persist()
        log.debug("metric %s: value kept until the first config", metric)

    def _release_held(self) -> None:
        """At the background sender's turn: report the values held while the clock was unverified, once
        the server's time confirms it (never raises)."""
        with self._lock:
            if self._state.waiting and self._following.config is not None \
                    and not self.server_clock.suspect(self._clock()):
                self._release_waiting()

    def _release_waiting(self) -> int:
        """Report the values that waited for a config, each in the window of its own time.

        What the config makes impossible (an unknown metric, a set for a
        categorical metric, a second value in a window, the ceiling) is
        passed to ``on_error`` and dropped; it never raises.
        """
        waiting, self._state.waiting = self._state.waiting, []
        reported = 0
        offset = self.server_clock.offset
        for (metric, value, at), held in zip(released(waiting), waiting, strict=True):
            try:
                # the time it was given, as the server's clock has it now (its offset may have changed since)
                self._report_at(metric, value, at + offset - float(held.get("offset", offset)))
                reported += 1
            except OnesidedError as exc:
                self._event("refused", metric, f"a value that waited for the config: {exc}")
                self._notify(exc)
        if waiting:
            self._commit()
            log.info("%d of %d value(s) that waited for the config reported", reported, len(waiting))
        return reported

    def _reporting(self, metric: str, value_or_set: Value | tuple[Value, ...]) -> Reporting:
        """The metric's entry, record and report plan (made once per config, cohort and level); the kind checked.

        Raises what :meth:`Following.entry` and :meth:`_record` raise, and ``ParameterError`` (field
        ``value``) for a set given to a categorical metric.
        """
        cached = self._plans.get(metric)  # reused while its record and level are those it was made for
        if cached is not None and cached.record is self._state.metrics.get(metric) \
                and cached.plan.level == cached.record.levels[-1] and (
                    cached.record.irr is None or cached.record.irr == (cached.plan.params.irr_p, cached.plan.params.irr_q)):
            check_kind(cached.entry.params, value_or_set)
            return cached
        entry = self._following.entry(metric)
        check_kind(entry.params, value_or_set)
        seal_public = self._following.verified().aggregator.seal_public
        return self._reporter.made(self._state.secret, entry, self._record(entry), seal_public)

    def _dropped(self, detail: str) -> None:
        """The outbox dropped reports for good: a ledger event, also passed to ``on_event``."""
        self._event("dropped", None, detail)

    def relax(self, metric: str, level_to: float, round_id: int, *, irr: IrrPair | None = None) -> LedgerEntry:
        """Move the metric's memoized noise to ``level_to`` (the local part of a round), and its IRR to ``irr``.

        If the metric reported in the current window, that window's value is
        re-sent at ``level_to`` (its memoized noise relaxed by the lazy step)
        and charged as one more report of the window's chain; earlier windows
        are final. Later reports carry ``round_id``. Re-applying the same
        level (and IRR) is a no-op.

        ``irr``: ``(irr_p, irr_q)`` after the round (``None``: the IRR is kept;
        docs/irr-relaxation.md). It must be a relaxation of the IRR the metric
        reports with now; the level may then stay (the round rule,
        :meth:`protocol.chain.RoundStep.check`). The re-send's IRR is drawn
        from the window's last report by the relaxed step when that report is
        kept and the window is charged no more so than with a fresh IRR (a
        fresh IRR otherwise: :meth:`protocol.chain.WindowChain.after`), and
        the ledger charges the window's reports as drawn
        (:meth:`protocol.chain.WindowChain.cost`). Later windows report with ``irr``.

        Raises:
            TighteningRefused: ``level_to`` is below the current level.
            BudgetExceeded: the relaxation would pass the ceiling.
            ParameterError: bad ``round_id``, unknown metric, trusted mode, an ``irr`` that is not
                a relaxation of the current IRR (field ``irr``) or not one of the mode; the client
                is disabled or its state unavailable (field ``client``).
        """
        check_int("round_id", round_id, low=1, high=2**32 - 1)
        check_number("level_to", level_to, positive=True, high=MAX_LEVEL)
        if self._off is not None:
            raise ParameterError("client", f"nothing to relax: {self._off.reason}")
        self._reopen()
        with self._lock:
            entry = self._following.entry(metric)
            params = entry.params
            if not params.local_mechanism.relaxable:
                raise ParameterError("metric", f"{metric!r} is trusted: there is no noise to relax")
            record = self._record(entry)
            if record.settle(params, self._clock()):
                self._disk.dirty = True
            step = RoundStep.of(params, record.levels[-1], record.irrs[-1], float(level_to), irr)
            current = record.current
            try:
                step.check()
                after = record.window_chain().after(step, params,
                                                    sent_kept=current is not None and current.sent is not None)
                self._accountant.check_spend(metric, record, params, after)
            except RoundRepeats:
                return self._accountant.entry(metric, record)
            except OnesidedError as exc:
                self._event("refused", metric, str(exc))
                raise
            self._join(Joining(metric=metric, round_id=round_id, step=step, after=after))
            return self._accountant.entry(metric, record)

    def _join(self, join: Joining) -> None:
        """Apply a checked round step (:meth:`relax`, or a round :class:`Following` decided to join): the
        current window's value re-sent (``join.after``), the level and IRR moved, the event recorded."""
        metric, step, round_id = join.metric, join.step, join.round_id
        entry = self._following.entry(metric)
        params = entry.params
        record = self._state.metrics[metric]
        current, relaxed = record.current, join.relaxed
        irr = None if step.irr_to is None else Irr.of(step.irr_to)
        queued = self._reporter.resend(self._state.secret, entry, record, step.level_to, round_id,
                                     self._following.verified().aggregator.seal_public, irr=irr, relaxed=relaxed)
        record.levels.append(step.level_to)
        record.irrs.append(record.irrs[-1] if irr is None else irr)
        record.rounds.append(round_id)
        if queued is not None and current is not None:
            current.last_step = record.step
            current.report_id = queued.report_id
            current.sent = queued.sent if with_irr(params, record.irr).irr_q is not None else None
            if relaxed:
                current.relaxed.append(record.step)
            self._outbox.put(queued.item, queued.report_id)
        irr_text = "" if irr is None else \
            f", IRR {tuple(step.irr_from)} -> {tuple(irr)}{' (relaxed step)' if relaxed else ''}"
        self._event("relax", metric, f"level {step.level_from:.6g} -> {step.level_to:.6g}{irr_text} (round {round_id})")
        self._commit()
        log.info("metric %s relaxed to level %.6g for round %d", metric, step.level_to, round_id)

    # --- sending ----------------------------------------------------------------

    def flush(self, deadline: float | None = None) -> FlushResult:
        """Upload the queue in batches; never raises (errors go to ``on_error``).

        The state is saved before anything is sent (the ledger always covers
        what left the device). Delivered (``accepted`` or ``replayed``) and
        finally rejected reports leave the queue; on a network failure the
        rest stays for the next call. One call sends at most the reports
        queued when it starts.

        Args:
            deadline: seconds this call may take in all (``None``: one minute,
                :data:`FLUSH_DEADLINE`). No backoff or request runs past it; a
                request's timeout is capped by the time left, and an answer
                that drips in is cut at it.
        """
        if self._off is not None:
            return FlushResult()
        try:
            until = self._monotonic() + seconds("deadline", FLUSH_DEADLINE if deadline is None else deadline)
            self._reopen()
        except (OnesidedError, OSError) as exc:
            self._notify(exc)
            return FlushResult(remaining=len(self._queue), error=exc)
        result = self._sender.flush(until, wait=True)
        self._prepare()
        return result

    def start(self, interval: float = 5.0) -> None:
        """Flush in a background thread every ``interval`` seconds until :meth:`close`.

        Returns at once; a second call while the sender runs does nothing,
        a call after :meth:`close` (or after the thread died) starts a new
        one. Each turn syncs when due (:mod:`client_sdk.background`). Also
        registers the flush at interpreter exit (``exit_deadline``).
        """
        check_number("interval", interval, positive=True)
        if self._off is not None:
            return
        self._reopen()
        self._background.start(float(interval))

    @property
    def batch_size(self) -> int:
        """Reports per upload (halved by the sender on a ``413``)."""
        return self.options.batch_size if self._off is not None else self._sender.batch_size

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
        if self._off is not None:
            return FlushResult()
        until = self._monotonic() + (self.exit_deadline if deadline is None else seconds("deadline", deadline))
        self._sender.stop(until)
        self._background.unregister_exit()
        result = FlushResult(remaining=len(self._queue))
        if flush:
            self.transport.stop_by(until)
            result = self._sender.flush(until, wait=True)
        try:
            with self._lock:
                self._disk.save()
        except OSError as exc:  # what was not written is lost with the process: unsent, never charged twice
            self._disk_error(exc)
        self._file_lock.release()
        self.transport.close()
        if result.remaining:
            log.info("closed with %d report(s) still queued; they are sent by the next run", result.remaining)
        return result

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- ledger -------------------------------------------------------------------

    def ledger(self) -> Ledger:
        """Per metric: levels released, exact cost, ceiling, remaining; plus events and drops."""
        if self._off is not None:
            return Ledger(entries=(), events=(), dropped_reports=0, queued_reports=0, unused=())
        with self._lock:
            return self._accountant.ledger(self._following.config)

    def budget(self, metric: str) -> Budget:
        """What is left of ``metric``'s privacy budget, and when it renews.

        Raises:
            KeyError: ``metric`` is neither used nor in the verified config.
        """
        if self._off is not None:
            raise KeyError(metric)
        with self._lock:
            return self._accountant.remaining(metric, self._following.config)

    def _event(self, kind: str, metric: str | None, detail: str) -> None:
        """A ledger event (kept in the state), also passed to ``on_event``."""
        self._disk.event(kind, metric, detail)
        self._emit(kind, detail, metric=metric, log_it=False)

    def _notify(self, error: Exception, *, metric: str | None = None) -> None:
        """An error the app does not see raised: logged, to ``on_error`` and (as an event) ``on_event``."""
        self._emit(getattr(error, "code", None) or type(error).__name__, f"{type(error).__name__}: {error}",
                   metric=metric, error=error, level=logging.WARNING)
        if self._on_error is None:
            return
        try:
            self._on_error(error)
        except Exception:  # a faulty callback must not break sending
            log.exception("on_error callback raised")

    def _emit(self, kind: str, detail: str, *, metric: str | None = None, error: Exception | None = None,
              level: int = logging.INFO, log_it: bool = True) -> None:
        """One event: a line in the ``onesided`` log, and the app's ``on_event`` (never raises)."""
        if log_it:
            log.log(level, "%s%s: %s", kind, f" ({metric})" if metric else "", detail)
        if self._on_event is None:
            return
        clock = getattr(self, "_clock", None)
        at = iso_utc(clock() if clock is not None else self.options.clock())
        try:
            self._on_event(ClientEvent(kind, detail, metric, at, error))
        except Exception:  # a faulty callback must not break the client
            log.exception("on_event callback raised")

    def _clock_off(self, offset: float) -> None:
        """The server's answers show the device clock off by ``offset`` seconds (or back within bounds)."""
        if abs(offset) <= OFF_THRESHOLD:
            self._emit("clock_ok", "the device clock agrees with the server's again")
            return
        way = "behind" if offset > 0 else "ahead of"
        self._emit("clock_off", f"the device clock is {abs(offset):.0f} s {way} the server's "
                   f"(server time {iso_utc(self.options.clock() + offset)}); windows follow the server's time",
                   level=logging.WARNING)


__all__ = ["FLUSH_DEADLINE", "AlreadyReported", "ClientOptions", "ClockBehind", "Client", "FlushResult",
           "ReportsDropped", "pinned_keys"]
