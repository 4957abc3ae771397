"""What a client has spent and has left: the ceiling, the charges of lost states, the low-budget warning.

A lost state's charge comes from its high-water mark (:mod:`client_sdk.highwater`): its exact
lifetime total and per-period charge where a mark survived; otherwise an infinite lifetime total
(``total_unknown_since``) and the whole ceiling charged to the period the loss was found in.

:class:`Accountant` is the client's accountant: :meth:`~Accountant.check_spend`
refuses a report or a round's re-send that would pass the ceiling (the ceiling and
the lost-state ``prior`` are its own business, never the caller's),
:meth:`~Accountant.spend` records a new window's release, :meth:`~Accountant.remaining`
answers what is left of a metric's budget, and :meth:`~Accountant.ledger` builds the
ledger an app reads.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from protocol.chain import WindowChain
from protocol.params import MetricParams
from protocol.rounding import epsilon_text
from protocol.wire import ConfigPayload, MetricEntry

from .highwater import lifetime_prior, period_prior, unknown_since
from .ledger import (
    Budget,
    Ceiling,
    Ledger,
    LedgerEntry,
    MetricRecord,
    WindowRelease,
    check_new_window,
    check_relaxation,
    ledger_entry,
    period_of,
    unused_entry,
)
from .status import iso_utc
from .storage import Storage

log = logging.getLogger("onesided.client")


class Accountant:
    """The privacy accountant of one client's open state.

    Args:
        ceiling: the budget policy (lifetime or renewing).
        warning: log once per metric and period when less than this fraction of the ceiling is left.
        disk: the open state (its lost-state charges, its records).
        clock: wall time.
    """

    def __init__(self, ceiling: Ceiling, warning: float, disk: Storage, clock: Callable[[], float]) -> None:
        self.ceiling = ceiling
        self.warning = warning
        self._disk = disk
        self._clock = clock
        self._warned: set[tuple[str, int]] = set()

    def prior(self, metric: str, when: float | None = None) -> float:
        """What lost states spent on ``metric``: over their lifetime (``inf``: unknown), or (renewing
        budget) in the period holding ``when`` (:mod:`client_sdk.highwater`)."""
        lost, period = self._disk.state.lost, self.ceiling.period
        if when is None or period is None:
            return lifetime_prior(lost, metric)
        return period_prior(lost, metric, period_of(when, period), period)

    def period_prior(self, metric: str, record: MetricRecord | None, when: float) -> float:
        """The ``prior`` a ceiling check takes: per period (renewing budget: of the period ``when`` lies
        in, to which a window starting then is charged) or for the lifetime."""
        if record is not None and record.period is not None:
            return self.prior(metric, when)
        return self.prior(metric)

    def relax_prior(self, metric: str, record: MetricRecord) -> float:
        """The ``prior`` of a relaxation's check: that of the current window's period (renewing budget)."""
        when = record.current.window if record.current is not None else self._clock()
        return self.period_prior(metric, record, when)

    def check_spend(self, metric: str, record: MetricRecord, params: MetricParams, spend: int | WindowChain) -> float:
        """Refuse a spend that would pass ``metric``'s ceiling; nothing is recorded.

        ``spend``: the start of a new window (a report in it,
        :func:`~client_sdk.ledger.check_new_window`), or the current window's
        chain after a round's re-send (:meth:`protocol.chain.WindowChain.after`,
        :func:`~client_sdk.ledger.check_relaxation`).

        Returns:
            What the ceiling is compared with after the spend (the lifetime total, or the period's).

        Raises:
            BudgetExceeded: the spend would pass the ceiling.
        """
        ceiling = self.ceiling.for_metric(metric)
        if isinstance(spend, WindowChain):
            return check_relaxation(record, params, spend, ceiling, self.relax_prior(metric, record))
        if record.period is None:  # report()'s usual path: the lifetime prior (0 without a lost state)
            lost = self._disk.state.lost
            prior = lifetime_prior(lost, metric) if lost else 0.0
        else:
            prior = self.prior(metric, spend)
        return check_new_window(record, params, ceiling, prior, window=spend)

    def spend(self, metric: str, record: MetricRecord, params: MetricParams, release: WindowRelease,
              after: float) -> None:
        """Record a new window's release (checked by :meth:`check_spend`, which returned ``after``): the
        window before it closed into the record's sums, a warning logged when little is left."""
        record.close_window(params)
        record.current = release
        if record.first_window is None:
            record.first_window = release.window
        self._disk.dirty = True
        ceiling = self.ceiling.for_metric(metric)
        if ceiling - after < self.warning * ceiling:
            self.warn_low(metric, record, ceiling - after, ceiling, release.window)

    def remaining(self, metric: str, config: ConfigPayload | None) -> Budget:
        """What is left of ``metric``'s budget, and when it renews.

        Raises:
            KeyError: ``metric`` is neither used nor in ``config``.
        """
        record = self._disk.state.metrics.get(metric)
        if record is not None:
            return Budget.of(self.entry(metric, record))
        entry = None if config is None else config.metric(metric)
        if entry is None:
            raise KeyError(metric)
        return Budget.of(self._unused(entry, self._clock()))

    def warn_low(self, metric: str, record: MetricRecord, left: float, ceiling: float, when: float) -> None:
        """Log once per metric and period: what is left fell below ``warning`` of the ceiling."""
        period = record.period
        start = 0 if period is None else period_of(when, period)
        if (metric, start) in self._warned:
            return
        self._warned.add((metric, start))
        renews = "" if period is None else f"; it renews at {iso_utc(start + period)}"
        log.warning("metric %s: %.6g of its privacy budget of %s left%s", metric, max(0.0, left), epsilon_text(ceiling),
                    renews)

    def entry(self, metric: str, record: MetricRecord) -> LedgerEntry:
        """The ledger line of a metric this client reported."""
        now = self._clock()
        entry = ledger_entry(record, record.metric_params(), self.ceiling.for_metric(metric), self.prior(metric),
                             now=now, period_prior=self.period_prior(metric, record, now))
        return self._unknown(entry)

    def _unknown(self, entry: LedgerEntry) -> LedgerEntry:
        """``entry`` marked ``total unknown since <date>`` when a lost state left no high-water mark."""
        since = unknown_since(self._disk.state.lost)
        return entry if since is None else dataclasses.replace(entry, total_unknown_since=since)

    def _unused(self, entry: MetricEntry, now: float) -> LedgerEntry:
        """The ledger line of a metric of the config this client has not reported yet."""
        name = entry.params.name
        return self._unknown(unused_entry(entry.params, self.ceiling.for_metric(name), self.prior(name),
                                          period=self.ceiling.period, now=now, period_prior=self.prior(name, now)))

    def ledger(self, config: ConfigPayload | None) -> Ledger:
        """Per metric: levels released, exact cost, ceiling, remaining; plus events and drops."""
        state = self._disk.state
        now = self._clock()
        unused = () if config is None else tuple(
            self._unused(e, now) for e in config.metrics if e.params.name not in state.metrics)
        return Ledger(
            entries=tuple(self.entry(m, r) for m, r in sorted(state.metrics.items())),
            events=tuple(state.events),
            dropped_reports=state.dropped,
            queued_reports=len(self._disk.queue),
            unused=unused,
        )


__all__ = ["Accountant"]
