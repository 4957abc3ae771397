"""Noticing a wrong server clock from the reports it receives, and the clock answers of wire version 2.

Devices' clocks disagree with the server's now and then; when *most*
reports are refused by the clock (``expired`` or ``too_early``), the odd
one out is the server. :class:`ClockWatch` keeps the clock verdicts of the
last :data:`WATCH_SECONDS` (per worker process) and suspects the server's
clock when at least :data:`MIN_REPORTS` reports were judged and more than
half were refused by it. A suspicion shows in ``/v1/health`` (problem
``clock``, status ``degraded``), ``/v1/readyz`` (503), ``/metrics``
(``onesided_clock_suspect``) and one log line when it starts (one more
when it ends). It fades when the evidence is older than the watch period,
so an instance taken out of a load balancer for it is tried again.

:func:`clock_answers` adds ``retry_after`` to clock-refused results for
clients that send ``Onesided-Wire: 2`` (docs/wire.md 7.4): on every
``too_early`` (the seconds until the window is accepted, at most an hour
while the clock is suspect) and on ``expired`` while the clock is suspect.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from aggregator.server.monitoring import CLOCK_SUSPECT
from protocol.wire import (
    MAX_RETRY_AFTER,
    STATUS_ACCEPTED,
    STATUS_EXPIRED,
    STATUS_REPLAYED,
    STATUS_TOO_EARLY,
    ReportEnvelope,
    ReportResult,
)

log = logging.getLogger(__name__)
WATCH_SECONDS = 600.0  # evidence older than this is forgotten
MIN_REPORTS = 50  # judged reports needed before the server's clock is suspected
SUSPECT_RETRY_AFTER = 3600  # the wait asked for while the server's own clock is suspect
_JUDGED = frozenset({STATUS_ACCEPTED, STATUS_REPLAYED, STATUS_EXPIRED, STATUS_TOO_EARLY})


class ClockWatch:
    """The clock verdicts of recent reports; thread-safe. ``now`` is injectable (monotonic seconds)."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._lock = threading.Lock()
        self._batches: deque[tuple[float, int, int, int]] = deque()  # (when, judged, expired, too_early)
        self._totals = [0, 0, 0]  # judged, expired, too_early over the batches held: kept, never summed again
        self._suspect: str | None = None

    def observe(self, statuses: Sequence[str]) -> None:
        """Count one batch's per-report statuses (those the clock judged at all)."""
        judged = sum(1 for s in statuses if s in _JUDGED)
        if not judged:
            return
        batch = (self._now(), judged, statuses.count(STATUS_EXPIRED), statuses.count(STATUS_TOO_EARLY))
        with self._lock:
            self._batches.append(batch)
            totals = self._totals
            totals[0] += batch[1]
            totals[1] += batch[2]
            totals[2] += batch[3]
            self._update()

    def suspicion(self) -> str | None:
        """Why the server's clock is suspect (one sentence), or ``None``."""
        with self._lock:
            self._update()
            return self._suspect

    def _update(self) -> None:
        # constant work a request: a busy server holds tens of thousands of batches in the window
        horizon = self._now() - WATCH_SECONDS
        totals = self._totals
        while self._batches and self._batches[0][0] < horizon:
            _, judged_then, expired_then, early_then = self._batches.popleft()
            totals[0] -= judged_then
            totals[1] -= expired_then
            totals[2] -= early_then
        judged, expired, early = totals
        suspect = None
        if judged >= MIN_REPORTS and 2 * (expired + early) > judged:
            direction = "ahead" if expired >= early else "behind"
            suspect = (f"{expired + early} of the last {judged} reports were refused by the server's clock "
                       f"({expired} expired, {early} too early): is it {direction}? check NTP")
        if (suspect is None) != (self._suspect is None):
            if suspect is not None:
                log.error("clock_suspect: %s", suspect)
            else:
                log.warning("clock_suspect ended: reports agree with the server's clock again")
            CLOCK_SUSPECT.set(0 if suspect is None else 1)
        self._suspect = suspect


def clock_answers(
    results: Sequence[ReportResult], envelopes: Sequence[ReportEnvelope], *, now: float, clock_skew_seconds: int,
    suspect: bool,
) -> list[ReportResult]:
    """``results`` with ``retry_after`` on the clock-refused ones (results and envelopes in batch order)."""
    answered = []
    for result, envelope in zip(results, envelopes, strict=True):
        wait: int | None = None
        if result.status == STATUS_TOO_EARLY:
            wait = int(envelope.window - clock_skew_seconds - now) + 1  # accepted once window <= now + skew
            wait = min(max(wait, 1), SUSPECT_RETRY_AFTER if suspect else MAX_RETRY_AFTER)
        elif result.status == STATUS_EXPIRED and suspect:
            wait = SUSPECT_RETRY_AFTER
        answered.append(result if wait is None else dataclasses.replace(result, retry_after=wait))
    return answered
