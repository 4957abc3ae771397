"""The regression of bit estimates on candidates (RAPPOR's design matrix).

Rows are the (cohort ``j``, bit ``b``) pairs of the cohorts that have
reports, columns the candidates; ``X[(j, b), i] = 1`` when candidate ``i``
sets bit ``b`` in cohort ``j`` (a bit hit by two hashes counts once, as in
the filter). With ``pi_i`` the share of the population holding ``i`` and
clients spread uniformly over cohorts::

    E[t_hat_jb / N_j] = sum_i X[(j, b), i] pi_i

Rows are weighted by ``N_j`` (a proportion estimated from ``N_j`` reports
has variance ~ ``1 / N_j``), so the working system is ``A pi ~ a`` with
``A = diag(sqrt(N_j)) X`` and ``a_jb = t_hat_jb / sqrt(N_j)``, and
``Var a_jb = Var(t_hat_jb) / N_j``. The weights do not depend on the
observed counts, which keeps the least-squares estimate unbiased; for a
candidate whose bits no other candidate shares it is
``sum_jb t_hat_jb / k``, unbiased for its count however its holders are
spread over cohorts. Counts are ``N pi``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from aggregator.analysis.decoding.counts import BitCounts, estimates_from_probabilities
from protocol.encodings import Encoding
from protocol.errors import ParameterError

if TYPE_CHECKING:  # SciPy is imported where a sparse matrix is built: a small fit does without it
    from scipy import sparse

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Entries of one block of the cohort-draw computation (memory bound: 8 bytes each).
_BLOCK = 4_000_000


@dataclass(frozen=True, eq=False)
class Design:
    """The weighted system ``A pi ~ a`` of the module docstring."""

    matrix: sparse.csc_matrix
    response: FloatArray
    response_variance: FloatArray
    num_reports: int
    num_bits: int
    cohort_sizes: FloatArray  # N_j of the kept cohorts; row r belongs to kept cohort r // num_bits

    @property
    def num_rows(self) -> int:
        return int(self.matrix.shape[0])

    def coefficient_variances(
        self, kept: IntArray, coefficients: FloatArray, influence: FloatArray
    ) -> FloatArray:
        """Variances of refitted coefficients: report noise plus the cohort draw.

        ``B diag(Var a) B'`` is the noise of the reports. Clients also pick
        their cohort at random, so the ``n_i`` holders of candidate ``i`` split
        over cohorts as a multinomial with shares ``s_j = N_j / N``; the
        model only expects ``s_j n_i`` in cohort ``j``. The deviation enters
        the response as ``W_i (n_ij - s_j n_i)`` with
        ``W_i[(j, b), j] = A[(j, b), i] / N_j``, so it adds
        ``sum_i n_i (B W_i) (diag s - s s') (B W_i)'`` (plug-in ``n_i`` from
        the positive refitted counts). It cancels for a candidate whose bits no
        other candidate shares, and matters for those that share bits with
        large ones.
        """
        noise = (influence * influence) @ self.response_variance
        present = np.nonzero(coefficients > 0)[0]
        if present.size == 0:
            return noise
        from scipy import sparse

        cohorts = self.cohort_sizes.size
        split = np.zeros(influence.shape[0])
        step = max(1, _BLOCK // max(cohorts * influence.shape[0], 1))
        for start in range(0, present.size, step):
            chosen = present[start : start + step]
            block = self.matrix[:, kept[chosen]].tocoo()
            cohort = block.row // self.num_bits
            # Q[r, i * C + j(r)] = A[r, i] / N_j(r); (Q' B')[i * C + j, k] = (B W_i)[k, j].
            q = sparse.csr_matrix(
                (block.data / self.cohort_sizes[cohort], (block.col * cohorts + cohort, block.row)),
                shape=(chosen.size * cohorts, self.num_rows),
            )
            g = np.asarray(q @ influence.T).reshape(chosen.size, cohorts, -1)
            split += cohort_split_variance(g, self.cohort_sizes, self.num_reports, coefficients[chosen])
        return noise + split


def cohort_split_variance(
    g: FloatArray, cohort_sizes: FloatArray, num_reports: int, coefficients: FloatArray
) -> FloatArray:
    """``sum_i n_i (B W_i) (diag s - s s') (B W_i)'`` (diagonal) from ``g[i, j, k] = (B W_i)[k, j]``.

    The cohort-draw term of :meth:`Design.coefficient_variances`, with
    ``n_i = num_reports * coefficients[i]`` and ``s = cohort_sizes / N``.
    """
    shares = cohort_sizes / cohort_sizes.sum()
    spread = np.einsum("j,ijk->ik", shares, g * g) - np.einsum("j,ijk->ik", shares, g) ** 2
    return np.asarray((num_reports * coefficients) @ spread, dtype=np.float64)


@functools.lru_cache(maxsize=4)
def _cached_bit_table(encoding: Encoding, candidates: tuple[str, ...]) -> IntArray:
    table = np.asarray(encoding.bit_table(list(candidates)), dtype=np.int64)
    table.setflags(write=False)
    return table


def candidate_bit_table(encoding: Encoding, candidates: Sequence[str]) -> IntArray:
    """``encoding.bit_table(candidates)``, read-only, cached for the last few (encoding, candidates).

    An aggregator decodes the same candidate list over and over (windows,
    rounds, polls); hashing it once saves most of a large fit's time.
    """
    return _cached_bit_table(encoding, tuple(candidates))


def check_bit_table(bit_table: npt.ArrayLike, counts: BitCounts, num_candidates: int) -> IntArray:
    """Validate ``(num_cohorts, num_candidates, num_hashes)`` bit indices against the counts."""
    table = np.asarray(bit_table)
    expected = (counts.num_cohorts, num_candidates)
    if table.ndim != 3 or table.shape[:2] != expected or table.shape[2] < 1:
        raise ParameterError(
            "bit_table", f"must have shape {expected} + (num_hashes,), got {table.shape}"
        )
    if not np.issubdtype(table.dtype, np.integer):
        raise ParameterError("bit_table", f"must hold integers, got {table.dtype}")
    if table.size and (table.min() < 0 or table.max() >= counts.num_bits):
        raise ParameterError("bit_table", f"bit indices must be in [0, {counts.num_bits})")
    return table.astype(np.int64)


def incidence(bit_table: IntArray, cohorts: IntArray, num_bits: int) -> sparse.csc_matrix:
    """0/1 matrix over (kept cohort, bit) x candidate, duplicates counted once."""
    from scipy import sparse

    _, num_candidates, _ = bit_table.shape
    sub = bit_table[cohorts]  # (kept, S, h)
    rows = (np.arange(cohorts.size)[:, None, None] * num_bits + sub).ravel()
    cols = np.broadcast_to(np.arange(num_candidates)[None, :, None], sub.shape).ravel()
    shape = (cohorts.size * num_bits, num_candidates)
    out = sparse.csc_matrix((np.ones(rows.size), (rows, cols)), shape=shape)  # sums repeats
    out.data[:] = 1.0
    return out


def build_design(counts: BitCounts, p_star: float, q_star: float, bit_table: IntArray) -> Design:
    """The weighted design for ``counts`` decoded with ``(p*, q*)``.

    Raises:
        ParameterError: ``counts`` holds no report.
    """
    from scipy import sparse

    kept, sizes, root, response, response_variance = weighted_response(counts, p_star, q_star)
    x = incidence(bit_table, kept, counts.num_bits)
    matrix = sparse.csc_matrix(sparse.diags(root) @ x)
    return Design(matrix, response, response_variance, counts.num_reports, counts.num_bits, sizes)


def weighted_response(
    counts: BitCounts, p_star: float, q_star: float
) -> tuple[IntArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """``(kept cohorts, N_j, row weights sqrt(N_j), a, Var a)`` of the module docstring.

    Raises:
        ParameterError: ``counts`` holds no report.
    """
    kept = np.nonzero(counts.totals > 0)[0]
    if kept.size == 0:
        raise ParameterError("counts", "holds no report: nothing to decode")
    estimates, variances = estimates_from_probabilities(counts, p_star, q_star)
    sizes = counts.totals[kept].astype(np.float64)
    root = np.repeat(np.sqrt(sizes), counts.num_bits)
    return kept, sizes, root, estimates[kept].ravel() / root, variances[kept].ravel() / root**2
