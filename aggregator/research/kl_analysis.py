"""The multi-user paper's accuracy analysis: noise magnitude and KL divergence (its Table 1).

The paper compares "common practice" (Laplace noise of location 0, scale
``b``) with its mechanism (location ``mu_i`` per analyst) by

* the noise's absolute value: ``E|Lap(mu, b)| = |mu| + b exp(-|mu| / b)``
  (``b`` at ``mu = 0``): larger whenever ``mu != 0``;
* the distortion of a data density ``p``: ``KL_c = KL(p || Lap(0, b))``
  against ``KL_p = KL(p || Lap(mu_bar, b))`` (the paper replaces the
  analysts' mixture ``(1/n) sum_i Lap(mu_i, b)`` by one Laplace at the mean
  location), with its closed form
  ``KL_p = KL_c + int_0^mu_bar p(x) (-2x) / b dx + (mu_bar / b)(1 - 2 F(mu_bar))``
  as printed; its last term's sign is flipped (the derivation's previous
  line gives ``(mu_bar / b)(2 F(mu_bar) - 1)``), see :func:`kl_closed_form`.

Table 1's verdict ("the same when the mean location is 0, worse
otherwise") follows from ``KL_p - KL_c = (E|X - mu_bar| - E|X|) / b``: it
holds when 0 is a median of ``p`` (``E|X - m|`` is smallest at a median);
for a density whose median is not 0 a non-zero mean location can give a
*smaller* divergence. Everything here is numerical integration on a fine
grid (trapezoid rule), checked against the closed forms.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Density = Callable[[FloatArray], FloatArray]

__all__ = ["abs_noise", "kl_closed_form", "kl_to_laplace", "kl_to_mixture", "laplace_density"]

GRID = np.linspace(-30.0, 30.0, 100_001)  # step 6e-4; the tails beyond 30 are below 1e-13 for the densities used


def laplace_density(x: FloatArray, location: float, scale: float) -> FloatArray:
    return np.exp(-np.abs(x - location) / scale) / (2.0 * scale)


def _kl(p: FloatArray, q: FloatArray, x: FloatArray) -> float:
    mask = p > 0
    integrand = np.zeros_like(p)
    integrand[mask] = p[mask] * (np.log(p[mask]) - np.log(q[mask]))
    return float(np.trapezoid(integrand, x))


def kl_to_laplace(density: Density, location: float, scale: float, x: FloatArray = GRID) -> float:
    """``KL(p || Lap(location, scale))`` by the trapezoid rule on ``x``."""
    return _kl(density(x), laplace_density(x, location, scale), x)


def kl_to_mixture(density: Density, locations: Sequence[float], scale: float, x: FloatArray = GRID) -> float:
    """``KL(p || (1/n) sum_i Lap(mu_i, scale))``: the analysts' noise as one mixture (the paper's first ``KL_p``)."""
    q = np.mean([laplace_density(x, m, scale) for m in locations], axis=0)
    return _kl(density(x), q, x)


def kl_closed_form(density: Density, mean_location: float, scale: float, *, as_printed: bool,
                   x: FloatArray = GRID) -> float:
    """``KL_p`` from ``KL_c`` for ``mean_location = m >= 0``: the paper's last line, or corrected.

    As printed: ``KL_c + int_0^m p(x)(-2x)/b dx + (m/b)(1 - 2 F(m))``. The
    line before it has ``int_{-inf}^m p m/b dx + int_m^inf p (-m)/b dx``,
    which is ``(m/b)(2 F(m) - 1)``: the printed sign of the last term is
    flipped (an erratum). ``as_printed=False`` uses ``(m/b)(2 F(m) - 1)``,
    which equals ``KL_c + (E|X - m| - E|X|) / b``, the direct integral.
    """
    if mean_location < 0:
        raise ValueError(f"mean_location must be >= 0 (the paper's case), got {mean_location}")
    p = density(x)
    kl_c = kl_to_laplace(density, 0.0, scale, x)
    inside = (x >= 0.0) & (x <= mean_location)
    middle = float(np.trapezoid(np.where(inside, p * (-2.0 * x) / scale, 0.0), x))
    below = float(np.trapezoid(np.where(x <= mean_location, p, 0.0), x))
    last = (1.0 - 2.0 * below) if as_printed else (2.0 * below - 1.0)
    return kl_c + middle + (mean_location / scale) * last


def abs_noise(location: float, scale: float) -> float:
    """``E|Lap(location, scale)| = |mu| + b exp(-|mu| / b)``."""
    return abs(location) + scale * math.exp(-abs(location) / scale)
