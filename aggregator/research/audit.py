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

Targets are built from the product's own code (:data:`TARGETS`, in
:mod:`.audit_shipped`); the ``planted_*`` mechanisms (:data:`PLANTED`, in
:mod:`.audit_plants`) are deliberately broken and must be caught (their bound
above their claim). This module holds the statistics and the audit; the
target types are in :mod:`.audit_targets`, the device path in
:mod:`.audit_device`.

>>> result = audit(TARGETS["local-asymmetric-set-bloom"], 20_000, seed=1)
>>> 0 < result.lower_bound <= result.claimed
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from scipy import stats

from protocol.errors import ParameterError
from protocol.rng import FloatArray, RandomSource, SeededRandom
from protocol.validation import check_int

from .audit_plants import (
    PLANTED,
    planted_float_release,
    planted_none_bit_reports,
    planted_per_set_memo_days,
)
from .audit_shipped import TARGETS, reachable
from .audit_targets import (
    AuditEvent,
    AuditTarget,
    Direction,
    Outcomes,
    Predicate,
    Ratio,
    Sampler,
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
# Registries
# ==========================================================================


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
