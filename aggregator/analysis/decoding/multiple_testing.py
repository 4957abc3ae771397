"""Detection: one-sided z-tests with multiple-testing control.

Each candidate ``i`` is tested for ``H0: n_i = 0`` against ``n_i > 0`` with
``z_i = n_hat_i / se_i`` and the normal p-value ``p_i = 1 - Phi(z_i)``.
Every candidate counts in the family (``S`` of them), fitted or not; an
unfitted candidate has ``p_i = 1``.

* ``"bonferroni"``: detect when ``p_i <= alpha / S``. Controls the
  family-wise error rate ``P(any false detection) <= alpha`` under any
  dependence (RAPPOR's default correction).
* ``"bh"``: Benjamini-Hochberg step-up: with ``p_(1) <= ... <= p_(S)``, let
  ``k = max{i : p_(i) <= i alpha / S}`` and detect the ``k`` smallest. Controls
  the false discovery rate ``E[false / max(detected, 1)] <= alpha`` for
  independent or positively dependent tests (Benjamini & Hochberg 1995,
  Benjamini & Yekutieli 2001). Candidates sharing Bloom bits have
  correlated estimates; the control is then approximate.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

from aggregator.analysis.decoding.normal import upper_tail
from protocol.errors import ParameterError
from protocol.validation import check_probability

Correction = Literal["bonferroni", "bh"]
CORRECTIONS: tuple[str, ...] = ("bonferroni", "bh")
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def check_alpha(alpha: float, name: str = "alpha") -> float:
    return check_probability(name, alpha, open_low=True, open_high=True)


def check_correction(correction: str) -> str:
    if correction not in CORRECTIONS:
        raise ParameterError("correction", f"must be one of {CORRECTIONS}, got {correction!r}")
    return correction


def one_sided_p_values(estimates: FloatArray, std_errors: FloatArray) -> FloatArray:
    """``1 - Phi(est / se)``; 1 where the standard error is NaN (not fitted).

    A zero standard error (exact, trusted data) gives 0 for a positive
    estimate and 1 otherwise.
    """
    est = np.asarray(estimates, dtype=np.float64)
    se = np.asarray(std_errors, dtype=np.float64)
    out = np.ones_like(est)
    exact = se == 0.0
    out[exact] = np.where(est[exact] > 0.0, 0.0, 1.0)
    noisy = np.isfinite(se) & (se > 0.0)
    out[noisy] = upper_tail(est[noisy] / se[noisy])
    return out


def detect(p_values: FloatArray, alpha: float, correction: str) -> BoolArray:
    """Detections at family level ``alpha`` (module docstring)."""
    check_alpha(alpha)
    check_correction(correction)
    p = np.asarray(p_values, dtype=np.float64)
    family = p.size
    if family == 0:
        return np.zeros(0, dtype=bool)
    if correction == "bonferroni":
        return p <= alpha / family
    ranked = np.sort(p, kind="stable")
    passing = np.nonzero(ranked <= alpha * np.arange(1, family + 1) / family)[0]
    if passing.size == 0:
        return np.zeros(family, dtype=bool)
    return p <= ranked[passing[-1]]
