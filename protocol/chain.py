"""The round and the window chain: one rule, one chain type that knows its own cost.

A round moves a metric from ``(level_from, irr_from)`` to ``(level_to,
irr_to)``. :meth:`RoundStep.check` is the one rule, used alike by the
aggregator (opening a round), the client following a signed announcement and
the client's explicit ``relax()``: the IRR (when the round sets one) must be a
relaxation of the one reports are made with (:func:`~protocol.irr_relaxation.check_irr_step`),
and the round must raise the level, or keep it and relax the IRR.

A window's reports form a :class:`WindowChain`: their levels, their IRRs and
which re-sends were drawn from the report before by the relaxed IRR step.
:meth:`WindowChain.cost` is the window's charge (docs/privacy.md, sections 3
and 8; docs/irr-relaxation.md, "Ledger"); :meth:`WindowChain.after` is the
chain once a round re-sends the window's value, relaxed only where that is
not dearer than a fresh IRR. Every cost depends on public parameters only
(levels, IRRs, what was kept), never on a value.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .accounting import from_micro, sequence_bit_epsilon, to_micro
from .errors import OnesidedError, ParameterError, TighteningRefused
from .params import MetricParams

IrrPair = tuple[float | None, float | None]
"""An IRR as callers write it: ``(irr_p, irr_q)`` (an :class:`Irr` is one)."""

MAX_EXACT_REPORT_CHAIN = 8
"""The longest window chain whose reports' joint law is computed exactly (``2^n`` report sequences)."""


class Irr(NamedTuple):
    """An instantaneous randomized response ``(irr_p, irr_q)``, frozen.

    Symmetric: both given, ``irr_p < irr_q``; asymmetric: ``irr_p`` is ``None``;
    ``(None, None)``: no IRR. A tuple, so it compares equal to the plain pair.
    """

    irr_p: float | None
    irr_q: float | None

    @classmethod
    def of(cls, pair: IrrPair) -> Irr:
        """``pair`` as an :class:`Irr` of floats."""
        if isinstance(pair, Irr):
            return pair
        p, q = pair
        return cls(None if p is None else float(p), None if q is None else float(q))

    @classmethod
    def held(cls, params: MetricParams, irr: IrrPair | None) -> Irr:
        """The IRR reports are made with: ``irr``, or the metric's own where it is ``None``."""
        return cls(params.irr_p, params.irr_q) if irr is None else cls.of(irr)


class RoundRepeats(OnesidedError, ValueError):
    """A round that keeps both the level and the IRR: it changes nothing (field ``level_to``)."""

    code = "round_repeats"

    def __init__(self, level: float) -> None:
        super().__init__(f"the round keeps the level ({level:.6g}) and the IRR: nothing to relax")
        self.level = level
        self.field = "level_to"


@dataclass(frozen=True, kw_only=True)
class RoundStep:
    """One round of one metric: from the level and IRR reports are made with to the round's.

    Attributes:
        mode: the metric's mode.
        level_from, irr_from: the level and IRR reports are made with now (``(None, None)``: no IRR).
        level_to: the round's level.
        irr_to: the round's IRR (``None``: the round keeps the IRR).
    """

    mode: str
    level_from: float
    irr_from: Irr
    level_to: float
    irr_to: Irr | None = None

    @classmethod
    def of(cls, params: MetricParams, level_from: float, irr_from: IrrPair | None, level_to: float,
           irr_to: IrrPair | None = None) -> RoundStep:
        """The step of a metric with ``params`` (``irr_from`` ``None``: the metric's own IRR)."""
        return cls(mode=params.mode, level_from=float(level_from), irr_from=Irr.held(params, irr_from),
                   level_to=float(level_to), irr_to=None if irr_to is None else Irr.of(irr_to))

    @property
    def relaxes_irr(self) -> bool:
        """Whether the round sets an IRR other than the one reports are made with."""
        return self.irr_to is not None and self.irr_to != self.irr_from

    def check(self) -> None:
        """The round rule: an IRR that relaxes the current one, and a level raised, or kept with the IRR relaxed.

        Raises:
            ParameterError: ``irr_to`` is not an IRR of the mode (field ``irr_p``, ``irr_q`` or
                ``mode``) or not a relaxation of ``irr_from`` (field ``irr``).
            TighteningRefused: ``level_to`` is below ``level_from``.
            RoundRepeats: the level kept and the IRR not relaxed.
        """
        if self.irr_to is not None:
            from .irr_relaxation import (
                check_irr_step,  # rounds that set an IRR are the only ones to need it
            )

            check_irr_step(self.mode, self.irr_from, self.irr_to)
        if self.level_to > self.level_from or (self.level_to == self.level_from and self.relaxes_irr):
            return
        if self.level_to < self.level_from:
            raise TighteningRefused(current=self.level_from, requested=self.level_to)
        raise RoundRepeats(self.level_from)


def distinct_levels(chain: Sequence[float]) -> tuple[float, ...]:
    """A window's chain without the repeats of rounds that kept the level (they relaxed the IRR only).

    A repeated level is no lazy step: the memoized noise stays as it is.
    """
    return tuple(v for i, v in enumerate(chain) if i == 0 or v != chain[i - 1])


class WindowChain(NamedTuple):
    """The reports of one value in one window: what the window's charge depends on.

    Attributes:
        levels: the level of each report, oldest first.
        irrs: the IRR of each report (``None``: the metric's own).
        relaxed: one flag per report after the first: drawn from the report before by the
            relaxed IRR step (else a fresh IRR).
    """

    levels: tuple[float, ...]
    irrs: tuple[Irr | None, ...]
    relaxed: tuple[bool, ...]

    @classmethod
    def of(cls, levels: Sequence[float], irrs: Sequence[IrrPair | None] | None = None,
           relaxed: Sequence[bool] | None = None) -> WindowChain:
        """A chain checked for shape (``irrs`` default all ``None``, ``relaxed`` all fresh).

        Raises:
            ParameterError: (field ``irrs``) not one IRR per level and one flag per level after the first.
        """
        n = len(levels)
        irr_key = (None,) * n if irrs is None else tuple(None if i is None else Irr.of(i) for i in irrs)
        flags = (False,) * (n - 1) if relaxed is None else tuple(bool(f) for f in relaxed)
        if len(irr_key) != n or len(flags) != max(0, n - 1):
            raise ParameterError("irrs", f"need one IRR per level and one relaxed flag per level after the first ({n})")
        return cls(tuple(levels), irr_key, flags)

    def cost(self, params: MetricParams) -> tuple[float, bool]:
        """The window's charge ``(epsilon rounded up, exact)`` (:func:`_window_cost`), remembered."""
        return _window_cost(params, *self)

    def after(self, step: RoundStep, params: MetricParams, *, sent_kept: bool) -> WindowChain:
        """The chain once ``step``'s round re-sends the window's value.

        The re-send is drawn from the window's last report by the relaxed IRR
        step when the round sets an IRR, that report was kept (``sent_kept``)
        and the window is charged no more so than with a fresh IRR. When the
        same round raises the level far the relaxed chain can cost more than
        a fresh report (symmetric, level 1 -> 5: 1.283063 against 1.243596),
        and past :data:`MAX_EXACT_REPORT_CHAIN` reports only bounds are at
        hand (docs/irr-relaxation.md, "Ledger").
        """
        if not self.levels:
            return WindowChain((step.level_to,), (step.irr_to,), ())
        levels, irrs = (*self.levels, step.level_to), (*self.irrs, self.irrs[-1] if step.irr_to is None else step.irr_to)
        fresh = WindowChain(levels, irrs, (*self.relaxed, False))
        if step.irr_to is None or not sent_kept:
            return fresh
        relaxed = WindowChain(levels, irrs, (*self.relaxed, True))
        return relaxed if relaxed.cost(params)[0] <= fresh.cost(params)[0] else fresh


def window_cost(
    params: MetricParams, levels: Sequence[float], irrs: Sequence[IrrPair | None] | None = None,
    relaxed: Sequence[bool] | None = None,
) -> tuple[float, bool]:
    """The charge of one window: :meth:`WindowChain.cost` of ``WindowChain.of(levels, irrs, relaxed)``."""
    return WindowChain.of(levels, irrs, relaxed).cost(params)


@functools.lru_cache(maxsize=1024)
def _window_cost(
    params: MetricParams, levels: tuple[float, ...], irrs: tuple[Irr | None, ...], relaxed: tuple[bool, ...]
) -> tuple[float, bool]:
    """A window's charge, computed (a pure function of its arguments, so remembered).

    Without IRR: ``bits_changed * sequence_bit_epsilon(mode, levels)`` (the
    released permanent bits; exact for the asymmetric mode, proven by an
    enclosure for symmetric chains; a level repeated by an IRR-only round
    releases the same bits again). With IRR the reports are a
    post-processing of those bits, so that bound holds, and the smaller of
    it and the epsilon of the window's reports themselves is charged; one
    report alone is exactly RAPPOR's ``eps_1``. The reports' epsilon is
    enclosed in outward-rounded double intervals and charged at the
    enclosure's upper end
    (:func:`~protocol.irr_relaxation.enclosed_report_chain_charge` of the
    IRR levels used, each report relaxed or fresh as sent; a chain of
    relaxed reports at one permanent level costs one report at the last IRR
    level). Where it is out of reach (more than
    :data:`MAX_EXACT_REPORT_CHAIN` reports, or no bound from doubles): with
    a relaxed report only the first bound is charged; with fresh IRRs only,
    the smaller of it and the composition of one ``eps_1`` per report where
    that composition is proven (:func:`_composition_proven`), marked not exact. ``bits_changed`` follows
    the metric's neighbour relation (``k``; ``2k`` for a symmetric
    categorical value replaced). Trusted: ``inf``.

    Returns:
        ``(epsilon rounded up, exact)``.
    """
    if not params.local_mechanism.randomized:
        return math.inf, True
    bits_changed = params.guarantee(levels[-1]).bits_changed
    eps, exact = sequence_bit_epsilon(params.mode, distinct_levels(levels))
    chain = bits_changed * to_micro(eps)
    steps = [params.with_irr(irr) for irr in irrs]
    if all(step.irr_q is None for step in steps):
        return from_micro(chain), exact
    if len(levels) == 1:
        return from_micro(min(chain, to_micro(steps[0].guarantee(levels[0]).epsilon_per_report))), True
    found = _relaxed_reports(params, steps, levels, relaxed)
    if found is not None:
        reports, reports_exact = found
        return (from_micro(chain), exact) if chain <= reports else (from_micro(reports), reports_exact)
    if any(relaxed) or not _composition_proven(params, levels):
        return from_micro(chain), False
    reports = sum(to_micro(step.guarantee(level).epsilon_per_report) for step, level in zip(steps, levels, strict=True))
    return (from_micro(chain), exact) if chain <= reports else (from_micro(reports), False)


def _composition_proven(params: MetricParams, levels: Sequence[float]) -> bool:
    """Whether ``sum_i eps_1(i)`` bounds a window of fresh-IRR reports (docs/privacy.md, section 8).

    Proven for one permanent level in both modes (every bit's loss is a concave function of the
    summed report log-ratios, hence subadditive) and for any asymmetric chain (the memoized bits
    along the exponential chain are associated); not for a symmetric chain of several levels,
    which is then charged the memoized bits' bound alone.
    """
    return params.local_mechanism.one_sided or len(distinct_levels(levels)) == 1


def _relaxed_reports(
    params: MetricParams, steps: Sequence[MetricParams], levels: Sequence[float], relaxed: Sequence[bool]
) -> tuple[int, bool] | None:
    """``(micro-epsilons, exact)`` of the window's reports, or ``None`` where no proven bound is at hand.

    The charge is the upper end of the enclosure of the reports' epsilon
    (:func:`~protocol.irr_relaxation.enclosed_report_chain_charge`), exact
    when the enclosure is narrower than 1e-9. ``None`` (the caller then
    charges the longitudinal bound, not exact) past
    :data:`MAX_EXACT_REPORT_CHAIN` reports or
    :data:`~protocol.laplace_chain_rigorous.MAX_ENCLOSED_LAPLACE_LEVELS`
    distinct levels (the symmetric enclosure's limit), for a chain the
    report law refuses, and for an unbounded enclosure (the reports are a
    post-processing of the memoized bits, so that is a failure to bound
    them, never a real infinity) or any value that is not a finite
    nonnegative number: never a negative or NaN charge.
    """
    from .irr_relaxation import enclosed_report_chain_charge
    from .laplace_chain_rigorous import MAX_ENCLOSED_LAPLACE_LEVELS

    if len(levels) > MAX_EXACT_REPORT_CHAIN or len(distinct_levels(levels)) > MAX_ENCLOSED_LAPLACE_LEVELS:
        return None
    randomizers = [step.randomizer(level) for step, level in zip(steps, levels, strict=True)]
    try:
        eps, exact = enclosed_report_chain_charge(randomizers, value_kind=params.value_kind,
                                                  num_hashes=params.encoding.num_hashes, relaxed=list(relaxed))
    except ParameterError:  # a chain the law does not cover (e.g. a step kept from an older state)
        return None
    if not 0.0 <= eps < math.inf:
        return None
    return to_micro(eps), exact


__all__ = [
    "MAX_EXACT_REPORT_CHAIN",
    "Irr",
    "IrrPair",
    "RoundRepeats",
    "RoundStep",
    "WindowChain",
    "distinct_levels",
    "window_cost",
]
