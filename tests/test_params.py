"""Metric parameters: validation (property-based), policy, round trip, digest."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import BloomEncoding, DirectEncoding, MetricParams, ParameterError, PolicyError

BLOOM = BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=8)


def _valid() -> dict[str, Any]:
    return MetricParams(name="places", encoding=BLOOM, mode="asymmetric", level=2.0, irr_q=0.05).to_dict()


def test_round_trip_and_digest_is_stable() -> None:
    m = MetricParams.from_dict(_valid())
    assert MetricParams.from_dict(m.to_dict()) == m
    assert m.digest() == MetricParams.from_dict(_valid()).digest()
    other = dict(_valid(), level=3.0)
    assert MetricParams.from_dict(other).digest() != m.digest()


def test_trusted_mode_has_no_level() -> None:
    m = MetricParams(name="exact", encoding=BLOOM, mode="trusted", level=math.inf)
    assert m.to_dict()["level"] is None
    assert MetricParams.from_dict(m.to_dict()) == m
    assert m.guarantee().epsilon_per_report == math.inf


def test_asymmetric_categorical_needs_a_none_value() -> None:
    enc = DirectEncoding(domain=("none", "flu", "covid"))
    with pytest.raises(PolicyError) as err:
        MetricParams(name="dx", encoding=enc, mode="asymmetric", level=1.0, value_kind="categorical")
    assert err.value.field == "mode"
    ok = MetricParams(
        name="dx", encoding=enc, mode="asymmetric", level=1.0, value_kind="categorical", none_value="none"
    )
    assert ok.guarantee().bits_changed == 1
    sym = MetricParams(name="dx", encoding=enc, mode="symmetric", level=1.0, value_kind="categorical")
    assert sym.guarantee().bits_changed == 2


BAD_FIELDS: dict[str, list[Any]] = {
    "name": ["", "Upper", "a b", "x" * 65, 5, None],
    "mode": ["both", 1, None],
    "level": [0, -1.0, "1", float("nan"), True],
    "irr_q": [1.5, -0.1, "0.1"],
    "value_kind": ["list", None],
    "time_precision": [0, -5, 1.5, "60"],
    "min_batch_size": [0, 2.0],
    "version": [2, "1"],
    "surprise": [1],
}


@given(st.sampled_from(sorted(BAD_FIELDS)), st.data())
def test_every_invalid_field_raises_a_value_error_naming_it(field: str, data: st.DataObject) -> None:
    bad = data.draw(st.sampled_from(BAD_FIELDS[field]))
    doc = dict(_valid(), **{field: bad})
    with pytest.raises(ValueError) as err:
        MetricParams.from_dict(doc)
    assert isinstance(err.value, ParameterError)
    assert err.value.field == field


@given(
    st.integers(min_value=-5, max_value=5000),
    st.integers(min_value=-2, max_value=70),
    st.integers(min_value=-1, max_value=70000),
)
def test_bloom_validator_accepts_exactly_the_domain(bits: int, hashes: int, cohorts: int) -> None:
    valid = 1 <= bits <= 4096 and 1 <= hashes <= min(64, bits) and 1 <= cohorts <= 2**16
    doc = dict(_valid(), encoding={"kind": "bloom", "num_bits": bits, "num_hashes": hashes, "num_cohorts": cohorts})
    if valid:
        assert MetricParams.from_dict(doc).num_bits == bits
    else:
        with pytest.raises(ParameterError) as err:
            MetricParams.from_dict(doc)
        assert err.value.field in {"num_bits", "num_hashes", "num_cohorts"}


def test_the_protocol_package_loads_its_modules_on_first_use() -> None:
    # `import protocol.errors` (the CLI, the SDK's error classes) does not pay for numpy and the mechanisms;
    # every public name still resolves from the package, and __all__ lists exactly them
    import subprocess
    import sys

    import protocol

    code = "import sys, protocol.errors; print('numpy' in sys.modules, 'protocol.central' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
    assert all(getattr(protocol, name) is not None for name in protocol.__all__)
    assert set(protocol.__all__) == set(protocol._EXPORTS)
