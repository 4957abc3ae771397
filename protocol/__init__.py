"""onesided.protocol: what the client and the aggregator share.

Encodings, randomness, thresholded bit randomizers, relaxation steps,
privacy accounting, metric parameters, central mechanisms (ALap, AGeo,
SALap and the competitors behind one registry, :mod:`protocol.mechanisms`),
their release records with gradual relaxation (:mod:`protocol.releases`) and
multi-analyst releases. Wire schemas and crypto
envelopes live in :mod:`protocol.wire` and :mod:`protocol.crypto`.
Pure: no I/O, no global state.
"""

from .accounting import (
    Guarantee,
    bit_epsilon,
    check_sequence_privacy,
    guarantee,
    round_up,
    sequence_bit_epsilon,
    sequence_pattern_probabilities,
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
from .mechanisms import (
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
from .multianalyst import MechanismA, correlated_releases
from .params import MetricParams, canonical_json
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

__all__ = [
    "AGeoMechanism",
    "ALapMechanism",
    "CentralMechanism",
    "GeometricMechanism",
    "LaplaceMechanism",
    "MechanismA",
    "Release",
    "SALapMechanism",
    "ageo",
    "alap",
    "correlated_releases",
    "make_release",
    "mechanism_class",
    "mechanism_names",
    "relax_release",
    "salap",
    "BloomEncoding",
    "BudgetExceeded",
    "DecryptError",
    "DirectEncoding",
    "Encoding",
    "Guarantee",
    "KeyedRandom",
    "MetricParams",
    "OnesidedError",
    "ParameterError",
    "PolicyError",
    "RandomSource",
    "Randomizer",
    "ReportRejected",
    "SecureRandom",
    "SeededRandom",
    "SignatureError",
    "TighteningRefused",
    "as_rng",
    "bit_epsilon",
    "bloom_bits",
    "canonical_json",
    "canonical_value",
    "check_sequence_privacy",
    "encode_population",
    "encoding_from_dict",
    "guarantee",
    "laplace_rate_from_f",
    "noise_seed",
    "relax_exponential",
    "relax_geometric",
    "relax_laplace",
    "round_up",
    "sequence_bit_epsilon",
    "sequence_pattern_probabilities",
    "threshold_bits",
    "tighten_exponential",
    "tighten_geometric",
    "tighten_laplace",
]
