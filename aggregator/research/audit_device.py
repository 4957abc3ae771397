"""Audit targets that drive the real device path: ``client_sdk.Client`` end to end.

Each sample is one fresh :class:`client_sdk.Client` (its own state folder and
secret) that syncs a signed config from an in-memory aggregator
(:class:`client_sdk.testing.FakeAggregator`, the server's key pair), reports
a history (one value per window, rounds opened during a window, several
windows), and flushes. Every report is sealed by the client and opened with
the aggregator's private key on arrival (``allow_plain=False``), so the
outcome audited is exactly what reaches the aggregator: the bits of every
report, in its (window, round) slot, and whether each slot was sent at all.
The claim is the client's own ledger charge (``Client.ledger()[m].spent``)
for that history: the audit checks that the ledger bounds the loss of the
joint outcome of everything one client sends, for two neighbouring histories
under the relation of the metric's mode
(:data:`protocol.accounting.NEIGHBOUR_RELATIONS`, ``HISTORY_NEIGHBOUR``).

The path is the product's: encoding, the report plan's fast path, keyed
memoized noise, the lazy relaxation of a round, the IRR pool, the ledger and
its ceiling, the queue, sealing and the transport. ``PLANTED_DEVICE`` holds
device-path regressions planted by patching the SDK's functions *in this
process only* while a target samples (the IRR switched off, the permanent
noise skipped, the memoized noise re-drawn for every report, a ledger that
forgets a window); each must be caught.

A client costs a few milliseconds (state files, a signature check, sealing
and opening), so these targets cap their samples (:attr:`AuditTarget.max_samples`).
The secret of each client comes from the OS (as on a device); the IRR from
the audit's seeded stream.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from protocol.accounting import neighbour_relation
from protocol.chain import IrrPair
from protocol.crypto import AggregatorKeys
from protocol.encodings import BloomEncoding, DirectEncoding, Value
from protocol.errors import BudgetExceeded, ParameterError
from protocol.params import MetricParams
from protocol.rng import RandomSource, SeededRandom

from .audit_law import law_check
from .audit_targets import AuditEvent, AuditTarget, Outcomes, TargetRegistry

__all__ = [
    "DEVICE_CHUNK",
    "DEVICE_TARGETS",
    "PLANTED_DEVICE",
    "DeviceHistory",
    "DeviceSampler",
    "DeviceScenario",
    "Window",
    "device_reports",
    "device_target",
    "with_jobs",
]

# A day's windows from a fixed Monday (the clock the clients are given).
DAY = 86400
T0 = 1_699_920_000
SERVER_URL = "http://aggregator.audit"
# The default cap on clients per input (`onesided audit --device-samples` sets another): a client
# costs 10-25 ms on 2 loaded cores, so 4,000 per input is about 2 minutes a target.
DEVICE_MAX_SAMPLES = 4_000


@dataclass(frozen=True)
class Window:
    """One window of a history: the value reported, then the rounds opened during it.

    ``rounds`` holds each round's level; ``irrs`` (empty: none) each round's IRR
    ``(irr_p, irr_q)``, ``None`` for a round that keeps the IRR. A round that sets
    an IRR may keep the level (an IRR-only round).
    """

    value: Value | frozenset[Value]
    rounds: tuple[float, ...] = ()
    irrs: tuple[IrrPair | None, ...] = ()

    def __post_init__(self) -> None:
        if self.irrs and len(self.irrs) != len(self.rounds):
            raise ParameterError("irrs", f"must hold one IRR (or None) per round ({len(self.rounds)})")

    def round_irr(self, k: int) -> IrrPair | None:
        """The IRR round ``k`` sets (``None``: kept)."""
        return self.irrs[k] if self.irrs else None


DeviceHistory = tuple[Window, ...]


@dataclass(frozen=True)
class DeviceScenario:
    """A metric, the client's budget settings, and two neighbouring histories.

    Attributes:
        params: the metric (served in the signed config).
        history_a: the history holding the sensitive item (or one value).
        history_b: its neighbour: the same schedule, each window's value a
            neighbour of ``a``'s under the mode's relation.
        max_epsilon: the client's ceiling, as ``Client(max_epsilon=...)``
            takes it (a number, or a mapping per metric).
        budget_period: the client's budget policy, as
            ``Client(budget_period=...)`` takes it: ``None`` for a lifetime
            ceiling, or a period after which the ceiling renews (the claim
            stays the ledger's total over every period).
        description: the histories, in words.
    """

    params: MetricParams
    history_a: DeviceHistory
    history_b: DeviceHistory
    max_epsilon: float | Mapping[str, float] = math.inf
    budget_period: str | int | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if len(self.history_a) != len(self.history_b) or not self.history_a:
            raise ParameterError("history_b", "must have the schedule of history_a (as many windows)")
        for i, (wa, wb) in enumerate(zip(self.history_a, self.history_b, strict=True)):
            if (wa.rounds, wa.irrs) != (wb.rounds, wb.irrs):
                raise ParameterError(f"history_b[{i}].rounds", "must be the rounds of history_a (the schedule)")

    @functools.cached_property
    def slots(self) -> tuple[tuple[int, int], ...]:
        """The ``(window, round)`` of every report the schedule can send, in order (value-independent)."""
        out: list[tuple[int, int]] = []
        round_id = 0
        for w, window in enumerate(self.history_a):
            out.append((self.window_start(w), round_id))
            for _ in window.rounds:
                round_id += 1
                out.append((self.window_start(w), round_id))
        return tuple(out)

    def window_start(self, index: int) -> int:
        return T0 + index * max(self.params.time_precision, DAY)


def _announcement(params: MetricParams, round_id: int, level_from: float, level_to: float, now: int,
                  irr: IrrPair | None = None) -> Any:
    from protocol.wire import MetricEntry, RoundAnnouncement

    irr_p, irr_q = (None, None) if irr is None else irr
    return RoundAnnouncement(
        round_id=round_id, metric=params.name, params_digest=MetricEntry.of(params).digest,
        level_from=level_from, level_to=level_to, cohorts=None, opened_at=now, expires_at=now + 3600,
        irr_p=irr_p, irr_q=irr_q,
    )


class _SigningOnce:
    """Signatures of the audit's server, made once per document for every client of a run.

    Ed25519 signatures are deterministic, so serving a signed document again
    is what signing it again gives; the clients still verify every one.
    """

    def __init__(self) -> None:
        self.configs: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.rounds: dict[Any, dict[str, Any]] = {}


def _aggregator(params: MetricParams, keys: AggregatorKeys) -> Any:
    """The in-memory server of a run: one per run, :meth:`~FakeAggregator.reset` before each client."""
    from client_sdk.testing import FakeAggregator

    class AuditAggregator(FakeAggregator):
        signed = _SigningOnce()

        def open_round(self, announcement: Any) -> None:
            doc = self.signed.rounds.get(announcement)
            if doc is None:
                doc = self.signed.rounds[announcement] = self.keys.sign(announcement.to_payload())
            self.rounds.append(doc)

        def config_document(self) -> dict[str, Any]:
            key = (self.issued_at, self.sync_interval, *map(id, self.rounds))
            doc = self.signed.configs.get(key)
            if doc is None:
                doc = self.signed.configs[key] = super().config_document()
            return doc

    return AuditAggregator([params], keys=keys)


def _run_client(scenario: DeviceScenario, history: DeviceHistory, keys: AggregatorKeys, folder: Path,
                rng: RandomSource, fake: Any = None) -> tuple[Any, float]:
    """One client over ``history``: returns the in-memory aggregator holding what it received, and the ledger's charge.

    ``fake``: the run's aggregator (reset here); a new one when ``None``.
    """
    from client_sdk import Client

    params = scenario.params
    if fake is None:
        fake = _aggregator(params, keys)
    fake.reset()
    now = [float(T0)]
    client = Client(SERVER_URL, folder, server_public_keys=fake.sign_public, session=fake,
                    max_epsilon=scenario.max_epsilon, clock=lambda: now[0], rng=rng, insecure_rng_for_testing=True,
                    budget_period=scenario.budget_period,
                    background=False,  # the auditor drives sync() and flush(): everything sent is in its hands
                    budget_warning=0.0,  # a ceiling reached on purpose is not worth a log line per sample
                    strict=True)  # a refusal raises (suppressed below), as the schedule expects, and logs nothing
    try:
        client.sync()
        round_id, level = 0, params.level
        for w, window in enumerate(history):
            start = scenario.window_start(w)
            now[0] = float(start + 60)
            with contextlib.suppress(BudgetExceeded):  # the ceiling refuses: nothing is sent (schedule-only)
                client.report(params.name, window.value if not isinstance(window.value, frozenset)
                              else sorted(window.value))
            for k, level_to in enumerate(window.rounds):
                round_id += 1
                now[0] = float(start + 120 + k)
                fake.open_round(_announcement(params, round_id, level, level_to, int(now[0]), window.round_irr(k)))
                level = level_to
                client.sync()  # joins the round if the ledger and the app allow: relaxes and re-sends
            client.flush()
        ledger = client.ledger()
        spent = ledger[params.name].spent if params.name in ledger else 0.0
    finally:
        client.close()
    return fake, spent


def _outcome_row(scenario: DeviceScenario, fake: Any) -> np.ndarray:
    """Everything the aggregator received from one client, opened: per slot a 'sent' flag and the bits."""
    params = scenario.params
    m = params.num_bits
    index = {slot: i for i, slot in enumerate(scenario.slots)}
    row = np.zeros(len(scenario.slots) * (m + 1), dtype=bool)
    for envelope, payload in fake.stored.values():
        slot = index.get((envelope.window, envelope.round))
        if slot is None:  # a report outside the schedule: a leak the layout cannot hold
            raise ParameterError("history", f"a report in window {envelope.window} round {envelope.round} "
                                 "is outside the schedule")
        base = slot * (m + 1)
        if row[base]:
            raise ParameterError("history", f"two reports in window {envelope.window} round {envelope.round}")
        row[base] = True
        row[base + 1 : base + 1 + m] = payload.bits
    return row


def _scratch() -> tempfile.TemporaryDirectory[str]:
    """A scratch folder for client states, in memory when the system has one (the SDK fsyncs every save)."""
    shm = Path("/dev/shm")
    where = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return tempfile.TemporaryDirectory(prefix="onesided-audit-", dir=where)


def device_reports(scenario: DeviceScenario, history: DeviceHistory, n: int, rng: RandomSource) -> Outcomes:
    """``n`` fresh clients over ``history``; one row per client: every report it sent, opened by the aggregator.

    The audit's own fixtures are made once for the ``n`` clients (one key
    pair, one scratch folder); each client is still the product's whole path.
    """
    keys = AggregatorKeys.generate()
    fake = _aggregator(scenario.params, keys)
    rows = np.empty((n, len(scenario.slots) * (scenario.params.num_bits + 1)), dtype=bool)
    with _scratch() as tmp:
        for i in range(n):
            folder = Path(tmp) / f"c{i}"
            folder.mkdir()
            _run_client(scenario, history, keys, folder / "state", rng, fake)
            rows[i] = _outcome_row(scenario, fake)
            shutil.rmtree(folder)
    return rows


# Clients per seeded substream. A run is cut into chunks of this many clients whatever the number of
# worker processes, chunk k's IRR stream being child k of one seed drawn from the audit's stream: the
# IRR draws of a run are the same for every --jobs (the secrets come from the OS, as on a device).
DEVICE_CHUNK = 64


def _chunk(scenario: DeviceScenario, history: DeviceHistory, patch: Patch | None, size: int,
           entropy: int, index: int) -> Outcomes:
    """Chunk ``index`` of a run: ``size`` clients on substream ``index`` of ``entropy`` (a worker's task)."""
    with (patch or contextlib.nullcontext)():
        stream = SeededRandom(np.random.SeedSequence(entropy, spawn_key=(index,)))
        return device_reports(scenario, history, size, stream)


def _pool_context() -> Any:
    """``fork`` where the system has it (workers start in milliseconds, nothing to re-import), else ``spawn``."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


@dataclass(frozen=True)
class DeviceSampler:
    """The sampler of one history: ``(n, rng) -> n`` client rows, over ``jobs`` worker processes.

    One 128-bit seed is drawn from ``rng``; the ``n`` clients are cut into
    chunks of :data:`DEVICE_CHUNK`, chunk ``k`` running on the ``k``-th child
    stream of that seed, in this process (``jobs == 1``) or in a pool of
    ``jobs`` processes. Rows come back in chunk order, so the outcome array
    has the same law for every ``jobs`` (and the same IRR draws). A planted
    ``patch`` is applied inside each chunk, in the process that runs it.
    """

    scenario: DeviceScenario
    history: DeviceHistory
    patch: Patch | None = None
    jobs: int = 1

    def __call__(self, n: int, rng: RandomSource) -> Outcomes:
        entropy = int.from_bytes(rng.random_bytes(16).tobytes(), "big")
        sizes = [min(DEVICE_CHUNK, n - start) for start in range(0, n, DEVICE_CHUNK)]
        tasks = [(self.scenario, self.history, self.patch, size, entropy, k) for k, size in enumerate(sizes)]
        width = len(self.scenario.slots) * (self.scenario.params.num_bits + 1)
        if not tasks:
            return np.empty((0, width), dtype=bool)
        if self.jobs <= 1 or len(tasks) == 1:
            parts = [_chunk(*task) for task in tasks]
        else:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=min(self.jobs, len(tasks)), mp_context=_pool_context()) as pool:
                parts = list(pool.map(_chunk, *zip(*tasks, strict=True)))
        return np.concatenate(parts)


def with_jobs(target: AuditTarget, jobs: int) -> AuditTarget:
    """``target`` with its device samplers spread over ``jobs`` worker processes (others unchanged)."""
    import dataclasses

    from protocol.validation import check_int

    check_int("jobs", jobs, low=1)
    if not isinstance(target.sample_a, DeviceSampler) or not isinstance(target.sample_b, DeviceSampler):
        return target
    return dataclasses.replace(target, sample_a=dataclasses.replace(target.sample_a, jobs=jobs),
                               sample_b=dataclasses.replace(target.sample_b, jobs=jobs))


def ledger_charge(scenario: DeviceScenario) -> float:
    """What the client's ledger charges for the scenario's schedule (the same for both histories, checked)."""
    keys = AggregatorKeys.generate()
    charges = []
    with _scratch() as tmp:
        for name, history in (("a", scenario.history_a), ("b", scenario.history_b)):
            (Path(tmp) / name).mkdir()
            _, spent = _run_client(scenario, history, keys, Path(tmp) / name / "state", SeededRandom(0))
            charges.append(spent)
    if charges[0] != charges[1]:
        raise ParameterError("history", f"the ledger charges {charges[0]} and {charges[1]}: it depends on the values")
    return charges[0]


def _focus(scenario: DeviceScenario) -> tuple[int, ...]:
    """Columns where the histories' true bits differ (cohort 0: Bloom scenarios use one cohort)."""
    params, m = scenario.params, scenario.params.num_bits
    cols: list[int] = []
    slot = 0
    for wa, wb in zip(scenario.history_a, scenario.history_b, strict=True):
        differ = np.flatnonzero(params.encode(_reported(wa.value), 0) != params.encode(_reported(wb.value), 0))
        for _ in range(1 + len(wa.rounds)):
            cols.extend(int(slot * (m + 1) + 1 + j) for j in differ)
            slot += 1
    return tuple(cols)


def _reported(value: Value | frozenset[Value]) -> Any:
    return sorted(value) if isinstance(value, frozenset) else value


Patch = Callable[[], contextlib.AbstractContextManager[None]]


def device_target(name: str, scenario: DeviceScenario, *, patch: Patch | None = None,
                  events: tuple[AuditEvent, ...] = ()) -> AuditTarget:
    """The audit target of a scenario: claim the ledger's charge, samples from real clients.

    ``patch``: a planted regression, active while the claim is computed and
    while each input samples (this process only; restored after).
    """
    active: Patch = patch or contextlib.nullcontext
    with active():
        claimed = ledger_charge(scenario)

    relation = neighbour_relation(scenario.params.mode, scenario.params.value_kind)
    return AuditTarget(
        name=name,
        claimed=claimed,
        sample_a=DeviceSampler(scenario, scenario.history_a, patch),
        sample_b=DeviceSampler(scenario, scenario.history_b, patch),
        direction="a_over_b" if relation.one_way else "both",
        focus=_focus(scenario),
        events=events,
        description=f"device path (Client, sealed, opened by the aggregator): {scenario.description}; "
        f"neighbour: {relation.sentence}, in every window; claim: the ledger's charge; "
        "law: each window's reports against their exact joint law",
        max_samples=DEVICE_MAX_SAMPLES,
        law=law_check(scenario),
    )


# ==========================================================================
# Planted device-path regressions: SDK functions replaced in this process while sampling
# ==========================================================================


@contextlib.contextmanager
def _replaced(module: str, name: str, replacement: Any) -> Iterator[None]:
    """``module.name`` replaced, and every ``client_sdk`` module's reference to the same object.

    The SDK imports its helpers by name, so the original is patched wherever
    it is bound; everything is restored on exit.
    """
    __import__(module)
    original = getattr(sys.modules[module], name)
    patched: list[tuple[Any, str]] = []
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == "client_sdk" or mod_name.startswith("client_sdk.")):
            continue
        for attr, value in list(vars(mod).items()):
            if value is original:
                setattr(mod, attr, replacement)
                patched.append((mod, attr))
    try:
        yield
    finally:
        for mod, attr in patched:
            setattr(mod, attr, original)


@contextlib.contextmanager
def irr_switched_off() -> Iterator[None]:
    """The device sends its permanent bits with no instantaneous randomized response."""
    with _replaced("client_sdk.memo", "apply_irr", lambda randomizer, permanent, masks: permanent):
        yield


@contextlib.contextmanager
def permanent_noise_skipped() -> Iterator[None]:
    """The device sends the encoded bits (then the IRR) without the memoized permanent noise."""
    with _replaced("client_sdk.memo", "fresh_mask", lambda stream, mask, zero, one: mask), \
            _replaced("client_sdk.memo", "permanent_bits",
                      lambda secret, params, bits, value_key, levels: np.asarray(bits, dtype=bool)):
        yield


@contextlib.contextmanager
def noise_redrawn_per_report() -> Iterator[None]:
    """Every report draws new memoized noise (the key gains a per-call counter): a round re-send is fresh."""
    import client_sdk.memo as memo

    original = memo.noise_key
    calls = iter(range(1 << 62))

    def fresh_key(window: int, value_key: bytes) -> bytes:
        return original(window, value_key) + next(calls).to_bytes(8, "big")

    with _replaced("client_sdk.memo", "noise_key", fresh_key):
        yield


@contextlib.contextmanager
def ledger_forgets_a_window() -> Iterator[None]:
    """Closing a window drops the earlier windows' charge: the ledger remembers only the latest."""
    from client_sdk.ledger import MetricRecord

    original = MetricRecord.close_window

    def forgetful(self: Any, params: MetricParams) -> None:
        original(self, params)
        self.closed_micro = 0

    MetricRecord.close_window = forgetful  # type: ignore[method-assign]
    try:
        yield
    finally:
        MetricRecord.close_window = original  # type: ignore[method-assign]


@contextlib.contextmanager
def asymmetric_irr_flips_ones() -> Iterator[None]:
    """The asymmetric IRR applied as an XOR: a true 1 is flipped to 0 as often as a 0 to 1 (one-sidedness lost)."""
    import client_sdk.memo as memo

    original = memo.apply_irr

    def xor(randomizer: Any, permanent: int, masks: Any) -> int:
        if not randomizer.mechanism.one_sided or not randomizer.has_irr:
            return original(randomizer, permanent, masks)
        return permanent ^ masks[1]

    with _replaced("client_sdk.memo", "apply_irr", xor):
        yield


@contextlib.contextmanager
def relaxed_step_keeps_changed_bits() -> Iterator[None]:
    """The relaxed IRR step ignores which memoized bits changed: a bit whose memoized value moved keeps its
    old report's garbling instead of a fresh IRR at the new level."""
    import protocol.irr_relaxation as irr_relaxation

    original = irr_relaxation.relax_instantaneous

    def no_restart(permanent: Any, report: Any, before: Any, after: Any, rng: Any = None, **_: Any) -> Any:
        return original(permanent, report, before, after, rng)

    irr_relaxation.relax_instantaneous = no_restart
    try:
        yield
    finally:
        irr_relaxation.relax_instantaneous = original


# ==========================================================================
# Scenarios
# ==========================================================================

_PLACES = DirectEncoding(domain=("home", "clinic", "work"))
_TWELVE = DirectEncoding(domain=tuple(f"place-{i}" for i in range(12)))  # 11 true zeros per client: the law's trials
ONE, NONE = frozenset({"place-0"}), frozenset[Value]()
_DIAG = DirectEncoding(domain=("none", "flu", "covid"))
_SYM = 2.0 * math.log(2.0)  # f = 1/2: bit epsilon ln 3
HC, H = frozenset({"home", "clinic"}), frozenset({"home"})


def _metric(mode: str, *, encoding: Any = _PLACES, level: float = 2.0, **extra: Any) -> MetricParams:
    return MetricParams(name="audit", encoding=encoding, mode=mode, level=level, **extra)  # type: ignore[arg-type]


def _scenarios() -> dict[str, Callable[[], DeviceScenario]]:
    asym = functools.partial(_metric, "asymmetric")
    return {
        "device-asymmetric-set": lambda: DeviceScenario(
            asym(), (Window(HC),), (Window(H),), description="asymmetric direct set, one window: {home, clinic} "
            "vs {home}"),
        "device-asymmetric-set-irr-windows": lambda: DeviceScenario(
            asym(irr_q=0.5), (Window(HC), Window(HC)), (Window(H), Window(H)),
            description="asymmetric direct set with IRR q 0.5, two windows differing in each"),
        "device-asymmetric-round": lambda: DeviceScenario(
            asym(level=1.0), (Window(HC, rounds=(2.0,)), Window(HC)), (Window(H, rounds=(2.0,)), Window(H)),
            description="asymmetric direct set, level 1, a round to 2 in window 1 (re-sent), window 2 at 2"),
        "device-symmetric-set-bloom-irr": lambda: DeviceScenario(
            _metric("symmetric", encoding=BloomEncoding(num_bits=8, num_hashes=2, num_cohorts=1), level=_SYM,
                    irr_p=0.25, irr_q=0.75),
            (Window(frozenset({"item-0"})), Window(frozenset({"item-0"}))), (Window(frozenset()), Window(frozenset())),
            description="symmetric Bloom m=8 k=2 with IRR (p .25, q .75), two windows: {x} vs {}"),
        "device-symmetric-categorical-round": lambda: DeviceScenario(
            _metric("symmetric", level=_SYM, value_kind="categorical"),
            (Window("home", rounds=(2.0 * math.log(4.0),)),), (Window("work", rounds=(2.0 * math.log(4.0),)),),
            description="symmetric categorical direct, level 2 ln 2 relaxed to 2 ln 4 in the window: home vs work"),
        "device-asymmetric-none-value": lambda: DeviceScenario(
            asym(encoding=_DIAG, value_kind="categorical", none_value="none"),
            (Window("flu"), Window("covid")), (Window("none"), Window("none")),
            description="asymmetric categorical with the declared none value: (flu, covid) vs (none, none)"),
        "device-ceiling-per-metric": lambda: DeviceScenario(
            asym(), (Window(HC), Window(HC), Window(HC)), (Window(H), Window(H), Window(H)),
            max_epsilon={"audit": 2.0}, description="asymmetric direct set, per-metric ceiling 2.0: the third "
            "window is refused (nothing sent), the same for both histories"),
        "device-asymmetric-close-rounds": lambda: DeviceScenario(
            asym(level=1.8), (Window(HC, rounds=(1.9, 2.0)),), (Window(H, rounds=(1.9, 2.0)),),
            description="asymmetric direct set, level 1.8 relaxed to 1.9 then 2 in the window (re-sent twice): "
            "the lazy steps keep the three reports as private as one at 2"),
        "device-ceiling-renewing-daily": lambda: DeviceScenario(
            asym(), (Window(HC), Window(HC), Window(HC)), (Window(H), Window(H), Window(H)),
            max_epsilon=1.0, budget_period="day", description="asymmetric direct set, a ceiling of 1.0 renewed "
            "each day: all three daily windows go (1.0 each), the claim is the ledger's total over the days"),
        "device-asymmetric-irr-level-round-fresh": lambda: DeviceScenario(
            asym(encoding=_TWELVE, level=1.0, irr_q=0.5), (Window(ONE, rounds=(2.0,)),),
            (Window(NONE, rounds=(2.0,)),), description="asymmetric direct set, IRR q 0.5, a round 1 -> 2 "
            "keeping the IRR: the re-send draws a fresh IRR"),
        "device-asymmetric-irr-round-relaxed": lambda: DeviceScenario(
            asym(encoding=_TWELVE, level=1.0, irr_q=0.2),
            (Window(ONE, rounds=(6.0,), irrs=((None, 0.1),)), Window(ONE)),
            (Window(NONE, rounds=(6.0,), irrs=((None, 0.1),)), Window(NONE)),
            description="asymmetric direct set, a round 1 -> 6 relaxing the IRR q 0.2 -> 0.1: the re-send is "
            "drawn from the last report, bits whose memoized value changed restart; window 2 at the new IRR"),
        "device-asymmetric-irr-only-round": lambda: DeviceScenario(
            asym(encoding=_TWELVE, level=1.0, irr_q=0.5), (Window(ONE, rounds=(1.0,), irrs=((None, 0.2),)),),
            (Window(NONE, rounds=(1.0,), irrs=((None, 0.2),)),),
            description="asymmetric direct set, an IRR-only round (level kept) relaxing q 0.5 -> 0.2"),
        "device-symmetric-irr-round-relaxed": lambda: DeviceScenario(
            _metric("symmetric", encoding=_TWELVE, level=_SYM, irr_p=0.5, irr_q=0.75),
            (Window(ONE, rounds=(2 * _SYM,), irrs=((0.25, 0.75),)),),
            (Window(NONE, rounds=(2 * _SYM,), irrs=((0.25, 0.75),)),),
            description="symmetric direct set, RAPPOR's IRR (0.5, 0.75) -> (0.25, 0.75) with the level doubled: "
            "relaxed re-send"),
        "device-symmetric-irr-round-fresh": lambda: DeviceScenario(
            _metric("symmetric", encoding=_TWELVE, level=1.0, irr_p=0.5, irr_q=0.75),
            (Window(ONE, rounds=(5.0,), irrs=((0.25, 0.75),)),),
            (Window(NONE, rounds=(5.0,), irrs=((0.25, 0.75),)),),
            description="symmetric direct set, level 1 -> 5 with IRR (0.5, 0.75) -> (0.25, 0.75): the relaxed "
            "chain would cost more, the re-send draws a fresh IRR"),
        "device-symmetric-irr-only-round": lambda: DeviceScenario(
            _metric("symmetric", encoding=_TWELVE, level=_SYM, irr_p=0.5, irr_q=0.75),
            (Window(ONE, rounds=(_SYM,), irrs=((0.25, 0.75),)),),
            (Window(NONE, rounds=(_SYM,), irrs=((0.25, 0.75),)),),
            description="symmetric direct set, an IRR-only round (0.5, 0.75) -> (0.25, 0.75), level kept"),
        "device-ceiling-global": lambda: DeviceScenario(
            asym(level=1.0), (Window(HC, rounds=(2.0,)), Window(HC)), (Window(H, rounds=(2.0,)), Window(H)),
            max_epsilon=1.5, description="asymmetric direct set, global ceiling 1.5: window 1 and its round "
            "(cost 1) go, window 2 (cost 1 more) is refused"),
    }


_SCENARIOS = _scenarios()

def _shipped(scenario: str) -> Callable[[str], AuditTarget]:
    return lambda name: device_target(name, _SCENARIOS[scenario]())


DEVICE_TARGETS: Mapping[str, AuditTarget] = TargetRegistry({name: _shipped(name) for name in _SCENARIOS})
"""The device path end to end, one target per scenario (built on first use: the claim runs two clients)."""


def _planted(scenario: str, patch: Patch) -> Callable[[str], AuditTarget]:
    return lambda name: device_target(name, _SCENARIOS[scenario](), patch=patch)


PLANTED_DEVICE: Mapping[str, AuditTarget] = TargetRegistry({
    "planted-device-irr-off": _planted("device-asymmetric-set-irr-windows", irr_switched_off),
    "planted-device-no-permanent-noise": _planted("device-asymmetric-set", permanent_noise_skipped),
    "planted-device-noise-per-report": _planted("device-asymmetric-close-rounds", noise_redrawn_per_report),
    "planted-device-ledger-forgets": _planted("device-ceiling-per-metric", ledger_forgets_a_window),
    "planted-device-asymmetric-irr-xor": _planted("device-asymmetric-set-irr-windows", asymmetric_irr_flips_ones),
    "planted-device-relaxed-no-restart": _planted("device-asymmetric-irr-round-relaxed",
                                                  relaxed_step_keeps_changed_bits),
    "planted-device-symmetric-relaxed-no-restart": _planted("device-symmetric-irr-round-relaxed",
                                                            relaxed_step_keeps_changed_bits),
})
"""Device-path regressions, planted in this process while sampling; each must be caught."""
