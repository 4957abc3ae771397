"""Bloom (mmh3 and RAPPOR md5) and direct encodings."""

from __future__ import annotations

import hashlib

import mmh3
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import BloomEncoding, DirectEncoding, bloom_bits, canonical_value, encode_population
from protocol.encodings import encoding_from_dict
from protocol.errors import ParameterError


def test_mmh3_derivation_as_documented() -> None:
    value = "café"
    got = bloom_bits(value, 5, num_bits=128, num_hashes=3)
    want = [mmh3.hash(value.encode("utf-8"), 5 * 3 + i, signed=False) % 128 for i in range(3)]
    assert got == want
    assert bloom_bits(value.encode("utf-8"), 5, num_bits=128, num_hashes=3) == got


def test_rappor_md5_derivation_matches_reference_rule() -> None:
    # Reference client: md5(4-byte big-endian cohort || word), byte i mod num_bloombits.
    digest = hashlib.md5(b"\x00\x00\x01\x02" + b"abc").digest()
    assert bloom_bits("abc", 258, num_bits=16, num_hashes=2, hashing="rappor-md5") == [
        digest[0] % 16,
        digest[1] % 16,
    ]


def test_set_is_or_of_members() -> None:
    enc = BloomEncoding(num_bits=64, num_hashes=2, num_cohorts=4)
    both = enc.encode(["a", "b"], 2)
    assert np.array_equal(both, enc.encode("a", 2) | enc.encode("b", 2))
    assert enc.encode([], 1).sum() == 0


@given(st.lists(st.text(max_size=8), max_size=6), st.integers(0, 3))
def test_population_path_equals_single_path(members: list[str], cohort: int) -> None:
    enc = BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4)
    values = sorted(set(members))
    table = enc.bit_table(values)
    got = encode_population(enc, [list(range(len(values)))], np.array([cohort]), table)
    assert np.array_equal(got[0], enc.encode(values, cohort))


def test_direct_encoding() -> None:
    enc = DirectEncoding(domain=("red", "green", "blue"))
    assert enc.encode(["blue", "red"]).tolist() == [True, False, True]
    with pytest.raises(ParameterError) as err:
        enc.encode("purple")
    assert err.value.field == "value"
    with pytest.raises(ParameterError) as err:
        enc.bits_of("red", 1)
    assert err.value.field == "cohort"


def test_canonical_value_ignores_order_and_repeats() -> None:
    assert canonical_value(["b", "a", "a"]) == canonical_value(["a", "b"])
    assert canonical_value("a") == canonical_value(["a"])
    assert canonical_value(["ab"]) != canonical_value(["a", "b"])


def test_round_trip_dict() -> None:
    for enc in (BloomEncoding(num_bits=16, num_hashes=2, num_cohorts=64, hashing="rappor-md5"),
                DirectEncoding(domain=("x", "y"))):
        assert encoding_from_dict(enc.to_dict()) == enc


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_bits": 0, "num_hashes": 1, "num_cohorts": 1}, "num_bits"),
        ({"num_bits": 8, "num_hashes": 9, "num_cohorts": 1}, "num_hashes"),
        ({"num_bits": 8, "num_hashes": 2, "num_cohorts": 0}, "num_cohorts"),
        ({"num_bits": 8, "num_hashes": 2, "num_cohorts": 1, "hashing": "sha1"}, "hashing"),
        ({"num_bits": 64, "num_hashes": 17, "num_cohorts": 1, "hashing": "rappor-md5"}, "num_hashes"),
        ({"num_bits": 8.0, "num_hashes": 2, "num_cohorts": 1}, "num_bits"),
    ],
)
def test_bloom_validation_names_the_field(kwargs: dict, field: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ParameterError) as err:
        BloomEncoding(**kwargs)
    assert err.value.field == field


def test_encoding_from_dict_errors_name_fields() -> None:
    with pytest.raises(ParameterError) as err:
        encoding_from_dict({"kind": "bloom", "num_bits": 8, "num_hashes": 2})
    assert err.value.field == "encoding.num_cohorts"
    with pytest.raises(ParameterError) as err:
        encoding_from_dict({"kind": "hash"})
    assert err.value.field == "encoding.kind"
