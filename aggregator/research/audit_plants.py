"""Planted broken mechanisms (:data:`PLANTED`): an audit must put each one's lower bound above its claim."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from protocol.encodings import DirectEncoding
from protocol.params import MetricParams
from protocol.rng import FloatArray, RandomSource

from .audit_shipped import (
    _ASYM_LEVEL,
    _NONE_DOMAIN,
    _SYM_LEVEL,
    UNIFORM_GRID_BITS,
    _exponential_of_uniform,
    _hole_event,
    _laplace_of_uniform,
    _metric,
    _rows,
)
from .audit_targets import (
    AuditEvent,
    AuditTarget,
    Outcomes,
    TargetRegistry,
)

# ==========================================================================
# Planted broken mechanisms (each must be caught: lower bound above claim)
# ==========================================================================


def planted_float_release(
    noise_of_uniform: Callable[[FloatArray], FloatArray], count: float, n: int, rng: RandomSource
) -> Outcomes:
    """Textbook floating-point noise: ``count + F^{-1}(u)`` as a double, ``u`` on the ``2^-53`` grid.

    Broken (Mironov 2012): the doubles reachable from ``count`` and from
    ``count - 1`` differ, so some outputs identify the count exactly.
    """
    k = np.maximum(np.floor(rng.uniform(n) * 2.0**UNIFORM_GRID_BITS), 1.0)
    return count + noise_of_uniform(k / 2.0**UNIFORM_GRID_BITS)


def _planted_float(name: str, *, laplace: bool) -> AuditTarget:
    """Float Laplace (two-sided, DP) or float exponential (one-sided ALap), count 1 vs 0, claim eps = 1."""
    epsilon = 1.0
    noise = _laplace_of_uniform(epsilon) if laplace else _exponential_of_uniform(epsilon)
    kind = "Laplace(1/eps)" if laplace else "Exp(eps) (one-sided ALap)"
    hole = _hole_event(0.0, noise, f"the float {kind} inverse CDF", increasing=laplace)
    return AuditTarget(
        name=name,
        claimed=epsilon,
        sample_a=functools.partial(planted_float_release, noise, 1.0),
        sample_b=functools.partial(planted_float_release, noise, 0.0),
        direction="both" if laplace else "a_over_b",
        events=(hole,),
        description=f"planted: count + floating-point {kind} noise, count 1 vs 0, claim eps = 1",
    )


def planted_per_set_memo_days(
    params: MetricParams, history: Sequence[frozenset[str]], n: int, rng: RandomSource
) -> Outcomes:
    """Permanent bits of each day, the memoized noise keyed on the whole set (broken: equal sets, equal bits)."""
    randomizer = params.randomizer()
    noise_of_set: dict[frozenset[str], FloatArray] = {}
    days = []
    for day in history:
        if day not in noise_of_set:
            noise_of_set[day] = randomizer.draw_noise((n, params.num_bits), rng)
        days.append(randomizer.permanent(_rows(params.encode(day, 0), n), noise_of_set[day]))
    return np.hstack(days)


def _planted_per_set_memo(name: str) -> AuditTarget:
    params = _metric(DirectEncoding(domain=("home", "clinic", "work")), "symmetric", _SYM_LEVEL, irr=False)
    h_a = (frozenset({"home", "clinic"}), frozenset({"home"}))
    h_b = (frozenset({"home"}), frozenset({"home"}))
    m = params.num_bits
    g = params.guarantee()
    # What a per-distinct-value ledger charges: k * bit epsilon once per distinct set of the history.
    claimed = max(len(set(h)) for h in (h_a, h_b)) * params.encoding.num_hashes * g.epsilon_bit
    return AuditTarget(
        name=name,
        claimed=claimed,
        sample_a=functools.partial(planted_per_set_memo_days, params, h_a),
        sample_b=functools.partial(planted_per_set_memo_days, params, h_b),
        direction="both",
        events=(AuditEvent(
            name="day-1 report equals day-2 report",
            predicate=lambda x: np.all(np.asarray(x)[:, :m] == np.asarray(x)[:, m:], axis=1),
        ),),
        description="planted: symmetric direct, no IRR, noise memoized per set; days ({home, clinic}, {home}) "
        "vs ({home}, {home}); claim: per-distinct-set ledger",
    )


def planted_none_bit_reports(params: MetricParams, value: str, n: int, rng: RandomSource) -> Outcomes:
    """Asymmetric reports where the declared none value owns a bit (``encoding.encode``, not ``params.encode``)."""
    return params.randomizer().simulate(_rows(params.encoding.encode(value, 0), n), rng)


def _planted_none_bit(name: str) -> AuditTarget:
    params = _metric(DirectEncoding(domain=_NONE_DOMAIN), "asymmetric", _ASYM_LEVEL, irr=False,
                     value_kind="categorical", none_value="none")
    none_bit = _NONE_DOMAIN.index("none")
    return AuditTarget(
        name=name,
        claimed=params.guarantee().epsilon_per_report,
        sample_a=functools.partial(planted_none_bit_reports, params, "a"),
        sample_b=functools.partial(planted_none_bit_reports, params, "none"),
        direction="a_over_b",
        focus=(none_bit, _NONE_DOMAIN.index("a")),
        events=(AuditEvent(name="the none bit is reported 0", predicate=lambda x: ~np.asarray(x)[:, none_bit]),),
        description="planted: asymmetric categorical direct where 'none' owns a bit; 'a' vs 'none', claim h*L/2",
    )


PLANTED: Mapping[str, AuditTarget] = TargetRegistry({
    "planted-float-laplace": functools.partial(_planted_float, laplace=True),
    "planted-float-alap": functools.partial(_planted_float, laplace=False),
    "planted-per-set-memo": _planted_per_set_memo,
    "planted-none-bit": _planted_none_bit,
})
"""Deliberately broken mechanisms: an audit must put each one's lower bound above its claim."""
