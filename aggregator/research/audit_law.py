"""The joint law of what one client sends in a window, checked against the exact law of the product's design.

The privacy lower bound of :func:`aggregator.research.audit.audit` only sees a
regression that *raises* the loss beyond the claim. Two kinds slip past it: a
change that keeps the loss within the claim but breaks what the data promises
(an asymmetric IRR that also flips true 1s makes "a reported 0 is a true 0"
false, so alpha = 0 certificates go wrong), and one whose excess loss is too
small for events to show (a relaxed IRR step that does not restart the bits
whose memoized value changed: 0.9286 true against 0.9089 charged). Both
change the *law* of the reports. So for every window of a device scenario
whose reports were all sent, the bits of each position across the window's
reports (the report, then each round's re-send) are compared with their exact
joint law, :func:`protocol.irr_relaxation.report_chain_law` of the window's
levels and IRRs, each re-send relaxed or fresh by the client's own rule
(:meth:`protocol.chain.WindowChain.after`: relaxed when the round sets an
IRR and the window is charged no more that way).

Positions are independent given the true bits, and clients are independent,
so the positions of one true bit in one window are i.i.d. draws of that law:
one multinomial per (history, window, true bit), tested by Pearson's
chi-square (cells expected below 5 merged into one), the statistics and
degrees of freedom summed over all of them. A pattern the law gives
probability 0 (a true 1 reported 0 in the asymmetric mode) gives ``p = 0``,
as does a report sent by some clients and not others (a refusal that depends
on more than the schedule). The check stops at a window's first refused
report (the levels after it are no longer the schedule's). Under the
product's law the p-value is uniform (up to the chi-square approximation), so
a check at ``alpha`` fails falsely with probability about ``alpha``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import stats

from protocol.chain import IrrPair, RoundStep, WindowChain
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.randomizers import Randomizer

from .audit_targets import Outcomes

if TYPE_CHECKING:
    from .audit_device import DeviceHistory, DeviceScenario

__all__ = ["law_check", "law_p_value", "window_chains"]

MIN_EXPECTED = 5.0


def _relaxed_flags(params: MetricParams, levels: Sequence[float], irrs: Sequence[IrrPair],
                   sets_irr: Sequence[bool]) -> list[bool]:
    """Per re-send, whether the client draws it by the relaxed IRR step (its rule, from the window's cost)."""
    chain = WindowChain.of(levels[:1], irrs[:1])
    for r in range(1, len(levels)):
        step = RoundStep.of(params, levels[r - 1], irrs[r - 1], levels[r], irrs[r] if sets_irr[r - 1] else None)
        chain = chain.after(step, params, sent_kept=params.irr_q is not None)
    return list(chain.relaxed)


def window_chains(params: MetricParams, history: DeviceHistory) -> list[tuple[list[Randomizer], list[bool]]]:
    """Per window: the randomizer of each report (level and IRR after its round) and the relaxed flags."""
    level, irr = params.level, (params.irr_p, params.irr_q)
    chains = []
    for window in history:
        levels, irrs, sets = [level], [irr], []
        for k, level_to in enumerate(window.rounds):
            level, new = level_to, window.round_irr(k)
            irr = irr if new is None else new
            levels.append(level)
            irrs.append(irr)
            sets.append(new is not None)
        randomizers = [params.with_irr(i).randomizer(lv) for lv, i in zip(levels, irrs, strict=True)]
        chains.append((randomizers, _relaxed_flags(params, levels, irrs, sets)))
    return chains


def _pearson(observed: np.ndarray, probabilities: np.ndarray) -> tuple[float, int] | None:
    """``(statistic, degrees of freedom)`` of one multinomial; ``None`` if an impossible pattern occurred."""
    if np.any(observed[probabilities == 0] > 0):
        return None
    expected = probabilities * observed.sum()
    small = expected < MIN_EXPECTED
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    if obs.size < 2:
        return 0.0, 0
    return float(((obs - exp) ** 2 / exp).sum()), int(obs.size - 1)


def _history_statistic(params: MetricParams, history: DeviceHistory, rows: Outcomes) -> tuple[float, int] | None:
    from protocol.irr_relaxation import report_chain_law

    width = params.num_bits + 1
    sent = rows[:, ::width]
    if rows.shape[0] and not np.all(sent == sent[0]):
        return None  # whether a report is sent must not depend on the draws
    total, dof, slot = 0.0, 0, 0
    for window, (randomizers, flags) in zip(history, window_chains(params, history), strict=True):
        count = len(randomizers)
        slots = list(range(slot, slot + count))
        slot += count
        if not rows.shape[0] or not np.all(sent[0, slots]):
            break
        try:
            law = report_chain_law(randomizers, relaxed=flags)
        except ParameterError:  # a chain the exact law does not cover (more than 3 symmetric levels)
            continue
        value = sorted(window.value) if isinstance(window.value, frozenset) else window.value
        true = params.encode(value, 0)
        weights = 1 << np.arange(count)
        for t in (0, 1):
            bits = np.flatnonzero(true == t)
            if not bits.size:
                continue
            columns = np.array([[s * width + 1 + j for s in slots] for j in bits])
            codes = (rows[:, columns].astype(np.int64) * weights).sum(axis=2).ravel()
            observed = np.bincount(codes, minlength=1 << count).astype(float)
            probabilities = np.array([float(law[t].get(tuple((c >> r) & 1 for r in range(count)), 0))
                                      for c in range(1 << count)])
            result = _pearson(observed, probabilities)
            if result is None:
                return None
            total, dof = total + result[0], dof + result[1]
    return total, dof


def law_p_value(scenario: DeviceScenario, rows_a: Outcomes, rows_b: Outcomes) -> float:
    """The p-value of the reports of both histories under the exact law (0: an impossible outcome)."""
    total, dof = 0.0, 0
    for history, rows in ((scenario.history_a, rows_a), (scenario.history_b, rows_b)):
        result = _history_statistic(scenario.params, history, np.asarray(rows, dtype=bool))
        if result is None:
            return 0.0
        total, dof = total + result[0], dof + result[1]
    return 1.0 if dof == 0 else float(stats.chi2.sf(total, dof))


def law_check(scenario: DeviceScenario) -> Any:
    """The scenario's law check, as :attr:`~aggregator.research.audit_targets.AuditTarget.law` takes it."""
    return functools.partial(law_p_value, scenario)

