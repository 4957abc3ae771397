"""The shipped audit targets, built from the product's own samplers and claims (:data:`TARGETS`), and the
floating-point hole events (Mironov 2012) some of them and some plants test for."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from protocol.accounting import sequence_bit_epsilon
from protocol.central import AGeoMechanism, ALapMechanism, SALapMechanism
from protocol.encodings import BloomEncoding, DirectEncoding, Encoding, Value
from protocol.errors import ParameterError
from protocol.local import local_mechanism
from protocol.params import MetricParams
from protocol.randomizers import Mode, Randomizer
from protocol.rng import FloatArray, RandomSource

from .audit_targets import (
    AuditEvent,
    AuditTarget,
    BoolArray,
    Outcomes,
    Predicate,
    TargetRegistry,
)

IntArray = npt.NDArray[np.int64]

# ==========================================================================
# Floating-point holes (Mironov, "On significance of the least significant bits
# for differential privacy", CCS 2012)
# ==========================================================================

# The grid of the uniforms the samplers below invert: k / 2**53 (NumPy's doubles, SeededRandom).
UNIFORM_GRID_BITS = 53


def reachable(
    outputs: npt.ArrayLike,
    count: float,
    noise_of_uniform: Callable[[FloatArray], FloatArray],
    *,
    increasing: bool,
    grid_bits: int = UNIFORM_GRID_BITS,
) -> BoolArray:
    """Which doubles ``count + noise_of_uniform(k / 2**grid_bits)`` can produce, for some integer ``k``.

    The sampler's output is a monotone function of its uniform, so a
    vectorized binary search over ``k`` finds the first grid point at or
    past each output and tests equality: exact for the sampler as written
    (the same floating-point operations in the same order). The event
    "not reachable from the neighbour's count" is Mironov's attack.

    Args:
        outputs: the released doubles.
        count: the neighbour's count.
        noise_of_uniform: the sampler's inverse CDF, elementwise on uniforms.
        increasing: whether the noise increases with the uniform.
        grid_bits: the uniforms are ``k / 2**grid_bits``, ``1 <= k < 2**grid_bits``.
    """
    z = np.asarray(outputs, dtype=np.float64)
    scale = float(2**grid_bits)

    def output(k: IntArray) -> FloatArray:
        return count + noise_of_uniform(k.astype(np.float64) / scale)

    lo = np.ones(z.shape, dtype=np.int64)
    hi = np.full(z.shape, 2**grid_bits - 1, dtype=np.int64)
    for _ in range(grid_bits + 1):  # smallest k whose output is at or past z (in sampling order)
        mid = (lo + hi) // 2
        out = output(mid)
        past = out >= z if increasing else out <= z
        hi = np.where(past, mid, hi)
        lo = np.where(past, lo, mid + 1)
    result: BoolArray = output(lo) == z
    return result


def _exponential_of_uniform(rate: float) -> Callable[[FloatArray], FloatArray]:
    """``-log(u) / rate``: :meth:`RandomSource.exponential`, the ALap / SALap noise."""
    return lambda u: -np.log(u) / rate


def _laplace_of_uniform(rate: float) -> Callable[[FloatArray], FloatArray]:
    """``-sign(u - 1/2) log1p(-2 |u - 1/2|) / rate``: :meth:`RandomSource.laplace`."""

    def noise(u: FloatArray) -> FloatArray:
        centred = u - 0.5
        out: FloatArray = -np.sign(centred) * np.log1p(-2.0 * np.abs(centred)) / rate
        return out

    return noise


def _hole_event(
    count: float,
    noise_of_uniform: Callable[[FloatArray], FloatArray],
    sampler: str,
    *,
    increasing: bool,
    column: int | None = None,
    when: Predicate | None = None,
) -> AuditEvent:
    """"The output is not reachable from ``count``" for a float inverse-CDF sampler (Mironov's event).

    Args:
        count: the neighbour's count.
        noise_of_uniform: the sampler's inverse CDF; ``increasing``: its direction.
        sampler: the sampler in words (for the event's name).
        column: the column of a 2-D outcome holding the output (``None``: 1-D outcomes).
        when: only rows where this holds can be in the event (e.g. "a value was released").
    """

    def predicate(outcomes: Outcomes) -> BoolArray:
        x = np.asarray(outcomes)
        values = x if column is None else x[:, column]
        active = np.ones(values.shape, dtype=bool) if when is None else when(x)
        out = np.zeros(values.shape, dtype=bool)
        out[active] = ~reachable(values[active], count, noise_of_uniform, increasing=increasing)
        return out

    where = "" if column is None else f" (column {column})"
    return AuditEvent(name=f"output{where} not reachable from count {count:g} by {sampler} on a 2^-53 grid",
                      predicate=predicate)


def _exponential_hole(rate: float, **kwargs: Any) -> AuditEvent:
    """Mironov's event for ``count + (-log u) / rate`` from count 0 (the float ALap / SALap noise)."""
    return _hole_event(0.0, _exponential_of_uniform(rate), f"float -log(u)/{rate:g}", increasing=False, **kwargs)


# ==========================================================================
# Shipped targets, from the product's own code
# ==========================================================================

_BLOOM8 = BloomEncoding(num_bits=8, num_hashes=2, num_cohorts=1)
_BLOOM4 = BloomEncoding(num_bits=4, num_hashes=2, num_cohorts=1)
_DOMAIN = ("a", "b", "c", "d")
_NONE_DOMAIN = ("none", "a", "b", "c")
# Levels: symmetric f = 1/2 (bit epsilon ln 3), asymmetric L = 2 (bit epsilon 1).
_SYM_LEVEL = 2.0 * math.log(2.0)
_ASYM_LEVEL = 2.0
_IRR: dict[str, dict[str, Any]] = {"symmetric": {"irr_p": 0.25, "irr_q": 0.75}, "asymmetric": {"irr_q": 0.25}}


def _disjoint_values(encoding: Encoding, count: int) -> list[str]:
    """``count`` values whose bits (cohort 0) are all distinct: the neighbours where the claim is tight."""
    if isinstance(encoding, DirectEncoding):
        return list(encoding.domain[:count])
    used: set[int] = set()
    out: list[str] = []
    for i in range(10_000):
        bits = set(encoding.bits_of(f"item-{i}", 0))
        if len(bits) == encoding.num_hashes and not bits & used:
            out.append(f"item-{i}")
            used |= bits
            if len(out) == count:
                return out
    raise ParameterError("encoding", f"no {count} values with disjoint bits")


def _metric(encoding: Encoding, mode: Mode, level: float, *, irr: bool, **extra: Any) -> MetricParams:
    return MetricParams(name="audit", encoding=encoding, mode=mode, level=level, **(_IRR[mode] if irr else {}), **extra)


def _rows(bits: BoolArray, n: int) -> BoolArray:
    return np.broadcast_to(np.asarray(bits, dtype=bool), (n, bits.size))


def _reports(randomizer: Randomizer, bits: BoolArray, n: int, rng: RandomSource) -> Outcomes:
    """One report per simulated client: :meth:`Randomizer.simulate` (permanent bits, then the IRR)."""
    return randomizer.simulate(_rows(bits, n), rng)


def _relaxed_chain(randomizer: Randomizer, level_to: float, bits: BoolArray, n: int, rng: RandomSource) -> Outcomes:
    """Memoized noise at the randomizer's level, lazily relaxed to ``level_to``; both bit vectors released."""
    b = _rows(bits, n)
    noise = randomizer.draw_noise(b.shape, rng)
    first = randomizer.permanent(b, noise)
    second = randomizer.permanent(b, randomizer.relax_noise(noise, level_to, rng))
    return np.hstack([first, second])


def _report_target(
    name: str, params: MetricParams, value_a: Value | frozenset[Value], value_b: Value | frozenset[Value], neighbour: str
) -> AuditTarget:
    """One report of ``value_a`` against ``value_b``; claim: the guarantee's per-report epsilon."""
    bits_a, bits_b = params.encode(value_a, 0), params.encode(value_b, 0)
    randomizer = params.randomizer()
    irr = f", IRR p={params.irr_p} q={params.irr_q}" if randomizer.has_irr else ""
    return AuditTarget(
        name=name,
        claimed=params.guarantee().epsilon_per_report,
        sample_a=functools.partial(_reports, randomizer, bits_a),
        sample_b=functools.partial(_reports, randomizer, bits_b),
        direction="a_over_b" if params.local_mechanism.one_sided else "both",
        focus=tuple(int(i) for i in np.flatnonzero(bits_a != bits_b)),
        description=f"{params.mode} {params.encoding.kind} m={params.num_bits} k={params.encoding.num_hashes}, "
        f"level {params.level:.4g}{irr}; {neighbour}",
    )


def _set_target(name: str, encoding: Encoding, mode: Mode, *, irr: bool) -> AuditTarget:
    x, y = _disjoint_values(encoding, 2)
    params = _metric(encoding, mode, _ASYM_LEVEL if local_mechanism(mode).one_sided else _SYM_LEVEL, irr=irr)
    return _report_target(name, params, frozenset({x, y}), frozenset({y}), "set {x, y} vs {y} (x removed)")


def _categorical_target(name: str, encoding: Encoding, *, irr: bool) -> AuditTarget:
    x, y = _disjoint_values(encoding, 2)
    params = _metric(encoding, "symmetric", _SYM_LEVEL, irr=irr, value_kind="categorical")
    return _report_target(name, params, x, y, "categorical value x vs y")


def _none_value_target(name: str) -> AuditTarget:
    params = _metric(DirectEncoding(domain=_NONE_DOMAIN), "asymmetric", _ASYM_LEVEL, irr=False,
                     value_kind="categorical", none_value="none")
    return _report_target(name, params, "a", "none", "categorical sensitive value 'a' vs the declared none value")


def _chain_target(name: str, mode: Mode, levels: tuple[float, float]) -> AuditTarget:
    """Two releases of one memoized noise (lazy relaxation); claim ``sequence_bit_epsilon * bits changed``."""
    params = _metric(_BLOOM4, mode, levels[0], irr=False)
    (x,) = _disjoint_values(_BLOOM4, 1)
    bits_a, bits_b = params.encode(frozenset({x}), 0), params.encode(frozenset(), 0)
    randomizer = params.randomizer()
    changed = np.flatnonzero(bits_a != bits_b)
    per_bit, _exact = sequence_bit_epsilon(mode, levels)
    return AuditTarget(
        name=name,
        claimed=per_bit * params.guarantee().bits_changed,
        sample_a=functools.partial(_relaxed_chain, randomizer, levels[1], bits_a),
        sample_b=functools.partial(_relaxed_chain, randomizer, levels[1], bits_b),
        direction="a_over_b" if local_mechanism(mode).one_sided else "both",
        focus=tuple(int(i) for i in (*changed, *(changed + params.num_bits))),
        description=f"{mode} bloom m={params.num_bits} k=2, memoized at level {levels[0]:.4g}, relaxed to "
        f"{levels[1]:.4g}, both permanent vectors released; set {{x}} vs {{}}",
    )


def _count_release(mechanism: ALapMechanism | AGeoMechanism, count: int, n: int, rng: RandomSource) -> Outcomes:
    return mechanism.release(np.full(n, count, dtype=np.int64), rng)


def _count_target(
    name: str, mechanism: ALapMechanism | AGeoMechanism, count: int, label: str, events: tuple[AuditEvent, ...] = ()
) -> AuditTarget:
    """``mechanism.release`` on count ``count`` (a) vs ``count - 1`` (b): one contribution removed."""
    return AuditTarget(
        name=name,
        claimed=mechanism.guarantee().epsilon,
        sample_a=functools.partial(_count_release, mechanism, count),
        sample_b=functools.partial(_count_release, mechanism, count - 1),
        direction="a_over_b",
        events=events,
        description=f"{label}.release on count {count} vs {count - 1} (decreasing p-sensitivity)",
    )


def _alap_target(name: str) -> AuditTarget:
    mechanism = ALapMechanism(epsilon=1.0)
    hole = _exponential_hole(mechanism.epsilon / mechanism.sensitivity)
    return _count_target(name, mechanism, 1, "ALapMechanism(epsilon=1)", (hole,))


def _ageo_target(name: str) -> AuditTarget:
    return _count_target(name, AGeoMechanism(epsilon=1.0, n_max=8), 4, "AGeoMechanism(epsilon=1, n_max=8)")


def _salap_release(mechanism: SALapMechanism, counts: tuple[float, ...], threshold: float, n: int,
                   rng: RandomSource) -> Outcomes:
    """``n`` SALap runs as rows ``(stop index, stopping value)``; ``(d, 0)`` when every answer is below.

    Vectorized :meth:`SALapMechanism.publish`; the first rows are checked against it.
    """
    d = len(counts)
    noise = mechanism.noise(n * d, rng).reshape(n, d)
    z = np.asarray(counts, dtype=np.float64) + noise
    above = z > threshold
    stopped = above.any(axis=1)
    stop = np.where(stopped, above.argmax(axis=1), d)
    value = np.where(stopped, z[np.arange(n), np.minimum(stop, d - 1)], 0.0)
    for i in range(min(n, 16)):
        expected = SALapMechanism.publish(counts, noise[i], threshold)
        got: list[float | None] = [None] * int(stop[i])
        if stop[i] < d:
            got.append(float(value[i]))
        if expected[: len(got)] != got:
            raise ParameterError("salap", f"vectorized publish disagrees with SALapMechanism.publish: {expected}")
    return np.column_stack([stop.astype(np.float64), value])


def _salap_target(name: str) -> AuditTarget:
    mechanism = SALapMechanism(epsilon=1.0)
    first_stop: Predicate = lambda x: np.asarray(x)[:, 0] == 0  # noqa: E731
    return AuditTarget(
        name=name,
        claimed=mechanism.guarantee().epsilon,
        sample_a=functools.partial(_salap_release, mechanism, (1.0, 1.0), 1.0),
        sample_b=functools.partial(_salap_release, mechanism, (0.0, 1.0), 1.0),
        direction="a_over_b",
        focus=(0,),
        statistic=lambda x: np.where(np.asarray(x)[:, 0] == 0, np.asarray(x)[:, 1], -np.inf),
        events=(_exponential_hole(1.0, column=1, when=first_stop),),
        description="SALapMechanism(epsilon=1), 2 queries, threshold 1, counts (1, 1) vs (0, 1); "
        "outcome (stop index, stopping value)",
    )



_DAY = 86400
_WINDOW0 = 1_699_920_000


def client_history_reports(
    params: MetricParams, history: Sequence[frozenset[str]], n: int, rng: RandomSource
) -> Outcomes:
    """What ``n`` clients (one fresh secret each) send over ``history``, one window a day.

    Runs the SDK's own per-report function (:func:`client_sdk.memo.report_bits`: encoding, noise
    memoized per (metric, window, value), IRR), so it audits the product's memoization, not a model.
    """
    from client_sdk.memo import report_bits

    out = np.empty((n, len(history) * params.num_bits), dtype=bool)
    m = params.num_bits
    for i in range(n):
        secret = rng.integers(256, 32).astype(np.uint8).tobytes()
        for d, day in enumerate(history):
            out[i, d * m : (d + 1) * m] = report_bits(
                secret, params, sorted(day), cohort=0, window=_WINDOW0 + d * _DAY, levels=[params.level], rng=rng
            )
    return out


def _client_history(name: str) -> AuditTarget:
    params = _metric(DirectEncoding(domain=("home", "clinic", "work")), "asymmetric", _ASYM_LEVEL, irr=False)
    h_a = (frozenset({"home", "clinic"}), frozenset({"home", "clinic"}))
    h_b = (frozenset({"home"}), frozenset({"home"}))
    clinic, m = 1, params.num_bits
    # The ledger's charge for the schedule (2 windows at the level): the windows add up.
    from protocol.chain import window_cost

    claimed = 2 * window_cost(params, [params.level])[0]
    return AuditTarget(
        name=name,
        claimed=claimed,
        sample_a=functools.partial(client_history_reports, params, h_a),
        sample_b=functools.partial(client_history_reports, params, h_b),
        direction="a_over_b",
        focus=(clinic, m + clinic),
        description="the client's path (SDK report_bits) over two windows: {home, clinic} each day vs {home}; "
        "claim: the ledger's charge for two windows",
        max_samples=100_000,
    )


TARGETS: Mapping[str, AuditTarget] = TargetRegistry({
    "local-symmetric-set-bloom": functools.partial(_set_target, encoding=_BLOOM8, mode="symmetric", irr=False),
    "local-symmetric-set-bloom-irr": functools.partial(_set_target, encoding=_BLOOM8, mode="symmetric", irr=True),
    "local-symmetric-categorical-direct": functools.partial(
        _categorical_target, encoding=DirectEncoding(domain=_DOMAIN), irr=False),
    "local-symmetric-categorical-bloom-irr": functools.partial(_categorical_target, encoding=_BLOOM8, irr=True),
    "local-asymmetric-set-bloom": functools.partial(_set_target, encoding=_BLOOM8, mode="asymmetric", irr=False),
    "local-asymmetric-set-bloom-irr": functools.partial(_set_target, encoding=_BLOOM8, mode="asymmetric", irr=True),
    "local-asymmetric-set-direct": functools.partial(
        _set_target, encoding=DirectEncoding(domain=_DOMAIN), mode="asymmetric", irr=False),
    "local-asymmetric-categorical-none": _none_value_target,
    "relaxed-symmetric-chain": functools.partial(
        _chain_target, mode="symmetric", levels=(_SYM_LEVEL, 2.0 * math.log(4.0))),
    "relaxed-asymmetric-chain": functools.partial(_chain_target, mode="asymmetric", levels=(1.0, 2.0)),
    "central-alap": _alap_target,
    "central-ageo": _ageo_target,
    "central-salap": _salap_target,
    "client-history": _client_history,
})
"""The shipped mechanisms, audited with the product's own samplers and claims."""
