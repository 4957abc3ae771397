"""Summing a batch's reported bits per collection, in numpy.

A *collection* is ``(window, round, cohort)`` of one metric. For a batch of
``n`` reports with packed bits (LSB first, docs/wire.md 4), the aggregate
update is, for every collection ``g`` present and bit ``b``,

    ones[g, b] = sum over the batch's reports r in g of bit_b(r),
    reports[g] = number of the batch's reports in g,

computed with one ``lexsort``, one ``unpackbits`` and one ``add.reduceat``. The ``aggregates``
table keeps a collection's ``ones`` as one value, ``num_bits`` little-endian
int64 counts (:func:`pack_counts`, :func:`unpack_counts`), so a batch reads
and rewrites one row per collection it touches.

>>> import numpy as np
>>> packed = np.array([[0b101], [0b001], [0b100]], dtype=np.uint8)
>>> s = sum_bits(windows=[0, 0, 60], rounds=[0, 0, 0], cohorts=[1, 1, 1], packed=packed, num_bits=3)
>>> s.keys.tolist(), s.ones.tolist(), s.reports.tolist()
([[0, 0, 1], [60, 0, 1]], [[2, 0, 1], [0, 0, 1]], [2, 1])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from protocol.errors import ParameterError

IntArray = npt.NDArray[np.int64]
COUNT_DTYPE = np.dtype("<i8")
"""A stored count: little-endian int64, whatever the machine's byte order."""
AGGREGATE_COLUMNS = ("metric_id", "window_start", "round_id", "cohort", "ones")
TOTAL_COLUMNS = ("metric_id", "window_start", "round_id", "cohort", "reports")


@dataclass(frozen=True, kw_only=True)
class BatchSums:
    """Per-collection sums of a batch, collections sorted by (window, round, cohort).

    Attributes:
        keys: ``(g, 3)`` int64: window, round, cohort.
        ones: ``(g, num_bits)`` int64: reports with each bit set.
        reports: ``(g,)`` int64: reports per collection.
    """

    keys: IntArray
    ones: IntArray
    reports: IntArray

    def __post_init__(self) -> None:
        g = self.keys.shape[0]
        if self.keys.shape != (g, 3) or self.ones.shape[0] != g or self.reports.shape != (g,):
            raise ParameterError("keys", "keys, ones and reports must describe the same collections")

    def total_rows(self, metric_id: int) -> list[tuple[int, ...]]:
        """Rows of :data:`TOTAL_COLUMNS` for the ``cohort_totals`` upsert, in key order."""
        columns = (np.full(self.reports.size, metric_id), *self.keys.T, self.reports)
        return list(zip(*(c.tolist() for c in columns), strict=True))


def sum_bits(
    *,
    windows: npt.ArrayLike,
    rounds: npt.ArrayLike,
    cohorts: npt.ArrayLike,
    packed: npt.ArrayLike,
    num_bits: int,
) -> BatchSums:
    """Sum a batch's bits per collection.

    Args:
        windows, rounds, cohorts: ``(n,)`` integers, one per report.
        packed: ``(n, ceil(num_bits / 8))`` uint8, bits LSB first.
        num_bits: the metric's ``num_bits``.

    Returns:
        The per-collection sums (see :class:`BatchSums`).
    """
    keys = np.stack([np.asarray(a, dtype=np.int64).reshape(-1) for a in (windows, rounds, cohorts)], axis=1)
    packed_arr = np.asarray(packed, dtype=np.uint8)
    if packed_arr.ndim != 2 or packed_arr.shape[0] != keys.shape[0] or packed_arr.shape[1] * 8 < num_bits:
        raise ParameterError("packed", f"must have shape ({keys.shape[0]}, >= {(num_bits + 7) // 8})")
    if keys.shape[0] == 0:
        empty = np.zeros((0, 3), dtype=np.int64)
        return BatchSums(keys=empty, ones=np.zeros((0, num_bits), dtype=np.int64), reports=np.zeros(0, dtype=np.int64))
    order = np.lexsort(keys.T[::-1])  # by window, then round, then cohort (np.unique(axis=0) cost 70 us of 130)
    ordered = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], np.any(ordered[1:] != ordered[:-1], axis=1))))
    bits = np.unpackbits(packed_arr[order], axis=1, count=num_bits, bitorder="little")
    ones = np.add.reduceat(bits, starts, axis=0, dtype=np.int64)
    reports = np.diff(np.append(starts, keys.shape[0])).astype(np.int64)
    return BatchSums(keys=ordered[starts], ones=ones, reports=reports)


def pack_counts(counts: npt.ArrayLike) -> list[bytes]:
    """The stored form of each row of ``counts`` (``(g, num_bits)`` integers): little-endian int64 bytes.

    >>> pack_counts(np.array([[1, 0, 2]]))[0].hex()
    '010000000000000000000000000000000200000000000000'
    """
    rows = np.ascontiguousarray(np.atleast_2d(np.asarray(counts)), dtype=COUNT_DTYPE)
    return [row.tobytes() for row in rows]


def unpack_counts(values: list[bytes], num_bits: int) -> IntArray:
    """``(len(values), num_bits)`` int64 counts from their stored form.

    Raises:
        ValueError: a value is not ``num_bits`` counts long (a damaged row:
            nothing is guessed).
    """
    width = num_bits * COUNT_DTYPE.itemsize
    for value in values:
        if len(value) != width:
            raise ValueError(f"an aggregates row holds {len(value)} bytes, not {width} ({num_bits} counts)")
    if not values:
        return np.zeros((0, num_bits), dtype=np.int64)
    return np.frombuffer(b"".join(values), dtype=COUNT_DTYPE).reshape(len(values), num_bits).astype(np.int64)
