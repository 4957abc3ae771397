"""Empirical privacy auditing: a black-box lower bound on a mechanism's privacy loss.

A printed epsilon is a promise: for neighbouring inputs ``a`` and ``b`` and
every event ``E``, ``P(E | a) <= e^eps P(E | b)`` (and the reverse, for DP;
one-sided ADP promises only the ``a``-over-``b`` direction, ``a`` holding the
sensitive item). :func:`audit` samples the mechanism on ``a`` and ``b``,
picks a distinguishing event on one half of the samples and bounds the two
probabilities of that event on the other half, so the printed epsilon can
never silently fall below the loss that sampling exhibits.

Statistics (docs/audit.md):

* **Selection** (first half): candidate events are single outcomes, sets of
  outcomes whose smoothed empirical log-ratio exceeds a cut (ranked on one
  half of the selection samples, the cut scored on the other, so noise that
  ranks an outcome high is not rewarded), the same two on the projection of
  the outcome onto the columns where the inputs differ
  (:attr:`AuditTarget.focus`), threshold events ``s >= t`` / ``s <= t`` on
  a scalar statistic (by default the number of ones over those columns, or
  the value of a 1-D outcome), and the target's custom events and their
  complements; each in both ratio directions when ``direction == "both"``.
  The event and direction with the largest conservative estimate (the
  log-ratio of Wilson score bounds at the same confidence) are kept: the
  maximum over the two directions is taken on the selection half, so only
  one event is measured and the confidence is not split.
* **Measurement** (second half, independent of the choice): a one-sided
  Clopper-Pearson lower bound on ``P(E | numerator)`` and upper bound on
  ``P(E | denominator)``, each at confidence ``1 - alpha/2``
  (``scipy.stats.beta``); the audited lower bound is
  ``max(0, ln(p_low / p_high))``. With no occurrence under the denominator
  the upper bound is the exact ``1 - (alpha/2)^(1/n)``, so an event that is
  impossible under the neighbour gives a large finite bound, about
  ``ln(n p / ln(2/alpha))``.

Because the event is a fixed function of the first half, the two bounds hold
simultaneously with probability ``>= 1 - alpha`` and then the true loss of
that event, hence the true epsilon, is at least the reported bound:
``P(lower_bound > true epsilon) <= alpha = 1 - confidence`` per audit.

Targets are built from the product's own code (:data:`TARGETS`); the
``planted_*`` mechanisms (:data:`PLANTED`) are deliberately broken and must
be caught (their bound above their claim).

>>> result = audit(TARGETS["local-asymmetric-set-bloom"], 20_000, seed=1)
>>> 0 < result.lower_bound <= result.claimed
True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from scipy import stats

from protocol.accounting import sequence_bit_epsilon
from protocol.central import AGeoMechanism, ALapMechanism, SALapMechanism
from protocol.encodings import BloomEncoding, DirectEncoding, Encoding, Value
from protocol.errors import ParameterError
from protocol.local import local_mechanism
from protocol.params import MetricParams
from protocol.randomizers import Mode, Randomizer
from protocol.rng import FloatArray, RandomSource, SeededRandom
from protocol.validation import check_int

from .audit_targets import (
    AuditEvent,
    AuditTarget,
    BoolArray,
    Direction,
    Outcomes,
    Predicate,
    Ratio,
    Sampler,
    TargetRegistry,
)

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_SAMPLES",
    "PLANTED",
    "TARGETS",
    "AuditEvent",
    "AuditResult",
    "AuditTarget",
    "audit",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "find_target",
    "planted_targets",
    "outcome_keys",
    "planted_float_release",
    "planted_none_bit_reports",
    "planted_per_set_memo_days",
    "reachable",
    "shipped_targets",
]

IntArray = npt.NDArray[np.int64]
_T = TypeVar("_T")

DEFAULT_SAMPLES = 10**6
DEFAULT_CONFIDENCE = 1.0 - 1e-6
# Thresholds tried on a statistic with more distinct values (quantiles of the pooled half).
MAX_THRESHOLDS = 2048
# Outcome families are skipped when outcomes barely repeat (continuous outputs): fewer than
# this many samples per distinct outcome on average leaves nothing to count.
MIN_SAMPLES_PER_OUTCOME = 8


# ==========================================================================
# Targets and results
# ==========================================================================


@dataclass(frozen=True, kw_only=True)
class AuditResult:
    """One audit: the claim, the audited lower bound and the event behind it.

    Attributes:
        name: the target's name.
        claimed: the printed epsilon.
        lower_bound: ``max(0, ln(p_low / p_high))``; the true epsilon is at
            least this with probability ``>= confidence``.
        event: the distinguishing event, in words.
        ratio: ``"a/b"`` (``P(E|a) / P(E|b)``) or ``"b/a"``.
        counts: ``(k_a, n_a, k_b, n_b)`` on the measurement half.
        samples: outcomes drawn per input (both halves).
        confidence: ``1 - alpha``.
        seed: the seed of the two sample streams.
        law_p: the p-value of the outcomes under the mechanism's exact law, for a target that
            has one (:attr:`AuditTarget.law`); ``None`` otherwise.
    """

    name: str
    claimed: float
    lower_bound: float
    event: str
    ratio: Ratio
    counts: tuple[int, int, int, int]
    samples: int
    confidence: float
    seed: int
    law_p: float | None = None

    @property
    def passed(self) -> bool:
        """The audit found no loss above the claim, and the outcomes fit the exact law (where checked)."""
        return self.lower_bound <= self.claimed and (self.law_p is None or self.law_p >= 1.0 - self.confidence)

    def to_dict(self) -> dict[str, Any]:
        k_a, n_a, k_b, n_b = self.counts
        return {
            "name": self.name,
            "claimed": self.claimed,
            "lower_bound": self.lower_bound,
            "event": self.event,
            "ratio": self.ratio,
            "counts": {"k_a": k_a, "n_a": n_a, "k_b": k_b, "n_b": n_b},
            "samples": self.samples,
            "confidence": self.confidence,
            "seed": self.seed,
            "law_p": self.law_p,
            "passed": self.passed,
        }


# ==========================================================================
# Clopper-Pearson bounds and outcome keys
# ==========================================================================


def clopper_pearson_lower(k: int, n: int, alpha: float) -> float:
    """One-sided ``1 - alpha`` lower bound on a binomial ``p`` from ``k`` of ``n``: ``Beta(alpha; k, n-k+1)``."""
    if k <= 0:
        return 0.0
    return float(stats.beta.ppf(alpha, k, n - k + 1))


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided ``1 - alpha`` upper bound: ``Beta(1 - alpha; k+1, n-k)``; ``1 - alpha^(1/n)`` at ``k = 0``."""
    if k >= n:
        return 1.0
    return float(stats.beta.isf(alpha, k + 1, n - k))


def _wilson_bounds(k: npt.NDArray[Any], n: int, z: float) -> tuple[FloatArray, FloatArray]:
    """Vectorized Wilson score bounds (the cheap conservative estimate used to select)."""
    kf = np.asarray(k, dtype=np.float64)
    z2 = z * z
    center = (kf + z2 / 2.0) / (n + z2)
    half = z / (n + z2) * np.sqrt(np.maximum(kf * (n - kf) / n, 0.0) + z2 / 4.0)
    return np.maximum(center - half, 0.0), np.minimum(center + half, 1.0)


def outcome_keys(outcomes: npt.ArrayLike) -> npt.NDArray[Any]:
    """One hashable key per outcome: the value (1-D), packed bits (bool rows up to 63 columns), or row bytes.

    The key depends only on the dtype and the width, so the same row always
    gets the same key.
    """
    x = np.asarray(outcomes)
    if x.ndim == 1:
        return x
    if x.ndim != 2:
        raise ParameterError("outcomes", f"must be a 1-D or 2-D array, got {x.ndim} dimensions")
    if x.dtype == np.bool_ and x.shape[1] <= 63:
        weights = np.left_shift(np.int64(1), np.arange(x.shape[1], dtype=np.int64))
        return x.astype(np.int64) @ weights
    rows = np.ascontiguousarray(x)
    return rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()


def _describe_row(row: npt.NDArray[Any]) -> str:
    if row.ndim == 0:
        return repr(row.item())
    if row.dtype == np.bool_:
        return "".join("1" if b else "0" for b in row)
    return "(" + ", ".join(f"{v:g}" for v in row.tolist()) + ")"


# ==========================================================================
# Candidate events
# ==========================================================================


@dataclass(frozen=True)
class _Family:
    """Candidate events with their selection counts under the numerator and the denominator input."""

    ratio: Ratio
    num: npt.NDArray[Any]
    den: npt.NDArray[Any]
    build: Callable[[int], tuple[str, Predicate]]
    sizes: tuple[int, int] | None = None  # (n_num, n_den) when not the whole selection half


@dataclass(frozen=True)
class _Choice:
    ratio: Ratio
    event: str
    predicate: Predicate
    score: float


def _ratios(direction: Direction) -> tuple[Ratio, ...]:
    return ("a/b", "b/a") if direction == "both" else ("a/b",)


def _oriented(ratio: Ratio, on_a: _T, on_b: _T) -> tuple[_T, _T]:
    """``(numerator, denominator)``: ``a``'s and ``b``'s, in the ratio's order."""
    return (on_a, on_b) if ratio == "a/b" else (on_b, on_a)


def _in_keys(project: Callable[[Outcomes], Outcomes], members: npt.NDArray[Any]) -> Predicate:
    return lambda outcomes: np.isin(outcome_keys(project(outcomes)), members)


def _whole(outcomes: Outcomes) -> Outcomes:
    return outcomes


def _key_families(
    project: Callable[[Outcomes], Outcomes], label: str, sel_a: Outcomes, sel_b: Outcomes,
    ratios: tuple[Ratio, ...],
) -> list[_Family]:
    """Single outcomes and log-ratio cut sets, on ``project(outcomes)``."""
    rows_a, rows_b = project(sel_a), project(sel_b)
    keys_a, keys_b = outcome_keys(rows_a), outcome_keys(rows_b)
    uniq, first, inverse = np.unique(np.concatenate([keys_a, keys_b]), return_index=True, return_inverse=True)
    if uniq.size * MIN_SAMPLES_PER_OUTCOME > keys_a.size + keys_b.size and uniq.size > 64:
        return []  # outcomes barely repeat: nothing to count
    inv_a, inv_b = inverse[: keys_a.size], inverse[keys_a.size :]
    count_a, count_b = np.bincount(inv_a, minlength=uniq.size), np.bincount(inv_b, minlength=uniq.size)

    def single(i: int) -> tuple[str, Predicate]:
        j = int(first[i])
        row = rows_a[j] if j < keys_a.size else rows_b[j - keys_a.size]
        return f"{label} == {_describe_row(np.asarray(row))}", _in_keys(project, uniq[i : i + 1])

    # Cut sets: the outcomes are ranked on the first half of the selection samples and the cut is
    # scored on the second half, so a set is not rewarded for the noise that ranked it high.
    half_a, half_b = keys_a.size // 2, keys_b.size // 2
    rank_a = np.bincount(inv_a[:half_a], minlength=uniq.size)
    rank_b = np.bincount(inv_b[:half_b], minlength=uniq.size)
    score_a, score_b = count_a - rank_a, count_b - rank_b
    families: list[_Family] = []
    for ratio in ratios:
        num, den = _oriented(ratio, count_a, count_b)
        families.append(_Family(ratio, num, den, single))
        rank_num, rank_den = _oriented(ratio, rank_a, rank_b)
        log_ratio = np.log(rank_num + 0.5) - np.log(rank_den + 0.5)
        order = np.argsort(-log_ratio, kind="stable")
        score_num, score_den = _oriented(ratio, score_a, score_b)
        sizes = _oriented(ratio, keys_a.size - half_a, keys_b.size - half_b)

        def cut_set(j: int, order: IntArray = order, log_ratio: FloatArray = log_ratio) -> tuple[str, Predicate]:
            text = f"{label} in the {j + 1} outcomes of empirical log-ratio >= {log_ratio[order[j]]:.3g}"
            return text, _in_keys(project, np.sort(uniq[order[: j + 1]]))

        families.append(_Family(
            ratio, np.cumsum(score_num[order]), np.cumsum(score_den[order]), cut_set, sizes=sizes))
    return families


def _threshold_candidates(values: FloatArray) -> FloatArray:
    uniq = np.unique(values)
    if uniq.size <= MAX_THRESHOLDS:
        return uniq
    return np.unique(np.quantile(uniq, np.linspace(0.0, 1.0, MAX_THRESHOLDS), method="inverted_cdf"))


def _threshold_families(
    statistic: Callable[[Outcomes], FloatArray], label: str, sel_a: Outcomes, sel_b: Outcomes,
    ratios: tuple[Ratio, ...],
) -> list[_Family]:
    """Events ``s >= t`` and ``s <= t`` for thresholds ``t`` on the statistic."""
    s_a, s_b = (np.asarray(statistic(x), dtype=np.float64) for x in (sel_a, sel_b))
    s_a, s_b = np.sort(s_a[~np.isnan(s_a)]), np.sort(s_b[~np.isnan(s_b)])
    cuts = _threshold_candidates(np.concatenate([s_a, s_b]))
    if cuts.size == 0:
        return []
    at_least = (s_a.size - np.searchsorted(s_a, cuts, "left"), s_b.size - np.searchsorted(s_b, cuts, "left"))
    at_most = (np.searchsorted(s_a, cuts, "right"), np.searchsorted(s_b, cuts, "right"))
    families: list[_Family] = []
    for op, (on_a, on_b) in ((">=", at_least), ("<=", at_most)):
        for ratio in ratios:
            num, den = _oriented(ratio, on_a, on_b)

            def build(i: int, op: str = op) -> tuple[str, Predicate]:
                t = float(cuts[i])
                if op == ">=":
                    return f"{label} >= {t:.6g}", lambda x: np.asarray(statistic(x)) >= t
                return f"{label} <= {t:.6g}", lambda x: np.asarray(statistic(x)) <= t

            families.append(_Family(ratio, num, den, build))
    return families


def _complement(predicate: Predicate) -> Predicate:
    return lambda outcomes: ~np.asarray(predicate(outcomes), dtype=bool)


def _custom_families(events: tuple[AuditEvent, ...], sel_a: Outcomes, sel_b: Outcomes, ratios: tuple[Ratio, ...]) -> list[_Family]:
    """The target's events and their complements."""
    named: list[tuple[str, Predicate]] = []
    for event in events:
        named.append((event.name, event.predicate))
        named.append((f"not ({event.name})", _complement(event.predicate)))
    if not named:
        return []
    on_a = np.array([np.count_nonzero(p(sel_a)) for _, p in named])
    on_b = np.array([np.count_nonzero(p(sel_b)) for _, p in named])
    return [_Family(ratio, *_oriented(ratio, on_a, on_b), lambda i: named[i]) for ratio in ratios]


def _default_statistic(target: AuditTarget, sample: Outcomes) -> tuple[Callable[[Outcomes], FloatArray], str]:
    """The statistic of threshold events and its label: the target's, the value, or ones over ``focus``."""
    if target.statistic is not None:
        return target.statistic, "statistic"
    if sample.ndim == 1:
        return (lambda x: np.asarray(x, dtype=np.float64)), "output"
    if target.focus:
        cols = list(target.focus)
        return (lambda x: np.asarray(x)[:, cols].sum(axis=1, dtype=np.float64)), f"ones over bits {tuple(cols)}"
    return (lambda x: np.asarray(x).sum(axis=1, dtype=np.float64)), "ones"


def _families(target: AuditTarget, sel_a: Outcomes, sel_b: Outcomes) -> Iterator[_Family]:
    ratios = _ratios(target.direction)
    yield from _key_families(_whole, "outcome", sel_a, sel_b, ratios)
    if target.focus and sel_a.ndim == 2:
        cols = list(target.focus)
        yield from _key_families(lambda x: np.asarray(x)[:, cols], f"columns {tuple(cols)}", sel_a, sel_b, ratios)
    statistic, label = _default_statistic(target, sel_a)
    yield from _threshold_families(statistic, label, sel_a, sel_b, ratios)
    yield from _custom_families(target.events, sel_a, sel_b, ratios)


def _select(target: AuditTarget, sel_a: Outcomes, sel_b: Outcomes, alpha: float) -> _Choice:
    """The candidate with the largest Wilson log-ratio on the selection half."""
    z = float(stats.norm.isf(alpha / 2.0))
    best: _Choice | None = None
    for family in _families(target, sel_a, sel_b):
        n_num, n_den = family.sizes or _oriented(family.ratio, len(sel_a), len(sel_b))
        low, _ = _wilson_bounds(family.num, n_num, z)
        _, high = _wilson_bounds(family.den, n_den, z)
        with np.errstate(divide="ignore"):
            score = np.log(low) - np.log(high)
        if score.size == 0:
            continue
        i = int(np.argmax(score))
        if best is None or score[i] > best.score:
            text, predicate = family.build(i)
            best = _Choice(family.ratio, text, predicate, float(score[i]))
    if best is None:
        raise ParameterError("target", f"{target.name}: no candidate event")
    return best


# ==========================================================================
# The audit
# ==========================================================================


def _draw(sampler: Sampler, n: int, rng: RandomSource, field: str) -> Outcomes:
    out = np.asarray(sampler(n, rng))
    if out.ndim not in (1, 2) or out.shape[0] != n:
        raise ParameterError(field, f"must return {n} outcomes (a 1-D or 2-D array), got shape {out.shape}")
    return out


def audit(
    target: AuditTarget, samples: int = DEFAULT_SAMPLES, *, seed: int, confidence: float = DEFAULT_CONFIDENCE
) -> AuditResult:
    """Audit one target: a lower bound on its true epsilon, at ``confidence``.

    Draws ``samples`` outcomes for each input from two seeded streams, selects
    the event on the first half and measures it on the second (module
    docstring). With probability at least ``confidence`` over the sampling,
    the true epsilon of the mechanism (for this neighbour, in the audited
    direction) is at least ``lower_bound``: the event is fixed before the
    second half is looked at, and each Clopper-Pearson bound fails with
    probability at most ``(1 - confidence) / 2``. A target with a law check
    (:attr:`AuditTarget.law`) is also tested on all its outcomes against its
    exact law, at ``1 - confidence``: a correct mechanism then fails the audit
    with probability at most about ``2 (1 - confidence)``.

    Args:
        target: the mechanism and the neighbours.
        samples: outcomes per input, >= 4 (10**6 gives a tight bound).
        seed: seed of the sample streams (same seed, same result).
        confidence: ``1 - alpha`` in (0, 1); default ``1 - 1e-6``.

    Returns:
        The :class:`AuditResult`.

    Raises:
        ParameterError: bad ``samples`` or ``confidence``, or a sampler
            returning the wrong shape.
    """
    check_int("samples", samples, low=4)
    if isinstance(confidence, bool) or not isinstance(confidence, float | int) or not 0 < confidence < 1:
        raise ParameterError("confidence", f"must be in (0, 1), got {confidence!r}")
    alpha = 1.0 - float(confidence)
    if target.max_samples is not None:
        samples = min(samples, target.max_samples)
    rng_a, rng_b = (SeededRandom(s) for s in np.random.SeedSequence(seed).spawn(2))
    out_a = _draw(target.sample_a, samples, rng_a, "sample_a")
    out_b = _draw(target.sample_b, samples, rng_b, "sample_b")
    half = samples // 2
    choice = _select(target, out_a[:half], out_b[:half], alpha)
    meas_a, meas_b = out_a[half:], out_b[half:]
    k_a = int(np.count_nonzero(choice.predicate(meas_a)))
    k_b = int(np.count_nonzero(choice.predicate(meas_b)))
    (k_num, n_num), (k_den, n_den) = _oriented(choice.ratio, (k_a, len(meas_a)), (k_b, len(meas_b)))
    p_low = clopper_pearson_lower(k_num, n_num, alpha / 2.0)
    p_high = clopper_pearson_upper(k_den, n_den, alpha / 2.0)
    bound = max(0.0, math.log(p_low / p_high)) if p_low > 0 else 0.0
    return AuditResult(
        name=target.name,
        claimed=float(target.claimed),
        lower_bound=bound,
        event=choice.event,
        ratio=choice.ratio,
        counts=(k_a, len(meas_a), k_b, len(meas_b)),
        samples=samples,
        confidence=float(confidence),
        seed=seed,
        law_p=None if target.law is None else target.law(out_a, out_b),
    )


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


# ==========================================================================
# Registries
# ==========================================================================


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

PLANTED: Mapping[str, AuditTarget] = TargetRegistry({
    "planted-float-laplace": functools.partial(_planted_float, laplace=True),
    "planted-float-alap": functools.partial(_planted_float, laplace=False),
    "planted-per-set-memo": _planted_per_set_memo,
    "planted-none-bit": _planted_none_bit,
})
"""Deliberately broken mechanisms: an audit must put each one's lower bound above its claim."""


def shipped_targets() -> dict[str, Mapping[str, AuditTarget]]:
    """The shipped registries by kind: the mechanisms (:data:`TARGETS`) and the device path end to end."""
    from .audit_device import DEVICE_TARGETS  # drives client_sdk; imported when asked for

    return {"mechanisms": TARGETS, "device": DEVICE_TARGETS}


def planted_targets() -> dict[str, Mapping[str, AuditTarget]]:
    """The planted registries: broken mechanisms (:data:`PLANTED`) and device-path regressions."""
    from .audit_device import PLANTED_DEVICE

    return {"mechanisms": PLANTED, "device": PLANTED_DEVICE}


def find_target(name: str) -> AuditTarget:
    """A shipped or planted target by name (mechanisms or the device path).

    Raises:
        ParameterError: (field ``target``) no such target.
    """
    registries = [*shipped_targets().values(), *planted_targets().values()]
    for registry in registries:
        if name in registry:
            return registry[name]
    known = [n for registry in registries for n in registry]
    raise ParameterError("target", f"unknown target {name!r}; known: {', '.join(known)}")
