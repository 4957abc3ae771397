"""Bit counts per (cohort, bit) and their unbiased de-noising (docs/decoding.md).

The aggregator keeps, per metric, window, round and cohort ``j``, the number
of reports ``N_j`` and, per bit ``b``, the number ``c_jb`` of reports with
that bit at 1. Everything in decoding starts from these two arrays,
:class:`BitCounts`; it never rescans raw reports.

A bit that is truly 1 is reported 1 with probability ``q*``, a bit that is
truly 0 with probability ``p*`` (``Randomizer.probabilities()``: PRR then
IRR). With ``t_jb`` true ones among ``N_j`` reports,
``E c_jb = q* t_jb + p* (N_j - t_jb)``, hence the unbiased estimate
(RAPPOR, Erlingsson et al. 2014, Sec. 4; asymmetric: ``q* = 1``)::

    t_hat = (c - p* N) / (q* - p*)

and, the reports being independent given the true bits, its variance::

    Var t_hat = (t q*(1 - q*) + (N - t) p*(1 - p*)) / (q* - p*)^2

reported with ``t`` replaced by ``t_hat`` clamped to ``[0, N]`` (RAPPOR's
plug-in). For the asymmetric randomizer (``q* = 1``) this is
``(N - t) p* / (1 - p*)``: at equal per-bit epsilon a rare item's variance is
``N / (e^eps - 1)`` against ``N e^eps / (e^eps - 1)^2`` for the symmetric
one, lower by the factor ``1 - e^-eps`` (docs/privacy.md).

Assumption: one report per client per window (the memoized bits make two
reports of one client dependent; the estimate stays unbiased, the variance
would be understated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from protocol.errors import ParameterError
from protocol.kernels import cohort_sums as compiled_cohort_sums
from protocol.kernels import column_sums as compiled_column_sums
from protocol.randomizers import Randomizer
from protocol.validation import check_integer_array

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Counting raw reports sums bool rows as uint8: at most 255 rows per partial sum (no overflow). Rows
# are summed 255 at a time into an accumulator of about 128 KiB (in cache), as one long contiguous
# add per row of the (255, groups x bits) view; cohort-sorting works in blocks of 64 such runs.
_RUN = 255
_ACCUMULATOR_BYTES = 1 << 17
_BLOCK = _RUN * 64


def _add_column_sums(rows: npt.NDArray[np.uint8], out: IntArray) -> None:
    """``out += rows.sum(0)`` for 0/1 ``uint8`` rows, without widening every element.

    ``g`` runs of 255 rows at a time: the ``255 g`` rows viewed as ``(255, g * m)``
    (row ``a g + b`` of the span is row ``a`` of group ``b``) and reduced over the
    first axis in ``uint8`` (exact: each element sums 255 rows), so the inner loop is
    one contiguous add of ``g * m`` bytes into an accumulator that stays in cache,
    close to a streaming read. Only the ``g * m`` partial sums, 1/255 of the data,
    are widened to ``int64``; fewer than 255 rows left are one more ``uint8`` sum.
    With numba (:mod:`protocol.kernels`) one compiled pass sums four rows at a
    time into the ``uint8`` partial sums instead: the same integers.
    """
    if compiled_column_sums(rows, out):
        return
    n, m = rows.shape
    groups = max(1, _ACCUMULATOR_BYTES // max(1, m))
    start = 0
    while n - start >= _RUN:
        g = min(groups, (n - start) // _RUN)
        stop = start + _RUN * g
        partial = np.add.reduce(rows[start:stop].reshape(_RUN, g * m), axis=0, dtype=np.uint8)
        out += partial.reshape(g, m).sum(axis=0, dtype=np.int64)
        start = stop
    if start < n:
        out += np.add.reduce(rows[start:], axis=0, dtype=np.uint8)


def _as_count_array(name: str, value: Any, ndim: int) -> IntArray:
    arr = np.asarray(value)
    if arr.ndim != ndim:
        raise ParameterError(name, f"must be a {ndim}-D array, got shape {arr.shape}")
    out = check_integer_array(name, arr, low=0)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, kw_only=True, eq=False)
class BitCounts:
    """Aggregated reports of one metric (one window, one round).

    Attributes:
        ones: ``(num_cohorts, num_bits)`` integers, ``c_jb`` = reports of
            cohort ``j`` with bit ``b`` at 1.
        totals: ``(num_cohorts,)`` integers, ``N_j`` = reports of cohort ``j``.

    The arrays are copied to read-only ``int64``. Two aggregates of the same
    metric add up with ``+`` (batches, windows).
    """

    ones: IntArray
    totals: IntArray

    def __post_init__(self) -> None:
        ones = _as_count_array("ones", self.ones, 2)
        totals = _as_count_array("totals", self.totals, 1)
        if ones.shape[0] != totals.shape[0]:
            raise ParameterError(
                "totals", f"must have one entry per cohort ({ones.shape[0]}), got {totals.shape[0]}"
            )
        if ones.shape[0] == 0 or ones.shape[1] == 0:
            raise ParameterError(
                "ones", f"must have at least one cohort and one bit, got shape {ones.shape}"
            )
        if np.any(ones > totals[:, None]):
            j, b = np.argwhere(ones > totals[:, None])[0]
            raise ParameterError(
                "ones",
                f"cohort {j} bit {b}: {ones[j, b]} ones exceed the {totals[j]} reports of the cohort",
            )
        object.__setattr__(self, "ones", ones)
        object.__setattr__(self, "totals", totals)

    @property
    def num_cohorts(self) -> int:
        return int(self.ones.shape[0])

    @property
    def num_bits(self) -> int:
        return int(self.ones.shape[1])

    @property
    def num_reports(self) -> int:
        return int(self.totals.sum())

    def __add__(self, other: BitCounts) -> BitCounts:
        if not isinstance(other, BitCounts):
            return NotImplemented
        if other.ones.shape != self.ones.shape:
            raise ParameterError(
                "counts", f"shapes differ: {self.ones.shape} and {other.ones.shape}"
            )
        return BitCounts(ones=self.ones + other.ones, totals=self.totals + other.totals)

    def check_shape(self, num_cohorts: int, num_bits: int) -> None:
        """Raise ``ParameterError('counts', ...)`` unless the shape is ``(num_cohorts, num_bits)``."""
        if self.ones.shape != (num_cohorts, num_bits):
            raise ParameterError(
                "counts",
                f"must be {num_cohorts} cohorts x {num_bits} bits for this metric, got {self.ones.shape}",
            )

    @classmethod
    def zeros(cls, num_cohorts: int, num_bits: int) -> BitCounts:
        return cls(
            ones=np.zeros((num_cohorts, num_bits), np.int64), totals=np.zeros(num_cohorts, np.int64)
        )

    @classmethod
    def from_reports(
        cls, reports: npt.ArrayLike, cohorts: npt.ArrayLike, num_cohorts: int
    ) -> BitCounts:
        """Count raw reports: ``reports`` ``(n, num_bits)`` bools, ``cohorts`` ``(n,)`` ints.

        Integer column sums (:func:`_add_column_sums`), no float copy: one
        cohort, or cohorts already in order (reports stored cohort by cohort),
        are summed in place; otherwise each block of 16,320 rows is sorted by
        cohort (a stable radix sort of 16-bit keys, the gather in cache) and
        summed cohort by cohort. Totals are one ``bincount``.
        """
        rep = np.asarray(reports)
        coh = np.asarray(cohorts)
        if rep.ndim != 2 or rep.dtype != np.bool_:
            raise ParameterError(
                "reports", f"must be a 2-D bool array, got {rep.dtype} shape {rep.shape}"
            )
        if coh.shape != (rep.shape[0],) or not np.issubdtype(coh.dtype, np.integer):
            raise ParameterError(
                "cohorts", f"must be {rep.shape[0]} integers, got {coh.dtype} shape {coh.shape}"
            )
        if coh.size and (coh.min() < 0 or coh.max() >= num_cohorts):
            raise ParameterError(
                "cohorts", f"must be in [0, {num_cohorts}), got {int(coh.min())}..{int(coh.max())}"
            )
        rows = rep.view(np.uint8)
        totals = np.bincount(coh, minlength=num_cohorts)
        bounds = np.concatenate(([0], np.cumsum(totals)))
        ones = np.zeros((num_cohorts, rep.shape[1]), dtype=np.int64)
        if num_cohorts == 1 or bool(np.all(coh[1:] >= coh[:-1])):
            for c in np.flatnonzero(totals):
                _add_column_sums(rows[bounds[c] : bounds[c + 1]], ones[c])
            return cls(ones=ones, totals=totals)
        if compiled_cohort_sums(rows, coh, ones):  # numba: no sort, the same integers
            return cls(ones=ones, totals=totals)
        keys = coh.astype(np.uint16) if num_cohorts <= 1 << 16 else coh
        for start in range(0, rep.shape[0], _BLOCK):
            # Sorted within a block (cache-sized, a radix sort for 16-bit keys): the gather stays in cache.
            block_keys = keys[start : start + _BLOCK]
            order = np.argsort(block_keys, kind="stable")
            block = rows[start : start + _BLOCK][order]
            edges = np.concatenate(([0], np.cumsum(np.bincount(block_keys, minlength=num_cohorts))))
            for c in np.flatnonzero(edges[1:] > edges[:-1]):
                _add_column_sums(block[edges[c] : edges[c + 1]], ones[c])
        return cls(ones=ones, totals=totals)

    @classmethod
    def from_rows(
        cls,
        *,
        num_cohorts: int,
        num_bits: int,
        cohort: npt.ArrayLike,
        bit: npt.ArrayLike,
        ones: npt.ArrayLike,
        report_totals: npt.ArrayLike,
    ) -> BitCounts:
        """Build from storage rows ``(cohort, bit, ones)`` plus per-cohort report totals.

        Rows repeating a ``(cohort, bit)`` are summed; missing rows count 0.
        """
        c = np.asarray(cohort, dtype=np.int64)
        b = np.asarray(bit, dtype=np.int64)
        v = np.asarray(ones, dtype=np.int64)
        if not c.shape == b.shape == v.shape or c.ndim != 1:
            raise ParameterError("rows", "cohort, bit and ones must be 1-D arrays of one length")
        if c.size and (c.min() < 0 or c.max() >= num_cohorts):
            raise ParameterError("cohort", f"must be in [0, {num_cohorts})")
        if b.size and (b.min() < 0 or b.max() >= num_bits):
            raise ParameterError("bit", f"must be in [0, {num_bits})")
        flat = np.bincount(c * num_bits + b, weights=v, minlength=num_cohorts * num_bits)
        return cls(
            ones=flat.reshape(num_cohorts, num_bits).astype(np.int64),
            totals=np.asarray(report_totals),
        )


def check_probabilities(p_star: float, q_star: float) -> None:
    """``0 <= p* < q* <= 1``: a bit carries information."""
    if not 0.0 <= p_star < q_star <= 1.0:
        raise ParameterError(
            "probabilities", f"need 0 <= p* < q* <= 1, got p*={p_star!r}, q*={q_star!r}"
        )


def estimates_from_probabilities(
    counts: BitCounts, p_star: float, q_star: float
) -> tuple[FloatArray, FloatArray]:
    """:func:`bit_estimates` for explicit ``(p*, q*)`` (RAPPOR files give them directly)."""
    check_probabilities(p_star, q_star)
    c = counts.ones.astype(np.float64)
    n = counts.totals.astype(np.float64)[:, None]
    gap = q_star - p_star
    estimates = (c - p_star * n) / gap
    t = np.clip(estimates, 0.0, n)
    variances = (t * q_star * (1.0 - q_star) + (n - t) * p_star * (1.0 - p_star)) / gap**2
    return estimates, variances


def bit_estimates(counts: BitCounts, randomizer: Randomizer) -> tuple[FloatArray, FloatArray]:
    """Unbiased true-one counts per (cohort, bit) and their variances.

    Args:
        counts: the aggregates.
        randomizer: the randomizer the reports were made with (a round's
            randomizer for a relaxation round: ``params.randomizer(level)``).

    Returns:
        ``(estimates, variances)``, both ``(num_cohorts, num_bits)`` floats:
        ``t_hat = (c - p* N) / (q* - p*)`` and the plug-in variance of the
        module docstring. Estimates may be negative or exceed ``N``.
    """
    p_star, q_star = randomizer.probabilities()
    return estimates_from_probabilities(counts, p_star, q_star)
