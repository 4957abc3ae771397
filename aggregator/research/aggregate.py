"""Exact aggregate-level simulation: cell counts drawn directly, no per-client arrays (docs/simulation.md).

Every bit of every client is randomized independently given the true bits,
so what the aggregator sees of one ``(cohort, bit)`` cell depends on the
clients only through the cell's true ones ``t`` and reports ``n``:

* one report per client: ``Binomial(t, q*) + Binomial(n - t, p*)`` (IRR included in ``p*, q*``);
* a window's memoized bit released at levels ``l_1 < ... < l_r`` (a
  relaxation round re-sends the same window's value, so its noise follows
  the lazy chain): the ``2^r`` report patterns of a cell are
  ``Multinomial(n - t, P(. | b=0)) + Multinomial(t, P(. | b=1))``, with
  :func:`report_pattern_probabilities` (IRR fresh per report).

Population truth at the count level (:func:`place_holders`,
:func:`bloom_bit_truth`): exact for direct encodings (the joint law of the
holders of every place under :meth:`SyntheticCity.draw_sets`), exact
marginals but independent cells for Bloom filters (the approximation is
measured in docs/simulation.md).

Memory and time depend on the number of cells, not on the number of
clients: 10^9 clients cost what 10^3 do.

>>> from protocol.randomizers import Randomizer
>>> p0, p1 = report_pattern_probabilities(Randomizer(mode="asymmetric", level=1.0), (1.0, 4.0))
>>> p0.round(6).tolist(), p1.round(6).tolist()
([0.393469, 0.0, 0.471195, 0.135335], [0.0, 0.0, 0.0, 1.0])
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from aggregator.research.populations import RelaxationDraw, SyntheticCity
from protocol.accounting import sequence_pattern_probabilities
from protocol.encodings import BloomEncoding
from protocol.errors import ParameterError
from protocol.local import local_mechanism
from protocol.randomizers import Randomizer
from protocol.rng import FloatArray, RandomSource
from protocol.validation import check_int

IntArray = npt.NDArray[np.int64]

__all__ = [
    "bloom_bit_truth",
    "count_generator",
    "pattern_counts",
    "permanent_pattern_probabilities",
    "place_holders",
    "relaxation_draws",
    "released_ones",
    "report_pattern_probabilities",
]


def count_generator(rng: RandomSource) -> np.random.Generator:
    """A numpy generator (binomial and multinomial samplers) seeded by four 32-bit words of ``rng``.

    The scenarios keep one :class:`~protocol.rng.RandomSource` per run; the
    count samplers need numpy's exact binomial (BTPE), so they get a child
    stream derived from it (same seed, same counts).
    """
    words = rng.integers(2**32, 4)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(w) for w in words])))


# --------------------------------------------------------------------------
# noise: pattern probabilities of one bit over a chain of releases
# --------------------------------------------------------------------------


def _patterns(releases: int) -> list[tuple[int, ...]]:
    """Every report pattern, in ``itertools.product((0, 1), repeat=releases)`` order (index = binary)."""
    return list(itertools.product((0, 1), repeat=releases))


def permanent_pattern_probabilities(mode: str, levels: tuple[float, ...]) -> tuple[FloatArray, FloatArray]:
    """``P(pattern | b)`` of the memoized bit ``[b + V_i > 1/2]`` at ``levels`` (lazy-relaxed), b = 0 and 1.

    * symmetric: :func:`protocol.accounting.sequence_pattern_probabilities`
      (``P(y | b=1) = P0(not y)``, the Laplace chain is symmetric);
    * asymmetric (``V_i = min(V_{i-1}, E_i)`` only decreases): for ``b = 0``
      the bit reads ``1^j 0^(r-j)`` with probability
      ``exp(-l_j/2) - exp(-l_{j+1}/2)`` (``l_0 = 0``, ``l_{r+1} = inf``);
      ``b = 1`` always reads all ones.
    """
    patterns = _patterns(len(levels))
    mechanism = local_mechanism(mode)
    if mechanism.two_sided:
        table = sequence_pattern_probabilities(tuple(float(x) for x in levels))
        p0 = np.array([table[y] for y in patterns])
        p1 = np.array([table[tuple(1 - b for b in y)] for y in patterns])
    elif mechanism.one_sided:
        cut = [1.0, *(math.exp(-lv / 2.0) for lv in levels), 0.0]
        p0, p1 = np.zeros(len(patterns)), np.zeros(len(patterns))
        for j in range(len(levels) + 1):
            p0[patterns.index((1,) * j + (0,) * (len(levels) - j))] = cut[j] - cut[j + 1]
        p1[-1] = 1.0
    else:
        raise ParameterError("mode", f"no noise chain for mode {mode!r}")
    return _normalized(p0), _normalized(p1)


def _normalized(p: FloatArray) -> FloatArray:
    p = np.clip(p, 0.0, None)
    out: FloatArray = p / p.sum()
    return out


def _irr_matrix(randomizer: Randomizer) -> FloatArray:
    """``T[B, r] = P(report r | permanent B)`` of one transmission."""
    channel = randomizer.irr_channel()  # asymmetric (irr_q, 1): 1 -> 1; 0 -> 1 w.p. irr_q
    if channel is None:
        return np.eye(2)
    p, q = channel
    return np.array([[1.0 - p, p], [1.0 - q, q]])


def report_pattern_probabilities(randomizer: Randomizer, levels: tuple[float, ...]) -> tuple[FloatArray, FloatArray]:
    """``P(report pattern | b)``, b = 0 and 1, for one memoized bit sent once at each of ``levels``.

    The permanent pattern (:func:`permanent_pattern_probabilities`) times a
    fresh IRR per report (the Kronecker product of the per-report matrices).
    With ``levels = (l,)`` this is ``(1 - p*, p*)`` and ``(1 - q*, q*)``.
    """
    p0, p1 = permanent_pattern_probabilities(randomizer.mode, levels)
    irr = _irr_matrix(randomizer)
    kernel: npt.NDArray[Any] = np.ones((1, 1))
    for _ in levels:
        kernel = np.kron(kernel, irr)
    return _normalized(p0 @ kernel), _normalized(p1 @ kernel)


# --------------------------------------------------------------------------
# drawing cell counts
# --------------------------------------------------------------------------


def _multinomial(gen: np.random.Generator, n: IntArray, pvals: FloatArray) -> IntArray:
    """``Multinomial(n_c, pvals)`` per cell, shape ``(*n.shape, len(pvals))``."""
    flat = np.asarray(n, dtype=np.int64).ravel()
    out = gen.multinomial(flat, pvals)
    return np.asarray(out, dtype=np.int64).reshape(*np.shape(n), len(pvals))


def pattern_counts(truth_ones: npt.ArrayLike, totals: npt.ArrayLike, randomizer: Randomizer,
                   levels: tuple[float, ...], gen: np.random.Generator) -> IntArray:
    """Clients per report pattern in every cell, shape ``(*cells, 2^len(levels))``.

    Args:
        truth_ones: true ones per cell.
        totals: reports per cell (broadcast against ``truth_ones``).
        randomizer: the metric's randomizer (its IRR; its mode picks the chain).
        levels: the window's chain of levels, one report at each.
        gen: from :func:`count_generator`.
    """
    t = np.asarray(truth_ones, dtype=np.int64)
    n = np.broadcast_to(np.asarray(totals, dtype=np.int64), t.shape)
    if np.any(t < 0) or np.any(t > n):
        raise ParameterError("truth_ones", "must lie in [0, totals] in every cell")
    p0, p1 = report_pattern_probabilities(randomizer, levels)
    return _multinomial(gen, n - t, p0) + _multinomial(gen, t, p1)


def released_ones(truth_ones: npt.ArrayLike, totals: npt.ArrayLike, randomizer: Randomizer,
                  levels: tuple[float, ...], gen: np.random.Generator) -> IntArray:
    """Reported ones per cell at each release, shape ``(len(levels), *cells)`` (the aggregator's counts)."""
    counts = pattern_counts(truth_ones, totals, randomizer, levels, gen)
    patterns = np.array(_patterns(len(levels)), dtype=np.int64)  # (2^r, r)
    out: IntArray = np.moveaxis(counts @ patterns, -1, 0)
    return out


# --------------------------------------------------------------------------
# population truth at the count level
# --------------------------------------------------------------------------


def _draw_kernel(draws: int, p: float) -> FloatArray:
    """Row ``r``: ``Binomial(r, p)`` pmf over ``0..draws`` (how many of ``r`` draws land on a place)."""
    out = np.zeros((draws + 1, draws + 1))
    for r in range(draws + 1):
        j = np.arange(r + 1)
        out[r, : r + 1] = [math.comb(r, int(x)) for x in j] * p**j * (1.0 - p) ** (r - j)
    return out


def place_holders(city: SyntheticCity, clients: int, gen: np.random.Generator) -> IntArray:
    """Clients holding each place: one exact draw of the joint law of ``city.draw_sets`` (after de-duplication).

    A client makes ``k`` independent draws from the popularity
    (``k ~ city.size_pmf()``) and holds the distinct places drawn. Places are
    visited in order, carrying the number of clients with ``r`` draws still
    unassigned: given that none of a client's remaining draws fell on an
    earlier place, each lands on place ``i`` with ``p_i / sum_{j >= i} p_j``,
    so the clients with ``r`` remaining split multinomially by how many land
    there (``Binomial(r, .)`` pmf); the holders of place ``i`` are those with
    at least one. ``num_places`` multinomial draws of ``max_places + 1``
    categories: exact, whatever ``clients``.
    """
    check_int("clients", clients, low=0)
    pop = city.popularity()
    tail = np.cumsum(pop[::-1])[::-1]
    k = city.max_places
    remaining = np.zeros(k + 1, dtype=np.int64)
    remaining[1:] = gen.multinomial(clients, city.size_pmf())
    holders = np.zeros(city.num_places, dtype=np.int64)
    shift = np.arange(k + 1)[:, None] - np.arange(k + 1)[None, :]  # r - j
    for i in range(city.num_places):
        cond = 1.0 if i == city.num_places - 1 else min(1.0, pop[i] / tail[i])
        split = np.asarray(gen.multinomial(remaining, _draw_kernel(k, cond)), dtype=np.int64)  # (r, j)
        holders[i] = int(remaining.sum() - split[:, 0].sum())
        remaining = np.array([split[shift == r].sum() for r in range(k + 1)], dtype=np.int64)
    return holders


def bloom_hit_probabilities(city: SyntheticCity, encoding: BloomEncoding) -> FloatArray:
    """``P(A_cj)``: popularity mass of the places that set bit ``j`` in cohort ``c``, shape ``(cohorts, bits)``."""
    table = encoding.bit_table(city.names())  # (C, P, h)
    c, places, h = table.shape
    hit = np.zeros((c, places, encoding.num_bits), dtype=bool)
    hit[np.arange(c)[:, None, None], np.arange(places)[None, :, None], table] = True
    out: FloatArray = np.einsum("cpm,p->cm", hit, city.popularity())
    return out


def bloom_bit_truth(city: SyntheticCity, clients: int, encoding: BloomEncoding,
                    gen: np.random.Generator) -> tuple[IntArray, IntArray]:
    """True ``(ones (cohorts, bits), totals (cohorts,))`` of a Bloom-encoded city, at the count level.

    Exact: the clients per (cohort, set size) (one multinomial); the law of
    every cell on its own: a client with ``k`` draws sets bit ``j`` of its
    cohort iff a draw lands in ``A_cj``, probability ``1 - (1 - P(A_cj))^k``,
    so the cell is a sum over ``k`` of binomials. Approximated: the cells of
    one cohort are drawn independently, while a client's places set several
    bits at once (the per-client path's cells are positively correlated;
    docs/simulation.md measures the effect).
    """
    pmf = city.size_pmf()
    cohorts = encoding.num_cohorts
    by_size = np.asarray(gen.multinomial(clients, np.outer(np.full(cohorts, 1.0 / cohorts), pmf).ravel()),
                         dtype=np.int64).reshape(cohorts, pmf.size)
    hit = bloom_hit_probabilities(city, encoding)
    ones = np.zeros((cohorts, encoding.num_bits), dtype=np.int64)
    for k in range(1, pmf.size + 1):
        p_set = -np.expm1(k * np.log1p(-np.minimum(hit, 1.0)))
        ones += gen.binomial(by_size[:, k - 1][:, None], p_set)
    return ones, by_size.sum(axis=1)


def relaxation_draws(truth_ones: IntArray, totals: IntArray, base: Randomizer, level_to: float, repetitions: int,
                     gen: np.random.Generator) -> list[RelaxationDraw]:
    """:func:`~aggregator.research.populations.relaxation_experiment`'s counts, drawn per cell.

    Per repetition ``(first, relaxed, one_shot, extra)`` ones per cell: the
    round's pair from the chain ``(base.level, level_to)``; a fresh one-shot
    collection at ``level_to``; an independent one at ``level_to - base.level``.
    """
    n = np.broadcast_to(totals[:, None], truth_ones.shape)
    draws: list[RelaxationDraw] = []
    for _ in range(repetitions):
        first, relaxed = released_ones(truth_ones, n, base, (base.level, level_to), gen)
        one_shot = released_ones(truth_ones, n, base.with_level(level_to), (level_to,), gen)[0]
        extra_level = level_to - base.level
        extra = released_ones(truth_ones, n, base.with_level(extra_level), (extra_level,), gen)[0]
        draws.append((first, relaxed, one_shot, extra))
    return draws
