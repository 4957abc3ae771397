"""Memoized noise: keyed per (metric, window, value): the same value in a window -> the same permanent bits
(also across restarts), another window or value -> independent noise; IRR fresh per report; relaxation chains."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from clocks import Clock
from scipy import stats

from client_sdk import Client
from client_sdk.memo import (
    memoized_noise,
    noise_key,
    permanent_bits,
    report_bits,
)
from client_sdk.testing import FakeAggregator
from protocol.encodings import BloomEncoding, canonical_value
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.rng import KeyedRandom, SeededRandom

SECRET = bytes(range(32))
BLOOM = BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=8)
ASYM = MetricParams(name="places", encoding=BLOOM, mode="asymmetric", level=1.0)
SYM_IRR = MetricParams(name="urls", encoding=BLOOM, mode="symmetric", level=1.0, irr_p=0.25, irr_q=0.75)
WINDOW = 1_699_920_000
DAY = 86400


def make_client(fake: FakeAggregator, path: Path, **kwargs: object) -> Client:
    kwargs.setdefault("max_epsilon", 100.0)
    kwargs.setdefault("clock", Clock(WINDOW + 3600.0))
    return Client("http://agg.test", path, background=False, strict=True, server_public_keys=[fake.sign_public], session=fake,
                  rng=kwargs.pop("rng", 1), insecure_rng_for_testing=True, **kwargs)  # type: ignore[arg-type]


def test_noise_is_a_pure_function_of_secret_metric_window_value_and_levels() -> None:
    key = noise_key(WINDOW, canonical_value("home"))
    a = memoized_noise(SECRET, ASYM, key, [1.0])
    assert np.array_equal(a, memoized_noise(SECRET, ASYM, key, [1.0]))
    assert not np.array_equal(a, memoized_noise(bytes(32), ASYM, key, [1.0]))
    assert not np.array_equal(a, memoized_noise(SECRET, ASYM, noise_key(WINDOW, canonical_value("work")), [1.0]))
    # the next window's noise of the same value is another draw: equal days do not send equal bits
    assert not np.array_equal(a, memoized_noise(SECRET, ASYM, noise_key(WINDOW + DAY, canonical_value("home")), [1.0]))
    assert key == b"W" + WINDOW.to_bytes(8, "big") + canonical_value("home")
    # step 0 is exactly draw_noise with the step-0 keyed stream (the decided design)
    expected = ASYM.randomizer(1.0).draw_noise(128, KeyedRandom.for_value(SECRET, "places", key, 0))
    assert np.array_equal(a, expected)


def test_relaxation_chain_follows_the_levels_used() -> None:
    key = noise_key(WINDOW, canonical_value({"cafe", "park"}))
    v0 = memoized_noise(SECRET, ASYM, key, [1.0])
    v1 = memoized_noise(SECRET, ASYM, key, [1.0, 2.0])
    expected = ASYM.randomizer(1.0).relax_noise(v0, 2.0, KeyedRandom.for_value(SECRET, "places", key, 1))
    assert np.array_equal(v1, expected)
    # exponential relaxation is min(V, E): noise never grows, so a permanent 0 stays 0
    assert np.all(v1 <= v0)
    # a jump 1 -> 3 is one step, a different chain than 1 -> 2 -> 3
    assert not np.array_equal(memoized_noise(SECRET, ASYM, key, [1.0, 3.0]),
                              memoized_noise(SECRET, ASYM, key, [1.0, 2.0, 3.0]))
    with pytest.raises(ParameterError):
        memoized_noise(SECRET, ASYM, key, [2.0, 1.0])


def test_different_values_have_independent_noise() -> None:
    # Pearson correlation of the uniforms behind pairs of values: 4000 pairs x 128 bits,
    # under independence r ~ N(0, 1/n); |r| < 6/sqrt(n) fails with probability 2e-9.
    values = [f"place-{i}" for i in range(8000)]
    noise = np.array([memoized_noise(SECRET, ASYM, canonical_value(v), [1.0]) for v in values])
    u = 1.0 - np.exp(-noise)  # back to uniforms (Exp(1) CDF)
    r = np.corrcoef(u[0::2].ravel(), u[1::2].ravel())[0, 1]
    assert abs(r) < 6 / math.sqrt(u[0::2].size)
    # and each value's uniforms are uniform: KS at alpha = 1e-6
    assert stats.kstest(u.ravel(), "uniform").pvalue > 1e-6


def test_sets_are_keyed_by_their_members_not_their_order() -> None:
    a = permanent_bits(SECRET, ASYM, BLOOM.encode(["b", "a"], 3), canonical_value(["b", "a", "a"]), [1.0])
    b = permanent_bits(SECRET, ASYM, BLOOM.encode({"a", "b"}, 3), canonical_value({"a", "b"}), [1.0])
    assert np.array_equal(a, b)
    assert canonical_value(["b", "a"]) == canonical_value({"a", "b"}) == canonical_value(("a", "b", "b"))
    assert canonical_value("a") == canonical_value(["a"]) == canonical_value({b"a"})


def test_any_iterable_is_a_set(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM])
    client = make_client(fake, tmp_path / "s", max_epsilon=100.0)
    client.sync()
    first = client.report("places", (p for p in ["b", "a", "b"]))  # a generator, read once
    assert client.report("places", {"a", "b"}) == first  # the same set in the same window: nothing new
    assert client.report("places", ["a", "b"]) == first
    client.flush()
    (payload,) = fake.payloads("places")
    assert client.ledger()["places"].windows == 1
    cohort = client.ledger()["places"].cohort
    assert cohort is not None and payload.bits[ASYM.encoding.encode({"a", "b"}, cohort)].all()


def test_a_window_survives_restarts_and_the_next_window_draws_new_noise(tmp_path: Path) -> None:
    # asymmetric without IRR: what is sent IS the permanent bits
    fake = FakeAggregator([ASYM])
    path, clock = tmp_path / "state", Clock(WINDOW + 3600.0)
    ids = []
    for run in range(3):
        client = make_client(fake, path, rng=run, clock=clock)
        client.sync()
        ids.append(client.report("places", {"home", "cafe"}))
        client.flush()
        client.close()
    assert ids[1] == ids[2] == ids[0] and len(fake.payloads("places")) == 1  # one report for the window
    clock.now += DAY
    client = make_client(fake, path, rng=4, clock=clock)
    client.sync()
    client.report("places", {"home", "cafe"})
    client.flush()
    first, second = fake.payloads("places")
    assert first.cohort == second.cohort  # the cohort was chosen once and kept
    # independent noise: each of ~126 non-member bits is a noise 1 w.p. q = e^-0.5 = 0.61 in each window;
    # equal vectors have probability (q^2 + (1-q)^2)^126 ~ 1e-23
    assert not np.array_equal(first.bits, second.bits)
    record = client._state.metrics["places"]
    bits = ASYM.encode({"home", "cafe"}, record.cohort)
    window = int(clock.now) // DAY * DAY
    assert np.array_equal(second.bits, permanent_bits(
        client._state.secret, ASYM, bits, noise_key(window, canonical_value({"home", "cafe"})), [1.0]))


def test_irr_is_fresh_per_report() -> None:
    n, cohort = 400, 3
    irr = SeededRandom(5)
    bits = np.array([report_bits(SECRET, SYM_IRR, "https://example.org/", cohort=cohort, window=WINDOW,
                                 levels=[1.0], rng=irr) for _ in range(n)])
    assert bits.shape == (n, 128)
    # Two reports agree on a bit w.p. p^2 + (1-p)^2 <= 0.625: identical 128-bit reports have
    # probability <= 0.625^128 ~ 1e-26 per pair.
    assert len({b.tobytes() for b in bits}) == n
    key = noise_key(WINDOW, canonical_value("https://example.org/"))
    perm = permanent_bits(SECRET, SYM_IRR, SYM_IRR.encode("https://example.org/", cohort), key, [1.0])
    # Frequency of reported ones given the permanent bit: q = 0.75 or p = 0.25.
    # Two-sided binomial tests at alpha = 1e-6 each.
    for mask, prob in ((perm, 0.75), (~perm, 0.25)):
        ones = int(bits[:, mask].sum())
        total = int(mask.sum()) * n
        assert stats.binomtest(ones, total, prob).pvalue > 1e-6
    # the permanent bits did not change in between: the same permanent vector explains every report,
    # which it would not if the memoized noise were redrawn (checked against a second value's bits)
    other = permanent_bits(SECRET, SYM_IRR, SYM_IRR.encode("https://x.org/", cohort),
                           noise_key(WINDOW, canonical_value("https://x.org/")), [1.0])
    assert not np.array_equal(perm, other)


def test_a_round_resends_the_window_relaxed(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM])
    client = make_client(fake, tmp_path / "s")
    client.sync()
    first_id = client.report("places", "home")
    client.relax("places", 3.0, round_id=7)  # re-sends "home" at level 3 for round 7
    assert client.report("places", "home") not in (first_id,)  # the app's repeat returns the round's report
    client.flush()
    (first, p1), (second, p2) = list(fake.stored.values())
    assert (first.round, p1.level) == (0, 1.0)
    assert (second.round, p2.level) == (7, 3.0)
    # one-sided: relaxing only turns noise ones off, never on
    assert np.all(p2.bits <= p1.bits)
    record = client._state.metrics["places"]
    key = noise_key(WINDOW, canonical_value("home"))
    expected = permanent_bits(client._state.secret, ASYM, ASYM.encode("home", record.cohort), key, [1.0, 3.0])
    assert np.array_equal(p2.bits, expected)
