"""The ordinary least-squares fit of a small design with NumPy alone.

The general fit (:mod:`~aggregator.analysis.decoding.design`,
:mod:`~aggregator.analysis.decoding.solvers`) keeps the design sparse and
factors it with SciPy, which is right for thousands of candidates but costs
about half a second of imports before any arithmetic. A fit of a few hundred
candidates on a few thousand (cohort, bit) rows, the shape of a RAPPOR
file decoded from the shell, fits in a dense matrix of a few megabytes. This
module computes the same OLS answer on that dense matrix: the same weighted
system ``A pi ~ a``, coefficients ``B a`` with ``B = (A'A)^-1 A'``, and the
same variances (report noise plus the cohort draw).

It answers only when every candidate is identifiable with a wide margin:
the smallest eigenvalue of the normalized Gram matrix is at least
:data:`MIN_EIGENVALUE`. Every pivot of a Cholesky factorization in any
column order is at least that eigenvalue (a Schur complement's eigenvalues
are not below the matrix's), so the general path's pivoted factorization,
which drops a column only at a pivot below ``1e-9``, keeps all columns too,
and both paths fit the same model. Otherwise, or when the matrix would be
large, it answers ``None`` and the caller takes the general path.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from aggregator.analysis.decoding.counts import BitCounts
from aggregator.analysis.decoding.design import cohort_split_variance, weighted_response

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Largest dense design (rows x candidates) fitted here: 2M entries, 16 MB.
MAX_ENTRIES = 2_000_000
# Smallest eigenvalue of the unit-diagonal Gram matrix accepted (the general path's rank cut is 1e-9).
MIN_EIGENVALUE = 1e-6
# Entries of one block of the cohort-draw computation (8 bytes each).
_BLOCK = 4_000_000


def dense_incidence(bit_table: IntArray, cohorts: IntArray, num_bits: int) -> FloatArray:
    """0/1 matrix over (kept cohort, bit) x candidate, a bit hit by two hashes set once."""
    _, num_candidates, _ = bit_table.shape
    sub = bit_table[cohorts]  # (kept, S, h)
    out = np.zeros((cohorts.size, num_bits, num_candidates))
    out[np.arange(cohorts.size)[:, None, None], sub, np.arange(num_candidates)[None, :, None]] = 1.0
    return out.reshape(cohorts.size * num_bits, num_candidates)


def _all_identifiable(gram: FloatArray) -> bool:
    diag = np.sqrt(np.diag(gram))
    if not np.all(diag > 0):
        return False
    corr = gram / np.outer(diag, diag)
    return bool(np.linalg.eigvalsh(corr)[0] >= MIN_EIGENVALUE)


def _variances(
    matrix: FloatArray, sizes: FloatArray, response_variance: FloatArray,
    num_reports: int, coefficients: FloatArray, influence: FloatArray,
) -> FloatArray:
    """``Design.coefficient_variances`` for a dense design and every column kept."""
    noise = (influence * influence) @ response_variance
    present = np.nonzero(coefficients > 0)[0]
    cohorts = sizes.size
    bits = matrix.shape[0] // cohorts
    split = np.zeros(influence.shape[0])
    # (cohort, bit, k) view of B' and, per cohort, (B W_i)[k, j] = sum_b B[k, (j, b)] A[(j, b), i] / N_j.
    b_by_cohort = influence.T.reshape(cohorts, bits, -1)
    step = max(1, _BLOCK // max(cohorts * influence.shape[0], 1))
    for start in range(0, present.size, step):
        chosen = present[start : start + step]
        block = (matrix[:, chosen] / np.repeat(sizes, bits)[:, None]).reshape(cohorts, bits, -1)
        g = np.matmul(block.transpose(0, 2, 1), b_by_cohort).transpose(1, 0, 2)  # (i, j, k)
        split += cohort_split_variance(g, sizes, num_reports, coefficients[chosen])
    return noise + split


def small_ols(
    counts: BitCounts, p_star: float, q_star: float, bit_table: IntArray
) -> tuple[IntArray, FloatArray, FloatArray] | None:
    """OLS on every candidate: ``(kept, coefficients, variances)`` as the general path's refit, or ``None``.

    ``None`` when the dense design would exceed :data:`MAX_ENTRIES` or a
    candidate is not identifiable with the margin of the module docstring.

    Raises:
        ParameterError: ``counts`` holds no report.
    """
    num_candidates = bit_table.shape[1]
    kept_cohorts = np.nonzero(counts.totals > 0)[0]
    if kept_cohorts.size * counts.num_bits * num_candidates > MAX_ENTRIES:
        return None
    _, sizes, root, response, response_variance = weighted_response(counts, p_star, q_star)
    matrix = root[:, None] * dense_incidence(bit_table, kept_cohorts, counts.num_bits)
    gram = matrix.T @ matrix
    if num_candidates == 0 or not _all_identifiable(gram):
        return None
    influence = np.asarray(np.linalg.solve(gram, matrix.T), dtype=np.float64)
    coefficients = influence @ response
    variances = _variances(matrix, sizes, response_variance, counts.num_reports, coefficients, influence)
    return np.arange(num_candidates, dtype=np.int64), coefficients, variances
