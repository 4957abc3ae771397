"""What colluding analysts learn by averaging their answers (multi-user paper, Sec. B, Theorem 3).

:func:`collusion_experiment` runs the averaging attack against independent
Laplace answers, Mechanism A (:class:`protocol.multianalyst.MechanismA`,
naive and calibrated attackers) and correlated answers (one lazy chain),
and compares with the paper's ``i = max{30, 18 D^2 / (m^2 eps^2)}``
colluders (:func:`colluders_needed`). A research experiment: the server
serves analysts with :func:`protocol.multianalyst.correlated_releases`.

>>> colluders_needed(0.5, 1.0)
72
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from protocol.central import check_level
from protocol.errors import ParameterError
from protocol.multianalyst import MechanismA
from protocol.relaxation import relax_laplace
from protocol.rng import FloatArray, RandomSource, as_rng
from protocol.validation import check_int, check_number

__all__ = ["SCHEMES", "CollusionResult", "Scheme", "colluders_needed", "collusion_experiment"]

Scheme = Literal["independent", "mechanism_a", "mechanism_a_calibrated", "correlated"]
SCHEMES: tuple[str, ...] = ("independent", "mechanism_a", "mechanism_a_calibrated", "correlated")
# Noise values (trials x analysts) drawn at once: 2^20 doubles are 8 MiB, and an attack holds a few such arrays.
TRIAL_BLOCK_VALUES = 1 << 20


def colluders_needed(margin: float, epsilon: float, sensitivity: float = 1.0) -> int:
    """The paper's ``i = max{30, 18 D^2 / (m^2 eps^2)}`` (rounded up).

    ``i`` colluders averaging independent ``Lap(D/eps)`` answers have
    standard error ``sigma / sqrt(i)``, ``sigma^2 = 2 D^2 / eps^2``; ``i``
    makes ``3 sigma / sqrt(i) <= m`` (about 99.7% within ``m`` by the CLT;
    the paper says 99%) and ``30`` is the CLT's rule of thumb.
    """
    m = check_number("margin", margin, positive=True)
    d = check_number("sensitivity", sensitivity, positive=True)
    e = check_level("epsilon", epsilon)
    return max(30, math.ceil(18.0 * d * d / (m * m * e * e) - 1e-9))


@dataclass(frozen=True, kw_only=True)
class CollusionResult:
    """The averaging attack's error per coalition size.

    Attributes:
        scheme: ``independent``, ``mechanism_a``, ``mechanism_a_calibrated``
            (the attacker subtracts the interval's mean) or ``correlated``.
        colluders: coalition sizes ``i`` (the first ``i`` analysts).
        rmse: root mean squared error of the coalition's estimate.
        within_margin: fraction of trials with ``|estimate - r| < margin``.
        best_member_rmse: RMSE of the most trusted member's answer alone
            (same trials; correlated: the coalition can do no better, Sec. 4.2).
        paper_colluders: ``colluders_needed(margin, eps, D)``.
    """

    scheme: str
    colluders: tuple[int, ...]
    rmse: tuple[float, ...]
    within_margin: tuple[float, ...]
    best_member_rmse: tuple[float, ...]
    margin: float
    paper_colluders: int
    trials: int

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def _analyst_noise(
    scheme: str, trials: int, analysts: int, mech: MechanismA, levels: FloatArray, rng: RandomSource
) -> FloatArray:
    """Noise of each analyst's answer to the shared query: shape ``(trials, analysts)``."""
    if scheme == "independent":
        return rng.laplace(1.0 / mech.scale, (trials, analysts))
    if scheme in ("mechanism_a", "mechanism_a_calibrated"):
        mu = mech.draw_locations(trials * analysts, rng).reshape(trials, analysts)
        noise = mech.answer(np.zeros(1), mu.ravel(), rng).reshape(trials, analysts)  # exact, on the grid
        return noise - mech.location_mean if scheme == "mechanism_a_calibrated" else noise
    return _correlated_chain(trials, levels / (mech.queries * mech.sensitivity), rng)


def _correlated_chain(trials: int, rates: FloatArray, rng: RandomSource) -> FloatArray:
    """Laplace noise from one lazy chain per trial: column ``j`` at rate ``rates[j]``."""
    order = np.argsort(rates, kind="stable")
    out = np.empty((trials, rates.size))
    current = rng.laplace(float(rates[order[0]]), trials)
    previous = float(rates[order[0]])
    for j in order:
        current = relax_laplace(current, previous, float(rates[j]), rng)
        previous = float(rates[j])
        out[:, j] = current
    return out


def collusion_experiment(
    scheme: Scheme,
    colluders: Sequence[int],
    *,
    epsilon: float,
    margin: float,
    sensitivity: float = 1.0,
    trials: int = 2000,
    levels: Sequence[float] | None = None,
    location: tuple[float, float] = (0.0, 0.0),
    true_value: float = 0.0,
    rng: RandomSource | int | None = None,
) -> CollusionResult:
    """Run the averaging attack of the multi-user paper (Sec. B, Theorem 3).

    Every analyst asks the same count query (true answer ``true_value``);
    a coalition of the first ``i`` analysts averages its answers.

    * ``independent``: each answer ``r + Lap(D/eps)`` (the paper's "common
      practice"); the error shrinks like ``sqrt(2) D / (eps sqrt(i))``.
    * ``mechanism_a``: ``r + Lap(mu_i, D/eps)``, ``mu_i`` uniform on
      ``location``; the error shrinks towards ``|mean(mu)|``.
    * ``mechanism_a_calibrated``: the same answers, the attacker subtracts
      the interval's mean; the error shrinks to 0 again.
    * ``correlated``: one lazy Laplace chain, analyst ``j`` at ``levels[j]``
      (default: all at ``epsilon``); the error stays at least the most
      trusted member's, ``sqrt(2) D / max_j eps_j``.
    """
    if scheme not in SCHEMES:
        raise ParameterError("scheme", f"must be one of {SCHEMES}, got {scheme!r}")
    sizes = tuple(check_int(f"colluders[{i}]", c, low=1) for i, c in enumerate(colluders))
    if not sizes:
        raise ParameterError("colluders", "must not be empty")
    n = max(sizes)
    mech = MechanismA(epsilon=epsilon, sensitivity=sensitivity, location_low=location[0], location_high=location[1])
    lv = np.full(n, float(epsilon)) if levels is None else np.asarray([check_level("levels", x) for x in levels])
    if lv.size < n:
        raise ParameterError("levels", f"must give a level to each of the {n} analysts, got {lv.size}")
    lv = lv[:n]
    check_int("trials", trials, low=1)
    source = as_rng(rng)
    columns = [i - 1 for i in sizes]
    # The most trusted member of each coalition: highest level (first one on ties).
    best = [int(np.argmax(lv[:i])) for i in sizes]
    squared = np.zeros(len(sizes))
    within = np.zeros(len(sizes), dtype=np.int64)
    best_squared = np.zeros(len(sizes))
    # Trials in blocks of at most TRIAL_BLOCK_VALUES noise values: memory is bounded by one block
    # (a few arrays of 8 MiB), whatever trials x analysts is.
    block = max(1, TRIAL_BLOCK_VALUES // n)
    for start in range(0, trials, block):
        rows = min(block, trials - start)
        noise = _analyst_noise(scheme, rows, n, mech, lv, source)
        errors = np.cumsum(noise, axis=1)[:, columns] / np.asarray(sizes)
        squared += np.sum(errors**2, axis=0)
        within += np.sum(np.abs(errors) < margin, axis=0)
        best_squared += np.sum(noise[:, best] ** 2, axis=0)
        del noise, errors
    return CollusionResult(
        scheme=scheme,
        colluders=sizes,
        rmse=tuple(float(x) for x in np.sqrt(squared / trials)),
        within_margin=tuple(float(x) / trials for x in within),
        best_member_rmse=tuple(float(x) for x in np.sqrt(best_squared / trials)),
        margin=float(margin),
        paper_colluders=colluders_needed(margin, epsilon, sensitivity),
        trials=int(trials),
    )
