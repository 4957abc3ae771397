"""The empirical privacy auditor (aggregator/research/audit.py, ``onesided audit``, docs/audit.md).

False-failure rate of the statistical tests: an audit's two Clopper-Pearson
bounds hold at confidence ``1 - alpha/2`` each on the measurement half, and
the event is chosen on the other half, so ``P(lower bound > true epsilon) <=
alpha = 1e-6`` per target (:data:`DEFAULT_CONFIDENCE`); with fixed seeds
every test here is deterministic (the twin test checks it).
"""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest

import aggregator.research.audit as audit_module
from aggregator.cli.main import main
from aggregator.research.audit import (
    DEFAULT_CONFIDENCE,
    PLANTED,
    TARGETS,
    AuditEvent,
    AuditResult,
    AuditTarget,
    audit,
    clopper_pearson_lower,
    clopper_pearson_upper,
    find_target,
    outcome_keys,
    planted_float_release,
    reachable,
)
from aggregator.research.audit_device import DEVICE_TARGETS, PLANTED_DEVICE
from protocol.central import ALapMechanism
from protocol.errors import ParameterError
from protocol.rng import RandomSource, SeededRandom

SAMPLES = 10**6
SEED = 20240611

# ALap (and SALap, which uses its noise) released ``count + (-log u) / eps`` as a double until the
# exact grid sampler (ALapMechanism.step); those outputs have holes (Mironov 2012) that identify
# the count: at 10**6 samples the float version audits at ~9.9 against a claim of 1.
FLOAT_ALAP = not hasattr(ALapMechanism, "step")
FLOAT_HOLES = pytest.mark.xfail(
    FLOAT_ALAP, strict=True,
    reason="floating-point ALap noise (count + -log(u)/eps as a double) has holes: outputs not reachable "
    "from count 0 prove count 1 (Mironov 2012); fixed by the exact grid sampler",
)
SHIPPED = [
    pytest.param(name, marks=FLOAT_HOLES if name in ("central-alap", "central-salap") else ())
    for name in TARGETS
]
# How close to its claim the audit of a shipped target must come at 10**6 samples: the measured
# ratios are 0.985-0.996 (docs/audit.md); 0.9 leaves room for other seeds and claims.
TIGHTNESS = 0.9


@functools.cache
def audited(name: str) -> AuditResult:
    return audit(find_target(name), SAMPLES, seed=SEED)


# --------------------------------------------------------------------------
# The product's claims hold, the planted mechanisms are caught, the auditor has teeth
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_target_lower_bound_within_claim(name: str) -> None:
    result = audited(name)
    # the client's own per-report code (~40 us a report) is audited at its cap of 10**5 samples per input
    expected = TARGETS[name].max_samples or SAMPLES
    assert result.samples == expected and result.confidence == DEFAULT_CONFIDENCE
    assert result.lower_bound <= result.claimed, result


@pytest.mark.parametrize("name", list(TARGETS))
def test_shipped_target_audit_is_tight(name: str) -> None:
    """Not toothless: each claim is approached from below (the claims are tight by construction)."""
    result = audited(name)
    assert result.lower_bound >= TIGHTNESS * result.claimed, result


def test_asymmetric_randomizer_tightness() -> None:
    # ln of P(both bits of x reported 1 | {x, y}) = 1 over P(... | {y}) = exp(-2): exactly the claim 2.
    result = audited("local-asymmetric-set-bloom")
    assert result.claimed == 2.0
    assert 0.98 * result.claimed <= result.lower_bound <= result.claimed


@pytest.mark.parametrize("name", list(PLANTED))
def test_planted_mechanism_is_caught(name: str) -> None:
    result = audited(name)
    assert result.lower_bound > result.claimed, result
    # Each leak is an event impossible under one input: ln(n p / ln(2/alpha)) ~ 10 at 10**6 samples.
    assert result.lower_bound > 5.0


def test_same_seed_same_result_other_seed_other_sample() -> None:
    target = TARGETS["local-symmetric-set-bloom"]
    first, second = audit(target, 20_000, seed=5), audit(target, 20_000, seed=5)
    assert first == second
    assert audit(target, 20_000, seed=6).counts != first.counts


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------


def test_clopper_pearson_bounds() -> None:
    alpha = 1e-3
    assert clopper_pearson_lower(0, 100, alpha) == 0.0
    assert clopper_pearson_upper(100, 100, alpha) == 1.0
    # k = 0: the exact bound 1 - alpha^(1/n).
    assert clopper_pearson_upper(0, 1000, alpha) == pytest.approx(1 - alpha ** (1 / 1000), rel=1e-9)
    assert clopper_pearson_lower(1000, 1000, alpha) == pytest.approx(alpha ** (1 / 1000), rel=1e-9)
    low, high = clopper_pearson_lower(300, 1000, alpha), clopper_pearson_upper(300, 1000, alpha)
    assert low < 0.3 < high and high - low < 0.1


def test_audit_of_identical_inputs_is_near_zero() -> None:
    """No loss at all: the bound stays at or near 0 (a nonzero value would be a false positive)."""

    def coin(n: int, rng: RandomSource) -> np.ndarray:
        return rng.uniform((n, 3)) < 0.3

    target = AuditTarget(name="same", claimed=0.0, sample_a=coin, sample_b=coin, focus=(0, 1))
    assert audit(target, 200_000, seed=3).lower_bound == 0.0


def test_impossible_event_gives_large_finite_bound() -> None:
    def ones(n: int, rng: RandomSource) -> np.ndarray:
        return np.ones(n)

    def zeros(n: int, rng: RandomSource) -> np.ndarray:
        return np.zeros(n)

    result = audit(AuditTarget(name="leak", claimed=1.0, sample_a=ones, sample_b=zeros), 10_000, seed=1)
    # P(E|a) >= (alpha/2)^(1/n) and P(E|b) <= 1 - (alpha/2)^(1/n) ~ ln(2/alpha)/n, n = 5000.
    assert result.counts == (5000, 5000, 0, 5000)
    edge = ((1 - DEFAULT_CONFIDENCE) / 2) ** (1 / 5000)
    assert result.lower_bound == pytest.approx(math.log(edge / (1 - edge)), rel=1e-9)
    assert result.lower_bound == pytest.approx(math.log(5000 / math.log(2 / (1 - DEFAULT_CONFIDENCE))), abs=0.01)


def test_custom_event_and_direction() -> None:
    """``a_over_b`` ignores a leak in the unprotected direction; ``both`` reports it."""

    def maybe(n: int, rng: RandomSource) -> np.ndarray:
        return rng.uniform(n) < 0.5

    def never(n: int, rng: RandomSource) -> np.ndarray:
        return np.zeros(n, dtype=bool)

    event = AuditEvent(name="reported false", predicate=lambda x: ~np.asarray(x))
    one_sided = AuditTarget(name="t", claimed=0.0, sample_a=maybe, sample_b=never, direction="a_over_b",
                            events=(event,))
    # a over b: {a's outcome true} is impossible under b, a real loss.
    assert audit(one_sided, 10_000, seed=2).lower_bound > 5
    reverse = AuditTarget(name="t", claimed=0.0, sample_a=never, sample_b=maybe, direction="a_over_b")
    assert audit(reverse, 10_000, seed=2).lower_bound < 1.0  # only P(false|a)/P(false|b) = 2 is measured
    both = AuditTarget(name="t", claimed=0.0, sample_a=never, sample_b=maybe, direction="both")
    assert audit(both, 10_000, seed=2).ratio == "b/a"


def test_outcome_keys() -> None:
    bits = np.array([[True, False, True], [False, False, False], [True, False, True]])
    keys = outcome_keys(bits)
    assert keys.tolist() == [5, 0, 5]
    wide = np.zeros((2, 70), dtype=bool)
    wide[1, 69] = True
    assert outcome_keys(wide)[0] != outcome_keys(wide)[1]
    ints = np.array([[1, 2], [1, 2], [2, 1]])
    k = outcome_keys(ints)
    assert k[0] == k[1] and k[0] != k[2]
    with pytest.raises(ParameterError, match="outcomes"):
        outcome_keys(np.zeros((2, 2, 2)))


# --------------------------------------------------------------------------
# The floating-point hole check
# --------------------------------------------------------------------------


def test_reachable_recognizes_the_samplers_own_outputs() -> None:
    rng = SeededRandom(4)

    def exponential(u: np.ndarray) -> np.ndarray:
        return -np.log(u) / 1.0

    def laplace(u: np.ndarray) -> np.ndarray:
        c = u - 0.5
        return -np.sign(c) * np.log1p(-2.0 * np.abs(c)) / 1.0

    own = planted_float_release(exponential, 0.0, 5000, rng)
    assert reachable(own, 0.0, exponential, increasing=False).all()
    assert reachable(planted_float_release(laplace, 0.0, 5000, rng), 0.0, laplace, increasing=True).all()
    # From count 1, many outputs in [1, 2) are off the count-0 sampler's coarser grid there.
    shifted = planted_float_release(exponential, 1.0, 5000, rng)
    in_range = (shifted >= 1.0) & (shifted < 2.0)
    holes = ~reachable(shifted[in_range], 0.0, exponential, increasing=False)
    assert 0.3 < holes.mean() < 0.9


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------


def _noop(n: int, rng: RandomSource) -> np.ndarray:
    return np.zeros(n)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"claimed": -1.0}, "claimed"),
        ({"claimed": True}, "claimed"),
        ({"name": ""}, "name"),
        ({"direction": "b_over_a"}, "direction"),
        ({"sample_a": 3}, "sample_a"),
        ({"focus": (-1,)}, "focus"),
        ({"events": ("x",)}, "events"),
    ],
)
def test_target_validation_names_the_field(kwargs: dict[str, object], field: str) -> None:
    base: dict[str, object] = {"name": "t", "claimed": 1.0, "sample_a": _noop, "sample_b": _noop}
    with pytest.raises(ParameterError) as info:
        AuditTarget(**{**base, **kwargs})  # type: ignore[arg-type]
    assert info.value.field == field


def test_audit_validation() -> None:
    target = AuditTarget(name="t", claimed=1.0, sample_a=_noop, sample_b=_noop)
    with pytest.raises(ParameterError, match="samples"):
        audit(target, 3, seed=1)
    with pytest.raises(ParameterError, match="confidence"):
        audit(target, 100, seed=1, confidence=1.0)
    bad = AuditTarget(name="t", claimed=1.0, sample_a=lambda n, rng: np.zeros(n + 1), sample_b=_noop)
    with pytest.raises(ParameterError, match="sample_a"):
        audit(bad, 100, seed=1)
    with pytest.raises(ParameterError, match="unknown target"):
        find_target("nope")


# --------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------


def test_cli_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["audit", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--samples", "--seed", "--planted", "--json", "--list"):
        assert option in out


def test_cli_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in TARGETS)
    assert main(["audit", "--list", "--planted", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == [*PLANTED, *PLANTED_DEVICE] and all(r["planted"] for r in rows)
    assert main(["audit", "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in DEVICE_TARGETS)  # the device path is audited too


def test_cli_json_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "central-ageo", "local-asymmetric-set-direct", "--samples", "20000", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == ["central-ageo", "local-asymmetric-set-direct"]
    for row in rows:
        assert row["verdict"] == "ok" and 0 < row["lower_bound"] <= row["claimed"]
        assert row["counts"]["n_a"] == row["counts"]["n_b"] == 10_000


def test_cli_table_and_planted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "planted-none-bit", "--samples", "20000"]) == 0
    out = capsys.readouterr().out
    assert "| planted-none-bit |" in out and "caught" in out
    # Too few samples to catch anything: a missed planted mechanism fails the command.
    assert main(["audit", "planted-none-bit", "--samples", "4"]) == 1
    assert "MISSED" in capsys.readouterr().out


def test_cli_exits_1_when_a_shipped_claim_is_exceeded(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    leaky = PLANTED["planted-none-bit"]
    shipped = {"leaky": AuditTarget(
        name="leaky", claimed=leaky.claimed, sample_a=leaky.sample_a, sample_b=leaky.sample_b,
        direction=leaky.direction,
    )}
    monkeypatch.setattr(audit_module, "shipped_targets", lambda: {"mechanisms": shipped})
    assert main(["audit", "--samples", "20000"]) == 1
    captured = capsys.readouterr()
    assert "FAIL" in captured.out and "leaky" in captured.err


def test_cli_unknown_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "no-such-target"]) == 2
    assert "target" in capsys.readouterr().err


def test_cli_jobs_spread_the_device_clients(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["audit", "device-asymmetric-set", "--samples", "200", "--device-samples", "200", "--json"]
    assert main([*argv, "--jobs", "2"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["verdict"] == "ok" and row["samples"] == 200
    assert main([*argv, "--jobs", "0"]) == 2
    assert "jobs" in capsys.readouterr().err
