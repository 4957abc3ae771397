"""onesided.protocol: what the client and the aggregator share.

Encodings, randomness, thresholded bit randomizers, relaxation steps,
privacy accounting, metric parameters, central mechanisms (ALap, AGeo,
SALap and the competitors behind one registry, :mod:`protocol.central`),
their release records with gradual relaxation (:mod:`protocol.releases`) and
multi-analyst releases. Wire schemas and crypto
envelopes live in :mod:`protocol.wire` and :mod:`protocol.crypto`.
Pure: no I/O, no global state.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Where each public name lives. Submodules load on first use (PEP 562), so `import protocol.errors`
# (the CLI, the SDK's error classes) does not pay for numpy and the mechanisms.
_EXPORTS: dict[str, str] = {
    "AGeoMechanism": "mechanisms",
    "ALapMechanism": "mechanisms",
    "BloomEncoding": "encodings",
    "BudgetExceeded": "errors",
    "CentralMechanism": "mechanisms",
    "DecryptError": "errors",
    "DirectEncoding": "encodings",
    "Encoding": "encodings",
    "GeometricMechanism": "mechanisms",
    "Guarantee": "accounting",
    "KeyedRandom": "rng",
    "LaplaceMechanism": "mechanisms",
    "MechanismA": "multianalyst",
    "MetricParams": "params",
    "OnesidedError": "errors",
    "ParameterError": "errors",
    "PolicyError": "errors",
    "RandomSource": "rng",
    "Randomizer": "randomizers",
    "Release": "releases",
    "ReportRejected": "errors",
    "SALapMechanism": "mechanisms",
    "SecureRandom": "rng",
    "SeededRandom": "rng",
    "SignatureError": "errors",
    "TighteningRefused": "errors",
    "ageo": "mechanisms",
    "alap": "mechanisms",
    "as_rng": "rng",
    "bit_epsilon": "accounting",
    "bloom_bits": "encodings",
    "canonical_json": "canonical",
    "canonical_value": "encodings",
    "check_sequence_privacy": "accounting",
    "correlated_releases": "multianalyst",
    "encode_population": "encodings",
    "encoding_from_dict": "encodings",
    "guarantee": "accounting",
    "laplace_rate_from_f": "randomizers",
    "make_release": "releases",
    "mechanism_class": "mechanisms",
    "mechanism_names": "mechanisms",
    "noise_seed": "rng",
    "relax_exponential": "relaxation",
    "relax_geometric": "relaxation",
    "relax_laplace": "relaxation",
    "relax_release": "releases",
    "round_up": "accounting",
    "salap": "mechanisms",
    "sequence_bit_epsilon": "accounting",
    "sequence_pattern_probabilities": "accounting",
    "threshold_bits": "randomizers",
    "tighten_exponential": "relaxation",
    "tighten_geometric": "relaxation",
    "tighten_laplace": "relaxation",
}

__all__ = [
    "AGeoMechanism",
    "ALapMechanism",
    "BloomEncoding",
    "BudgetExceeded",
    "CentralMechanism",
    "DecryptError",
    "DirectEncoding",
    "Encoding",
    "GeometricMechanism",
    "Guarantee",
    "KeyedRandom",
    "LaplaceMechanism",
    "MechanismA",
    "MetricParams",
    "OnesidedError",
    "ParameterError",
    "PolicyError",
    "RandomSource",
    "Randomizer",
    "Release",
    "ReportRejected",
    "SALapMechanism",
    "SecureRandom",
    "SeededRandom",
    "SignatureError",
    "TighteningRefused",
    "ageo",
    "alap",
    "as_rng",
    "bit_epsilon",
    "bloom_bits",
    "canonical_json",
    "canonical_value",
    "check_sequence_privacy",
    "correlated_releases",
    "encode_population",
    "encoding_from_dict",
    "guarantee",
    "laplace_rate_from_f",
    "make_release",
    "mechanism_class",
    "mechanism_names",
    "noise_seed",
    "relax_exponential",
    "relax_geometric",
    "relax_laplace",
    "relax_release",
    "round_up",
    "salap",
    "sequence_bit_epsilon",
    "sequence_pattern_probabilities",
    "threshold_bits",
    "tighten_exponential",
    "tighten_geometric",
    "tighten_laplace",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'protocol' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"protocol.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # the names, for type checkers and editors
    from .accounting import (
        Guarantee,
        bit_epsilon,
        check_sequence_privacy,
        guarantee,
        round_up,
        sequence_bit_epsilon,
        sequence_pattern_probabilities,
    )
    from .canonical import canonical_json
    from .central import (
        AGeoMechanism,
        ALapMechanism,
        CentralMechanism,
        GeometricMechanism,
        LaplaceMechanism,
        SALapMechanism,
        ageo,
        alap,
        mechanism_class,
        mechanism_names,
        salap,
    )
    from .encodings import (
        BloomEncoding,
        DirectEncoding,
        Encoding,
        bloom_bits,
        canonical_value,
        encode_population,
        encoding_from_dict,
    )
    from .errors import (
        BudgetExceeded,
        DecryptError,
        OnesidedError,
        ParameterError,
        PolicyError,
        ReportRejected,
        SignatureError,
        TighteningRefused,
    )
    from .multianalyst import MechanismA, correlated_releases
    from .params import MetricParams
    from .randomizers import Randomizer, laplace_rate_from_f, threshold_bits
    from .relaxation import (
        relax_exponential,
        relax_geometric,
        relax_laplace,
        tighten_exponential,
        tighten_geometric,
        tighten_laplace,
    )
    from .releases import Release, make_release, relax_release
    from .rng import KeyedRandom, RandomSource, SecureRandom, SeededRandom, as_rng, noise_seed
