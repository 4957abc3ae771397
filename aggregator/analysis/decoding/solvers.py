"""Least-squares solvers behind the candidate fit.

* :func:`nonnegative_lasso`: ``argmin ||a - A x||^2 + sum_i lam_i x_i`` over
  ``x >= 0``; ``lam = 0`` is non-negative least squares. On the non-negative
  orthant the L1 penalty is linear, so the problem is a bound-constrained
  quadratic; a working-set method solves it exactly (deterministic), which
  is fast because the support is small next to the candidates.
* :func:`least_squares_refit`: ordinary least squares on a support, with
  the influence matrix ``B = (A'A)^-1 A'`` for sandwich covariances
  ``B Cov(a) B'``. Columns that are linearly dependent on others (pivoted
  Cholesky of the normalized Gram matrix) are dropped from the support: they
  are not identifiable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # SciPy is imported by the functions that use it: a small fit does without it
    from scipy import sparse

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Relative pivot below which a column counts as dependent on the others.
_RANK_TOL = 1e-9
# Ridge (relative to the largest diagonal) keeping a working set's Gram matrix positive definite.
_RIDGE = 1e-12
# Optimality tolerance on the gradient of the unit-column problem, and columns added per step.
_KKT_TOL = 1e-9
_BATCH = 64


def _restricted_solve(
    columns: sparse.csc_matrix, response: FloatArray, penalty: FloatArray
) -> FloatArray:
    """The problem on a working set, as an NNLS: with ``G = R'R``, ``min ||R x - R^-T d||``."""
    from scipy import linalg, optimize  # here: slow to import, and only these fits need them

    gram = (columns.T @ columns).toarray()
    gram[np.diag_indices_from(gram)] += _RIDGE * max(float(np.max(np.diag(gram))), 1.0)
    upper = linalg.cholesky(gram, lower=False, check_finite=False)
    target = columns.T @ response - penalty / 2.0
    rhs = linalg.solve_triangular(upper, target, trans="T", lower=False, check_finite=False)
    x, _ = optimize.nnls(upper, rhs, maxiter=50 * max(gram.shape[0], 1))
    return np.asarray(x, dtype=np.float64)


def nonnegative_lasso(
    matrix: sparse.csc_matrix,
    response: FloatArray,
    penalty: FloatArray,
    start: IntArray | None = None,
) -> FloatArray:
    """Minimize ``||response - matrix x||^2 + penalty' x`` subject to ``x >= 0``.

    A working-set method, exact up to rounding: solve the problem on a few
    columns (an NNLS on their Cholesky factor), then add the outside
    columns whose gradient ``penalty_i - 2 A_i' r`` is negative (the most
    negative first, :data:`_BATCH` at a time) and drop members at 0 with a
    positive gradient, until no column violates the optimality conditions.
    Columns are scaled to unit norm first; all-zero columns stay at 0.

    Args:
        matrix: ``(rows, cols)`` sparse design.
        response: ``(rows,)``.
        penalty: ``(cols,)`` non-negative per-column L1 weights.
        start: optional initial working set (e.g. a previous support).

    Returns:
        ``x`` (``(cols,)``), exactly 0 outside the support.
    """
    from scipy import sparse

    cols = matrix.shape[1]
    norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=0)).ravel())
    usable = norms > 0
    scale = np.where(usable, norms, 1.0)
    scaled = sparse.csc_matrix(matrix @ sparse.diags(1.0 / scale))
    scaled_t = scaled.T.tocsr()
    lam = penalty / scale
    work = np.zeros(0, dtype=np.int64) if start is None else np.unique(start[usable[start]])
    values = np.zeros(0)
    for _ in range(cols + 1):
        values = (
            _restricted_solve(scaled[:, work], response, lam[work]) if work.size else np.zeros(0)
        )
        resid = response - scaled[:, work] @ values
        grad = lam - 2.0 * (scaled_t @ resid)
        outside = usable.copy()
        outside[work] = False
        violators = np.nonzero(outside & (grad < -_KKT_TOL))[0]
        if violators.size == 0:
            break
        entering = violators[np.argsort(grad[violators], kind="stable")[:_BATCH]]
        staying = work[(values > 0) | (grad[work] <= _KKT_TOL)]
        work = np.union1d(staying, entering)
    x = np.zeros(cols)
    x[work] = values
    return x / scale


def independent_columns(gram: FloatArray) -> IntArray:
    """Indices (ascending) of a maximal set of linearly independent columns of a Gram matrix."""
    from scipy import linalg

    diag = np.sqrt(np.diag(gram))
    if gram.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    keep = diag > 0
    norm = np.where(keep, diag, 1.0)
    corr = gram / np.outer(norm, norm)
    corr[~keep, :] = 0.0
    corr[:, ~keep] = 0.0
    _, piv, rank, _ = linalg.lapack.dpstrf(corr, tol=_RANK_TOL, lower=0)
    return np.sort(piv[:rank] - 1).astype(np.int64)


def least_squares_refit(
    matrix: sparse.csc_matrix, response: FloatArray, support: IntArray
) -> tuple[IntArray, FloatArray, FloatArray]:
    """OLS of ``response`` on the columns ``support``.

    Returns:
        ``(kept, coefficients, influence)``: the identifiable part of the
        support (ascending), their OLS coefficients and the influence matrix
        ``B = (A'A)^-1 A'`` (``coefficients = B response``), from which any
        covariance of the response gives the coefficients' one
        (``B Cov B'``; independent rows: ``Var coef_i = sum_r B_ir^2 v_r``).
    """
    if support.size == 0:
        return support, np.zeros(0), np.zeros((0, matrix.shape[0]))
    from scipy import linalg

    sub = matrix[:, support]
    gram = (sub.T @ sub).toarray()
    kept_local = independent_columns(gram)
    sub = sub[:, kept_local]
    factor = linalg.cho_factor(
        gram[np.ix_(kept_local, kept_local)], lower=False, check_finite=False
    )
    influence = linalg.cho_solve(factor, sub.T.toarray(), check_finite=False)
    return support[kept_local], influence @ response, influence
