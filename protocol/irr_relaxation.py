"""Relaxing the instantaneous randomized response (IRR) between rounds, with exact accounting.

A relaxation round loosens the memoized (permanent) bits ``B``. With an IRR
on, each report ``S`` is a fresh randomization of ``B``, and a round that
keeps the IRR's noise caps how much the round can gain. This module relaxes
the IRR as well, and decides when that is sound.

**The construction** (a bit-level lazy step). An IRR level is the binary
channel ``(p, q) = (P(S=1 | B=0), P(S=1 | B=1))`` (asymmetric mode:
``(q_irr, 1)``; no IRR: ``(0, 1)``). Relaxing ``(p1, q1)`` to a more
informative ``(p2, q2)`` uses the *garbling* ``T`` with ``(p1, q1) = T o (p2, q2)``:
``T(1|0) = (p1 q2 - q1 p2) / (q2 - p2)``, ``T(1|1) = (q1 (1-p2) - p1 (1-q2)) / (q2 - p2)``
(:func:`irr_garbling`; it exists exactly when both lie in ``[0, 1]``). Given
the report ``s`` sent at ``(p1, q1)`` and the same memoized bit ``B``, the
next report is drawn from

    P(S' = 1 | S = s, B) = P2(1 | B) T(s | 1) / P1(s | B).

**Why it is sound** (both modes). The pair then has the joint law
``P(S, S' | B) = P2(S' | B) T(S | S')``: ``S'`` has exactly the one-shot law
at ``(p2, q2)``, and ``S`` is a post-processing of ``S'`` by a channel that
does not depend on ``B``. So the likelihood ratio of any report sequence
between ``B = 1`` and ``B = 0`` is that of its last report alone: a chain of
relaxed reports of one memoized bit reveals exactly what one report at the
last IRR level reveals, about ``B`` and so about the true bit ``b``
(RAPPOR's one-report ``eps_1`` at the last levels), instead of the sum over
the reports that independent IRRs compose to. A chain of steps is a chain
of garblings, so any number of rounds costs the last one. The asymmetric
IRR is the special case ``T(1|1) = 1``, ``T(1|0) = (q1 - q2)/(1 - q2)``:
a 1 that came from the noise is kept with probability ``q2 / q1``, the
exponential chain of the permanent bits again, and the protected direction
(a 1 is never turned into a 0 by a true 1) is unchanged.

When the same round also relaxes the permanent bits, a bit whose memoized
value changed starts a fresh IRR at the new level (its old report says
nothing of the new ``B``). Everything a client sends is still a function of
its memoized bits and of randomness independent of ``b``, so the
longitudinal bound of the permanent chain holds whatever the IRR does;
:func:`report_chain_law` gives the law of one report per round for
both rounds relaxed, and :func:`report_chain_epsilon` its epsilon, in
rationals and floats (research and tests); :func:`enclosed_report_chain_epsilon`
encloses that epsilon in outward-rounded double intervals from the closed
forms, and :func:`enclosed_report_chain_charge` is what a client charges.

What it gives up: consecutive reports agree more often than independent
IRRs would (the point of a fresh IRR is also to keep reports from being
linked through their bits); :func:`report_agreement` states by how much.

>>> before, after = (Fraction(1, 2), Fraction(3, 4)), (Fraction(1, 4), Fraction(3, 4))
>>> irr_garbling(before, after)
(Fraction(3, 8), Fraction(7, 8))
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from .accounting import ValueKind, round_up
from .errors import ParameterError
from .exact import bernoulli_choose
from .laplace_chain_rigorous import (
    EXACT_WIDTH,
    enclosed_fraction,
    enclosed_log,
)
from .local import LocalMechanism, local_mechanism
from .randomizers import Randomizer
from .rng import RandomSource

__all__ = [
    "IrrLevel",
    "check_irr_step",
    "enclosed_report_chain_charge",
    "enclosed_report_chain_epsilon",
    "irr_garbling",
    "irr_level",
    "irr_step_conditionals",
    "relax_instantaneous",
    "report_agreement",
    "report_chain_epsilon",
    "report_chain_law",
]

BoolArray = npt.NDArray[np.bool_]
IrrLevel = tuple[Fraction, Fraction]
"""``(P(report 1 | memoized 0), P(report 1 | memoized 1))`` of an IRR, exact rationals of the stated doubles."""
Law = tuple[dict[tuple[int, ...], Fraction], dict[tuple[int, ...], Fraction]]


def irr_level(randomizer: Randomizer) -> IrrLevel:
    """The IRR channel of ``randomizer``: symmetric ``(irr_p, irr_q)``, asymmetric ``(irr_q, 1)``, none ``(0, 1)``."""
    if not randomizer.mechanism.irr_relaxable:
        raise ParameterError("mode", f"the {randomizer.mode} mode has no IRR to relax")
    channel = randomizer.irr_channel()
    if channel is None:
        return (Fraction(0), Fraction(1))
    return (Fraction(channel[0]), Fraction(channel[1]))


def irr_garbling(before: IrrLevel, after: IrrLevel) -> tuple[Fraction, Fraction]:
    """``(T(1|0), T(1|1))`` of the channel ``T`` with ``before = T o after``, exactly.

    Raises:
        ParameterError: (field ``irr``) ``before`` is not a garbling of
            ``after``: the step would tighten the IRR or change its shape.
    """
    (p1, q1), (p2, q2) = before, after
    if not q2 > p2:
        raise ParameterError("irr", f"the relaxed IRR must have q > p, got p={p2}, q={q2}")
    low = (p1 * q2 - q1 * p2) / (q2 - p2)
    high = (q1 * (1 - p2) - p1 * (1 - q2)) / (q2 - p2)
    if not (0 <= low <= 1 and 0 <= high <= 1):
        raise ParameterError(
            "irr",
            f"({float(p1):.6g}, {float(q1):.6g}) is not a post-processing of ({float(p2):.6g}, {float(q2):.6g}): "
            "a relaxed IRR must be at least as informative",
        )
    return low, high


def irr_step_conditionals(before: IrrLevel, after: IrrLevel) -> tuple[Fraction, Fraction, Fraction, Fraction]:
    """``P(S'=1 | S=s, B)`` at index ``s + 2 B``, exact (impossible states, ``P1(s|B) = 0``: ``P2(1|B)``)."""
    t_low, t_high = irr_garbling(before, after)
    out = []
    for b in (0, 1):
        one_after = after[b]
        for s in (0, 1):
            from_one = t_high if s else 1 - t_high  # T(s | S' = 1)
            given = before[b] if s else 1 - before[b]  # P1(s | B), = P2(1|B) T(s|1) + P2(0|B) T(s|0)
            out.append(one_after * from_one / given if given else one_after)
    return out[0], out[1], out[2], out[3]


def check_irr_step(
    mode: str, before: tuple[float | None, float | None], after: tuple[float | None, float | None]
) -> None:
    """Refuse a round's IRR ``after = (irr_p, irr_q)`` that is not a relaxation of ``before``.

    ``after`` must be an IRR of the ``mode`` (asymmetric: ``irr_p`` is null;
    symmetric: both given, ``irr_p < irr_q``; the trusted mode has none) and
    ``before`` (the IRR the reports were made with so far, ``(None, None)``
    for none) must be a garbling of it (:func:`irr_garbling`). A step that
    keeps the IRR is a relaxation (the identity garbling).

    Raises:
        ParameterError: field ``irr_p`` or ``irr_q`` (the shape), ``mode``
            (no IRR in this mode), or ``irr`` (not a relaxation).
    """
    mechanism = local_mechanism(mode)
    if not mechanism.irr_relaxable:
        raise ParameterError("mode", f"the {mode} mode has no IRR to relax")
    if after[1] is None:
        raise ParameterError("irr_q", "a relaxed IRR needs irr_q (leave irr_p and irr_q out to keep the IRR)")
    Randomizer(mode=mode, level=1.0, irr_p=after[0], irr_q=after[1])  # type: ignore[arg-type]  # its shape
    first = _irr_pair(mechanism.irr_channel(*before))
    second = _irr_pair(mechanism.irr_channel(*after))
    irr_garbling(first, second)


def _irr_pair(channel: tuple[float, float] | None) -> IrrLevel:
    return (Fraction(0), Fraction(1)) if channel is None else (Fraction(channel[0]), Fraction(channel[1]))


def _check_same_kind(before: Randomizer, after: Randomizer) -> None:
    if before.mechanism is not after.mechanism:
        raise ParameterError("mode", f"an IRR step keeps the mode, got {before.mode} then {after.mode}")


def relax_instantaneous(
    permanent: npt.ArrayLike,
    report: npt.ArrayLike,
    before: Randomizer,
    after: Randomizer,
    rng: RandomSource | None = None,
    *,
    previous_permanent: npt.ArrayLike | None = None,
) -> BoolArray:
    """The next report with ``after``'s IRR, relaxed from ``report`` sent with ``before``'s IRR.

    Args:
        permanent: the memoized bits now (after this round's permanent relaxation, if any).
        report: the bits sent in the previous round, made from ``previous_permanent``
            with ``before``'s IRR.
        before, after: the randomizers of the two rounds (same mode; only their IRRs matter here).
        rng: the source of the step's randomness (``None``: the secure default).
        previous_permanent: the memoized bits the previous report was made from
            (``None``: the same as ``permanent``). A bit whose memoized value
            changed gets a fresh IRR at ``after``'s level.

    Returns:
        bits whose law given the memoized bits is exactly ``after``'s IRR
        (:func:`irr_step_conditionals`, about one random byte per bit).

    Raises:
        ParameterError: shapes differ (field ``report`` or ``previous_permanent``);
            a report bit impossible under ``before`` (field ``report``); the
            step is not a relaxation (field ``irr``); modes differ (``mode``).
    """
    _check_same_kind(before, after)
    perm = np.asarray(permanent, dtype=bool)
    sent = np.asarray(report, dtype=bool)
    prev = perm if previous_permanent is None else np.asarray(previous_permanent, dtype=bool)
    for name, arr in (("report", sent), ("previous_permanent", prev)):
        if arr.shape != perm.shape:
            raise ParameterError(name, f"must have the shape of permanent {perm.shape}, got {arr.shape}")
    first, second = irr_level(before), irr_level(after)
    step = irr_step_conditionals(first, second)
    for b in (0, 1):
        for s in (0, 1):
            if (first[b] if s else 1 - first[b]) == 0 and np.any((prev == bool(b)) & (sent == bool(s))):
                raise ParameterError("report", f"holds a {s} where the memoized bit {b} cannot give one")
    fresh = (second[0], second[0], second[1], second[1])
    table = (step[0], step[1], fresh[0], fresh[1], step[2], step[3], fresh[2], fresh[3])
    choice = sent.view(np.uint8) + np.uint8(2) * (prev != perm).view(np.uint8)
    return bernoulli_choose(rng, table, choice, upper=perm)


# --------------------------------------------------------------------------
# Exact accounting: one report per round
# --------------------------------------------------------------------------


def _permanent_law(randomizers: Sequence[Randomizer]) -> tuple[list[int], Law]:
    """Law of the memoized bit at the distinct levels, and each round's index among them."""
    index, distinct = _round_levels(randomizers)
    # asymmetric: the exponential chain; symmetric: the exact law the simulations' relax_laplace_bits samples
    return index, randomizers[0].mechanism.permanent_chain_law(distinct)


def report_chain_law(randomizers: Sequence[Randomizer], *, relaxed: bool | Sequence[bool] = True) -> Law:
    """``P(reports | b)`` for ``b = 0, 1``: one report per round, round ``r`` made with ``randomizers[r]``.

    The permanent bit follows its relaxation chain over the rounds' levels
    (asymmetric: the exponential chain; symmetric: the law
    :func:`~protocol.relaxation.relax_laplace_bits` samples, at most 3
    distinct levels); each report is the IRR of that round's memoized bit,
    either relaxed from the previous report (:func:`relax_instantaneous`,
    fresh where the memoized bit changed) or, ``relaxed=False``, fresh every
    round. ``relaxed`` may also say it round by round: ``relaxed[r - 1]`` for
    round ``r``'s report (a client that relaxed some rounds' IRR and drew a
    fresh one in others). Exact rationals.
    """
    if not randomizers:
        raise ParameterError("randomizers", "must hold at least one round")
    for later in randomizers[1:]:
        _check_same_kind(randomizers[0], later)
    index, permanent = _permanent_law(randomizers)
    irr = [irr_level(r) for r in randomizers]
    flags = _step_flags(relaxed, len(randomizers))
    steps = [irr_step_conditionals(a, b) if flag else None
             for (a, b), flag in zip(itertools.pairwise(irr), flags, strict=True)]
    out: Law = ({}, {})
    for b in (0, 1):
        for pattern, weight in permanent[b].items():
            memo = [pattern[i] for i in index]
            for reports in itertools.product((0, 1), repeat=len(randomizers)):
                p = weight * (irr[0][memo[0]] if reports[0] else 1 - irr[0][memo[0]])
                for r in range(1, len(randomizers)):
                    step = steps[r - 1]
                    one = irr[r][memo[r]] if step is None or memo[r] != memo[r - 1] else step[reports[r - 1] + 2 * memo[r]]
                    p *= one if reports[r] else 1 - one
                if p:
                    out[b][reports] = out[b].get(reports, Fraction(0)) + p
    return out


def _step_flags(relaxed: bool | Sequence[bool], rounds: int) -> list[bool]:
    """One flag per round after the first: its report relaxed from the previous one (``True``) or fresh."""
    if isinstance(relaxed, bool):
        return [relaxed] * (rounds - 1)
    flags = [bool(f) for f in relaxed]
    if len(flags) != rounds - 1:
        raise ParameterError("relaxed", f"must hold one flag per round after the first ({rounds - 1}), got {len(flags)}")
    return flags


def report_chain_epsilon(
    randomizers: Sequence[Randomizer], *, value_kind: ValueKind = "set", num_hashes: int = 1,
    relaxed: bool | Sequence[bool] = True,
) -> float:
    """Epsilon of one report per round (:func:`report_chain_law`), rounded up.

    Per bit, ``up = max_y ln(P(y|1)/P(y|0))`` and ``down`` the reverse; as
    :func:`~protocol.accounting.report_epsilon`: asymmetric ``k up`` (the
    protected direction), symmetric set ``k max(up, down)``, categorical
    ``k (up + down)``. Infinite when a sequence is possible under one bit only.
    A float evaluation (``math.log`` of rationals; the symmetric law over several
    levels is quadrature-based): a sanity value, not a proven charge
    (:func:`enclosed_report_chain_charge` is).
    """
    law = report_chain_law(randomizers, relaxed=relaxed)

    def worst(num: dict[tuple[int, ...], Fraction], den: dict[tuple[int, ...], Fraction]) -> float:
        if any(y not in den for y in num):
            return math.inf
        return max(math.log(num[y]) - math.log(den[y]) for y in num)

    up, down = worst(law[1], law[0]), worst(law[0], law[1])
    return round_up(randomizers[0].mechanism.chain_epsilon(up, down, value_kind, num_hashes))


# --------------------------------------------------------------------------
# Proven accounting: the report chain's epsilon enclosed in doubles
# --------------------------------------------------------------------------
# Interval arrays ``(lo, hi)`` of nonnegative quantities, every operation rounded one double outward
# (IEEE +, *, / are correctly rounded, element by element in numpy too). An exact zero stays an exact
# zero (``hi == 0`` only for a true 0), so a report sequence one bit cannot send is known exactly.
_Pair = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]


def _mul(a: _Pair, b: _Pair) -> _Pair:
    zero = (a[1] == 0.0) | (b[1] == 0.0)
    return (np.maximum(np.nextafter(a[0] * b[0], -np.inf), 0.0),
            np.where(zero, 0.0, np.nextafter(a[1] * b[1], np.inf)))


def _sum_rows(x: _Pair) -> _Pair:
    """The sum over the first axis, pairwise, each addition rounded outward."""
    lo, hi = x
    while lo.shape[0] > 1:
        if lo.shape[0] % 2:
            lo, hi = (np.concatenate([v, np.zeros_like(v[:1])]) for v in (lo, hi))
        zero = (hi[0::2] == 0.0) & (hi[1::2] == 0.0)
        lo = np.maximum(np.nextafter(lo[0::2] + lo[1::2], -np.inf), 0.0)
        hi = np.where(zero, 0.0, np.nextafter(hi[0::2] + hi[1::2], np.inf))
    return lo[0], hi[0]


def _enclosed_memo_law(mechanism: LocalMechanism, levels: tuple[float, ...]) -> tuple[list[tuple[int, ...]], _Pair] | None:
    """The memoized bits' patterns at ``levels`` and ``P(pattern | b)`` as intervals (shape ``(2, patterns)``).

    The mechanism's :meth:`~protocol.local.LocalMechanism.enclosed_chain_law` (closed forms, enclosed);
    ``None``: no bound in doubles.
    """
    law = mechanism.enclosed_chain_law(levels)
    if law is None:
        return None
    patterns, weights = law
    return patterns, (np.array([[w[0] for w in row] for row in weights]),
                      np.array([[w[1] for w in row] for row in weights]))


def _factor_tables(irr: list[IrrLevel], flags: Sequence[bool]) -> list[_Pair]:
    """Round ``r``'s ``P(S_r = y | S_{r-1} = s, memoized bits m then m')`` at ``[m, m', s, y]``, as intervals."""
    def table(r: int) -> list[Fraction]:
        step = irr_step_conditionals(irr[r - 1], irr[r]) if r and flags[r - 1] else None
        out = []
        for m, m_now, s, y in itertools.product((0, 1), repeat=4):
            one = irr[r][m_now] if step is None or m != m_now else step[s + 2 * m_now]
            out.append(one if y else 1 - one)
        return out

    tables = []
    for r in range(len(irr)):
        ends = [enclosed_fraction(v) for v in table(r)]
        tables.append((np.array([e[0] for e in ends]).reshape(2, 2, 2, 2),
                       np.array([e[1] for e in ends]).reshape(2, 2, 2, 2)))
    return tables


def _enclosed_report_law(randomizers: tuple[Randomizer, ...], flags: tuple[bool, ...]) -> _Pair | None:
    """``P(reports | b)`` as intervals, shape ``(2, 2^rounds)``: the sum over memoized patterns of the pattern's
    probability times the reports' (a Markov chain given the pattern, from exact IRR factors)."""
    index, distinct = _round_levels(randomizers)
    law = _enclosed_memo_law(randomizers[0].mechanism, distinct)
    if law is None:
        return None
    patterns, weights = law
    memo = np.array([[m[i] for m in patterns] for i in index])  # memo[r, pattern]
    tables = _factor_tables([irr_level(r) for r in randomizers], flags)
    # round 0: the memoized bit alone (the table's previous-state indices are unused there)
    given: _Pair = (tables[0][0][0, memo[0], 0, :], tables[0][1][0, memo[0], 0, :])
    for r in range(1, len(randomizers)):
        last = np.arange(given[0].shape[1]) & 1  # the previous report: the low bit of the sequence's index
        factor = tuple(t[memo[r - 1], memo[r]][:, last, :] for t in tables[r])
        grown = _mul((given[0][:, :, None], given[1][:, :, None]), (factor[0], factor[1]))
        given = (grown[0].reshape(len(patterns), -1), grown[1].reshape(len(patterns), -1))
    per_bit = [_sum_rows(_mul((weights[0][b][:, None], weights[1][b][:, None]), given)) for b in (0, 1)]
    return np.stack([p[0] for p in per_bit]), np.stack([p[1] for p in per_bit])


def _round_levels(randomizers: Sequence[Randomizer]) -> tuple[list[int], tuple[float, ...]]:
    levels = [float(r.level) for r in randomizers]
    if any(b < a for a, b in itertools.pairwise(levels)):
        raise ParameterError("levels", f"must not decrease from round to round, got {levels}")
    distinct = sorted(set(levels))
    return [distinct.index(lv) for lv in levels], tuple(distinct)


def _enclosed_log_ratio(num: _Pair, den: _Pair) -> tuple[float, float]:
    """``max_y ln(num_y / den_y)`` over the sequences ``num`` can send, enclosed (``inf`` when ``den`` cannot)."""
    sent = num[1] > 0.0
    if np.any(sent & (den[1] == 0.0)):
        return math.inf, math.inf
    with np.errstate(divide="ignore", over="ignore"):
        low = np.nextafter(num[0][sent] / den[1][sent], -np.inf)
        high = np.nextafter(num[1][sent] / den[0][sent], np.inf)
    # both laws sum to 1, so the largest ratio is at least 1
    return enclosed_log(max(1.0, float(low.max())), max(1.0, float(high.max())))


def _chain_bound(mechanism: LocalMechanism, up: float, down: float, value_kind: str, num_hashes: int, upward: bool) -> float:
    """The mechanism's ``chain_epsilon`` of two doubles in exact arithmetic, rounded to a double on one side.

    The mechanisms combine ``up`` and ``down`` as ``k up``, ``k max(up, down)`` or ``k (up + down)``: a
    finite result at an infinite argument does not use that argument.
    """
    combine = mechanism.chain_epsilon
    if math.isinf(combine(up, down, value_kind, num_hashes)):
        return math.inf
    # Fractions through the float signature: the three forms are exact in rationals
    ends: list[Any] = [Fraction(v) if math.isfinite(v) else Fraction(0) for v in (up, down)]
    value = enclosed_fraction(Fraction(combine(ends[0], ends[1], value_kind, num_hashes)))
    return value[1] if upward else value[0]


@functools.lru_cache(maxsize=512)
def _enclosed_chain(randomizers: tuple[Randomizer, ...], value_kind: str, num_hashes: int,
                    flags: tuple[bool, ...]) -> tuple[float, float]:
    law = _enclosed_report_law(randomizers, flags)
    if law is None:
        return 0.0, math.inf
    lo, hi = law
    up = _enclosed_log_ratio((lo[1], hi[1]), (lo[0], hi[0]))
    down = _enclosed_log_ratio((lo[0], hi[0]), (lo[1], hi[1]))
    mechanism = randomizers[0].mechanism
    return (_chain_bound(mechanism, up[0], down[0], value_kind, num_hashes, upward=False),
            _chain_bound(mechanism, up[1], down[1], value_kind, num_hashes, upward=True))


def enclosed_report_chain_epsilon(
    randomizers: Sequence[Randomizer], *, value_kind: ValueKind = "set", num_hashes: int = 1,
    relaxed: bool | Sequence[bool] = True,
) -> tuple[float, float]:
    """``(lo, hi)`` with ``lo <= epsilon <= hi`` for one report per round: :func:`report_chain_epsilon`, proven.

    The same law as :func:`report_chain_law` (each round's report from its memoized bit, relaxed from
    the previous report or fresh), evaluated in double interval arithmetic, each operation rounded
    outward: the memoized bits' law over the distinct levels is enclosed from its closed forms
    (symmetric: :func:`~protocol.laplace_chain_rigorous.enclosed_pattern_probabilities`, the Laplace
    chain the client samples with its noise; asymmetric: ``e^{-L/2}`` enclosed in integer arithmetic),
    the IRR factors are exact rationals of the stated doubles, enclosed by the doubles next to them,
    and the logs are checked against enclosed exponentials. Standard library and numpy only.
    ``(0, inf)`` when doubles give no bound (levels within a few doubles of each other); ``inf`` at
    both ends when a sequence is possible under one bit only (in a direction the mode protects).
    Cached: a client asks for the same chain on every report of a window.

    >>> kept = [Randomizer(mode="symmetric", level=2 * math.log(2), irr_p=p, irr_q=0.75) for p in (0.5, 0.25)]
    >>> lo, hi = enclosed_report_chain_epsilon(kept)  # relaxed at one level: one report at (0.25, 0.75)
    >>> round_up(hi), hi - lo < 1e-12
    (0.510826, True)

    Raises:
        ParameterError: as :func:`report_chain_law` (fields ``randomizers``, ``mode``, ``levels``,
            ``relaxed``, ``irr``); ``value_kind`` not ``set`` or ``categorical``; ``num_hashes`` < 1.
    """
    chain = tuple(randomizers)
    if not chain:
        raise ParameterError("randomizers", "must hold at least one round")
    for later in chain[1:]:
        _check_same_kind(chain[0], later)
    if value_kind not in ("set", "categorical"):
        raise ParameterError("value_kind", f"must be 'set' or 'categorical', got {value_kind!r}")
    if isinstance(num_hashes, bool) or not isinstance(num_hashes, int) or num_hashes < 1:
        raise ParameterError("num_hashes", f"must be an integer >= 1, got {num_hashes!r}")
    return _enclosed_chain(chain, value_kind, num_hashes, tuple(_step_flags(relaxed, len(chain))))


def enclosed_report_chain_charge(
    randomizers: Sequence[Randomizer], *, value_kind: ValueKind = "set", num_hashes: int = 1,
    relaxed: bool | Sequence[bool] = True,
) -> tuple[float, bool]:
    """``(charge, exact)``: the upper end of :func:`enclosed_report_chain_epsilon` rounded up (6 decimals),
    and whether the enclosure is within :data:`~protocol.laplace_chain_rigorous.EXACT_WIDTH`."""
    lo, hi = enclosed_report_chain_epsilon(randomizers, value_kind=value_kind, num_hashes=num_hashes, relaxed=relaxed)
    return round_up(hi), hi - lo <= EXACT_WIDTH


def report_agreement(before: Randomizer, after: Randomizer, permanent_one_share: float = 0.5) -> tuple[float, float]:
    """``P(S' = S)`` per bit for a relaxed step and for a fresh IRR, at a fixed memoized bit.

    The memoized bit is 1 with probability ``permanent_one_share``. The
    relaxed step's reports agree more often: the linkability a fresh IRR
    is there to blur.
    """
    first, second = irr_level(before), irr_level(after)
    step = irr_step_conditionals(first, second)
    relaxed = fresh = 0.0
    for b, weight in ((0, 1.0 - permanent_one_share), (1, permanent_one_share)):
        p1, p2 = float(first[b]), float(second[b])
        relaxed += weight * (p1 * float(step[1 + 2 * b]) + (1 - p1) * (1 - float(step[2 * b])))
        fresh += weight * (p1 * p2 + (1 - p1) * (1 - p2))
    return relaxed, fresh
