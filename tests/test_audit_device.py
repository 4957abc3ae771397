"""The auditor drives the real device path (``client_sdk.Client``, sealed reports opened by the aggregator).

Each sample is a whole client: sync a signed config, report a history (windows, rounds), flush; the
outcome is what the aggregator opened. The claim is the client's ledger charge. Shipped targets must pass
(the audit's lower bound exceeds a true claim with probability <= 1 - confidence = 1e-6 per target); the
planted device-path regressions, patched into this process only while sampling, must be caught.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from aggregator.research.audit import audit, find_target, planted_targets, shipped_targets
from aggregator.research.audit_device import (
    DEVICE_CHUNK,
    DEVICE_TARGETS,
    PLANTED_DEVICE,
    DeviceSampler,
    DeviceScenario,
    Window,
    _run_client,
    device_reports,
    irr_switched_off,
    ledger_charge,
    permanent_noise_skipped,
    with_jobs,
)
from protocol.crypto import AggregatorKeys
from protocol.encodings import DirectEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.rng import SeededRandom

PLACES = DirectEncoding(domain=("home", "clinic", "work"))
HC, H = frozenset({"home", "clinic"}), frozenset({"home"})


def _asym(level: float = 2.0, **extra: object) -> MetricParams:
    return MetricParams(name="audit", encoding=PLACES, mode="asymmetric", level=level, **extra)  # type: ignore[arg-type]


def test_every_report_is_sealed_and_opened_with_the_aggregator_key(tmp_path: Path) -> None:
    scenario = DeviceScenario(_asym(level=1.0), (Window(HC, rounds=(2.0,)), Window(HC)),
                              (Window(H, rounds=(2.0,)), Window(H)))
    fake, spent = _run_client(scenario, scenario.history_a, AggregatorKeys.generate(), tmp_path / "s", SeededRandom(3))
    sent = sorted((env.window, env.round) for env, _ in fake.stored.values())
    assert sent == sorted(scenario.slots) and len(sent) == 3  # window 1, its round, window 2
    assert all(env.sealed is not None and env.plain is None for env, _ in fake.stored.values())
    assert spent == 2.0  # window 1 relaxed 1 -> 2 costs 2/2, window 2 at level 2 costs 2/2: the ledger
    # the holder's bits: clinic is always 1 (asymmetric noise only adds ones)
    assert all(payload.bits[1] for _, payload in fake.stored.values())


def test_outcome_rows_hold_every_slot_and_whether_it_was_sent() -> None:
    scenario = DeviceScenario(_asym(), (Window(HC), Window(HC), Window(HC)), (Window(H), Window(H), Window(H)),
                              max_epsilon={"audit": 2.0})
    rows = device_reports(scenario, scenario.history_a, 20, SeededRandom(4))
    m = 3
    assert rows.shape == (20, 3 * (m + 1))
    sent = rows[:, [0, m + 1, 2 * (m + 1)]]
    assert sent[:, :2].all() and not sent[:, 2].any()  # the ceiling refuses the third window: nothing sent
    assert ledger_charge(scenario) == 2.0


def test_the_charge_must_not_depend_on_the_values() -> None:
    with pytest.raises(ParameterError):
        DeviceScenario(_asym(), (Window(HC, rounds=(3.0,)),), (Window(H),))  # not the same schedule


def test_device_targets_are_in_the_registries_and_claim_the_ledger() -> None:
    assert set(DEVICE_TARGETS) <= set(shipped_targets()["device"])
    assert set(PLANTED_DEVICE) == set(planted_targets()["device"])
    assert find_target("device-asymmetric-set").claimed == 1.0  # one window, level 2, one member: 2/2
    assert find_target("device-ceiling-global").claimed == 1.0  # the second window is refused by the ceiling
    assert find_target("device-asymmetric-close-rounds").claimed == 1.0  # lazy chain 1.8 -> 1.9 -> 2: the last
    for name in DEVICE_TARGETS:
        target = DEVICE_TARGETS[name]
        assert target.max_samples is not None and math.isfinite(target.claimed) and target.focus


@pytest.mark.parametrize("name", sorted(DEVICE_TARGETS))
def test_shipped_device_targets_pass_at_a_small_sample(name: str) -> None:
    # false-failure rate per target: about 2e-6 (the lower bound at 1 - 1e-6, and the law check at 1e-6),
    # whatever the sample size
    result = audit(DEVICE_TARGETS[name], 100, seed=11)
    assert result.passed, result.to_dict()
    assert result.samples == 100 and result.law_p is not None


@pytest.mark.parametrize("name", sorted(PLANTED_DEVICE))
def test_planted_device_regressions_are_caught(name: str) -> None:
    # At 400 clients per input (200 measured) each regression's distinguishing event leaves the audit a
    # margin of many standard deviations (e.g. noise re-drawn per report: P(all ones | b) = e^-2.85 = 0.058,
    # caught unless 45 or more of 200 hit, a Binomial(200, 0.058) tail below 1e-12; IRR off: the two
    # windows' ones have P = e^-2 = 0.135 where the charge allows 0.47).
    # The regressions that change the law (all of them) are also caught by the law check: a true 1 sent as 0
    # (asymmetric XOR) is impossible (p = 0); a relaxed step that does not restart changed bits gives p = 0
    # (asymmetric) and 1.6e-7 at 200 clients (symmetric; its chi-square noncentrality doubles at 400).
    target = PLANTED_DEVICE[name]
    result = audit(target, 400, seed=5)
    assert not result.passed, result.to_dict()
    assert result.lower_bound > target.claimed or (result.law_p is not None and result.law_p < 1e-6)


def test_planting_is_undone_after_sampling() -> None:
    import client_sdk.memo as memo

    before = memo.apply_irr  # the client's one report pipeline (memo.ReportPlan) calls it from memo
    with irr_switched_off():
        assert memo.apply_irr is not before
    assert memo.apply_irr is before
    # a shipped target sampled after a planted one sees the real IRR: reports vary
    scenario = DeviceScenario(_asym(irr_q=0.5), (Window(H),), (Window(frozenset()),))
    rows = device_reports(scenario, scenario.history_b, 60, SeededRandom(8))
    assert 0 < rows[:, 1:].sum() < rows[:, 1:].size and np.all(rows[:, 0])


# --------------------------------------------------------------------------
# Worker processes (--jobs): seeded substreams per chunk, the same IRR draws for every number of jobs
# --------------------------------------------------------------------------


def test_jobs_give_the_same_irr_draws() -> None:
    # With the memoized noise skipped (a planted patch, applied inside each worker) a client's reports depend
    # on the seeded IRR stream only, not on its OS-drawn secret: the runs must be identical for 1 and 2 jobs.
    scenario = DeviceScenario(_asym(irr_q=0.5), (Window(HC), Window(HC)), (Window(H), Window(H)))
    n = 2 * DEVICE_CHUNK + 3  # three chunks, the last one short
    one = DeviceSampler(scenario, scenario.history_b, permanent_noise_skipped, jobs=1)(n, SeededRandom(21))
    two = DeviceSampler(scenario, scenario.history_b, permanent_noise_skipped, jobs=2)(n, SeededRandom(21))
    assert one.shape == (n, 2 * 4) and np.array_equal(one, two)
    assert one[:, [0, 1, 4, 5]].all()  # both windows sent, home's bit 1 (asymmetric: a 1 stays 1)
    assert 0 < one[:, [2, 3, 6, 7]].sum() < 4 * n  # clinic's and work's zeros go through the IRR (q 0.5)
    other = DeviceSampler(scenario, scenario.history_b, permanent_noise_skipped, jobs=2)(n, SeededRandom(22))
    assert not np.array_equal(one, other)


def test_jobs_give_outcomes_of_the_same_law() -> None:
    # The shipped path (secrets from the OS, so not seedable): for {home} every client sends, home's bit is
    # always 1, and work's bit (a zero raised by the noise) is 1 with one probability whatever the number of
    # jobs. A two-proportion z-test at |z| < 5.3: false-failure rate about 1e-7.
    scenario = DeviceScenario(_asym(), (Window(HC),), (Window(H),))
    n = 3 * DEVICE_CHUNK
    rows = {jobs: DeviceSampler(scenario, scenario.history_b, jobs=jobs)(n, SeededRandom(30 + jobs))
            for jobs in (1, 2)}
    for row in rows.values():
        assert row[:, 0].all() and row[:, 1].all()  # sent; home's bit
    p1, p2 = (rows[j][:, 3].mean() for j in (1, 2))
    pooled = (p1 + p2) / 2
    assert abs(p1 - p2) < 5.3 * math.sqrt(2 * pooled * (1 - pooled) / n) + 1e-12


def test_planted_regression_is_caught_across_worker_processes() -> None:
    # the patch is applied in each worker (not inherited from the parent): caught as with one process
    target = with_jobs(PLANTED_DEVICE["planted-device-irr-off"], 2)
    result = audit(target, 400, seed=5)
    assert not result.passed and result.lower_bound > target.claimed
    assert with_jobs(find_target("central-alap"), 2) is find_target("central-alap")  # other targets: unchanged
    with pytest.raises(ParameterError, match="jobs"):
        with_jobs(target, 0)
