"""Metric parameters: the one record both sides agree on.

A metric is registered at the aggregator, published in the signed config,
and read by clients. Its parameters are immutable once reports exist; the
``digest`` binds them into every sealed report.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from .accounting import Guarantee, ValueKind, guarantee
from .canonical import canonical_json
from .encodings import (
    BloomEncoding,
    BoolArray,
    DirectEncoding,
    Encoding,
    PrefixEncoding,
    Value,
    encoding_from_dict,
)
from .errors import ParameterError
from .local.base import LocalMechanism, local_mechanism
from .randomizers import Mode, Randomizer
from .validation import check_int

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
VALUE_KINDS: tuple[str, ...] = ("set", "categorical")
PARAMS_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class MetricParams:
    """Everything about a metric that a report depends on.

    Attributes:
        name: ``[a-z0-9][a-z0-9_.-]{0,63}``.
        encoding: Bloom, direct or prefix (discovery).
        mode: ``symmetric`` (Laplace), ``asymmetric`` (exponential, one-sided)
            or ``trusted`` (exact bits; central releases add the noise).
        level: the initial noise rate (``inf`` for trusted). Rounds raise it.
        irr_p, irr_q: instantaneous randomized response (see :class:`Randomizer`).
        value_kind: ``set`` (presence data) or ``categorical`` (one value).
        none_value: for categorical data, the declared non-sensitive value;
            required by the asymmetric mode (docs/privacy.md).
        time_precision: seconds per window; estimates are per window.
        min_batch_size: below this many reports in a window, no estimate.
        max_items: contribution bound of trusted set metrics: the aggregator keeps at most this
            many ones of a report (chosen at random) and central releases protect a person with
            up to this many items (L1 sensitivity); 1 <= max_items <= num_bits, default 1.
    """

    name: str
    encoding: Encoding
    mode: Mode
    level: float
    irr_p: float | None = None
    irr_q: float | None = None
    value_kind: ValueKind = "set"
    none_value: str | None = None
    time_precision: int = 86400
    min_batch_size: int = 100
    max_items: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.fullmatch(self.name):
            raise ParameterError("name", f"must match {NAME_PATTERN.pattern}, got {self.name!r}")
        if not isinstance(self.encoding, BloomEncoding | DirectEncoding | PrefixEncoding):
            raise ParameterError("encoding", "must be a BloomEncoding, DirectEncoding or PrefixEncoding")
        mechanism = local_mechanism(self.mode)
        if self.value_kind not in VALUE_KINDS:
            raise ParameterError("value_kind", f"must be one of {VALUE_KINDS}, got {self.value_kind!r}")
        self._check_none_value()
        mechanism.check_metric(self.value_kind, self.none_value)
        check_int("time_precision", self.time_precision, low=1, high=10**9)
        check_int("min_batch_size", self.min_batch_size, low=1, high=10**9)
        check_int("max_items", self.max_items, low=1, high=self.encoding.num_bits)
        self.randomizer()  # validates level and IRR

    def __hash__(self) -> int:
        """The hash of the fields, computed once (frozen): caches keyed on the parameters are hit per report.

        A direct domain of thousands of items took microseconds to hash on every lookup.
        """
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the cached hash (string hashes differ between processes)."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def _check_none_value(self) -> None:
        """The declared non-sensitive value: a non-empty string, in a direct domain, categorical only."""
        none = self.none_value
        if none is None:
            return
        if not isinstance(none, str) or not none:
            raise ParameterError("none_value", f"must be a non-empty string or null, got {none!r}")
        if self.value_kind != "categorical":
            raise ParameterError("none_value", "applies to categorical metrics only")
        if isinstance(self.encoding, DirectEncoding) and none not in self.encoding.domain:
            raise ParameterError("none_value", f"must be an item of the direct domain, got {none!r}")

    def is_none(self, value: object) -> bool:
        """True for the declared non-sensitive value (``str`` or its UTF-8 bytes)."""
        none = self.none_value
        if none is None:
            return False
        return value == none or value == none.encode("utf-8")

    def encode(self, value_or_set: Value | Iterable[Value], cohort: int) -> BoolArray:
        """The true bits of a report: the encoding's, except that ``none_value`` is all zeros.

        The declared non-sensitive value is reserved: it owns no bits (its
        direct-domain bit is always 0 before noise), so a report of it is
        noise only and an asymmetric report of a sensitive value differs from
        it in the 1 -> 0 direction only (docs/privacy.md).
        """
        if isinstance(value_or_set, str | bytes) and self.is_none(value_or_set):
            self.encoding.check_cohort(cohort)
            return np.zeros(self.encoding.num_bits, dtype=bool)
        return self.encoding.encode(value_or_set, cohort)

    @property
    def local_mechanism(self) -> LocalMechanism:
        """The mechanism of :attr:`mode` (what every mode-dependent question is asked of)."""
        return local_mechanism(self.mode)

    def randomizer(self, level: float | None = None) -> Randomizer:
        """The bit randomizer at ``level`` (default: the initial level)."""
        return Randomizer(
            mode=self.mode, level=self.level if level is None else level, irr_p=self.irr_p, irr_q=self.irr_q
        )

    def with_irr(self, irr: tuple[float | None, float | None] | None) -> MetricParams:
        """These parameters with the IRR ``irr = (irr_p, irr_q)`` (``None`` or the same IRR: ``self``).

        What the reports of a round that relaxed the IRR are made with (and decoded with).
        """
        if irr is None or (irr[0], irr[1]) == (self.irr_p, self.irr_q):
            return self
        return replace(self, irr_p=irr[0], irr_q=irr[1])

    def guarantee(self, level: float | None = None) -> Guarantee:
        return guarantee(self.randomizer(level), num_hashes=self.encoding.num_hashes, value_kind=self.value_kind)

    @property
    def num_bits(self) -> int:
        return self.encoding.num_bits

    @property
    def num_cohorts(self) -> int:
        return self.encoding.num_cohorts

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": PARAMS_VERSION,
            "name": self.name,
            "encoding": self.encoding.to_dict(),
            "mode": self.mode,
            "level": None if math.isinf(self.level) else self.level,
            "irr_p": self.irr_p,
            "irr_q": self.irr_q,
            "value_kind": self.value_kind,
            "none_value": self.none_value,
            "time_precision": self.time_precision,
            "min_batch_size": self.min_batch_size,
        } | ({"max_items": self.max_items} if self.max_items != 1 else {})  # default left out: digests unchanged

    def digest(self) -> str:
        """Hex SHA-256 of :func:`canonical_json` of :meth:`to_dict`.

        Clients take it from the signed config rather than recomputing it.
        """
        return hashlib.sha256(canonical_json(self.to_dict())).hexdigest()

    @classmethod
    def from_dict(cls, data: Any) -> MetricParams:
        """Validate a JSON object; every error names its field."""
        if not isinstance(data, dict):
            raise ParameterError("metric", "must be a JSON object")
        known = {
            "version", "name", "encoding", "mode", "level", "irr_p", "irr_q", "value_kind",
            "none_value", "time_precision", "min_batch_size", "max_items",
        }
        unknown = sorted(set(data) - known)
        if unknown:
            raise ParameterError(unknown[0], "is not a known field")
        version = data.get("version", PARAMS_VERSION)
        if version != PARAMS_VERSION:
            raise ParameterError("version", f"must be {PARAMS_VERSION}, got {version!r}")
        for required in ("name", "encoding", "mode"):
            if required not in data:
                raise ParameterError(required, "is required")
        mode = data["mode"]
        level = data.get("level")
        if level is None:
            if local_mechanism(mode).randomized:
                raise ParameterError("level", "is required for symmetric and asymmetric metrics")
            level = math.inf
        kwargs: dict[str, Any] = {k: data[k] for k in ("irr_p", "irr_q", "none_value") if k in data}
        for k in ("value_kind", "time_precision", "min_batch_size", "max_items"):
            if k in data:
                kwargs[k] = data[k]
        return cls(
            name=data["name"], encoding=encoding_from_dict(data["encoding"]), mode=mode, level=level, **kwargs
        )


