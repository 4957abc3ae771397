"""Following the server: its signed config verified against the pinned keys, its rounds joined within the ceiling.

:class:`Following` holds a client's pinned Ed25519 keys and the app's
consent to rounds. It verifies a config document, decides whether a
fetched config replaces the kept one (``issued_at`` is the serial: an
older one is refused), records a metric whose parameters changed, and
applies the latest open round of each metric the client reports
(docs/client.md, rounds) through the client's own ``relax()``, so the
ledger's rules stay in one place.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any, Protocol, cast

from protocol.errors import OnesidedError, ParameterError, ReportRejected, SignatureError
from protocol.params import MetricParams
from protocol.wire import ConfigPayload, MetricEntry, RoundAnnouncement, verify_config

from .ledger import MetricRecord, check_relaxation
from .spending import Spending
from .storage import Storage

log = logging.getLogger("onesided.client")


class FollowingHost(Protocol):
    """What joining a round uses of the client: the ledger's rules."""

    def relax(self, metric: str, level_to: float, round_id: int) -> object: ...
    def _settle(self, record: MetricRecord, params: MetricParams) -> None: ...
    def _commit(self) -> None: ...


class Following:
    """Config verification and round joining for one client.

    Args:
        host: the client (:class:`FollowingHost`), held weakly.
        keys: the pinned Ed25519 public keys by key id.
        accept_round: the app's consent to a round (``None``: every round the ceiling allows).
        disk, spending, clock: the client's open state, budget arithmetic and wall time.
    """

    def __init__(self, host: FollowingHost, keys: dict[str, bytes],
                 accept_round: Callable[[RoundAnnouncement], bool] | None, *, disk: Storage, spending: Spending,
                 clock: Callable[[], float]) -> None:
        self._host = cast(FollowingHost, weakref.proxy(host))
        self._keys = keys
        self._accept_round = accept_round
        self._disk = disk
        self._spending = spending
        self._clock = clock
        self.config: ConfigPayload | None = None  # the last verified config

    def verify(self, document: Any) -> ConfigPayload:
        """The config of a signed document, if one of the pinned keys signed it.

        Raises:
            SignatureError: unsigned, signed by another key, or tampered.
            ReportRejected: a malformed payload (field by path).
        """
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

    def load(self) -> None:
        """Take the config kept in the (just opened) state, if it still verifies."""
        document = self._disk.state.config
        self.config = None
        if document is None:
            return
        try:
            self.config = self.verify(document)
        except ReportRejected as exc:
            log.warning("stored config no longer verifies (%s); call sync()", exc.field)

    def verified(self) -> ConfigPayload:
        """The kept config.

        Raises:
            ParameterError: none yet.
        """
        if self.config is None:
            raise ParameterError("metric", "no verified config yet: call sync() first")
        return self.config

    def entry(self, metric: str) -> MetricEntry:
        """``metric``'s entry in the kept config.

        Raises:
            ParameterError: no config yet, or not a metric of it.
        """
        entry = self.verified().metric(metric)
        if entry is None:
            raise ParameterError("metric", f"{metric!r} is not a metric of the signed config")
        return entry

    def adopt(self, document: dict[str, Any], config: ConfigPayload) -> bool:
        """Keep a freshly verified config, unless it is older than the kept one (then ``False``).

        ``issued_at`` (the signing time) is the config's serial: an older
        config (a replayed or stale signed document) is refused, with a
        ``stale_config`` event recorded once. A kept config records a
        ``params_changed`` event (once) for each metric this client reports
        whose parameters it changed.
        """
        kept = self.config
        if kept is not None and config.issued_at < kept.issued_at:
            detail = f"config issued at {config.issued_at} is older than the kept one ({kept.issued_at}); kept"
            if not any(e.kind == "stale_config" and e.detail == detail for e in self._disk.state.events):
                self._disk.event("stale_config", None, detail)
                self._host._commit()
            log.warning("refused a config older than the kept one (issued %d < %d)", config.issued_at,
                        kept.issued_at)
            return False
        self._disk.state.config = document
        self.config = config
        for name, record in self._disk.state.metrics.items():
            entry = config.metric(name)
            if entry is not None and entry.digest != record.digest:
                detail = f"parameters changed to digest {entry.digest[:16]}; reports of the metric are refused"
                if not any(e.metric == name and e.detail == detail for e in self._disk.state.events):
                    self._disk.event("params_changed", name, detail)
        return True

    def apply_rounds(self, config: ConfigPayload) -> int:
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
            record = self._disk.state.metrics.get(name)
            if record is None or record.round >= announcement.round_id:
                continue
            reason = self._refusal(announcement, record)
            if reason is None:
                self._host.relax(name, announcement.level_to, announcement.round_id)
                applied += 1
                continue
            detail = f"round {announcement.round_id}: {reason}"
            if not any(e.metric == name and e.detail == detail for e in self._disk.state.events):
                self._disk.event("round_refused", name, detail)
                self._host._commit()
            log.info("round %d of metric %s not applied: %s", announcement.round_id, name, reason)
        return applied

    def _refusal(self, announcement: RoundAnnouncement, record: MetricRecord) -> str | None:
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
        self._host._settle(record, record.metric_params())
        try:  # the check relax() makes, asked first so a refusal is recorded once, as a round refusal
            check_relaxation(record, record.metric_params(), announcement.level_to,
                             self._spending.ceiling.for_metric(announcement.metric),
                             self._spending.relax_prior(announcement.metric, record))
        except OnesidedError as exc:
            return str(exc)
        return None


__all__ = ["Following", "FollowingHost"]
