"""Association and discovery over stored aggregates (docs/decoding.md 8-9).

The HTTP layer (:mod:`aggregator.server.api.association`) and the CLI call this module; the
analysis is :mod:`aggregator.analysis.association` and :mod:`aggregator.analysis.discovery`.
The collection (window, round) is chosen and refused below ``min_batch_size`` exactly as for
estimates (:class:`~aggregator.server.services.estimates.DecodingService`).

>>> AssociationRequest.from_mapping({"values_a": ["x"], "values_b": ["y", "z"], "round": "0"}).round
0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from aggregator.analysis.association import JOINT_METHODS, MAX_CELLS, estimate_joint
from aggregator.analysis.discovery import DEFAULT_ALPHABET, DiscoverySettings, discover
from aggregator.server.services.estimates import DecodingService, _known_fields
from aggregator.server.storage import MetricRecord
from protocol.encodings import PrefixEncoding
from protocol.errors import ParameterError

COLLECTION_FIELDS = ("window", "round")
ASSOCIATION_FIELDS = (*COLLECTION_FIELDS, "values_a", "values_b", "method")
DISCOVERY_FIELDS = (*COLLECTION_FIELDS, "min_share", "alphabet", "max_prefixes", "alpha")


def _number(field: str, value: Any, kind: type) -> Any:
    """An int or float from JSON or query text; errors name the field."""
    if isinstance(value, str):
        try:
            value = kind(value)
        except ValueError:
            raise ParameterError(field, f"must be {'an integer' if kind is int else 'a number'}, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not isinstance(value, int)):
        raise ParameterError(field, f"must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    if not math.isfinite(value):
        raise ParameterError(field, f"must be finite, got {value!r}")
    return value


def _optional_index(field: str, value: Any) -> int | None:
    if value is None:
        return None
    number = _number(field, value, int)
    if not 0 <= number < 2**62:
        raise ParameterError(field, f"must be an integer in [0, 2**62), got {number!r}")
    return int(number)


def _values(field: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise ParameterError(field, "is required: a non-empty list of strings")
    if not all(isinstance(v, str) and v for v in value):
        raise ParameterError(field, "must hold non-empty strings")
    return tuple(value)


@dataclass(frozen=True, kw_only=True)
class AssociationRequest:
    """``values_a x values_b`` of a pair metric, in one collection; ``method`` of the joint."""

    values_a: tuple[str, ...]
    values_b: tuple[str, ...]
    window: int | None = None
    round: int | None = None
    method: str = "projection"

    @classmethod
    def from_mapping(cls, data: Any) -> AssociationRequest:
        fields = _known_fields(data, ASSOCIATION_FIELDS)
        a, b = _values("values_a", fields.get("values_a")), _values("values_b", fields.get("values_b"))
        if len(a) * len(b) > MAX_CELLS:
            raise ParameterError("values_b", f"{len(a)} x {len(b)} cells is over {MAX_CELLS}")
        method = fields.get("method") or "projection"
        if method not in JOINT_METHODS:
            raise ParameterError("method", f"must be one of {', '.join(JOINT_METHODS)}, got {method!r}")
        return cls(values_a=a, values_b=b, window=_optional_index("window", fields.get("window")),
                   round=_optional_index("round", fields.get("round")), method=method)


@dataclass(frozen=True, kw_only=True)
class DiscoveryRequest:
    """One collection of a prefix metric and the :class:`DiscoverySettings`."""

    settings: DiscoverySettings
    window: int | None = None
    round: int | None = None

    @classmethod
    def from_mapping(cls, data: Any) -> DiscoveryRequest:
        fields = _known_fields(data, DISCOVERY_FIELDS)
        settings = DiscoverySettings(
            alphabet=fields.get("alphabet") or DEFAULT_ALPHABET,
            min_share=float(_number("min_share", fields.get("min_share", 0.01), float)),
            max_prefixes=_number("max_prefixes", fields.get("max_prefixes", 64), int),
            alpha=float(_number("alpha", fields.get("alpha", 0.05), float)),
        )
        return cls(settings=settings, window=_optional_index("window", fields.get("window")),
                   round=_optional_index("round", fields.get("round")))


class PairService(DecodingService):
    """The association and discovery answers, on :class:`DecodingService`'s choice of collection."""

    def association(self, metric: MetricRecord, request: AssociationRequest) -> dict[str, Any]:
        """The header and, unless ``reason`` is set, ``joint`` (:meth:`JointEstimate.to_dict`)."""
        chosen = self.choose(metric, request.window, request.round)
        body, counts = self._decodable(metric, chosen)
        body["joint"] = None
        if counts is not None:
            fit = estimate_joint(counts, chosen.params, chosen.level, request.values_a, request.values_b,
                                 method=request.method)
            body["joint"] = fit.to_dict()
        return body

    def discovered(self, metric: MetricRecord, request: DiscoveryRequest) -> dict[str, Any]:
        """The header and, unless ``reason`` is set, ``discovery`` (:meth:`Discovery.to_dict`)."""
        if not isinstance(metric.params.encoding, PrefixEncoding):
            raise ParameterError("metric", f"{metric.name!r} is not a prefix metric (encoding.kind 'prefix')")
        chosen = self.choose(metric, request.window, request.round)
        body, counts = self._decodable(metric, chosen)
        body["discovery"] = None
        if counts is not None:
            body["discovery"] = discover(counts, chosen.params, chosen.level, request.settings).to_dict()
        return body
