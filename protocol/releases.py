"""Release records of the central mechanisms, and their gradual relaxation (docs/central.md).

A :class:`Release` is the JSON-serialisable record a store persists: the
exact counts and the noise (server-side only), the published answers, and
the levels released so far. :func:`make_release` runs a registered
:class:`~protocol.central.CentralMechanism` once and records it;
:func:`relax_release` refines the answers by the mechanism's lazy step on
the kept noise (gradual-release paper, Sec. 3): the budget charged is the
final level, not the sum. Both dispatch through the registry of
:mod:`protocol.central`, so a new mechanism needs no change here.

>>> rel = make_release("ageo", [3, 0, 7], 0.5, n_max=10, rng=1)
>>> relax_release(rel, 2.0, rng=2).levels
(0.5, 2.0)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .central import (
    Answers,
    CentralGuarantee,
    CentralMechanism,
    Monotonicity,
    Noise,
    check_level,
    check_not_tighter,
    mechanism_class,
)
from .errors import BudgetExceeded, ParameterError
from .exact import check_grid
from .rng import RandomSource, as_rng

RELEASE_SCHEMA = "onesided.release/v1"

__all__ = ["RELEASE_SCHEMA", "Release", "coerce_levels", "make_release", "relax_release", "release_answers"]


@dataclass(frozen=True, kw_only=True)
class Release:
    """A central release as a store persists it (JSON via :meth:`to_json_dict`).

    Attributes:
        mechanism: a registered name (:func:`~protocol.central.mechanism_names`).
        levels: the epsilons released so far, strictly increasing; the
            current answers are at ``levels[-1]``, which is also the budget
            charged (lazy relaxation: the final level, not the sum).
        counts: the exact values (server-side only).
        noise: the noise at ``levels[-1]`` (server-side only; for AGeo the
            untruncated ``G``).
        answers: the published values; for SALap ``None`` is "below
            threshold" and NaN "not answered" (after the stop).
        sensitivity, monotonicity, n_max, thresholds: mechanism parameters.
        grid: the output grid ``g`` (1 for the integer mechanisms): every
            answer is a multiple of it.
        negative_noise: server-side, grid mechanisms: the part ``g G_minus``
            of ``noise = g (G_plus - G_minus)`` (0 for one-sided noise), kept
            so that relaxation can step both geometrics.
    """

    mechanism: str
    levels: tuple[float, ...]
    counts: tuple[float, ...]
    noise: tuple[float, ...]
    answers: tuple[float | None, ...]
    sensitivity: float = 1.0
    monotonicity: Monotonicity = "decreasing"
    n_max: int | None = None
    thresholds: tuple[float, ...] | None = None
    grid: float = 1.0
    negative_noise: tuple[float, ...] | None = None
    SCHEMA: ClassVar[str] = RELEASE_SCHEMA

    def __post_init__(self) -> None:
        if not self.levels:
            raise ParameterError("levels", "must not be empty")
        for i, lv in enumerate(self.levels):
            check_level(f"levels[{i}]", lv)
        if any(b <= a for a, b in zip(self.levels, self.levels[1:], strict=False)):
            raise ParameterError("levels", f"must be strictly increasing, got {list(self.levels)}")
        check_grid(self.grid)
        kind = mechanism_class(self.mechanism)
        if kind.integer and self.grid != 1.0:
            raise ParameterError("grid", f"{self.mechanism} releases integers: the grid is 1, got {self.grid}")
        self.mechanism_params()  # validates sensitivity, monotonicity, n_max
        n = len(self.counts)
        for name in ("noise", "answers"):
            if len(getattr(self, name)) != n:
                raise ParameterError(name, f"must have one entry per count ({n}), got {len(getattr(self, name))}")
        if not kind.integer and (self.negative_noise is None or len(self.negative_noise) != n):
            raise ParameterError("negative_noise", f"a grid release keeps one negative part per count ({n})")
        if kind.sequential and (self.thresholds is None or len(self.thresholds) != n):
            raise ParameterError("thresholds", f"salap needs one threshold per query ({n})")

    @property
    def epsilon(self) -> float:
        """The current level, which is the budget charged."""
        return self.levels[-1]

    def mechanism_params(self, epsilon: float | None = None) -> CentralMechanism:
        """The mechanism object at ``epsilon`` (default: the current level), on this release's grid."""
        kind = mechanism_class(self.mechanism)
        return kind.from_params(
            self.epsilon if epsilon is None else epsilon, sensitivity=self.sensitivity,
            monotonicity=self.monotonicity, n_max=self.n_max, grid=None if kind.integer else self.grid,
        )

    def kept_noise(self) -> Noise:
        """The server-side noise as the mechanism's lazy step takes it."""
        negative = None if self.negative_noise is None else np.asarray(self.negative_noise, dtype=np.float64)
        return Noise(total=np.asarray(self.noise), negative=negative)

    def guarantee(self) -> CentralGuarantee:
        return self.mechanism_params().guarantee()

    def public_dict(self) -> dict[str, Any]:
        """What an analyst may see: no counts, no noise."""
        return {
            "schema": self.SCHEMA,
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "levels": list(self.levels),
            "grid": self.grid,
            "answers": _answers_to_json(self),
            "num_answers": len(self.answers),
            "thresholds": None if self.thresholds is None else list(self.thresholds),
            "guarantee": self.guarantee().to_dict(),
        }

    def to_json_dict(self) -> dict[str, Any]:
        """Everything, for the store; ``server`` holds the fields never shown to analysts."""
        server: dict[str, Any] = {"counts": list(self.counts), "noise": list(self.noise)}
        if self.negative_noise is not None:
            server["negative_noise"] = list(self.negative_noise)
        return {
            "schema": self.SCHEMA,
            "mechanism": self.mechanism,
            "levels": list(self.levels),
            "sensitivity": self.sensitivity,
            "monotonicity": self.monotonicity,
            "n_max": self.n_max,
            "grid": self.grid,
            "thresholds": None if self.thresholds is None else list(self.thresholds),
            "answers": _answers_to_json(self),
            "num_answers": len(self.answers),
            "server": server,
        }

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> Release:
        """Inverse of :meth:`to_json_dict` (validated; grid releases must name their grid)."""
        if not isinstance(data, dict) or data.get("schema") != RELEASE_SCHEMA:
            raise ParameterError("schema", f"must be {RELEASE_SCHEMA!r}")
        try:
            server = data["server"]
            n = int(data["num_answers"])
            answers = list(data["answers"]) + [math.nan] * (n - len(data["answers"]))
            thresholds = data.get("thresholds")
            negative = server.get("negative_noise")
            grid = data.get("grid", 1.0) if mechanism_class(data["mechanism"]).integer else data["grid"]
            return cls(
                mechanism=data["mechanism"],
                levels=tuple(float(x) for x in data["levels"]),
                counts=tuple(server["counts"]),
                noise=tuple(server["noise"]),
                answers=tuple(answers),
                sensitivity=float(data["sensitivity"]),
                monotonicity=data["monotonicity"],
                n_max=data.get("n_max"),
                thresholds=None if thresholds is None else tuple(float(x) for x in thresholds),
                grid=grid,
                negative_noise=None if negative is None else tuple(negative),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ParameterError):
                raise
            raise ParameterError("release", f"malformed release record: {exc}") from exc


def _answers_to_json(release: Release) -> list[float | int | None]:
    """SALap: answers up to and including the stop (``None`` = below threshold); others as is."""
    if not mechanism_class(release.mechanism).sequential:
        return list(release.answers)
    out: list[float | int | None] = []
    for a in release.answers:
        if a is not None and math.isnan(a):
            break
        out.append(a)
    return out


def _answer_tuple(answers: Answers) -> tuple[float | int | None, ...]:
    """Published answers as plain Python values (ints stay ints)."""
    return tuple(answers.tolist() if isinstance(answers, np.ndarray) else answers)


def _noise_tuples(noise: Noise) -> dict[str, Any]:
    negative = None if noise.negative is None else tuple(noise.negative.tolist())
    return {"noise": tuple(np.asarray(noise.total).tolist()), "negative_noise": negative}


def make_release(
    mechanism: str,
    counts: npt.ArrayLike,
    epsilon: float,
    *,
    sensitivity: float = 1.0,
    monotonicity: Monotonicity = "decreasing",
    n_max: int | None = None,
    thresholds: npt.ArrayLike | None = None,
    rng: RandomSource | int | None = None,
) -> Release:
    """Run the registered ``mechanism`` once at ``epsilon`` and record it (noise kept for later relaxation).

    Grid mechanisms draw their noise on the grid of ``D / epsilon``
    (:func:`~protocol.exact.default_grid`), recorded in the release and kept
    by every later relaxation; counts must lie on it (integers always do).

    Raises:
        ParameterError: an unknown mechanism (field ``mechanism``) or bad parameters (their field).
    """
    check_level("epsilon", epsilon)
    mech = mechanism_class(mechanism).from_params(
        epsilon, sensitivity=sensitivity, monotonicity=monotonicity, n_max=n_max, grid=None
    )
    c, t = mech.prepare(counts, thresholds)
    noise = mech.draw_noise(c.shape, rng)
    return Release(
        mechanism=mechanism,
        levels=(float(epsilon),),
        counts=tuple(c.tolist()),
        answers=_answer_tuple(mech.publish(c, noise.total, t)),
        sensitivity=float(sensitivity),
        monotonicity=monotonicity,
        n_max=n_max,
        thresholds=None if t is None else tuple(t.tolist()),
        grid=mech.step,
        **_noise_tuples(noise),
    )


def relax_release(
    release: Release,
    epsilon: float,
    *,
    ceiling: float | None = None,
    rng: RandomSource | int | None = None,
) -> Release:
    """Refine a published release to the looser level ``epsilon`` (gradual-release paper, Sec. 3).

    The stored noise takes the mechanism's exact lazy step on the release's
    grid (:meth:`~protocol.central.CentralMechanism.relax`), the answers
    are recomputed from it, and ``epsilon`` is appended to ``levels``. The
    refined answers have the one-shot ``epsilon`` error, and the budget
    charged for the whole history is ``epsilon`` (not the sum of levels).

    Raises:
        TighteningRefused: ``epsilon`` below the current level.
        BudgetExceeded: ``epsilon`` above ``ceiling``.
        ParameterError: SALap, the two-sided geometric and two-sided AGeo cannot be relaxed.
    """
    e2 = check_level("epsilon", epsilon)
    if ceiling is not None and e2 > ceiling:
        raise BudgetExceeded(requested=e2, remaining=ceiling, detail="relaxation ceiling")
    check_not_tighter(release.epsilon, e2)
    if e2 == release.epsilon:
        return release
    noise = release.mechanism_params().relax(release.kept_noise(), e2, as_rng(rng))
    answers = release.mechanism_params(e2).publish(np.asarray(release.counts), noise.total, release.thresholds)
    return dataclasses.replace(
        release, levels=(*release.levels, e2), answers=_answer_tuple(answers), **_noise_tuples(noise)
    )


def release_answers(release: Release) -> npt.NDArray[Any]:
    """The answers as an array (float; SALap's ``None`` becomes ``-inf``, meaning "below threshold")."""
    return np.array([-math.inf if a is None else a for a in release.answers], dtype=np.float64)


def coerce_levels(levels: Sequence[float]) -> tuple[float, ...]:
    """Validated, sorted, de-duplicated levels (for multi-level releases)."""
    out = sorted({check_level(f"levels[{i}]", lv) for i, lv in enumerate(levels)})
    if not out:
        raise ParameterError("levels", "must not be empty")
    return tuple(out)
