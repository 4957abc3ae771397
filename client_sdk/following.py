"""Following the server: its signed config verified against the pinned keys, its rounds joined within the ceiling.

:class:`Following` holds a client's pinned Ed25519 keys and the app's
consent to rounds. It verifies a config document (with a pinned key or one
learned from a signing-key rotation announced in a verified config,
docs/client.md, keys), decides whether a
fetched config replaces the kept one (``issued_at`` is the serial: an
older one is refused), records a metric whose parameters changed, and
decides on the latest open round of each metric the client reports
(docs/client.md, rounds): :meth:`Following.decide_rounds` checks each once
(:meth:`protocol.chain.RoundStep.check`, the app's consent, the
accountant's ceiling) and returns the rounds to join, which the client
applies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from protocol.chain import RoundRepeats, RoundStep, WindowChain
from protocol.crypto import key_id
from protocol.errors import (
    OnesidedError,
    ParameterError,
    ReportRejected,
    SignatureError,
    TighteningRefused,
)
from protocol.wire import ConfigPayload, MetricEntry, RoundAnnouncement, verify_config

from .ledger import MetricRecord
from .spending import Accountant
from .storage import Storage

log = logging.getLogger("onesided.client")


@dataclass(frozen=True, kw_only=True)
class Joining:
    """A round this client joins, checked once (:meth:`Following.decide_rounds`): the client applies it.

    Attributes:
        metric, round_id: the round.
        step: its checked step.
        after: the metric's current window chain once the round re-sends the window's value
            (its last flag: the re-send drawn by the relaxed IRR step; no window: one report, unused).
    """

    metric: str
    round_id: int
    step: RoundStep
    after: WindowChain

    @property
    def relaxed(self) -> bool:
        """The re-send is drawn from the window's last report by the relaxed IRR step."""
        return bool(self.after.relaxed) and self.after.relaxed[-1]


class Following:
    """Config verification and round joining for one client.

    Args:
        keys: the pinned Ed25519 public keys by key id.
        accept_round: the app's consent to a round (``None``: every round the ceiling allows).
        disk, accountant, clock: the client's open state, its accountant and wall time.
    """

    def __init__(self, keys: dict[str, bytes], accept_round: Callable[[RoundAnnouncement], bool] | None, *,
                 disk: Storage, accountant: Accountant, clock: Callable[[], float]) -> None:
        self._keys = dict(keys)  # the app's pins: always trusted
        self._accept_round = accept_round
        self._disk = disk
        self._accountant = accountant
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
        ``stale_config`` event recorded once (the caller writes it). A kept config records a
        ``params_changed`` event (once) for each metric this client reports
        whose parameters it changed.
        """
        kept = self.config
        if kept is not None and config.issued_at < kept.issued_at:
            detail = f"config issued at {config.issued_at} is older than the kept one ({kept.issued_at}); kept"
            if not any(e.kind == "stale_config" and e.detail == detail for e in self._disk.state.events):
                self._disk.event("stale_config", None, detail)
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

    def decide_rounds(self, config: ConfigPayload) -> list[Joining]:
        """The latest open round of each metric this client reports that it joins (docs/client.md, rounds).

        The announcements were verified with the config (pinned Ed25519 key).
        A round is joined when it is for this metric's parameters and this
        client's cohort, unexpired, passes the round rule
        (:meth:`~protocol.chain.RoundStep.check`: it raises the level, or
        keeps it and relaxes the IRR this client reports with), the app
        consents and the ceiling allows it; otherwise it is skipped with its
        reason in the ledger events (the caller writes them) and nothing is
        sent. A client that missed rounds jumps straight to the latest level
        (one lazy step, Markov property) and IRR (a chain of relaxations is one).
        """
        latest: dict[str, RoundAnnouncement] = {}
        for announcement in config.rounds:
            held = latest.get(announcement.metric)
            if held is None or announcement.round_id > held.round_id:
                latest[announcement.metric] = announcement
        joining: list[Joining] = []
        for name, announcement in sorted(latest.items()):
            record = self._disk.state.metrics.get(name)
            if record is None or record.round >= announcement.round_id:
                continue
            decision = self._decide(config, announcement, record)
            if isinstance(decision, Joining):
                joining.append(decision)
                continue
            detail = f"round {announcement.round_id}: {decision}"
            if not any(e.metric == name and e.detail == detail for e in self._disk.state.events):
                self._disk.event("round_refused", name, detail)
            log.info("round %d of metric %s not applied: %s", announcement.round_id, name, decision)
        return joining

    def _decide(self, config: ConfigPayload, announcement: RoundAnnouncement, record: MetricRecord) -> Joining | str:
        """The round to join, or why this client does not take part in it."""
        if announcement.params_digest != record.digest:
            return "announced for other parameters than this client's"
        entry = config.metric(announcement.metric)
        if entry is None or entry.digest != record.digest:
            return "the metric's parameters changed since this client first reported it"
        if announcement.expires_at <= self._clock():
            return "expired"
        if announcement.cohorts is not None and record.cohort not in announcement.cohorts:
            return "not for this client's cohort"
        params = record.metric_params()
        if not params.local_mechanism.relaxable:
            return "the metric is trusted: there is no noise to relax"
        step = RoundStep.of(params, record.levels[-1], record.irrs[-1], announcement.level_to, announcement.irr)
        try:  # signed or not, a round that breaks the rule is never followed
            step.check()
        except (TighteningRefused, RoundRepeats):
            return f"does not raise the level ({record.levels[-1]:.6g} -> {announcement.level_to:.6g})"
        except ParameterError as exc:
            return f"its IRR is refused ({exc.field}): {exc.detail}"
        if self._accept_round is not None and not self._accept_round(announcement):
            return "declined by the app"
        if record.settle(params, self._clock()):
            self._disk.dirty = True
        current = record.current
        after = record.window_chain().after(step, params, sent_kept=current is not None and current.sent is not None)
        try:
            self._accountant.check_spend(announcement.metric, record, params, after)
        except OnesidedError as exc:
            return str(exc)
        return Joining(metric=announcement.metric, round_id=announcement.round_id, step=step, after=after)


__all__ = ["Following", "Joining"]
