"""Association: the joint distribution of two variables (docs/decoding.md 9).

**How the two values are linked.** A client reports one *pair metric* per
window whose value is the pair: :func:`pair_value` ``(a, b)`` is one string,
encoded like any value (a Bloom filter of the pair, or a direct encoding over
the product domain, :func:`pair_domain`). The aggregator only keeps bit
counts, and the counts of two separately reported metrics do not identify
their joint; linking two reports would need the server to keep them side by
side. One report of the pair needs neither: it is one value of one metric,
so the client's memoized noise, its one-value-per-window rule, its ledger
and the metric's guarantee (``MetricParams.guarantee``: a categorical pair
replaced by any other pair) cover everything it sends about both variables.

**Estimates.** Over the candidates ``A x B`` (every pair of a candidate of
each variable):

* per cell, the ordinary candidate decoder (:func:`fit_candidates`): counts
  that are unbiased, with standard errors (``estimates``, ``std_errors``);
* the joint distribution on the simplex (``joint``), by ``method``:
  ``"projection"`` (default) is the Euclidean projection of the unbiased
  shares onto the simplex; ``"em"`` maximizes the composite likelihood of the bit counts,
  ``c_jb ~ Binomial(N_j, p* + (q* - p*) sum_i X[(j,b), i] pi_i)`` over the
  simplex with the EM of a mixture whose weights are shared by every
  (cohort, bit) row (:func:`em_bit_counts_run`). The plain EM is a
  contraction of rate ~0.9999 here (nearly all the information is missing),
  so both EMs are accelerated (:func:`accelerated_em`, SQUAREM), the
  bit-count one finished by Newton steps on the support
  (:func:`newton_simplex`), and they stop on a bound of the distance to the
  maximum of the concave log-likelihood; converged, the EM is as
  accurate as the projection, which stays the default for its speed
  (docs/decoding.md 9).

:func:`em_reports_fit` is RAPPOR's association EM (Fanti et al., "Building a
RAPPOR with the Unknown", 2016) for linked per-report data (two filters per
report, e.g. RAPPOR's association files,
:func:`aggregator.analysis.rappor_io.decode_rappor_association`), with
standard errors from the empirical information.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from aggregator.analysis.decoding.counts import BitCounts, check_probabilities
from aggregator.analysis.decoding.design import candidate_bit_table, incidence
from aggregator.analysis.decoding.fit import check_candidates, fit_candidates
from protocol.encodings import DirectEncoding, PrefixEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.validation import check_int

FloatArray = npt.NDArray[np.float64]
PAIR_SEPARATOR = "\x1f"  # ASCII unit separator: never in a candidate of either variable
JOINT_METHODS: tuple[str, ...] = ("projection", "em")
MAX_CELLS = 10_000


def pair_value(a: str, b: str) -> str:
    """The value a client reports for the pair ``(a, b)``: ``a + "\\x1f" + b``.

    >>> pair_value("android", "de") == "android\\x1fde"
    True

    Raises:
        ParameterError: a value holds the separator (field ``value_a`` or ``value_b``).
    """
    for name, value in (("value_a", a), ("value_b", b)):
        if not isinstance(value, str) or PAIR_SEPARATOR in value:
            raise ParameterError(name, f"must be a string without the separator \\x1f, got {value!r}")
    return f"{a}{PAIR_SEPARATOR}{b}"


def _variable(field: str, values: Sequence[str]) -> tuple[str, ...]:
    """A variable's candidates: non-empty, distinct strings; errors name ``field``."""
    try:
        return check_candidates(values)
    except ParameterError as exc:
        raise ParameterError(field, str(exc.detail)) from None


def pair_domain(values_a: Sequence[str], values_b: Sequence[str]) -> tuple[str, ...]:
    """Every pair, ``a``-major: the domain of a direct pair metric and the candidates of a Bloom one."""
    a, b = _variable("values_a", values_a), _variable("values_b", values_b)
    if len(a) * len(b) > MAX_CELLS:
        raise ParameterError("values_b", f"{len(a)} x {len(b)} cells is over {MAX_CELLS}")
    return tuple(pair_value(x, y) for x in a for y in b)


@dataclass(frozen=True, kw_only=True, eq=False)
class JointEstimate:
    """The joint distribution of two variables.

    Attributes:
        values_a, values_b: the candidates (rows, columns).
        joint: ``(A, B)`` shares on the simplex.
        estimates, std_errors: ``(A, B)`` unbiased counts and their standard errors
            (NaN where the candidate decoder left a cell out).
        num_reports: ``N``.
        method: how ``joint`` was made.
        em: how the EM ended (``method="em"`` only).
    """

    values_a: tuple[str, ...]
    values_b: tuple[str, ...]
    joint: FloatArray
    estimates: FloatArray
    std_errors: FloatArray
    num_reports: int
    method: str
    em: EMRun | None = None

    def marginals(self) -> tuple[FloatArray, FloatArray]:
        return self.joint.sum(axis=1), self.joint.sum(axis=0)

    def rows(self) -> list[dict[str, Any]]:
        """One row per cell, ``a``-major: ``a, b, share, estimate, std_error, proportion, proportion_std_error``."""
        n = max(self.num_reports, 1)
        out = []
        for i, a in enumerate(self.values_a):
            for j, b in enumerate(self.values_b):
                se = float(self.std_errors[i, j])
                out.append({
                    "a": a, "b": b, "share": float(self.joint[i, j]), "estimate": float(self.estimates[i, j]),
                    "std_error": None if np.isnan(se) else se, "proportion": float(self.estimates[i, j]) / n,
                    "proportion_std_error": None if np.isnan(se) else se / n,
                })
        return out

    def to_dict(self) -> dict[str, Any]:
        first, second = self.marginals()
        return {
            "method": self.method, "num_reports": self.num_reports,
            "em": None if self.em is None else {"iterations": self.em.iterations, "converged": self.em.converged,
                                                "gap": self.em.gap},
            "values_a": list(self.values_a), "values_b": list(self.values_b),
            "marginal_a": [float(x) for x in first], "marginal_b": [float(x) for x in second],
            "cells": self.rows(),
        }


def project_simplex(x: npt.ArrayLike) -> FloatArray:
    """The Euclidean projection of ``x`` onto ``{p >= 0, sum p = 1}`` (sort-based).

    >>> project_simplex([0.7, 0.5, -0.2]).round(6).tolist()
    [0.6, 0.4, 0.0]
    """
    v = np.asarray(x, dtype=np.float64).ravel()
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    rho = np.nonzero(u - css / np.arange(1, v.size + 1) > 0)[0][-1]
    out: FloatArray = np.maximum(v - css[rho] / (rho + 1.0), 0.0)
    return out


@dataclass(frozen=True, kw_only=True, eq=False)
class EMRun:
    """How an EM ended.

    Attributes:
        shares: the estimate on the simplex.
        iterations: EM steps taken (evaluations of the EM map, extrapolations included).
        converged: ``gap <= tolerance``.
        gap: an upper bound, in nats, on how far the log-likelihood at ``shares`` is below its
            maximum over the simplex: the Frank-Wolfe duality gap ``max_i g_i - g . pi`` of the
            (concave) log-likelihood, or after Newton steps the squared Newton decrement on the
            support (:func:`newton_simplex`).
        newton_steps: Newton steps taken (:func:`newton_simplex`).
    """

    shares: FloatArray
    iterations: int
    converged: bool
    gap: float
    newton_steps: int = 0


MAX_NEWTON_CELLS = 2_000  # a dense Hessian of this many cells is 32 MB
MAX_NEWTON_WORK = 10**10  # per-report Hessians: reports x cells^2 multiply-adds (~5 s on one core)
NEWTON_SWITCH_GAP = 1.0  # nats: the EM has found the support well enough for Newton steps
DECREMENT_BOUND = 0.46  # lambda^2 for lambda <= 0.68: the self-concordant bound f* - f <= lambda^2 holds
ACTIVE_SHARE = 1e-8  # a share below this whose gradient is below the mean is taken to be 0 by Newton


def _gap(gradient: FloatArray, pi: FloatArray) -> float:
    return float(np.max(gradient) - gradient @ pi)


def newton_simplex(
    pi: FloatArray, objective: Callable[[FloatArray], float], gradient: Callable[[FloatArray], FloatArray],
    hessian: Callable[[FloatArray, npt.NDArray[np.int64]], FloatArray], *, tolerance: float, max_steps: int = 60,
) -> tuple[FloatArray, int, float]:
    """Active-set Newton ascent of a concave function on the simplex, from ``pi``: ``(pi, steps, gap)``.

    Each step: shares below :data:`ACTIVE_SHARE` whose gradient is below ``g . pi`` are set to 0;
    the free cells are those above 0 and those at 0 whose gradient exceeds ``g . pi``
    (they would enter); the Newton step of the quadratic model on them under ``sum d = 0``
    (the KKT system, least squares when the Hessian is singular); a cell at 0 that the step would
    push below is held at 0 and the step solved again; the step length is the largest that keeps
    every share >= 0 (a share that reaches 0 leaves), halved until the objective rises by Armijo's
    rule. Stops when the duality gap is at most ``tolerance``, or, no cell wanting to enter, the
    Newton decrement squared is (the bound of a self-concordant function, which the negative
    log-likelihood of counts is: Boyd and Vandenberghe 9.6.3), or when a step cannot raise the
    objective (the caller's EM takes over). ``gap`` is the bound that stopped it.
    """
    value = objective(pi)
    steps = 0
    grad = gradient(pi)
    gap = _gap(grad, pi)
    while gap > tolerance and steps < max_steps:
        # Shares the EM is still shrinking geometrically (below ACTIVE_SHARE, gradient below the
        # mean): set to 0 (to first order this raises the objective by sum pi_i (g . pi - g_i));
        # left free, they would block every step at a length of their size.
        fading = (pi > 0.0) & (pi < ACTIVE_SHARE) & (grad < grad @ pi)
        if fading.any():
            pi = np.where(fading, 0.0, pi)
            pi /= pi.sum()
            value, grad = objective(pi), gradient(pi)
            gap = _gap(grad, pi)
            if gap <= tolerance:
                break
        free = np.nonzero((pi > 0.0) | (grad > grad @ pi))[0]
        solved = False
        for _ in range(3):
            h = hessian(pi, free)
            if not np.all(np.isfinite(h)):  # a rate at 0 or 1 (p* = 0 or q* = 1): leave it to the EM
                break
            size = free.size
            kkt = np.zeros((size + 1, size + 1))
            kkt[:size, :size], kkt[:size, size], kkt[size, :size] = h, 1.0, 1.0
            try:
                d = np.linalg.lstsq(kkt, np.concatenate([-grad[free], [0.0]]), rcond=None)[0][:size]
            except np.linalg.LinAlgError:
                break
            stuck = (pi[free] <= 0.0) & (d < 0.0)
            if not stuck.any():
                solved = True
                break
            free = free[~stuck]
        if not solved:
            break
        slope = float(grad[free] @ d)  # the Newton decrement squared on the free cells' face
        if not (pi[free] <= 0.0).any() and slope <= min(tolerance, DECREMENT_BOUND):
            # No cell wants to enter and the face's decrement is small: the negative log-likelihood
            # of counts is self-concordant, so lambda^2 bounds the distance to the maximum (Boyd and
            # Vandenberghe 9.6.3, lambda <= 0.68). The FW gap cannot certify this last part: it is
            # the gradient's spread, which the huge curvature keeps far above the distance.
            gap = max(slope, 0.0)
            break
        if not slope > 0.0:
            break
        down = d < 0.0
        limit = float(np.min(pi[free][down] / -d[down])) if down.any() else np.inf
        t = min(1.0, limit)
        accepted = False
        while t > 1e-10:
            trial = pi.copy()
            trial[free] += t * d
            if t == limit:
                trial[free[down][np.argmin(pi[free][down] / -d[down])]] = 0.0
            trial = np.maximum(trial, 0.0)
            trial /= trial.sum()
            new = objective(trial)
            if np.isfinite(new) and new >= value + 1e-4 * t * slope:
                accepted = True
                break
            t /= 2.0
        if not accepted:
            break
        pi, value, steps = trial, new, steps + 1
        grad = gradient(pi)
        gap = _gap(grad, pi)
    return pi, steps, gap


def check_em_settings(max_iterations: int, tolerance: float) -> None:
    """Raises ParameterError naming ``max_iterations`` (>= 1) or ``tolerance`` (> 0)."""
    check_int("max_iterations", max_iterations, low=1)
    if not (isinstance(tolerance, int | float) and tolerance > 0.0):
        raise ParameterError("tolerance", f"must be a number > 0 (nats), got {tolerance!r}")


def accelerated_em(
    step: Callable[[FloatArray], FloatArray], objective: Callable[[FloatArray], float],
    gradient: Callable[[FloatArray], FloatArray], start: FloatArray, *, max_iterations: int, tolerance: float,
    accelerate: bool = True, hessian: Callable[[FloatArray, npt.NDArray[np.int64]], FloatArray] | None = None,
) -> EMRun:
    """Run the EM map ``step`` from ``start`` until the duality gap is at most ``tolerance`` nats.

    With ``accelerate``, each cycle is SQUAREM (Varadhan and Roland, 2008, scheme S3): two EM
    steps ``r = F(p) - p``, ``v = F(F(p)) - F(p) - r``, the extrapolation ``p - 2 a r + a^2 v``
    with ``a = -|r| / |v|`` (at most -1), moved halfway towards ``a = -1`` (which is ``F(F(p))``)
    until every share is positive (else ``F(F(p))``), then one EM step from there; kept only if the log-likelihood
    ``objective`` did not fall below ``F(F(p))``'s, so every cycle raises it as the EM does.
    The stopping rule is certified: the log-likelihood is concave over the simplex, so
    ``max_i g_i - g . pi`` (``g`` the ``gradient``) bounds the distance to its maximum.

    With a ``hessian`` (of the log-likelihood on a set of cells), once the gap is below
    :data:`NEWTON_SWITCH_GAP` the maximum is polished by :func:`newton_simplex` (the EM's
    slow tail is the approach of the shares that end at 0); should Newton stall, the EM goes on
    and Newton is tried again when the gap has fallen tenfold.
    """
    pi, used, newton = start, 0, 0
    gap = _gap(gradient(pi), pi)
    retry = NEWTON_SWITCH_GAP
    while gap > tolerance and used < max_iterations:
        if hessian is not None and gap <= retry:
            pi, steps, gap = newton_simplex(pi, objective, gradient, hessian, tolerance=tolerance)
            newton += steps
            retry = gap / 10.0
            continue
        first = step(pi)
        used += 1
        if not accelerate or used + 2 > max_iterations:
            pi = first
        else:
            second = step(first)
            used += 1
            r, v = first - pi, second - 2.0 * first + pi
            norm_v = float(np.linalg.norm(v))
            alpha = min(-float(np.linalg.norm(r)) / norm_v, -1.0) if norm_v > 0.0 else -1.0
            jump: FloatArray | None = None
            while alpha < -1.01:  # alpha = -1 is second itself; closer than -1.01 is not worth a step
                trial = pi - 2.0 * alpha * r + alpha * alpha * v
                if np.all(trial[pi > 0.0] > 0.0) and np.all(trial >= 0.0):
                    jump = trial / trial.sum()
                    break
                alpha = (alpha - 1.0) / 2.0
            pi = second
            if jump is not None and used < max_iterations:
                stepped = step(jump)
                used += 1
                if objective(stepped) >= objective(second):
                    pi = stepped
        gap = _gap(gradient(pi), pi)
    return EMRun(shares=pi, iterations=used, converged=gap <= tolerance, gap=gap, newton_steps=newton)


def em_bit_counts_run(
    counts: BitCounts, probabilities: tuple[float, float], bit_table: npt.ArrayLike, *,
    max_iterations: int = 20_000, tolerance: float = 1e-3, accelerate: bool = True, newton: bool = True,
) -> EMRun:
    """Shares on the simplex maximizing the composite binomial likelihood of the bit counts.

    Row ``r = (j, b)`` sees ``c_r`` ones of ``N_j`` reports, each a 1 with
    probability ``P_ri = p* + (q* - p*) X_ri`` under candidate ``i``. The EM
    of a mixture whose weights every row shares: ``pi_i <- pi_i sum_r
    (c_r P_ri / theta_r + (N_j - c_r)(1 - P_ri)/(1 - theta_r)) / sum_r N_j``
    with ``theta_r = sum_i P_ri pi_i``; each step raises the likelihood, but
    slowly (docs/decoding.md 9: each (report, bit) trial says little about
    which candidate made it, so the missing information is nearly all of it);
    :func:`accelerated_em` extrapolates, polishes with Newton steps (``newton``, up to
    :data:`MAX_NEWTON_CELLS` candidates) and stops on the duality gap (nats).
    """
    check_em_settings(max_iterations, tolerance)
    p_star, q_star = probabilities
    check_probabilities(p_star, q_star)
    table = np.asarray(bit_table, dtype=np.int64)
    kept = np.nonzero(counts.totals > 0)[0]
    if kept.size == 0:
        raise ParameterError("counts", "holds no report: nothing to decode")
    x = incidence(table, kept, counts.num_bits).tocsr()
    ones = counts.ones[kept].ravel().astype(np.float64)
    sizes = np.repeat(counts.totals[kept].astype(np.float64), counts.num_bits)
    gap, total = q_star - p_star, sizes.sum()
    tiny = 1e-300

    def theta(pi: FloatArray) -> FloatArray:
        out: FloatArray = p_star + gap * (x @ pi)
        return out

    def step(pi: FloatArray) -> FloatArray:
        th = theta(pi)
        hit = ones / np.maximum(th, tiny)
        miss = (sizes - ones) / np.maximum(1.0 - th, tiny)
        out = pi * (p_star * hit.sum() + (1.0 - p_star) * miss.sum() + gap * (x.T @ (hit - miss))) / total
        result: FloatArray = out / out.sum()
        return result

    def objective(pi: FloatArray) -> float:
        th = np.clip(theta(pi), tiny, 1.0 - 1e-16)
        return float(ones @ np.log(th) + (sizes - ones) @ np.log1p(-th))

    def gradient(pi: FloatArray) -> FloatArray:
        th = theta(pi)
        out: FloatArray = gap * (x.T @ (ones / np.maximum(th, tiny) - (sizes - ones) / np.maximum(1.0 - th, tiny)))
        return out

    def hessian(pi: FloatArray, cells: npt.NDArray[np.int64]) -> FloatArray:
        th = np.clip(theta(pi), tiny, 1.0 - 1e-16)
        weight = ones / th**2 + (sizes - ones) / (1.0 - th) ** 2
        part = x[:, cells]
        out: FloatArray = -(gap**2) * (part.T @ part.multiply(weight[:, None])).toarray()
        return out

    start = np.full(table.shape[1], 1.0 / table.shape[1])
    return accelerated_em(step, objective, gradient, start, max_iterations=max_iterations, tolerance=tolerance,
                          accelerate=accelerate,
                          hessian=hessian if newton and table.shape[1] <= MAX_NEWTON_CELLS else None)


def em_bit_counts(
    counts: BitCounts, probabilities: tuple[float, float], bit_table: npt.ArrayLike, *,
    max_iterations: int = 20_000, tolerance: float = 1e-3,
) -> FloatArray:
    """The shares of :func:`em_bit_counts_run` (accelerated, stopped on a duality gap of ``tolerance`` nats)."""
    return em_bit_counts_run(counts, probabilities, bit_table, max_iterations=max_iterations,
                             tolerance=tolerance).shares


def estimate_joint(
    counts: BitCounts, params: MetricParams, level: float | None, values_a: Sequence[str],
    values_b: Sequence[str], *, method: str = "projection",
) -> JointEstimate:
    """The joint of a pair metric over ``values_a x values_b`` (module docstring).

    Args:
        counts: aggregates of one window and round of the pair metric.
        params: the pair metric (Bloom, or direct over :func:`pair_domain`).
        level: the level the reports were made at (``None``: ``params.level``).
        values_a, values_b: distinct candidates of each variable.
        method: ``"projection"`` or ``"em"``.

    Raises:
        ParameterError: bad candidates (``values_a``, ``values_b``, or a pair outside a direct
            domain: ``candidates``), ``method``, counts (``counts``), a prefix metric (``metric``).
    """
    if method not in JOINT_METHODS:
        raise ParameterError("method", f"must be one of {JOINT_METHODS}, got {method!r}")
    if isinstance(params.encoding, PrefixEncoding):
        raise ParameterError("metric", f"{params.name!r} is a prefix metric: its short-prefix cohorts do not hold "
                             "the pairs whole; a pair metric needs a direct or Bloom encoding")
    cells = pair_domain(values_a, values_b)
    a, b = tuple(values_a), tuple(values_b)
    counts.check_shape(params.num_cohorts, params.num_bits)
    if isinstance(params.encoding, DirectEncoding):
        if not any(PAIR_SEPARATOR in value for value in params.encoding.domain):
            raise ParameterError("metric", f"{params.name!r} is not a pair metric: its domain holds single values, "
                                 "not pairs (create one with: onesided metric create --encoding direct "
                                 "--pair-a A1,A2 --pair-b B1,B2 ...)")
        missing = set(cells) - set(params.encoding.domain)
        if missing:
            raise ParameterError("candidates", f"{len(missing)} pairs are not in the metric's domain, "
                                 f"e.g. {sorted(missing)[0]!r}")
    fit = fit_candidates(counts, params, level, cells)
    n = counts.num_reports
    run = None
    if method == "em":
        run = em_bit_counts_run(counts, params.randomizer(level).probabilities(),
                                candidate_bit_table(params.encoding, cells))
        joint = run.shares
    else:
        joint = project_simplex(fit.estimates / max(n, 1))
    shape = (len(a), len(b))
    return JointEstimate(values_a=a, values_b=b, joint=joint.reshape(shape), estimates=fit.estimates.reshape(shape),
                         std_errors=fit.std_errors.reshape(shape), num_reports=n, method=method, em=run)


def log_likelihoods(
    reports: npt.NDArray[np.bool_], cohorts: npt.ArrayLike, bit_table: npt.ArrayLike,
    probabilities: tuple[float, float],
) -> FloatArray:
    """``(N, S)`` log-likelihood of each report under each candidate, up to a per-report constant.

    A report's bits are independent given the candidate's true bits
    ``X_j(i)``: ``log P(x | i) = sum_{b in X_j(i)} (x_b log(q*/p*) + (1 - x_b) log((1-q*)/(1-p*))) + const``.
    """
    p_star, q_star = probabilities
    check_probabilities(p_star, q_star)
    if p_star <= 0.0 or q_star >= 1.0:
        raise ParameterError("probabilities", "per-report likelihoods need 0 < p* and q* < 1")
    rep = np.asarray(reports, dtype=bool)
    coh = np.asarray(cohorts, dtype=np.int64)
    table = np.asarray(bit_table, dtype=np.int64)
    up, down = np.log(q_star / p_star), np.log((1.0 - q_star) / (1.0 - p_star))
    out = np.empty((rep.shape[0], table.shape[1]))
    for j in np.unique(coh):
        rows = np.nonzero(coh == j)[0]
        member = np.zeros((rep.shape[1], table.shape[1]))
        member[table[j], np.arange(table.shape[1])[:, None]] = 1.0  # repeats count once
        ones = rep[rows].astype(np.float64) @ member
        out[rows] = ones * up + (member.sum(axis=0)[None, :] - ones) * down
    return out


@dataclass(frozen=True, kw_only=True, eq=False)
class ReportsEM:
    """The per-report EM's result (:func:`em_reports_fit`).

    Attributes:
        joint, std_errors: ``(A, B)`` shares on the simplex and their standard errors.
        iterations: EM steps taken.
        converged: the duality gap is at most the tolerance.
        gap: the duality gap (nats; :class:`EMRun`).
        newton_steps: Newton steps taken.
    """

    joint: FloatArray
    std_errors: FloatArray
    iterations: int
    converged: bool
    gap: float
    newton_steps: int = 0


def em_reports_fit(
    log_a: FloatArray, log_b: FloatArray, *, max_iterations: int = 2000, tolerance: float = 1e-3,
    chunk: int = 20_000, accelerate: bool = True, newton: bool = True,
) -> ReportsEM:
    """RAPPOR's association EM on linked reports, with its iterations and whether it converged.

    ``pi_ab <- pi_ab mean_r La[r, a] Lb[r, b] / sum_cd La[r, c] pi_cd Lb[r, d]`` from the uniform
    joint, accelerated and stopped when the log-likelihood is within ``tolerance`` nats of its
    maximum (:func:`accelerated_em`, with Newton steps when ``newton`` and the Hessian, reports x
    cells^2, is at most :data:`MAX_NEWTON_WORK`; RAPPOR stops when no share moves by 1e-6, which a
    slow EM satisfies far from the maximum), or after ``max_iterations`` steps. Standard errors: the
    empirical information ``J = sum_r s_r s_r'`` of the scores ``s_r = (La Lb)[r] / denominator_r - 1``,
    inverted on the simplex's tangent space.

    Raises:
        ParameterError: no report (``reports``), a log-likelihood row of another length
            (``log_b``), ``max_iterations`` < 1 or ``tolerance`` <= 0 (named).
    """
    check_em_settings(max_iterations, tolerance)
    if log_a.ndim != 2 or log_b.ndim != 2 or log_a.shape[0] != log_b.shape[0]:
        raise ParameterError("log_b", f"must have one row per report as log_a, got {log_a.shape} and {log_b.shape}")
    la = np.exp(log_a - log_a.max(axis=1, keepdims=True))
    lb = np.exp(log_b - log_b.max(axis=1, keepdims=True))
    n, size_a, size_b = la.shape[0], la.shape[1], lb.shape[1]
    check_int("reports", n, low=1)

    def gradient(pi: FloatArray) -> FloatArray:
        denom = ((la @ pi.reshape(size_a, size_b)) * lb).sum(axis=1)
        out: FloatArray = (la.T @ (lb / denom[:, None])).ravel()
        return out

    def step(pi: FloatArray) -> FloatArray:
        out = pi * gradient(pi) / n
        result: FloatArray = out / out.sum()
        return result

    def objective(pi: FloatArray) -> float:
        return float(np.log(((la @ pi.reshape(size_a, size_b)) * lb).sum(axis=1)).sum())

    def hessian(pi: FloatArray, cells: npt.NDArray[np.int64]) -> FloatArray:
        denom = ((la @ pi.reshape(size_a, size_b)) * lb).sum(axis=1)
        out = np.zeros((cells.size, cells.size))
        rows, cols = np.divmod(cells, size_b)
        for start in range(0, n, chunk):
            part = slice(start, start + chunk)
            scaled = la[part][:, rows] * lb[part][:, cols] / denom[part, None]
            out -= scaled.T @ scaled
        return out

    cells = size_a * size_b
    polish = newton and cells <= MAX_NEWTON_CELLS and n * cells * cells <= MAX_NEWTON_WORK
    run = accelerated_em(step, objective, gradient, np.full(cells, 1.0 / cells), max_iterations=max_iterations,
                         tolerance=tolerance, accelerate=accelerate, hessian=hessian if polish else None)
    pi = run.shares.reshape(size_a, size_b)
    denom = ((la @ pi) * lb).sum(axis=1)
    info = np.zeros((size_a * size_b, size_a * size_b))
    for start in range(0, n, chunk):
        part = slice(start, start + chunk)
        scores = (la[part, :, None] * lb[part, None, :]).reshape(-1, size_a * size_b) / denom[part, None] - 1.0
        info += scores.T @ scores
    basis = np.linalg.svd(np.eye(size_a * size_b) - 1.0 / (size_a * size_b))[0][:, : size_a * size_b - 1]
    cov = basis @ np.linalg.pinv(basis.T @ info @ basis) @ basis.T
    return ReportsEM(joint=pi, std_errors=np.sqrt(np.maximum(np.diag(cov), 0.0)).reshape(size_a, size_b),
                     iterations=run.iterations, converged=run.converged, gap=run.gap,
                     newton_steps=run.newton_steps)


def em_reports(
    log_a: FloatArray, log_b: FloatArray, *, max_iterations: int = 2000, tolerance: float = 1e-3,
    chunk: int = 20_000,
) -> tuple[FloatArray, FloatArray]:
    """RAPPOR's association EM on linked reports: ``(joint, std_errors)``, both ``(A, B)`` (:func:`em_reports_fit`)."""
    fit = em_reports_fit(log_a, log_b, max_iterations=max_iterations, tolerance=tolerance, chunk=chunk)
    return fit.joint, fit.std_errors


__all__ = ["JOINT_METHODS", "MAX_NEWTON_CELLS", "EMRun", "JointEstimate", "PAIR_SEPARATOR", "ReportsEM", "accelerated_em",
           "check_em_settings", "em_bit_counts", "em_bit_counts_run", "em_reports", "em_reports_fit",
           "estimate_joint", "log_likelihoods", "newton_simplex", "pair_domain", "pair_value", "project_simplex"]
