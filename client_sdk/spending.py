"""What a client has spent and has left: the ceiling, the charges of lost states, the low-budget warning.

:class:`Spending` answers the questions the client's ledger rules ask
(:func:`~client_sdk.ledger.check_new_window`,
:func:`~client_sdk.ledger.check_relaxation` take a ``prior``: what a lost
state may have spent, charged in full) and builds the ledger an app reads
(:meth:`Spending.ledger`, :class:`~client_sdk.ledger.Budget`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from protocol.wire import ConfigPayload

from .ledger import (
    Ceiling,
    Ledger,
    LedgerEntry,
    MetricRecord,
    ledger_entry,
    period_of,
    unused_entry,
)
from .status import epsilon_text, iso_utc
from .storage import Storage

log = logging.getLogger("onesided.client")


class Spending:
    """The budget arithmetic of one client's open state.

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
        """Lost-state charges of ``metric``: all of them, or (renewing budget) those of the period holding ``when``."""
        lost = self._disk.state.lost
        if not lost:
            return 0.0
        period = self.ceiling.period
        return sum(
            Ceiling.from_dict(entry["ceiling"]).for_metric(metric) for entry in lost
            if when is None or period is None or period_of(float(entry["at"]), period) == period_of(when, period)
        )

    def period_prior(self, metric: str, record: MetricRecord | None, when: float) -> float:
        """The ``prior`` a ceiling check takes: per period (renewing budget) or for the lifetime."""
        if record is not None and record.period is not None:
            return self.prior(metric, when)
        return self.prior(metric)

    def relax_prior(self, metric: str, record: MetricRecord) -> float:
        """The ``prior`` of a relaxation's check: that of the current window's period (renewing budget)."""
        when = record.current.window if record.current is not None else self._clock()
        return self.period_prior(metric, record, when)

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
        return ledger_entry(record, record.metric_params(), self.ceiling.for_metric(metric), self.prior(metric),
                            now=now, period_prior=self.period_prior(metric, record, now))

    def ledger(self, config: ConfigPayload | None) -> Ledger:
        """Per metric: levels released, exact cost, ceiling, remaining; plus events and drops."""
        state = self._disk.state
        now, period = self._clock(), self.ceiling.period
        unused = () if config is None else tuple(
            unused_entry(e.params, self.ceiling.for_metric(e.params.name), self.prior(e.params.name),
                         period=period, now=now, period_prior=self.prior(e.params.name, now))
            for e in config.metrics if e.params.name not in state.metrics
        )
        return Ledger(
            entries=tuple(self.entry(m, r) for m, r in sorted(state.metrics.items())),
            events=tuple(state.events),
            dropped_reports=state.dropped,
            queued_reports=len(self._disk.queue),
            unused=unused,
        )


__all__ = ["Spending"]
