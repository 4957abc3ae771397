"""Unknown-dictionary discovery: frequent strings found without candidates (docs/decoding.md 8).

A *prefix* metric (:class:`protocol.encodings.PrefixEncoding`) splits its
clients into groups by cohort; cohort ``c`` reports the Bloom filter of the
first ``lengths[c]`` bytes of its value (``value + 0x00``, so a complete
value ends with the end byte). The aggregator grows a frontier of frequent
prefixes one level (one distinct length) at a time, the prefix-extension
idea of PEM (Wang et al., "Locally Differentially Private Heavy Hitter
Identification", 2019), with our bit randomizers and Bloom filters in place
of OLH:

1. Start from the empty prefix. At level ``L`` extend every frontier prefix
   by every string of ``L - len(prefix)`` symbols of ``alphabet`` plus the
   end byte (cut after the end byte; a complete prefix carries over as it is).
2. Score each candidate with the cohorts of length ``L``: per cohort its
   share, the smallest de-noised count ``t_hat`` of its ``k`` bits (a
   collision only raises a bit, so the minimum is the least contaminated)
   over the cohort's reports; the score is the median share over the
   cohorts times the level's reports (:func:`score_prefixes`: a collision
   in one cohort of several does not move it).
3. Keep the candidates whose share (score over the level's reports) is at
   least ``prune_share`` (default ``min_share / 2``: a string's prefixes are
   at least as frequent as the string) *and* whose score passes a one-sided
   Bonferroni test at ``alpha`` over the level's candidates; at most
   ``max_prefixes`` of them, largest first.
4. At the last level the survivors are whole strings (or prefixes of
   strings longer than the last length, marked incomplete). They go to the
   ordinary candidate decoder (:func:`~aggregator.analysis.decoding.fit_bit_table`)
   on the last level's cohorts alone, which gives counts with standard
   errors; the counts are scaled to all reports (``N / N_last``, clients
   pick cohorts uniformly). A string is *discovered* when it is complete,
   detected, and its estimated share is at least ``min_share``.

Privacy: each client sends one report per window, of one prefix; the
metric's guarantee (``MetricParams.guarantee``) covers it exactly as for a
Bloom metric with the same ``num_hashes`` (two values differ in at most the
``k`` bits of each of their prefixes). Nothing here touches the client.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import special

from aggregator.analysis.decoding.counts import BitCounts, bit_estimates
from aggregator.analysis.decoding.fit import CandidateFit, check_candidates, fit_bit_table
from protocol.encodings import PREFIX_END, PrefixEncoding, prefix_of
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.validation import check_int, check_probability

FloatArray = npt.NDArray[np.float64]
DEFAULT_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
# Extensions of one prefix at one level: alphabet^step grows fast; refuse a layout beyond this.
MAX_EXTENSIONS = 200_000
MAX_PREFIXES = 10_000  # the most prefixes kept per level (DiscoverySettings.max_prefixes)


@dataclass(frozen=True, kw_only=True)
class DiscoverySettings:
    """How the frontier grows.

    Attributes:
        alphabet: the symbols tried at each position (single bytes; UTF-8 of ASCII).
            Strings with other symbols are not found.
        min_share: report strings whose estimated share of all reports is at least this.
        prune_share: keep prefixes at least this frequent (default ``min_share / 2``).
        max_prefixes: the most prefixes kept per level.
        alpha: family level of the per-level tests and of the final detections.
    """

    alphabet: str = DEFAULT_ALPHABET
    min_share: float = 0.01
    prune_share: float | None = None
    max_prefixes: int = 64
    alpha: float = 0.05

    def __post_init__(self) -> None:
        if not isinstance(self.alphabet, str) or not self.alphabet:
            raise ParameterError("alphabet", "must be a non-empty string")
        data = self.alphabet.encode("utf-8")
        if len(data) != len(self.alphabet) or len(set(data)) != len(data) or PREFIX_END in data:
            raise ParameterError("alphabet", "must be distinct ASCII symbols other than the byte 0x00")
        check_probability("min_share", self.min_share, open_low=True, open_high=True)
        if self.prune_share is not None:
            check_probability("prune_share", self.prune_share, open_high=True)
        check_int("max_prefixes", self.max_prefixes, low=1, high=MAX_PREFIXES)
        check_probability("alpha", self.alpha, open_low=True, open_high=True)

    @property
    def symbols(self) -> list[bytes]:
        return [bytes([b]) for b in self.alphabet.encode("utf-8")] + [PREFIX_END]

    @property
    def pruning(self) -> float:
        return self.min_share / 2.0 if self.prune_share is None else self.prune_share


@dataclass(frozen=True, kw_only=True, eq=False)
class Discovery:
    """What :func:`discover` found.

    Attributes:
        strings: the discovered strings, most frequent first.
        fit: the candidate decoder's fit of every survivor of the last level,
            counts scaled to all reports (``fit.num_reports`` is ``N``).
        complete: per candidate of ``fit``, whether it is a whole string.
        levels: per level, ``{"length", "cohorts", "reports", "candidates", "kept"}``.
        settings: the settings used.
    """

    strings: tuple[str, ...]
    fit: CandidateFit
    complete: tuple[bool, ...]
    levels: tuple[dict[str, int], ...]
    settings: DiscoverySettings

    def rows(self) -> list[dict[str, Any]]:
        """The fit's rows (largest first) with ``complete`` and ``discovered`` added."""
        index = {c: i for i, c in enumerate(self.fit.candidates)}
        found = set(self.strings)
        return [
            {**row, "complete": self.complete[index[row["candidate"]]], "discovered": row["candidate"] in found}
            for row in self.fit.rows()
        ]

    def to_dict(self) -> dict[str, Any]:
        s = self.settings
        return {
            "discovered": list(self.strings),
            "min_share": s.min_share, "prune_share": s.pruning, "max_prefixes": s.max_prefixes,
            "alpha": s.alpha, "alphabet": s.alphabet, "num_reports": self.fit.num_reports,
            "levels": list(self.levels), "rows": self.rows(),
        }


def extend(frontier: Sequence[bytes], length: int, symbols: Sequence[bytes]) -> list[bytes]:
    """Every candidate of ``length`` bytes that extends a frontier prefix (module docstring, step 1).

    >>> extend([b"a", b"b\\x00"], 2, [b"x", b"\\x00"])
    [b'ax', b'a\\x00', b'b\\x00']
    """
    out: dict[bytes, None] = {}
    for prefix in frontier:
        if prefix.endswith(PREFIX_END):
            out[prefix] = None
            continue
        step = length - len(prefix)
        if step < 1:
            raise ParameterError("lengths", f"level {length} does not extend prefix {prefix!r}")
        if len(symbols) ** step > MAX_EXTENSIONS:
            raise ParameterError(
                "lengths", f"a step of {step} symbols makes {len(symbols) ** step} extensions per prefix "
                f"(at most {MAX_EXTENSIONS}): use more, shorter levels",
            )
        for tail in itertools.product(symbols, repeat=step):
            word = prefix + b"".join(tail)
            cut = word.find(PREFIX_END)
            out[word if cut < 0 else word[: cut + 1]] = None
    return list(out)


def _level_cohorts(encoding: PrefixEncoding, counts: BitCounts) -> list[tuple[int, list[int]]]:
    """``(length, cohorts with reports)`` per distinct length, shortest first."""
    levels = []
    for length in sorted(set(encoding.lengths)):
        cohorts = [c for c, x in enumerate(encoding.lengths) if x == length and counts.totals[c] > 0]
        if cohorts:
            levels.append((length, cohorts))
    if not levels:
        raise ParameterError("counts", "holds no report: nothing to discover")
    return levels


def score_prefixes(
    encoding: PrefixEncoding,
    counts: BitCounts,
    estimates: FloatArray,
    variances: FloatArray,
    cohorts: Sequence[int],
    prefixes: Sequence[bytes],
) -> tuple[FloatArray, FloatArray]:
    """Per prefix, its score (step 2) over ``cohorts`` and the score's variance.

    The score is ``N_L`` times the *median* over the cohorts of the prefix's
    share in the cohort (smallest de-noised count of its ``k`` bits over the
    cohort's reports). Cohorts of one level hash with different seeds, so a
    prefix that collides with a frequent one in one cohort rarely does in
    most: the median ignores it where a sum would not. Variance: that of the
    mean share times ``pi / 2`` (the median's asymptotic efficiency for
    normal errors) when there are more than two cohorts.
    """
    sizes = counts.totals[list(cohorts)].astype(np.float64)
    shares = np.empty((len(cohorts), len(prefixes)))
    share_var = np.zeros(len(prefixes))
    rows = np.arange(len(prefixes))
    for j, c in enumerate(cohorts):
        bits = encoding.prefix_bits(prefixes, c)  # (P, k)
        est = estimates[c][bits]
        pick = np.argmin(est, axis=1)
        shares[j] = est[rows, pick] / sizes[j]
        share_var += variances[c][bits][rows, pick] / sizes[j] ** 2
    reports = float(sizes.sum())
    efficiency = np.pi / 2.0 if len(cohorts) > 2 else 1.0
    score: FloatArray = np.median(shares, axis=0) * reports
    var: FloatArray = efficiency * share_var / len(cohorts) ** 2 * reports**2
    return score, var


def _keep(score: FloatArray, var: FloatArray, reports: int, settings: DiscoverySettings) -> npt.NDArray[np.int64]:
    """Indices of the kept candidates (step 3), largest score first."""
    z = float(special.ndtri(1.0 - settings.alpha / max(score.size, 1)))
    passing = (score >= settings.pruning * reports) & (score >= z * np.sqrt(np.maximum(var, 1e-12)))
    chosen = np.nonzero(passing)[0]
    order = chosen[np.argsort(-score[chosen], kind="stable")]
    return order[: settings.max_prefixes]


def _name(prefix: bytes) -> str:
    return prefix.rstrip(PREFIX_END).decode("utf-8", errors="replace")


def _scaled_fit(
    counts: BitCounts, params: MetricParams, encoding: PrefixEncoding, level: float | None, cohorts: list[int],
    prefixes: Sequence[bytes], names: Sequence[str], **settings: Any,
) -> CandidateFit:
    """The candidate decoder on ``cohorts`` alone, counts scaled to all reports (``N / N_cohorts``)."""
    sub = BitCounts(ones=counts.ones[cohorts], totals=counts.totals[cohorts])
    table = np.stack([encoding.prefix_bits(prefixes, c) for c in cohorts])
    fit = fit_bit_table(sub, params.randomizer(level).probabilities(), table, names, **settings)
    scale = counts.num_reports / sub.num_reports
    return replace(
        fit, estimates=fit.estimates * scale, std_errors=fit.std_errors * scale, lower=fit.lower * scale,
        upper=fit.upper * scale, num_reports=counts.num_reports,
    )


def _final_fit(
    counts: BitCounts, params: MetricParams, encoding: PrefixEncoding, level: float | None, cohorts: list[int],
    survivors: list[bytes], settings: DiscoverySettings,
) -> CandidateFit:
    """The candidate decoder on the last level's cohorts, counts scaled to all reports (step 4)."""
    return _scaled_fit(counts, params, encoding, level, cohorts, survivors, [_name(p) for p in survivors],
                       alpha=settings.alpha, method="auto")


def whole_prefixes(encoding: Any, candidates: Sequence[str]) -> list[bytes]:
    """Each candidate whole with its end byte, as the longest cohorts encode it.

    Raises:
        ParameterError: not a prefix encoding (``encoding``); a candidate of at least the
            longest length in bytes, or holding 0x00 (``candidates``).
    """
    if not isinstance(encoding, PrefixEncoding):
        raise ParameterError("encoding", f"needs a prefix metric, got {getattr(encoding, 'kind', encoding)!r}")
    longest = max(encoding.lengths)
    for name in candidates:
        size = len(name.encode("utf-8"))
        if "\x00" in name or size >= longest:
            raise ParameterError(
                "candidates", f"{name!r}: a candidate of a prefix metric must be shorter than its longest prefix "
                f"({longest} bytes with the end byte) and hold no 0x00, got {size} bytes; longer strings share "
                "their reports with every string of the same first bytes (use /discovered)")
    return [prefix_of(name, longest) for name in candidates]


def fit_prefix_candidates(
    counts: BitCounts, params: MetricParams, level: float | None, candidates: Sequence[str], *,
    alpha: float = 0.05, correction: str = "bonferroni", confidence: float = 0.95, method: str = "auto",
) -> CandidateFit:
    """Counts of whole strings ``candidates`` of a prefix metric (what ``/estimates`` answers).

    The ordinary decoder over every cohort would be biased: a short-prefix
    cohort encodes ``"ho"`` for both ``"home"`` and ``"house"``. Here only the
    cohorts whose length exceeds the longest candidate's byte length are used:
    there every candidate is encoded whole with its end byte
    (:func:`~protocol.encodings.prefix_of`), so the fit is the ordinary
    candidate decoder on a uniform sample of the clients (cohorts are drawn
    uniformly); counts, standard errors and intervals are scaled to all
    reports (``N / N_used``), as in discovery's last step.

    Raises:
        ParameterError: not a prefix metric (``encoding``); a candidate of at
            least the longest length in bytes (``candidates``: no cohort holds it
            whole); no report in the cohorts that do (``counts``); bad settings (named).
    """
    encoding = params.encoding
    counts.check_shape(params.num_cohorts, params.num_bits)
    names = check_candidates(candidates)
    prefixes = whole_prefixes(encoding, names)
    assert isinstance(encoding, PrefixEncoding)  # whole_prefixes refused any other encoding
    need = max(len(p) for p in prefixes)
    cohorts = [c for c, length in enumerate(encoding.lengths) if length >= need and counts.totals[c] > 0]
    if not cohorts:
        raise ParameterError("counts", f"no report in the cohorts of length >= {need} that hold the candidates whole")
    return _scaled_fit(counts, params, encoding, level, cohorts, prefixes, names, alpha=alpha,
                       correction=correction, confidence=confidence, method=method)


def discover(
    counts: BitCounts, params: MetricParams, level: float | None = None, settings: DiscoverySettings | None = None
) -> Discovery:
    """Find the frequent strings of a prefix metric (module docstring).

    Args:
        counts: aggregates of one window and round of the metric.
        params: a metric with a :class:`~protocol.encodings.PrefixEncoding`.
        level: the level the reports were made at (``None``: ``params.level``).
        settings: see :class:`DiscoverySettings`.

    Raises:
        ParameterError: not a prefix metric (``encoding``), counts of the wrong shape
            or without reports (``counts``), a level step too long (``lengths``).
    """
    settings = settings or DiscoverySettings()
    encoding = params.encoding
    if not isinstance(encoding, PrefixEncoding):
        raise ParameterError("encoding", f"discovery needs a prefix metric, got {encoding.kind!r}")
    counts.check_shape(params.num_cohorts, params.num_bits)
    estimates, variances = bit_estimates(counts, params.randomizer(level))
    frontier: list[bytes] = [b""]
    record = []
    levels = _level_cohorts(encoding, counts)
    for length, cohorts in levels:
        candidates = extend(frontier, length, settings.symbols)
        score, var = score_prefixes(encoding, counts, estimates, variances, cohorts, candidates)
        reports = int(counts.totals[cohorts].sum())
        frontier = [candidates[i] for i in _keep(score, var, reports, settings)]
        record.append({"length": length, "cohorts": len(cohorts), "reports": reports,
                       "candidates": len(candidates), "kept": len(frontier)})
        if not frontier:
            break
    if not frontier:
        frontier = [PREFIX_END]  # nothing frequent: decode the empty string alone, so the answer has its shape
    fit = _final_fit(counts, params, encoding, level, levels[-1][1], frontier, settings)
    complete = tuple(p.endswith(PREFIX_END) for p in frontier)
    share = fit.estimates / max(fit.num_reports, 1)
    found = [i for i in np.argsort(-fit.estimates, kind="stable")
             if complete[i] and fit.detected[i] and share[i] >= settings.min_share]
    return Discovery(strings=tuple(fit.candidates[i] for i in found), fit=fit, complete=complete,
                     levels=tuple(record), settings=settings)


def recall_precision(found: Sequence[str], truth: Sequence[str]) -> tuple[float, float]:
    """``(recall, precision)`` of ``found`` against the set ``truth`` (1.0 for an empty denominator)."""
    hit = len(set(found) & set(truth))
    return (hit / len(set(truth)) if truth else 1.0, hit / len(set(found)) if found else 1.0)


def levels_for(max_length: int, step: int, first: int | None = None) -> list[int]:
    """Prefix lengths ``first, first + step, ...`` ending at ``max_length + 1`` (room for the end byte)."""
    check_int("max_length", max_length, low=1, high=1023)
    check_int("step", step, low=1, high=max_length + 1)
    last = max_length + 1
    start = step if first is None else first
    out = list(range(start, last, step))
    return [*out, last] if not out or out[-1] != last else out


__all__ = ["DEFAULT_ALPHABET", "Discovery", "DiscoverySettings", "discover", "extend", "fit_prefix_candidates",
           "levels_for", "recall_precision", "score_prefixes", "whole_prefixes"]
