"""One report pipeline: the client, the demo's simulated clients and the simulations.

* The demo's simulated clients send what :class:`client_sdk.memo.ReportPlan` makes, bit for bit the
  vectorized definition (:func:`client_sdk.memo.permanent_bits`) the demo used before, for the same secrets.
* The simulations' vectorized draws (:meth:`Randomizer.sample_permanent`, ``relax_permanent``,
  ``sample_instantaneous``: the same :mod:`protocol.local` mechanism objects) have the law of the plan's
  payloads: a seeded chi-square of homogeneity per true bit, false-failure rate ``P_MIN`` = 1e-6 per test
  under the null (4 such tests here).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from scipy import stats
from statsupport import P_MIN

from aggregator.demo.local import SimulatedClients, client_secrets
from aggregator.research.populations import SyntheticCity, make_population
from client_sdk.memo import ReportPlan, bits_of_mask, mask_of_bits, noise_key, permanent_bits
from protocol.crypto import AggregatorKeys
from protocol.encodings import BloomEncoding, DirectEncoding, canonical_value
from protocol.params import MetricParams
from protocol.rng import SeededRandom
from protocol.wire import open_report, payload_header

WINDOW = 86400 * 20_000


def _demo_params(places: int = 40) -> tuple[MetricParams, SyntheticCity]:
    city = SyntheticCity(num_places=places, zipf_exponent=1.1, mean_places=3.0)
    params = MetricParams(name="places", encoding=DirectEncoding(domain=tuple(city.names())), mode="asymmetric",
                          level=1.0, value_kind="set", time_precision=86400, min_batch_size=100)
    return params, city


@pytest.mark.parametrize("levels", [[1.0], [1.0, 8.0]])
def test_the_demos_reports_are_the_old_paths_bits_bit_for_bit(levels: list[float]) -> None:
    # The demo metric has no IRR, so a report is its permanent bits: a function of the secret. The sealed
    # reports of SimulatedClients open to exactly the bits the demo computed before it took the plan
    # (permanent_bits of the population's encoded rows, keyed on the window and the set).
    params, city = _demo_params()
    pop = make_population(city, 120, params.encoding, SeededRandom(7))
    keys = AggregatorKeys.generate()
    sim = SimulatedClients(params=params, digest="d" * 64, population=pop, first=20,
                           secrets=client_secrets(100, 2026), ceilings=np.full(100, 5.0))
    who = np.arange(20, 120)
    reports = list(sim.reports(levels=levels, round_id=len(levels) - 1, seal_public=keys.seal_public_raw,
                               window=WINDOW, who=who))
    assert len(reports) == len(who)
    ones = 0
    for i, envelope in zip(who, reports, strict=True):
        assert (envelope.metric, envelope.round, envelope.window) == ("places", len(levels) - 1, WINDOW)
        payload = open_report(envelope, seal_private=keys.seal_private, num_bits=params.num_bits,
                              num_cohorts=params.encoding.num_cohorts, allow_plain=False)
        assert (payload.cohort, payload.level) == (int(pop.cohorts[i]), levels[-1])
        key = noise_key(WINDOW, canonical_value(pop.member_sets(int(i))))
        old = permanent_bits(sim.secrets[i - 20], params, pop.bits[i], key, levels)
        assert np.array_equal(payload.bits, old)
        ones += int(old.sum())
    assert 0 < ones < len(who) * params.num_bits  # noisy bits, neither all 0 nor all 1


def test_a_plan_for_another_secret_is_that_secrets_plan() -> None:
    params, city = _demo_params()
    names = city.names()
    first, second = client_secrets(2, 1)
    template = ReportPlan(first, params, 0, 8.0)
    other = template.for_secret(second)
    own = ReportPlan(second, params, 0, 8.0)
    for value in ([names[0]], [names[1], names[7]], []):
        key = noise_key(WINDOW, canonical_value(value))
        for chain in (None, (1.0, 8.0)):
            assert other.payload(value, key, (0, 0), chain=chain) == own.payload(value, key, (0, 0), chain=chain)
        assert template.payload(value, key, (0, 0)) == ReportPlan(first, params, 0, 8.0).payload(value, key, (0, 0))
    assert template.for_secret(first).payload([names[3]], key, (0, 0)) == template.payload([names[3]], key, (0, 0))


def _plan_patterns(params: MetricParams, levels: tuple[float, ...], clients: int) -> tuple[np.ndarray, np.ndarray]:
    """Each (client, bit)'s true bit and its reports' pattern (index in binary, first report highest),
    from :class:`ReportPlan` payloads with the client's IRR (fresh per report, seeded)."""
    root = hashlib.sha256(b"report-pipeline-law").digest()
    rng = SeededRandom(11)
    m, reports = params.num_bits, len(levels)
    truth = np.zeros((clients, m), dtype=bool)
    pattern = np.zeros((clients, m), dtype=np.int64)
    plans = [ReportPlan(root, params, 0, levels[0]), ReportPlan(root, params, 0, levels[-1])]
    irr = rng.uniform((clients, reports, m))
    for i in range(clients):
        secret = hashlib.sha256(root + i.to_bytes(8, "big")).digest()
        value = [f"v{i % 7}", f"w{i % 5}"]
        truth[i] = params.encode(value, 0)
        key = noise_key(WINDOW, canonical_value(value))
        for r in range(reports):
            plan = plans[0 if r == 0 else 1].for_secret(secret)
            below_p = mask_of_bits(irr[i, r] < params.irr_p) if params.irr_p is not None else 0
            below_q = mask_of_bits(irr[i, r] < params.irr_q) if params.irr_q is not None else 0
            body = plan.payload(value, key, (below_p, below_q), chain=levels[: r + 1] if r else None)
            assert body[:11] == payload_header(0, levels[r])
            bits = bits_of_mask(int.from_bytes(body[11:], "little"), m)
            pattern[i] = 2 * pattern[i] + bits
    return truth, pattern


def _simulated_patterns(params: MetricParams, truth: np.ndarray, levels: tuple[float, ...]) -> np.ndarray:
    """The simulations' vectorized draws of the same reports: sample_permanent, relax_permanent, IRR."""
    rng = SeededRandom(12)
    base = params.randomizer(levels[0])
    permanent = base.sample_permanent(truth, rng)
    pattern = base.sample_instantaneous(permanent, rng).astype(np.int64)
    for step in range(1, len(levels)):
        permanent = params.randomizer(levels[step - 1]).relax_permanent(truth, permanent, levels[step], rng)
        pattern = 2 * pattern + params.randomizer(levels[step]).sample_instantaneous(permanent, rng)
    return pattern


@pytest.mark.parametrize(("mode", "irr", "levels"), [
    ("asymmetric", {}, (1.0, 8.0)),
    ("asymmetric", {"irr_q": 0.2}, (0.5, 2.0)),
    ("symmetric", {}, (1.0, 4.0)),
    ("symmetric", {"irr_p": 0.25, "irr_q": 0.75}, (1.0, 3.0)),
])
def test_plan_payloads_and_the_vectorized_simulation_have_one_law(mode: str, irr: dict[str, float],
                                                                  levels: tuple[float, ...]) -> None:
    # Reports' patterns over a window's first report and a round's re-send, per true bit: a 2 x 4
    # contingency table (plan vs simulation) per true bit, chi-square of homogeneity, each at P_MIN / 2.
    params = MetricParams(name="law", encoding=BloomEncoding(num_bits=16, num_hashes=2, num_cohorts=1), mode=mode,
                          level=levels[0], value_kind="set", **irr)  # type: ignore[arg-type]
    truth, plan = _plan_patterns(params, levels, 1500)
    simulated = _simulated_patterns(params, truth, levels)
    cells = 2 ** len(levels)
    for b in (False, True):
        table = np.array([np.bincount(plan[truth == b], minlength=cells),
                          np.bincount(simulated[truth == b], minlength=cells)])
        table = table[:, table.sum(axis=0) > 0]  # patterns the mechanism cannot produce (asymmetric)
        if table.shape[1] < 2:
            continue
        assert stats.chi2_contingency(table).pvalue > P_MIN / 2, (b, table)
