"""Following the server: its signed config verified against the pinned keys, its rounds joined within the ceiling.

:class:`Following` holds a client's pinned Ed25519 keys and the app's
consent to rounds. It verifies a config document (with a pinned key or one
learned from a signing-key rotation announced in a verified config,
docs/client.md, keys), decides whether a
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

from protocol.crypto import key_id
from protocol.errors import OnesidedError, ParameterError, ReportRejected, SignatureError
from protocol.params import MetricParams
from protocol.wire import ConfigPayload, MetricEntry, RoundAnnouncement, verify_config

from .ledger import Irr, MetricRecord, check_relaxation
from .spending import Spending
from .storage import Storage

log = logging.getLogger("onesided.client")


def resend_relaxed(record: MetricRecord, params: MetricParams, level_to: float, irr: Irr | None) -> bool:
    """Whether a round's re-send is drawn from the window's kept report by the relaxed IRR step (else a fresh IRR).

    Relaxed when the round sets an IRR, the window's last report is kept, and the window is charged no more so
    than with a fresh IRR. When the same round raises the level far, the relaxed chain can cost more than a
    fresh report (symmetric, level 1 -> 5: 1.283063 against 1.243596), and past
    :data:`~client_sdk.ledger.MAX_EXACT_REPORT_CHAIN` reports only bounds are at hand; the choice depends on
    public parameters only (levels, IRRs, what was kept), never on the value (docs/irr-relaxation.md, "Ledger").
    """
    current = record.current
    if irr is None or current is None or current.sent is None:
        return False
    levels, irrs, flags = record.window_chain()
    chain = (*levels, float(level_to)), (*irrs, (irr[0], irr[1]))
    relaxed, fresh = (record.window_cost(params, (*chain, (*flags, flag)))[0] for flag in (True, False))
    return relaxed <= fresh


class FollowingHost(Protocol):
    """What joining a round uses of the client: the ledger's rules."""

    def relax(self, metric: str, level_to: float, round_id: int, *,
              irr: tuple[float | None, float | None] | None = None) -> object: ...
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
        self._keys = dict(keys)  # the app's pins: always trusted
        self._accept_round = accept_round
        self._disk = disk
        self._spending = spending
        self._clock = clock
        self.config: ConfigPayload | None = None  # the last verified config

    def trusted_keys(self) -> dict[str, bytes]:
        """The keys a config may be signed with, by key id: the app's pins and the learned keys."""
        return {**self._disk.state.learned_sign_keys, **self._keys}

    def verify(self, document: Any) -> ConfigPayload:
        """The config of a signed document, if a trusted key (pinned, or learned) signed it.

        Nothing is learned here: an announced next key is trusted only when
        the verified config is kept (:meth:`adopt`).

        Raises:
            SignatureError: unsigned, signed by another key, or tampered.
            ReportRejected: a malformed payload (field by path).
        """
        if not isinstance(document, dict) or "signature" not in document or "key_id" not in document:
            raise SignatureError("signature", "the config is not a signed document")
        seen = document["key_id"]
        trusted = self.trusted_keys()
        public = trusted.get(seen) if isinstance(seen, str) else None
        if public is None:
            raise SignatureError("key_id", self._untrusted(str(seen)[:64], trusted))
        return verify_config(document, sign_public=public)

    def _untrusted(self, seen: str, trusted: dict[str, bytes]) -> str:
        """Why a config signed by key id ``seen`` is refused, and what to do about it."""
        ids = ", ".join(sorted(trusted))
        if self.config is None:
            return (f"the config is signed by key id {seen!r}, not by a pinned key (pinned key ids: {ids}); pin "
                    "the aggregator's sign_public, printed by `onesided keys show` on the aggregator")
        return (f"the config is signed by key id {seen!r}, which this client does not trust (trusted key ids: "
                f"{ids}); if the aggregator switched signing keys (`onesided keys rotate --sign`) while this client "
                "did not sync, it missed the announcement of the new key: update the app to pin the aggregator's "
                "current sign_public, printed by `onesided keys show` on the aggregator")

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
        self._follow_rotation(config)
        for name, record in self._disk.state.metrics.items():
            entry = config.metric(name)
            if entry is not None and entry.digest != record.digest:
                detail = f"parameters changed to digest {entry.digest[:16]}; reports of the metric are refused"
                if not any(e.metric == name and e.detail == detail for e in self._disk.state.events):
                    self._disk.event("params_changed", name, detail)
        return True

    def _follow_rotation(self, config: ConfigPayload) -> None:
        """Trust the signing key a kept config announces; forget learned keys it no longer names.

        ``config`` verified with a trusted key and is the newest seen, so its
        ``aggregator.next_sign_public`` is the operator's word. Learned keys
        other than the config's signer and its announced next key are dropped
        (a finished or withdrawn rotation); the app's pins are never dropped.
        """
        learned = self._disk.state.learned_sign_keys
        signer = key_id(config.aggregator.sign_public)
        announced = config.aggregator.next_sign_public
        kept = {kid: raw for kid, raw in learned.items() if kid == signer}
        if announced is not None and key_id(announced) not in self._keys:
            kept[key_id(announced)] = announced
        if kept == learned:
            return
        for kid in sorted(kept.keys() - learned.keys()):
            self._disk.event("sign_key_learned", None, f"trusting signing key id {kid}, announced by key id {signer}")
            log.info("trusting signing key id %s, announced in a config signed by key id %s", kid, signer)
        for kid in sorted(learned.keys() - kept.keys()):
            self._disk.event("sign_key_dropped", None, f"signing key id {kid} no longer announced by key id {signer}")
            log.info("no longer trusting learned signing key id %s", kid)
        self._disk.state.learned_sign_keys = kept

    def apply_rounds(self, config: ConfigPayload) -> int:
        """Apply the latest open round of each metric this client reports (docs/client.md, rounds).

        The announcements were verified with the config (pinned Ed25519 key).
        A round is applied when it is for this metric's parameters and this
        client's cohort, unexpired, raises the level (or keeps it and relaxes
        the IRR), its IRR (if any) relaxes the one this client reports with,
        the app consents and the ledger ceiling allows it; otherwise it is
        skipped with its reason in the ledger events and nothing is sent. A
        client that missed rounds jumps straight to the latest level (one lazy
        step, Markov property) and IRR (a chain of relaxations is one).
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
                self._host.relax(name, announcement.level_to, announcement.round_id, irr=announcement.irr)
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
        params = record.metric_params()
        held = record.current_irr(params)
        if announcement.irr is not None:
            try:  # signed or not, an IRR that does not relax what this client sent is never followed
                announcement.check_irr(params, held)
            except ReportRejected as exc:
                return f"its IRR is refused ({exc.field}): {exc.reason}"
        relaxes_irr = announcement.irr is not None and announcement.irr != held
        if not (announcement.level_to > record.levels[-1]
                or (relaxes_irr and announcement.level_to == record.levels[-1])):
            return f"does not raise the level ({record.levels[-1]:.6g} -> {announcement.level_to:.6g})"
        if self._accept_round is not None and not self._accept_round(announcement):
            return "declined by the app"
        self._host._settle(record, params)
        try:  # the check relax() makes, asked first so a refusal is recorded once, as a round refusal
            check_relaxation(record, params, announcement.level_to,
                             self._spending.ceiling.for_metric(announcement.metric),
                             self._spending.relax_prior(announcement.metric, record), irr=announcement.irr,
                             relaxed=resend_relaxed(record, params, announcement.level_to, announcement.irr))
        except OnesidedError as exc:
            return str(exc)
        return None


__all__ = ["Following", "FollowingHost", "resend_relaxed"]
