"""The asymmetric-DP paper's experiments (Sec. VI, Figs. 2-6) on a Peopleflow-like synthetic population.

The paper runs on Peopleflow (Tokyo, Dec 22 2013), which is not public.
What it states about the data is reproduced here: 10,338 users, 5,835
target places, and at 6 p.m. 5,343 places with at most ``t = 5`` visitors
(Fig. 2). :class:`PeopleflowLike` draws such populations:

* **hourly** (the low-sensitive query, Figs. 2-4): each place has a
  popularity ``w_i ~ Gamma(shape)`` (many quiet places, a few busy
  stations and shops), and each user is at one place at the hour, drawn
  with probability ``w_i / sum w``. A place's visitors are then close to
  negative binomial with mean ``users / places``; the shape is the one free
  parameter, solved (:func:`fit_popularity_shape`) so that the expected
  number of places with at most ``t`` visitors is the paper's 5,343. (A
  Zipf popularity cannot: with 10,338 users it leaves at most 277 places
  above 5, at exponent 0.7.) Nothing else is fitted: the certificate rates are
  predictions from the population, to be compared with the paper's.
* **daily** (the high-sensitive query, Figs. 5-6): each user stays at
  ``1 + Poisson(mean_daily_stays - 1)`` distinct places in the day, drawn
  from the same popularity; SALap answers the places in a random order
  (the dataset's place ids carry no popularity order). The paper does not
  state the number of stays per user and day; it is a parameter (2 by
  default: homes and offices are not among the target categories, shops,
  restaurants, entertainment, groceries and schools are), and the Fig. 5
  experiment shows its effect.

The certificate rules, in closed form per place (exact for the product's
grid ALap, :class:`protocol.central.ALapMechanism`):

* the paper's: "safe" when ``answer <= t``:
  :meth:`~protocol.central.ALapMechanism.safe_probability`, about
  ``1 - exp(-eps (t - c))``, 0 at ``c = t``;
* the product's: ``answer < t + 1`` (integer counts, noise >= 0, the same
  answer read more fully): :meth:`~protocol.central.ALapMechanism.certificate_probability`,
  ``1 - exp(-eps (t + 1 - c))``;
* the paper's virtual ``(eps, delta)``-DP competitor: the best ``beta`` at
  distance ``k = t + 1 - c``, :func:`aggregator.research.bounds.dp_beta_upper_bound`.

Every function takes a numpy ``Generator`` (one per seeded repetition).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import numpy.typing as npt
from scipy import optimize, stats

from aggregator.research.bounds import dp_beta_upper_bound
from protocol.central import ALapMechanism
from protocol.errors import ParameterError
from protocol.validation import check_int, check_number

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
RULES: tuple[str, ...] = ("paper", "product")

__all__ = [
    "RULES",
    "PeopleflowLike",
    "alap_safe_probabilities",
    "dp_safe_probabilities",
    "expected_beta",
    "fit_popularity_shape",
    "salap_right_answers",
]


@dataclass(frozen=True, kw_only=True)
class PeopleflowLike:
    """The paper's Peopleflow data as it describes them (Sec. VI-A, Fig. 2).

    Attributes:
        users: trajectories (10,338).
        places: target places (5,835).
        threshold: ``t`` of Fig. 2 (5).
        safe_places: places with at most ``threshold`` visitors at 6 p.m. (5,343): the fit's target.
        mean_daily_stays: distinct places a user stays at in a day (high-sensitive query).
        low_shape: take the more overdispersed of the two popularity shapes that fit (:func:`fit_popularity_shape`).
    """

    users: int = 10_338
    places: int = 5_835
    threshold: int = 5
    safe_places: int = 5_343
    mean_daily_stays: float = 2.0
    low_shape: bool = False

    def __post_init__(self) -> None:
        check_int("users", self.users, low=1)
        check_int("places", self.places, low=2)
        check_int("threshold", self.threshold, low=0)
        check_int("safe_places", self.safe_places, low=1)
        if self.safe_places >= self.places:
            raise ParameterError("safe_places", f"must be < places ({self.places}), got {self.safe_places}")
        check_number("mean_daily_stays", self.mean_daily_stays, positive=True)
        if self.mean_daily_stays < 1:
            raise ParameterError("mean_daily_stays", f"must be >= 1, got {self.mean_daily_stays}")

    @property
    def popularity_shape(self) -> float:
        return fit_popularity_shape(self.users, self.places, self.threshold, self.safe_places, low=self.low_shape)

    def popularity(self, gen: np.random.Generator) -> FloatArray:
        """A draw of the places' popularity: ``w_i ~ Gamma(shape)``, normalized."""
        weights = gen.gamma(self.popularity_shape, size=self.places)
        return np.asarray(weights / weights.sum(), dtype=np.float64)

    def hourly_counts(self, gen: np.random.Generator) -> IntArray:
        """Visitors per place at the hour: a popularity, then one multinomial (each user at one place)."""
        return gen.multinomial(self.users, self.popularity(gen)).astype(np.int64)

    def daily_counts(self, gen: np.random.Generator) -> IntArray:
        """Visitors per place in the day, places in a random order (SALap's query order).

        A user makes ``1 + Poisson(mean_daily_stays - 1)`` draws by popularity
        and holds the distinct places drawn (a place stayed at twice is one visit).
        """
        p = self.popularity(gen)
        draws = 1 + gen.poisson(self.mean_daily_stays - 1, self.users)
        user = np.repeat(np.arange(self.users, dtype=np.int64), draws)
        place = np.searchsorted(np.cumsum(p), gen.random(user.size) * p.sum(), side="right")
        place = np.minimum(place, self.places - 1)
        held = np.unique(user * self.places + place) % self.places
        counts = np.bincount(held, minlength=self.places).astype(np.int64)
        return counts[gen.permutation(self.places)]


@cache
def fit_popularity_shape(users: int, places: int, threshold: int, safe_places: int, *, low: bool = False) -> float:
    """The Gamma shape at which ``places`` x P(visitors <= threshold) is ``safe_places``.

    With ``users`` each at one place and popularity ``Gamma(shape)``, a
    place's visitors are close to ``NegativeBinomial(shape, mean users /
    places)`` (Poisson with a Gamma rate; the multinomial's dependence
    between places is of order ``1 / places``). The safe share is not
    monotone in the shape: it falls from ``places`` (shape -> 0: nearly every
    place empty) to a minimum near shape 0.2 and rises again towards the
    Poisson's (shape -> inf). Where two shapes fit, this is the larger one,
    the less overdispersed population (``low`` picks the other branch).
    """
    mean = users / places

    def excess(shape: float) -> float:
        return float(places * stats.nbinom.cdf(threshold, shape, shape / (shape + mean))) - safe_places

    least = float(optimize.minimize_scalar(excess, bounds=(1e-3, 10.0), method="bounded").x)
    left, right = (1e-3, least) if low else (least, 1e3)
    if excess(left) * excess(right) > 0:
        raise ParameterError("safe_places", f"no popularity shape gives {safe_places} safe places of {places}")
    return float(optimize.brentq(excess, left, right, xtol=1e-12))


def alap_safe_probabilities(counts: IntArray, threshold: int, epsilon: float, *, rule: str,
                            sensitivity: float = 1.0) -> FloatArray:
    """``P(ALap certifies place i safe)`` per place (0 for places above the threshold under either rule).

    ``rule``: ``"paper"`` (``answer <= t``) or ``"product"`` (``answer < t + 1``).
    """
    if rule not in RULES:
        raise ParameterError("rule", f"must be one of {RULES}, got {rule!r}")
    mech = ALapMechanism(epsilon=epsilon, sensitivity=sensitivity)
    values, inverse = np.unique(counts, return_inverse=True)
    if rule == "paper":
        table = [mech.safe_probability(float(c), float(threshold)) for c in values]
    else:
        table = [mech.certificate_probability(int(c), float(threshold)) if c <= threshold else 0.0 for c in values]
    return np.asarray(table)[inverse]


def dp_safe_probabilities(counts: IntArray, threshold: int, epsilon: float, *, alpha: float,
                          delta: float) -> FloatArray:
    """The virtual ``(eps, delta)``-DP sanitizer's ``P(safe)`` per place: its best ``beta`` at ``k = t + 1 - c``."""
    values, inverse = np.unique(counts, return_inverse=True)
    table = [dp_beta_upper_bound(alpha=alpha, epsilon=epsilon, delta=delta, k=int(threshold + 1 - c))
             if c <= threshold else alpha for c in values]
    return np.asarray(table)[inverse]


def expected_beta(safe_probability: FloatArray, counts: IntArray, threshold: int) -> float:
    """``E[beta]``: the mean of ``P(safe)`` over the truly safe places (the paper's Sec. VI-A4)."""
    safe = counts <= threshold
    return float(np.mean(safe_probability[safe])) if np.any(safe) else math.nan


def salap_right_answers(safe_probability: FloatArray, ks: Sequence[int]) -> tuple[FloatArray, float]:
    """SALap's right answers in query order: ``P(at least k bottoms)`` for each ``k``, and the expected number.

    The first ``k`` answers are all bottoms with probability ``prod_{i<=k} s_i``
    (independent noise per query); a bottom is never wrong (alpha = 0), so
    the bottoms are the right answers. ``E[#bottoms] = sum_k prod_{i<=k} s_i``.
    """
    prefix = np.cumprod(safe_probability)
    at_least = np.array([prefix[k - 1] if 0 < k <= prefix.size else (1.0 if k <= 0 else 0.0) for k in ks])
    return at_least, float(np.sum(prefix))
