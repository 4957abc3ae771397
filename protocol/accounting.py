"""Privacy accounting: exact epsilons, guarantee records, relaxed sequences.

Conventions (docs/privacy.md):

* ``level`` is the noise rate (Laplace rate for symmetric, exponential rate
  for asymmetric). Per-bit epsilon of the memoized bit:
  symmetric ``ln((1 - f/2) / (f/2))`` with ``f = exp(-level/2)``;
  asymmetric ``level / 2`` (only the 1 -> 0 direction is protected).
* A *set* neighbour adds or removes one member: at most ``k`` bits change,
  all in one direction. A *categorical* neighbour changes the value: ``2k``
  bits change (RAPPOR's ``eps_inf = 2h ln((1-f/2)/(f/2))``).
* With IRR, the per-transmission epsilon is RAPPOR's ``eps_1``.
* A sequence of relaxed releases of the same memoized noise costs the
  exact epsilon of the released bit sequence (computed here), never the sum.

Every epsilon reported is rounded *up* (:func:`round_up`).

>>> round(bit_epsilon("symmetric", laplace_rate_from_f(0.5)), 12) == round(math.log(3), 12)
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

# The Laplace chain's integration lives in protocol.laplace_chain and the rounding in protocol.rounding;
# their names stay importable from here (redundant aliases mark the re-exports).
from .encodings import Encoding
from .laplace_chain import MAX_EXACT_LAPLACE_LEVELS as MAX_EXACT_LAPLACE_LEVELS
from .laplace_chain import MAX_NESTED_LAPLACE_LEVELS as MAX_NESTED_LAPLACE_LEVELS
from .laplace_chain import _forward_pattern_probabilities as _forward_pattern_probabilities
from .laplace_chain import check_sequence, sequence_pattern_probabilities
from .laplace_chain import laplace_sequence_epsilon as _laplace_sequence_exact  # noqa: F401 (tests use it)
from .local.base import MODES, local_mechanism
from .local.common import NeighbourRelation, ValueKind
from .randomizers import Mode, Randomizer, laplace_rate_from_f
from .rounding import from_micro, round_up, to_micro

__all__ = [
    "CENTRAL_NEIGHBOUR",
    "ContributionBound",
    "Guarantee",
    "HISTORY_NEIGHBOUR",
    "NEIGHBOUR_RELATIONS",
    "NeighbourRelation",
    "bit_epsilon",
    "central_neighbour",
    "check_sequence_privacy",
    "contribution_bound",
    "guarantee",
    "laplace_rate_from_f",
    "from_micro",
    "neighbour_relation",
    "report_epsilon",
    "round_up",
    "to_micro",
    "sequence_bit_epsilon",
    "sequence_pattern_probabilities",
]

def bit_epsilon(mode: Mode, level: float) -> float:
    """Epsilon of one memoized bit at ``level`` (unrounded), as the mode's mechanism states it."""
    return local_mechanism(mode).bit_epsilon(level)


def report_epsilon(
    p_star: float, q_star: float, *, mode: Mode, value_kind: ValueKind, num_hashes: int
) -> float:
    """Epsilon of one vector of independent bits with ``P(1|0) = p*``, ``P(1|1) = q*`` (unrounded).

    * symmetric, categorical (value replaced; ``k`` bits go up, ``k`` down):
      ``k ln(q*(1-p*) / (p*(1-q*)))`` (RAPPOR's formula; tight when the two
      values' bits are disjoint).
    * symmetric, set (one member added or removed; up to ``k`` bits move in
      one direction): ``k max(ln(q*/p*), ln((1-p*)/(1-q*)))``.
    * asymmetric (one member removed, ADP): ``k ln(1/p*)``; the other
      direction is the declared non-sensitive leak.
    """
    return local_mechanism(mode).report_epsilon(p_star, q_star, value_kind, num_hashes)


@dataclass(frozen=True)
class Guarantee:
    """What a configuration promises, in numbers and in words.

    Attributes:
        epsilon_bit: one memoized bit at the current level.
        epsilon_per_report: one transmission (with IRR when on: RAPPOR's eps_1).
        epsilon_longitudinal: any number of transmissions of one window's
            memoized bits at this level (RAPPOR's eps_inf). Noise is memoized
            per window, so different windows are independent releases whose
            costs add up (docs/privacy.md).
        neighbour: which change of the input the epsilons are about.
        protects / reveals: plain statement of the policy.
    """

    mode: str
    level: float
    epsilon_bit: float
    epsilon_per_report: float
    epsilon_longitudinal: float
    bits_changed: int
    neighbour: str
    protects: str
    reveals: str


@dataclass(frozen=True)
class ContributionBound:
    """What one person's report of a trusted metric may change in the stored bit counts.

    The one definition both sides use: ingestion keeps at most ``ones`` ones
    of a report (``aggregator.server.ingest``) and the central releases take
    their sensitivity from it (``aggregator.server.services.releases``), so
    the two cannot drift apart.

    Attributes:
        ones: the most ones a stored report keeps: the L1 change of the bit
            counts when one person's report is added or removed.
        per_count: the most any one bit count moves (a report holds each
            bit once): the sensitivity of a single count (SALap's queries).
    """

    ones: int
    per_count: int = 1


class BoundedMetric(Protocol):
    """What :func:`contribution_bound` reads of a metric (:class:`~protocol.params.MetricParams` has it)."""

    @property
    def max_items(self) -> int: ...

    @property
    def encoding(self) -> Encoding: ...


def contribution_bound(params: BoundedMetric) -> ContributionBound:
    """The contribution bound of a trusted metric: ``max_items * num_hashes`` ones per report.

    ``max_items`` members, each setting at most ``num_hashes`` bits (one with
    the direct encoding). Metrics randomized on the device store what they
    receive unclipped (their privacy is the device's); the bound is theirs
    too, but nothing enforces it and no central release uses it.
    """
    return ContributionBound(ones=params.max_items * params.encoding.num_hashes)


# The neighbour relation of every mode, each stated once by its mechanism (protocol.local):
# ``MetricParams.guarantee().neighbour``, the ledger, the audit and docs/privacy.md's table read it.
NEIGHBOUR_RELATIONS: tuple[NeighbourRelation, ...] = tuple(
    relation for mode in MODES for relation in local_mechanism(mode).neighbours
)
# Central releases of a trusted metric's counts: one person's whole report (``max_items`` bound).
CENTRAL_NEIGHBOUR = (
    "one person's report in the window added or removed; a person contributes at most {max_items} item{s}"
)
# Everything one client sends for a metric, over its whole history.
HISTORY_NEIGHBOUR = (
    "two histories are neighbours when they have the same schedule (windows reported, rounds joined, "
    "cohort) and, in every window, their values are neighbours in the relation of the metric's mode "
    "(possibly in every window, possibly about different items)"
)


def neighbour_relation(mode: Mode, value_kind: ValueKind) -> NeighbourRelation:
    """The :data:`NEIGHBOUR_RELATIONS` entry of a metric kind (its mechanism's relation)."""
    return local_mechanism(mode).neighbour(value_kind)


def central_neighbour(max_items: int) -> str:
    """:data:`CENTRAL_NEIGHBOUR` for a metric's contribution bound."""
    return CENTRAL_NEIGHBOUR.format(max_items=max_items, s="s" if max_items != 1 else "")


def guarantee(
    randomizer: Randomizer, *, num_hashes: int, value_kind: ValueKind = "set"
) -> Guarantee:
    """The guarantee record of one configuration at ``randomizer.level``."""
    mechanism = randomizer.mechanism
    relation = mechanism.neighbour(value_kind)
    bits_changed, neighbour = relation.hashes_changed * num_hashes, relation.sentence
    protects, reveals = mechanism.policy(value_kind)
    if not mechanism.randomized:
        return Guarantee(
            randomizer.mode, math.inf, math.inf, math.inf, math.inf, bits_changed, neighbour, protects, reveals
        )
    per_report = mechanism.report_epsilon(*randomizer.probabilities(), value_kind, num_hashes)
    longitudinal = mechanism.report_epsilon(*randomizer.permanent_probabilities(), value_kind, num_hashes)
    return Guarantee(
        mode=randomizer.mode,
        level=randomizer.level,
        epsilon_bit=round_up(mechanism.bit_epsilon(randomizer.level)),
        epsilon_per_report=round_up(per_report),
        epsilon_longitudinal=round_up(longitudinal),
        bits_changed=bits_changed,
        neighbour=neighbour,
        protects=protects,
        reveals=reveals,
    )


def sequence_bit_epsilon(mode: Mode, levels: tuple[float, ...] | list[float]) -> tuple[float, bool]:
    """Epsilon of one memoized bit released at each of ``levels`` (lazy-relaxed).

    Returns:
        ``(epsilon rounded up, exact)``. Asymmetric: exactly ``levels[-1] / 2``
        (the noise only decreases, so a 0 -> 1 bit reads 1...1 0...0 and
        ``P(all ones | 0) = exp(-L_n / 2)``). Symmetric: the upper end of a
        proven enclosure of the exact epsilon, rounded up, up to
        :data:`~protocol.laplace_chain_rigorous.MAX_ENCLOSED_LAPLACE_LEVELS`
        levels (``exact`` when the enclosure is narrower than 1e-9); beyond
        that the continuous bound ``levels[-1]`` (the released noise process
        is ``e_n``-DP for inputs 1 apart), with ``exact = False``.
    """
    seq = tuple(float(v) for v in levels)
    check_sequence(seq)
    return local_mechanism(mode).sequence_bit_epsilon(seq)


def check_sequence_privacy(mode: Mode, levels: tuple[float, ...] | list[float], epsilon: float) -> bool:
    """True when releasing one bit at ``levels`` is ``epsilon``-private (exact check).

    Tight: :func:`sequence_bit_epsilon` passes, anything 1% lower fails.
    """
    seq = tuple(float(v) for v in levels)
    check_sequence(seq)
    return local_mechanism(mode).check_sequence_privacy(seq, epsilon)
