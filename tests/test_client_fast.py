"""The one-report fast path: bit for bit the vectorized path; reports queued unsealed, sealed by the sender."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
from clocks import Clock

from client_sdk import Client
from client_sdk.client import EphemeralPool, PrefetchedUniforms, ReportsDropped, _empty_after_fork
from client_sdk.memo import (
    GRID,
    SCALAR_MAX_BITS,
    _fresh_permanent,
    bits_of_mask,
    encoded_mask,
    fresh_cuts,
    keyed_words,
    mask_of_bits,
    noise_key,
    permanent_bits,
    report_bits,
    report_mask,
)
from client_sdk.queue import envelope_of
from client_sdk.testing import FakeAggregator
from protocol.accounting import ValueKind
from protocol.crypto import b64d, b64e
from protocol.encodings import BloomEncoding, DirectEncoding, canonical_value
from protocol.params import MetricParams
from protocol.randomizers import MAX_LEVEL, Mode, Randomizer
from protocol.rng import KeyedRandom, SecureRandom, SeededRandom, words_to_uniforms
from protocol.wire import (
    ReportPayload,
    build_report,
    pack_payload,
    pack_payload_mask,
    sealed_report_id,
)

WINDOW = 1_699_920_000
DAY = 86400


def random_params(rs: random.Random, num_bits: int) -> MetricParams:
    mode: Mode = rs.choice(["symmetric", "asymmetric"])
    level = rs.choice([rs.uniform(0.01, 4.0), rs.uniform(4.0, MAX_LEVEL)])
    irr = rs.random() < 0.5
    p, q = sorted(rs.uniform(0.05, 0.95) for _ in range(2))
    kind: ValueKind = rs.choice(["set", "categorical"])
    return MetricParams(
        name="m", encoding=BloomEncoding(num_bits=num_bits, num_hashes=min(num_bits, rs.randint(1, 4)),
                                         num_cohorts=8, hashing=rs.choice(["mmh3", "rappor-md5"])),
        mode=mode, level=level, irr_p=p if irr and mode == "symmetric" else None, irr_q=q if irr else None,
        value_kind=kind, none_value="none" if kind == "categorical" else None,
    )


def vectorized_report(secret: bytes, params: MetricParams, value: object, cohort: int, levels: list[float],
                      seed: int) -> np.ndarray:
    """The definition: encode, memoized noise by draw_noise / relax_noise, threshold, IRR (numpy throughout)."""
    bits = params.encode(value, cohort)  # type: ignore[arg-type]
    key = noise_key(WINDOW, canonical_value(value))  # type: ignore[arg-type]
    permanent = permanent_bits(secret, params, bits, key, levels)
    return params.randomizer(levels[-1]).instantaneous(permanent, SeededRandom(seed))


def test_scalar_path_equals_the_vectorized_path_bit_for_bit() -> None:
    # 3000 random cases: both modes, IRR on and off, chains of 1 to 3 levels, 1 to 600 bits (past the
    # scalar cut-over), sets and categorical values (the none value included), both hashings.
    rs = random.Random(7)
    for case in range(3000):
        num_bits = rs.choice([1, 7, 16, 32, 64, 128, 200, SCALAR_MAX_BITS + 88])
        params = random_params(rs, num_bits)
        secret = rs.randbytes(32)
        chain = sorted({params.level, *(rs.uniform(params.level, MAX_LEVEL) for _ in range(rs.randint(0, 2)))})
        if params.value_kind == "categorical":
            value: object = rs.choice(["none", f"v{rs.randint(0, 99)}"])
        else:
            value = {f"v{rs.randint(0, 99)}" for _ in range(rs.randint(1, 4))}
        cohort = rs.randrange(8)
        expected = vectorized_report(secret, params, value, cohort, chain, case)
        got = report_mask(secret, params, value, cohort=cohort, window=WINDOW, levels=chain,  # type: ignore[arg-type]
                          rng=SeededRandom(case))
        assert np.array_equal(bits_of_mask(got, num_bits), expected), (case, params, chain)
        again = report_bits(secret, params, value, cohort=cohort, window=WINDOW,  # type: ignore[arg-type]
                            levels=chain, rng=SeededRandom(case))
        assert np.array_equal(again, expected)


def test_the_cuts_sit_exactly_where_the_vectorized_threshold_flips() -> None:
    # At the grid points on both sides of each cut, the cut test and draw_noise + permanent agree:
    # a cut one grid point off would fail here (the random cases above almost never land on it).
    rs = random.Random(3)
    levels = [1e-3, 0.5, 2 * math.log(2), 1.0, 4.0, 17.3, MAX_LEVEL] + [rs.uniform(0.01, MAX_LEVEL) for _ in range(40)]
    for mode in ("symmetric", "asymmetric"):
        for level in levels:
            randomizer = Randomizer(mode=mode, level=level)
            for true_bit, cut in zip((False, True), fresh_cuts(randomizer), strict=True):
                ks = [k for k in (0, cut.cut - 2, cut.cut - 1, cut.cut, cut.cut + 1, GRID - 1) if 0 <= k < GRID]
                vectorized = _fresh_permanent(randomizer, true_bit, np.array(ks, dtype=np.uint64))
                assert [cut.bit(k) for k in ks] == vectorized.tolist(), (mode, level, true_bit, cut)
    # asymmetric: a true 1 is always 1; a true 0 is 1 below u = exp(-L/2) (within a grid point of it)
    zero, one = fresh_cuts(Randomizer(mode="asymmetric", level=2.0))
    assert one.bit(0) and one.bit(GRID - 1) and not zero.rising
    assert abs(zero.cut / GRID - math.exp(-1.0)) < 4 / GRID


def test_the_stream_is_read_as_keyed_random_reads_it() -> None:
    secret = bytes(range(32))
    words = keyed_words(secret, "places", b"key", 3, 40)
    uniforms = words_to_uniforms(np.array(words, dtype=np.uint64))
    assert np.array_equal(uniforms, KeyedRandom.for_value(secret, "places", b"key", 3).uniform(40))


def test_masks_encode_and_pack_like_the_arrays() -> None:
    rs = random.Random(1)
    direct = MetricParams(name="d", encoding=DirectEncoding(domain=("a", "b", "c", "none")), mode="asymmetric",
                          level=1.0, value_kind="categorical", none_value="none")
    for item in ("a", "c", "none"):
        assert encoded_mask(direct, item, 0) == mask_of_bits(direct.encode(item, 0))
    for _ in range(200):
        params = random_params(rs, rs.choice([1, 9, 16, 100]))
        value = {f"x{rs.randint(0, 30)}" for _ in range(rs.randint(1, 5))}
        if params.value_kind == "categorical":
            value = {value.pop()}  # one member: the same bits as the value itself
        cohort = rs.randrange(8)
        assert encoded_mask(params, value, cohort) == mask_of_bits(params.encode(value, cohort))
        bits = np.array([rs.random() < 0.5 for _ in range(params.num_bits)])
        mask = mask_of_bits(bits)
        assert np.array_equal(bits_of_mask(mask, params.num_bits), bits)
        assert pack_payload_mask(cohort=cohort, level=1.5, mask=mask, num_bits=params.num_bits) == pack_payload(
            ReportPayload(cohort=cohort, level=1.5, bits=bits))
    with pytest.raises(ValueError):
        pack_payload_mask(cohort=0, level=1.0, mask=1 << 9, num_bits=9)


ASYM_IRR = MetricParams(name="places", encoding=BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=8),
                        mode="asymmetric", level=1.0, irr_q=0.1)


def make_client(fake: FakeAggregator, path: Path, **kwargs: object) -> Client:
    kwargs.setdefault("clock", Clock(WINDOW + 3600.0))
    return Client("http://agg.test", path, server_public_keys=[fake.sign_public], session=fake,
                  max_epsilon=100.0, **kwargs)  # type: ignore[arg-type]


def test_report_returns_the_id_the_aggregator_sees_and_queues_it_unsealed(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM_IRR])
    client = make_client(fake, tmp_path / "s", autosave=False)
    client.sync()
    rid = client.report("places", {"home"})
    (item,) = list(client._queue)
    assert item["report_id"] == rid and "sealed" not in item  # sealing is the sender's
    first, second = envelope_of(item), envelope_of(item)
    assert first.sealed == second.sealed  # deterministic: a resent batch is byte-identical
    assert first.report_id_text == rid == b64e(sealed_report_id(first.sealed or b""))
    client.flush()
    assert [r for (_, r) in fake.stored] == [rid]
    assert len(client._queue) == 0


def test_a_crash_after_report_returns_loses_nothing(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM_IRR])
    clock = Clock(WINDOW + 3600.0)
    client = make_client(fake, tmp_path / "s", clock=clock)  # autosave: on disk when report() returns
    client.sync()
    rid = client.report("places", {"home", "cafe"})
    spent = client.ledger()["places"].spent
    del client  # a crash: no close(), no flush(); only what report() wrote survives
    again = make_client(fake, tmp_path / "s", clock=clock)
    assert again.ledger()["places"].spent == spent and again.ledger().queued_reports == 1
    assert again.report("places", {"home", "cafe"}) == rid  # the same window and value: the same id
    result = again.flush()
    assert result.delivered == 1 and [r for (_, r) in fake.stored] == [rid]


def test_a_pending_report_whose_key_does_not_give_its_id_is_dropped(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM_IRR])
    errors: list[Exception] = []
    client = make_client(fake, tmp_path / "s", autosave=False, on_error=errors.append)
    client.sync()
    client.report("places", {"home"})
    (item,) = list(client._queue)
    raw = bytearray(b64d(item["pending"], "pending"))
    raw[5] ^= 1  # another ephemeral key (bit 0 would be clamped away): its public half no longer gives the id
    item["pending"] = b64e(bytes(raw))
    result = client.flush()
    assert result.delivered == 0 and not fake.stored
    assert any(isinstance(e, ReportsDropped) for e in errors) and client.ledger().dropped_reports == 1


def test_a_queue_of_sealed_reports_from_before_still_sends(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM_IRR])
    client = make_client(fake, tmp_path / "s")
    client.sync()
    entry = fake.entries["places"]
    old = build_report(params_digest=entry.digest, metric="places", round=0, window=WINDOW, cohort=0, level=1.0,
                       bits=np.zeros(128, dtype=bool), seal_public=fake.keys.seal_public_raw)
    client._queue.append(old.to_json())
    client.save()
    client.close()
    again = make_client(fake, tmp_path / "s")
    assert again.flush().delivered == 1
    assert [r for (_, r) in fake.stored] == [old.report_id_text]


def test_keys_and_uniforms_made_ahead_are_handed_out_once_and_dropped_in_a_forked_child() -> None:
    pool = EphemeralPool(size=8)
    pool.refill()
    taken = [pool.take() for _ in range(12)]  # 8 made ahead, 4 made on the spot
    assert len({public for _, public in taken}) == 12 and len(pool) == 0
    pool.refill()
    source = SeededRandom(9)
    ahead = PrefetchedUniforms(SeededRandom(9), chunk=64)
    drawn = np.concatenate([ahead.uniform(n) for n in (10, 60, 7, 100)])
    assert np.array_equal(drawn, source.uniform(len(drawn)))  # the source's stream, in order, once each
    _empty_after_fork()  # what os.register_at_fork runs in a child: nothing of the parent's is reused
    assert len(pool) == 0 and len(ahead._buffer) == 0


def test_the_irr_comes_from_the_os_csprng_and_the_sender_fills_the_pool(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM_IRR])
    client = make_client(fake, tmp_path / "s", autosave=False)
    assert isinstance(client._irr, PrefetchedUniforms) and isinstance(client._irr.source, SecureRandom)
    assert len(client._ephemeral) == 0
    client.sync()
    assert len(client._ephemeral) == client._ephemeral.size
    client.report("places", {"home"})
    assert len(client._ephemeral) == client._ephemeral.size - 1
    client.flush()
    assert len(client._ephemeral) == client._ephemeral.size


def test_a_round_resend_is_queued_pending_with_its_own_id(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM_IRR])
    client = make_client(fake, tmp_path / "s", autosave=False)
    client.sync()
    first = client.report("places", {"home"})
    client.relax("places", 2.0, round_id=1)
    ids = [item["report_id"] for item in client._queue]
    assert ids[0] == first and len(set(ids)) == 2
    assert client.report("places", {"home"}) == ids[1]  # the window's latest report
    client.flush()
    assert {r for (_, r) in fake.stored} == set(ids)
