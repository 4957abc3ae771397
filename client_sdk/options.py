"""``ClientOptions``: a :class:`~client_sdk.Client`'s settings, validated once, in one place.

The client's constructor keywords are these fields; ``Client(url, path,
options=ClientOptions(...))`` is the same as passing them one by one. Bad
values raise :class:`~protocol.errors.ParameterError` naming the keyword at
construction; after that nothing re-checks them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.crypto import b64d, key_id
from protocol.errors import ParameterError, ReportRejected
from protocol.rng import RandomSource, SecureRandom, as_rng
from protocol.validation import check_int, check_number
from protocol.wire import RoundAnnouncement

from .ledger import Ceiling
from .sender import CLOCK_RETRY_CAP
from .status import ClientEvent
from .transport import MAX_CONFIG_BYTES, MAX_RESPONSE_BYTES, RetryPolicy

OnError = Callable[[Exception], None]
OnEvent = Callable[[ClientEvent], None]
CORRUPT_POLICIES = ("raise", "reset")
BUDGET_REFUSALS = ("raise", "skip")


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


def secure_or_testing(rng: RandomSource | int | None, allowed: bool) -> RandomSource:
    """The OS CSPRNG, or a non-secure source when the testing switch says so."""
    if rng is None or isinstance(rng, SecureRandom):
        return SecureRandom()
    if not allowed:
        raise ParameterError(
            "rng", "a seeded or custom source makes the IRR predictable; pass insecure_rng_for_testing=True "
            "in tests and benchmarks, or leave rng=None (the OS CSPRNG)",
        )
    return as_rng(rng)


def seconds(name: str, value: object) -> float:
    """A finite duration >= 0, for deadlines and intervals."""
    return check_number(name, value, nonnegative=True)


@dataclass(frozen=True, kw_only=True)
class ClientOptions:
    """A client's settings (the keywords of :class:`~client_sdk.Client`).

    Attributes:
        server_public_keys: the pinned Ed25519 key(s) (raw or base64url); a
            config must be signed by one of them.
        max_epsilon: the ceiling per metric: a number, or a mapping by metric
            name with ``"*"`` as the default (unlisted metrics are refused).
        on_error: called with every error of background work (never raises into the app).
        on_event: called with every :class:`~client_sdk.status.ClientEvent` (a refused or
            dropped report, a disk or network error, a device clock found off, a low budget).
        strict: raise programmer errors (a wrong type, a value outside a declared domain, an
            unknown metric, a second value in a window, a refused budget) from ``report()``,
            ``sync()`` and ``save()`` instead of logging them (development and tests; ``debug``
            is the same switch). Never for what the environment causes (disk, network, clock).
        debug: the same as ``strict``.
        disabled: every call is a cheap no-op (no file, no thread, no request).
        state_key: the host app's AES key (16 or 32 bytes) for the state;
            ``None`` uses a key file (``key_path``, default ``<state_path>.key``, 0600).
        on_corrupt: ``"raise"`` (default) or ``"reset"``; see ``docs/client.md``.
        retry, session, batch_format: transport settings (:class:`~client_sdk.Transport`).
        max_config_bytes, max_response_bytes: the largest config and upload
            answer read (4 MiB, 1 MiB); a larger one is refused (:class:`TransportError`).
        max_queue: bound of the offline queue; the oldest report goes first.
        max_waiting: bound of the values kept before the first config (the same value of a
            metric again within an hour is kept once); the oldest goes first.
        batch_size: reports per upload.
        flush_at: the background sender sends at once when this many reports are queued.
        autosave: persist the reports soon after ``report()`` (on the background sender's
            thread, or on the caller's without one); ``False``: at ``flush()``, ``save()``
            and ``close()``.
        clock_retry_cap: the longest wait before a report the server's clock refused for now
            is resent (seconds; the server's ``retry_after`` is shorter or capped to this).
        background: start the background sender at once (default; ``start()``
            with ``send_interval``): it syncs first, sends every
            ``send_interval`` seconds, re-syncs on the config's schedule. ``False``:
            the app drives ``sync()`` and ``flush()`` itself (tests,
            simulations, command-line tools).
        send_interval: seconds between background flushes.
        exit_deadline: the default deadline of ``close()``, and the overall
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
        budget_refusals: ``"raise"``: ``report()`` raises :class:`BudgetExceeded`;
            ``"skip"``: it returns a ``refused`` status, logs, and passes the error
            to ``on_error``. ``None`` (default): ``"raise"`` with ``strict``, else ``"skip"``.
        sync_interval: seconds between the background sender's syncs (the
            config's own ``sync_interval``, when it announces one, wins);
            a failed sync is retried sooner, with backoff.
        accept_round: the app's consent to a relaxation round (``None``: accept
            every round the ceiling allows). A refused round is not applied and
            nothing is sent for it: the aggregator sees non-participation.

    Derived once, at construction: ``keys`` (the pinned keys by key id),
    ``ceiling`` (:class:`~client_sdk.ledger.Ceiling`) and ``random`` (the
    source actually used).
    """

    server_public_keys: bytes | str | Iterable[bytes | str]
    max_epsilon: float | Mapping[str, float]
    on_error: OnError | None = None
    on_event: OnEvent | None = None
    strict: bool = False
    debug: bool = False
    disabled: bool = False
    state_key: bytes | None = None
    key_path: str | Path | None = None
    on_corrupt: str = "raise"
    retry: RetryPolicy | None = None
    session: Any = None
    batch_format: str = "json"
    max_config_bytes: int = MAX_CONFIG_BYTES
    max_response_bytes: int = MAX_RESPONSE_BYTES
    max_queue: int = 10_000
    max_waiting: int = 1_000
    batch_size: int = 500
    flush_at: int = 100
    autosave: bool = True
    background: bool = True
    send_interval: float = 5.0
    exit_deadline: float = 2.0
    clock_retry_cap: float = CLOCK_RETRY_CAP
    flush_at_exit: bool = False
    rollback_keyring: bool = False
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], object] | None = None
    monotonic: Callable[[], float] = time.monotonic
    rng: RandomSource | int | None = None
    accept_round: Callable[[RoundAnnouncement], bool] | None = None
    insecure_rng_for_testing: bool = False
    budget_period: str | int | None = None
    budget_warning: float = 0.2
    budget_refusals: str | None = None
    sync_interval: float = 3600.0
    keys: dict[str, bytes] = field(init=False, repr=False, compare=False)
    ceiling: Ceiling = field(init=False, repr=False, compare=False)
    random: RandomSource = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.on_corrupt not in CORRUPT_POLICIES:
            raise ParameterError("on_corrupt", f"must be one of {CORRUPT_POLICIES}, got {self.on_corrupt!r}")
        for name, value in (("max_queue", self.max_queue), ("batch_size", self.batch_size),
                            ("flush_at", self.flush_at), ("max_waiting", self.max_waiting)):
            check_int(name, value, low=1)
        self._set("strict", bool(self.strict or self.debug))
        self._set("clock_retry_cap", check_number("clock_retry_cap", self.clock_retry_cap, positive=True))
        self._set("exit_deadline", seconds("exit_deadline", self.exit_deadline))
        if not seconds("send_interval", self.send_interval) > 0:
            raise ParameterError("send_interval", f"must be > 0, got {self.send_interval!r}")
        self._set("keys", pinned_keys(self.server_public_keys))
        self._set("ceiling", Ceiling.of(self.max_epsilon, self.budget_period))
        self._set("budget_warning", check_number("budget_warning", self.budget_warning, nonnegative=True, high=1.0))
        if self.budget_refusals is None:
            self._set("budget_refusals", "raise" if self.strict else "skip")
        if self.budget_refusals not in BUDGET_REFUSALS:
            raise ParameterError("budget_refusals", f"must be one of {BUDGET_REFUSALS}, got {self.budget_refusals!r}")
        self._set("sync_interval", check_number("sync_interval", self.sync_interval, positive=True))
        self._set("random", secure_or_testing(self.rng, self.insecure_rng_for_testing))

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)  # frozen: set once, here


__all__ = ["BUDGET_REFUSALS", "CORRUPT_POLICIES", "ClientOptions", "OnError", "OnEvent", "pinned_keys", "seconds"]
