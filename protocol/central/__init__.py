"""Central (aggregator-side) mechanisms with one-sided error (docs/central.md), behind one interface.

One module a mechanism, like :mod:`protocol.local`: :mod:`.common` (checks, guarantees, the grid,
certificates, the Protocol and its registry), :mod:`.alap`, :mod:`.ageo` (with the lazy step
:func:`relax_noise`), :mod:`.salap`, :mod:`.competitors` (Laplace, two-sided geometric). Every
name is importable from ``protocol.central`` (and, for existing callers, ``protocol.central``).

The aggregator holds exact counts ``c`` (one per place, say) and publishes
noisy answers. The query "is place ``i`` safe, ``c_i <= t``?" is answered
by the sanitizer ``answer_i <= t`` (the ADP paper's); for integer counts
the one-sided mechanisms certify the stronger ``answer_i < floor(t) + 1``
(:func:`certificate_cut`), at the same privacy.

* **ALap** (ADP paper, Def. V.3): one-sided exponential noise of scale
  ``D_p / eps``. For the policy "not having visited is non-sensitive" the
  count's p-sensitivity is *monotonically decreasing* (a protected change
  only removes a visit), the noise is ``>= 0`` and a "safe" answer is never
  wrong: ``P(safe | c) = 1 - exp(-eps (t - c) / D_p)`` for ``c <= t``, 0 above.
  Laplace when the p-sensitivity is not monotonic.
* **AGeo** (Def. VIII.1): the discrete, optimal version for counts in
  ``{0..n_max}``: ``min(c + G, n_max)`` with ``P(G >= k) = exp(-eps k)``.
  ``P(safe | c) = 1 - exp(-eps (t - c + 1))`` for ``c <= t < n_max``.
* **SALap** (Algorithm 1): threshold queries answered in sequence with the
  whole budget ``eps`` each, until the first "above threshold" answer.
* Competitors: eps-DP Laplace and two-sided geometric (the paper's bounds
  and virtual (eps, delta)-DP sanitizer are research tools:
  :mod:`aggregator.research.bounds`).

Every published value comes from the exact integer samplers of
:mod:`protocol.exact`: integer arithmetic and exact Bernoulli(exp(-gamma))
trials for rational ``gamma`` (the construction of Canonne, Kamath and
Steinke, "The Discrete Gaussian for Differential Privacy", 2020, Algorithms
1-2), fed with exact uniform integers cut from the injected
:class:`RandomSource`. AGeo and the two-sided geometric publish integers;
ALap, Laplace and SALap publish multiples of a power-of-two grid ``g``
(:func:`~protocol.exact.default_grid`, about ``D / (1024 eps)``, recorded in
the release): the noise is ``g`` times an exact geometric (one-sided) or a
difference of two (discrete Laplace), never floating-point inversion, whose
holes make some outputs impossible under a neighbour (Mironov 2012). The
claimed epsilon is the exact loss of what is sampled, ``r floor(D / g)`` with
``r = eps g / D`` per grid step as the sampler uses it, rounded up.

Every mechanism implements :class:`CentralMechanism` (its name, integer or
grid output, noise, publish, relax, guarantee) and registers under its name
(:func:`mechanism_class`, :func:`mechanism_names`); the release records of
:mod:`protocol.releases` dispatch through that registry, never on strings.
The shape follows diffprivlib's mechanism base class (parameters checked at
construction, one ``randomise``), OpenDP's constructors (the privacy claim
derived from the parameters) and PipelineDP's additive-mechanism factory
(one table from a kind to its class).

>>> import math
>>> mech = ALapMechanism(epsilon=1.0)
>>> mech.step, float(mech.step_rate)  # grid 2**-10, rate eps g / D per grid step
(0.0009765625, 0.0009765625)
>>> mech.safe_probability(count=2, threshold=5) == 1 - math.exp(-float(mech.step_rate) * (3 / mech.step + 1))
True
>>> mechanism_names()
('alap', 'ageo', 'salap', 'laplace', 'geometric')
"""

from .ageo import AGeoMechanism, ageo, relax_noise
from .alap import ALapMechanism, alap
from .common import (
    MONOTONICITIES,
    Answers,
    CentralGuarantee,
    CentralMechanism,
    IntArray,
    MechanismType,
    Monotonicity,
    Noise,
    PSensitivity,
    as_counts,
    certificate_cut,
    certificate_statement,
    certified_safe,
    check_epsilon,
    check_level,
    check_monotonicity,
    check_not_tighter,
    grid_steps,
    integer_sensitivity,
    mechanism_class,
    mechanism_names,
    on_grid,
    register_mechanism,
    sign_p,
)
from .competitors import (
    GeometricMechanism,
    LaplaceMechanism,
    geometric_mechanism,
    laplace_mechanism,
)
from .salap import SALapMechanism, salap

__all__ = [
    "AGeoMechanism",
    "ALapMechanism",
    "Answers",
    "CentralGuarantee",
    "CentralMechanism",
    "GeometricMechanism",
    "IntArray",
    "LaplaceMechanism",
    "MONOTONICITIES",
    "MechanismType",
    "Monotonicity",
    "Noise",
    "PSensitivity",
    "SALapMechanism",
    "ageo",
    "alap",
    "as_counts",
    "certificate_cut",
    "certificate_statement",
    "certified_safe",
    "check_epsilon",
    "check_level",
    "check_monotonicity",
    "check_not_tighter",
    "geometric_mechanism",
    "grid_steps",
    "integer_sensitivity",
    "laplace_mechanism",
    "mechanism_class",
    "mechanism_names",
    "on_grid",
    "register_mechanism",
    "relax_noise",
    "salap",
    "sign_p",
]
