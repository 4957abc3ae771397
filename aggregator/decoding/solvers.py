"""Least-squares solvers behind the candidate fit.

* :func:`nonnegative_lasso`: ``argmin ||a - A x||^2 + sum_i lam_i x_i`` over
  ``x >= 0``; ``lam = 0`` is non-negative least squares. On the non-negative
  orthant the L1 penalty is linear, so the problem is a smooth
  bound-constrained quadratic, solved by L-BFGS-B (deterministic) after
  scaling every column to unit norm.
* :func:`least_squares_refit`: ordinary least squares on a support, with
  the influence matrix ``B = (A'A)^-1 A'`` for sandwich covariances
  ``B Cov(a) B'``. Columns that are linearly dependent on others (pivoted
  Cholesky of the normalized Gram matrix) are dropped from the support: they
  are not identifiable.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy import linalg, optimize, sparse

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Relative pivot below which a column counts as dependent on the others.
_RANK_TOL = 1e-9
_MAX_ITER = 15000


def nonnegative_lasso(
    matrix: sparse.csc_matrix, response: FloatArray, penalty: FloatArray
) -> FloatArray:
    """Minimize ``||response - matrix x||^2 + penalty' x`` subject to ``x >= 0``.

    Args:
        matrix: ``(rows, cols)`` sparse design.
        response: ``(rows,)``.
        penalty: ``(cols,)`` non-negative per-column L1 weights.

    Returns:
        ``x`` (``(cols,)``), exactly 0 where the bound is active.
    """
    norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=0)).ravel())
    usable = norms > 0
    scale = np.where(usable, norms, 1.0)
    scaled = (matrix @ sparse.diags(1.0 / scale)).tocsr()
    scaled_t = scaled.T.tocsr()
    lam = np.where(usable, penalty / scale, 0.0)

    def objective(u: FloatArray) -> tuple[float, FloatArray]:
        resid = response - scaled @ u
        return float(resid @ resid + lam @ u), lam - 2.0 * (scaled_t @ resid)

    result = optimize.minimize(
        objective,
        np.zeros(matrix.shape[1]),
        jac=True,
        method="L-BFGS-B",
        bounds=optimize.Bounds(0.0, np.where(usable, np.inf, 0.0)),
        options={
            "maxiter": _MAX_ITER,
            "maxfun": 2 * _MAX_ITER,
            "ftol": 1e-15,
            "gtol": 1e-10,
            "maxcor": 20,
        },
    )
    x: FloatArray = np.maximum(result.x, 0.0) / scale
    return x


def independent_columns(gram: FloatArray) -> IntArray:
    """Indices (ascending) of a maximal set of linearly independent columns of a Gram matrix."""
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
    sub = matrix[:, support]
    gram = (sub.T @ sub).toarray()
    kept_local = independent_columns(gram)
    sub = sub[:, kept_local]
    factor = linalg.cho_factor(
        gram[np.ix_(kept_local, kept_local)], lower=False, check_finite=False
    )
    influence = linalg.cho_solve(factor, sub.T.toarray(), check_finite=False)
    return support[kept_local], influence @ response, influence
