"""The one-report fast path: bit for bit the vectorized path; reports queued unsealed, sealed by the sender."""

from __future__ import annotations

import hmac
import math
import random
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from clocks import Clock
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from client_sdk import Client
from client_sdk.client import ReportsDropped
from client_sdk.ledger import MetricRecord, WindowRelease, check_new_window, window_cost
from client_sdk.memo import (
    GRID,
    CutTable,
    FreshCut,
    ReportPlan,
    _fresh_permanent,
    _GivenUniforms,
    bits_of_mask,
    encoded_mask,
    fresh_cuts,
    irr_masks,
    keyed_words,
    mask_of_bits,
    noise_key,
    permanent_bits,
    report_bits,
    report_mask,
)
from client_sdk.pools import CALLER_IRR_ROWS, IRR_AHEAD, EphemeralPool, IrrPool, _empty_after_fork
from client_sdk.queue import envelope_of, item_id, legacy_item, read_pending
from client_sdk.testing import FakeAggregator
from protocol.accounting import ValueKind, from_micro, round_up
from protocol.crypto import b64e
from protocol.encodings import BloomEncoding, DirectEncoding, canonical_value
from protocol.errors import BudgetExceeded, ParameterError
from protocol.params import MetricParams
from protocol.randomizers import MAX_LEVEL, Mode, Randomizer
from protocol.rng import (
    KeyedHmac,
    KeyedRandom,
    SecureRandom,
    SeededRandom,
    Shape,
    noise_prefix,
    noise_seed,
    noise_suffix,
    words_to_uniforms,
)
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
        num_bits = rs.choice([1, 7, 16, 32, 64, 128, 200, 600])
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
    kwargs.setdefault("max_epsilon", 100.0)
    return Client("http://agg.test", path, background=False, strict=True, server_public_keys=[fake.sign_public], session=fake,
                  **kwargs)  # type: ignore[arg-type]


def test_report_returns_the_id_the_aggregator_sees_and_queues_it_unsealed(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM_IRR])
    client = make_client(fake, tmp_path / "s", autosave=False)
    client.sync()
    rid = client.report("places", {"home"})
    (item,) = list(client._queue)
    assert item_id(item) == rid and item[:1] == b"P"  # pending: sealing is the sender's
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


def test_the_sender_seals_with_the_key_object_it_kept_and_forgets_it_once_delivered(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM_IRR])
    clock = Clock(WINDOW + 3600.0)
    client = make_client(fake, tmp_path / "s", autosave=False, clock=clock)
    client.sync()
    ids = []
    for _ in range(5):
        ids.append(client.report("places", {"home"}))
        clock.advance(DAY)
    assert len(client._held) == 5
    for item in client._queue:  # the kept object seals to the same bytes as the queued raw key
        held = client._held.get(item_id(item))
        assert held is not None and envelope_of(item, held).sealed == envelope_of(item).sealed
    other = X25519PrivateKey.generate()  # an object that is not the item's key is not used
    item = client._queue[0]
    assert envelope_of(item, other).sealed == envelope_of(item).sealed
    assert client.flush().delivered == 5 and len(client._held) == 0
    assert {r for (_, r) in fake.stored} == set(ids)
    client.report("places", {"home"})
    _empty_after_fork()
    assert len(client._held) == 0 and client.flush().delivered == 1  # sealed from the queued bytes


def test_a_pending_report_whose_key_does_not_give_its_id_is_dropped(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM_IRR])
    errors: list[Exception] = []
    client = make_client(fake, tmp_path / "s", autosave=False, on_error=errors.append)
    client.sync()
    client.report("places", {"home"})
    (item,) = list(client._queue)
    raw = bytearray(item)
    raw[2 + raw[1] + 5] ^= 1  # another ephemeral key (bit 0 would be clamped away): its public half no longer gives the id
    client._queue.remove([item_id(item)])
    client._queue.append(bytes(raw))
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
    client._queue.append(legacy_item(old.to_json()))
    client.save()
    client.close(flush=False)  # the queue stays for the next run
    again = make_client(fake, tmp_path / "s")
    assert again.flush().delivered == 1
    assert [r for (_, r) in fake.stored] == [old.report_id_text]


def test_keys_and_irr_made_ahead_are_handed_out_once_and_dropped_in_a_forked_child() -> None:
    pool = EphemeralPool(size=8)
    pool.refill()
    taken = [pool.take() for _ in range(12)]  # 8 made ahead, the rest by the filler thread or on the spot
    assert len({public for _, _, public, _ in taken}) == 12
    for _ in range(1000):  # half empty: the filler thread refills the pool off the caller's thread
        if len(pool) >= pool.first and not pool._wanted.is_set() and not pool._refilling.locked():
            break
        time.sleep(0.01)
    # the 8 made ahead were all taken, so what the pool holds now the filler made (how much depends on when
    # it ran during the burst: at least half of what its last refill aimed at, itself at least `first`)
    assert len(pool) >= pool.first // 2 and pool.size >= 8
    assert pool.made == len(taken) + len(pool)  # none made only to be dropped
    assert len({public for _, _, public, _ in [*taken, *(pool.take() for _ in range(8))]}) == 20
    assert all(rid == b64e(sealed_report_id(public)) for _, _, public, rid in taken)
    assert all((key.key is None or (key.key.private_bytes_raw() == key.private
                                    and key.key.public_key().public_bytes_raw() == key.public))
               and X25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw() == public
               and key.private == private and key.public == public
               and key.report_id == sealed_report_id(public) and key.report_id_text == rid
               for key, private, public, rid in taken)
    pool.refill()
    randomizer = Randomizer(mode="symmetric", level=1.0, irr_p=0.3, irr_q=0.8)
    ahead = IrrPool(SeededRandom(9), randomizer, 37, size=16)
    ahead.refill()
    assert len(ahead) == 16
    drawn = [ahead.take() for _ in range(20)]  # 16 drawn ahead in one call; empty: a small block, size doubled
    source = SeededRandom(9)
    expected = irr_masks(randomizer, source.uniform((16, 37))) + irr_masks(randomizer, source.uniform((32, 37)))[:4]
    assert drawn == expected  # the source's stream, in order, once each
    assert (ahead.size, len(ahead)) == (32, 28)
    ahead.refill()  # more than half of the doubled size is left: nothing drawn; the flag is reset
    [ahead.take() for _ in range(28)]
    ahead.take()  # empty again after a refill: another small block, the size doubled once more
    assert (ahead.size, len(ahead)) == (64, CALLER_IRR_ROWS - 1)
    ahead.take()
    assert ahead.size == 64  # doubled once per refill, not once per empty take
    wide = IrrPool(SeededRandom(9), randomizer, 1000)  # 4,096 uniforms at most on the caller's thread
    wide.take()
    assert len(wide) == 4096 // 1000 - 1
    _empty_after_fork()  # what os.register_at_fork runs in a child: nothing of the parent's is reused
    assert len(pool) == 0 and len(ahead) == 0


def test_the_irr_comes_from_the_os_csprng_and_the_sender_fills_the_pools(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM_IRR])
    clock = Clock(WINDOW + 3600.0)
    client = make_client(fake, tmp_path / "s", autosave=False, clock=clock)
    assert isinstance(client._rng, SecureRandom) and not client._irr
    assert len(client._ephemeral) == 0
    client.sync()
    assert len(client._ephemeral) == client._ephemeral.size and not client._irr  # no IRR for unused metrics
    client.report("places", {"home"})  # the metric's pool is empty: a small block on the spot; more kept ahead
    (irr,) = client._irr.values()
    assert isinstance(irr.source, SecureRandom) and len(irr) == CALLER_IRR_ROWS - 1 and irr.size == 2 * IRR_AHEAD
    assert len(client._ephemeral) == client._ephemeral.size - 1
    client.flush()  # the sender refills the keys; the small block's rows are still more than half the IRR's size
    assert len(client._ephemeral) == client._ephemeral.size and len(irr) == CALLER_IRR_ROWS - 1
    for _ in range(CALLER_IRR_ROWS - 1 - irr.size // 2):  # the small block's rows are used first
        clock.advance(DAY)
        client.report("places", {"home"})
    assert len(irr) == irr.size // 2
    clock.advance(DAY)
    client.report("places", {"home"})
    client.flush()  # the IRR is refilled once less than half of it is left
    assert len(irr) == irr.size


def test_a_round_resend_is_queued_pending_with_its_own_id(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM_IRR])
    client = make_client(fake, tmp_path / "s", autosave=False)
    client.sync()
    first = client.report("places", {"home"})
    client.relax("places", 2.0, round_id=1)
    ids = [item_id(item) for item in client._queue]
    assert ids[0] == first and len(set(ids)) == 2
    assert client.report("places", {"home"}) == ids[1]  # the window's latest report
    client.flush()
    assert {r for (_, r) in fake.stored} == set(ids)


def test_the_report_plan_equals_the_vectorized_path_bit_for_bit() -> None:
    # The client's per-metric plan (precomputed HMAC states, cut tables, IRR masks drawn ahead) against the
    # definition, on 3000 random cases: modes, IRR on and off, levels up to MAX_LEVEL, 1 to 600 bits, sets,
    # categorical values and the none value, both hashings, and direct encodings.
    rs = random.Random(11)
    for case in range(3000):
        if rs.random() < 0.2:
            domain = tuple(f"v{i}" for i in range(rs.choice([2, 16, 128, 300])))
            kind: ValueKind = rs.choice(["set", "categorical"])
            mode: Mode = rs.choice(["symmetric", "asymmetric"])
            irr = rs.random() < 0.5
            params = MetricParams(name="d", encoding=DirectEncoding(domain=domain), mode=mode,
                                  level=rs.uniform(0.01, MAX_LEVEL), value_kind=kind,
                                  irr_p=0.25 if irr and mode == "symmetric" else None, irr_q=0.75 if irr else None,
                                  none_value="v0" if kind == "categorical" else None)
            pick = len(domain)
        else:
            params = random_params(rs, rs.choice([1, 7, 16, 32, 64, 128, 200, 600]))
            pick = 100
        if params.value_kind == "categorical":
            value: object = rs.choice(["none", "v0", f"v{rs.randrange(pick)}"])
            if isinstance(params.encoding, DirectEncoding) and value == "none":
                value = "v1"
        else:
            value = {f"v{rs.randrange(pick)}" for _ in range(rs.randint(1, 4))}
        cohort = rs.randrange(params.num_cohorts)
        secret = rs.randbytes(32)
        expected = vectorized_report(secret, params, value, cohort, [params.level], case)
        plan = ReportPlan(secret, params, cohort, params.level)
        masks = irr_masks(params.randomizer(), SeededRandom(case).uniform((1, params.num_bits)))[0]
        key = noise_key(WINDOW, canonical_value(value))  # type: ignore[arg-type]
        payload = plan.payload(value, key, masks)  # type: ignore[arg-type]
        assert payload == pack_payload(ReportPayload(cohort=cohort, level=params.level, bits=expected)), (case, params)


def test_the_report_plan_along_a_relaxed_chain_equals_the_vectorized_path() -> None:
    # A round's re-send takes the same plan as a window's first report, given the window's chain of levels
    # (its last the plan's level): 600 random chains of 2 or 3 levels against the definition, bit for bit.
    rs = random.Random(17)
    for case in range(600):
        params = random_params(rs, rs.choice([1, 16, 64, 200]))
        chain = sorted({params.level, *(rs.uniform(params.level, MAX_LEVEL) for _ in range(rs.randint(1, 2)))})
        value: object = f"v{rs.randint(0, 99)}" if params.value_kind == "categorical" else {"a", f"v{case}"}
        cohort = rs.randrange(params.num_cohorts)
        secret = rs.randbytes(32)
        expected = vectorized_report(secret, params, value, cohort, chain, case)
        plan = ReportPlan(secret, params, cohort, chain[-1])
        masks = irr_masks(params.randomizer(), SeededRandom(case).uniform((1, params.num_bits)))[0]
        key = noise_key(WINDOW, canonical_value(value))  # type: ignore[arg-type]
        payload = plan.payload(value, key, masks, chain=chain)  # type: ignore[arg-type]
        assert payload == pack_payload(ReportPayload(cohort=cohort, level=chain[-1], bits=expected)), (case, chain)
    with pytest.raises(ValueError, match="plan's level"):
        plan.payload(value, key, masks, chain=[chain[-1], chain[-1] + 1.0])  # type: ignore[arg-type]


def test_cut_tables_decide_ties_on_the_whole_word() -> None:
    # Words built around each cut: the top byte ties with the cut's (decided by the whole word), one above,
    # one below, and the extremes; the table's mask equals FreshCut.bit word by word.
    rs = random.Random(5)
    cuts = [FreshCut(cut=c, rising=r) for r in (False, True)
            for c in (0, 1, 4095, 2**44, 2**44 + 1, rs.randrange(1, GRID), GRID - 1, GRID)]
    for cut in cuts:
        threshold = cut.cut << 12
        words = [0, 2**64 - 1]
        for delta in (-4097, -4096, -1, 0, 1, 4095, 4096):
            if 0 <= threshold + delta < 2**64:
                words.append(threshold + delta)
        words += [rs.randrange(2**64) for _ in range(40)]
        words += [(min(threshold >> 56, 255) << 56) | rs.randrange(2**56) for _ in range(40)]  # top-byte ties
        rs.shuffle(words)
        stream = struct.pack(f"<{len(words)}Q", *words)
        got = CutTable(cut).mask(stream[::-8], stream)
        assert [bool(got >> j & 1) for j in range(len(words))] == [cut.bit(w >> 12) for w in words], cut


def test_keyed_hmac_is_hmac_sha256() -> None:
    rs = random.Random(2)
    for length in (0, 1, 32, 63, 64, 65, 200):
        key = rs.randbytes(length)
        prefix, message = rs.randbytes(rs.randrange(100)), rs.randbytes(rs.randrange(300))
        keyed = KeyedHmac(key)
        assert keyed.digest(prefix + message) == hmac.digest(key, prefix + message, "sha256")
        assert keyed.extended(prefix).digest(message) == hmac.digest(key, prefix + message, "sha256")
        assert KeyedHmac(key, prefix).digest(message) == hmac.digest(key, prefix + message, "sha256")
    secret = rs.randbytes(32)
    seed = KeyedHmac(secret).extended(noise_prefix("places")).digest(noise_suffix(b"W-key", 2))
    assert seed == noise_seed(secret, "places", b"W-key", 2)


class Recording(SeededRandom):
    """A seeded source that keeps every block of uniforms it hands out."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.blocks: list[np.ndarray] = []

    def uniform(self, shape: Shape) -> np.ndarray:
        out = super().uniform(shape)
        self.blocks.append(out.copy())
        return out


def test_client_reports_equal_the_definition_with_the_irr_drawn_ahead(tmp_path: Path) -> None:
    # Through the whole client: the IRR pool draws its uniforms ahead, in blocks, from the client's source; each
    # queued payload equals the vectorized definition (encode, permanent_bits, instantaneous) fed the next row.
    params = MetricParams(name="urls", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4,
                                                              hashing="rappor-md5"),
                          mode="symmetric", level=1.3, irr_p=0.4, irr_q=0.7, value_kind="categorical",
                          time_precision=DAY)
    fake = FakeAggregator([params])
    clock = Clock(WINDOW + 60.0)
    source = Recording(4)
    client = make_client(fake, tmp_path / "s", autosave=False, clock=clock, rng=source, max_epsilon=1e9,
                         insecure_rng_for_testing=True)
    client.sync()
    items: list[bytes] = []
    for day in range(100):  # the pool is empty: report() draws small blocks of 32; flush() tops the pool up
        value = f"https://example.org/{day % 7}"
        rid = client.report("urls", value)
        items.extend(i for i in client._queue if item_id(i) == rid)
        if day == 79:
            client.flush()
        clock.now += DAY
    blocks = [b for b in source.blocks if b.ndim == 2 and b.shape[1] == 32]
    # rows used in the order drawn: three small blocks by day 79 (16 rows left, more than half the doubled
    # size, so the flush draws nothing), then a fourth once those 16 are used
    assert [len(b) for b in blocks] == [32, 32, 32, 32]
    rows = iter(np.concatenate(blocks))
    record = client._state.metrics["urls"]
    randomizer = params.randomizer()
    for day, item in enumerate(items):
        value, window = f"https://example.org/{day % 7}", WINDOW + day * DAY
        assert read_pending(item).window == window
        bits = params.encode(value, record.cohort)
        permanent = permanent_bits(client._state.secret, params, bits, noise_key(window, canonical_value(value)),
                                   [params.level])
        expected = randomizer.instantaneous(permanent, _GivenUniforms(next(rows)))
        payload = read_pending(item).payload
        assert payload == pack_payload(ReportPayload(cohort=record.cohort, level=params.level, bits=expected)), day


def test_a_window_release_of_an_older_state_still_opens() -> None:
    # States written before the fingerprint was dropped hold one: it is ignored, the value decides repeats.
    old = {"window": WINDOW, "value": b64e(canonical_value("a")), "fingerprint": "00" * 16, "first_step": 0,
           "last_step": 0, "report_id": "r"}
    release = WindowRelease.from_dict(old)
    assert release.value == old["value"] and "fingerprint" not in release.to_dict()


@pytest.mark.parametrize("value", [5, None, 2.5, object()])
def test_a_value_that_is_neither_text_nor_a_set_is_refused_naming_the_field(tmp_path: Path, value: object) -> None:
    fake = FakeAggregator([ASYM_IRR])
    client = make_client(fake, tmp_path / "s", autosave=False)
    client.sync()
    with pytest.raises(ParameterError) as refused:
        client.report("places", value)  # type: ignore[arg-type]
    assert refused.value.field == "value" and type(value).__name__ in str(refused.value)
    with pytest.raises(ParameterError) as member:
        client.report("places", {"home", 7})  # type: ignore[arg-type]
    assert member.value.field == "value"
    assert len(client._queue) == 0 and client.ledger()["places"].windows == 0


def test_a_round_resend_equals_the_definition_with_the_irr_drawn_ahead(tmp_path: Path) -> None:
    # relax() re-sends the window's value along its chain (vectorized noise, relax_noise) with the IRR from the
    # same pool as report(): each payload is the definition fed the next row of the source's uniforms.
    params = MetricParams(name="urls", encoding=BloomEncoding(num_bits=24, num_hashes=3, num_cohorts=4),
                          mode="symmetric", level=1.0, irr_p=0.3, irr_q=0.6, value_kind="set", time_precision=DAY)
    fake = FakeAggregator([params])
    source = Recording(8)
    client = make_client(fake, tmp_path / "s", autosave=False, rng=source, insecure_rng_for_testing=True,
                         max_epsilon=1e9)
    client.sync()
    value = {"https://a.example/", "https://b.example/"}
    first = client.report("urls", value)
    client.relax("urls", 2.5, round_id=1)
    client.relax("urls", 4.0, round_id=2)
    items = list(client._queue)
    assert item_id(items[0]) == first and len(items) == 3
    rows = iter(np.concatenate([b for b in source.blocks if b.ndim == 2 and b.shape[1] == 24]))
    record = client._state.metrics["urls"]
    bits = params.encode(value, record.cohort)
    key = noise_key(WINDOW, canonical_value(value))
    for item, chain in zip(items, ([1.0], [1.0, 2.5], [1.0, 2.5, 4.0]), strict=True):
        permanent = permanent_bits(client._state.secret, params, bits, key, chain)
        expected = params.randomizer(chain[-1]).instantaneous(permanent, _GivenUniforms(next(rows)))
        payload = read_pending(item).payload
        assert payload == pack_payload(ReportPayload(cohort=record.cohort, level=chain[-1], bits=expected)), chain


def test_the_ledger_check_without_a_prior_is_the_rounded_formula() -> None:
    # check_new_window skips round_up(0 + spent): spent is from_micro(n), which round_up returns as it is.
    rs = random.Random(13)
    for _ in range(20000):
        n = rs.choice([rs.randrange(10**3), rs.randrange(10**7), rs.randrange(10**13)])
        assert round_up(from_micro(n)) == from_micro(n)
    params = ASYM_IRR
    for case in range(3000):
        levels = sorted({rs.uniform(0.1, MAX_LEVEL) for _ in range(rs.randint(1, 3))})
        record = MetricRecord(params=params.to_dict(), digest="d", cohort=0, levels=levels,
                              rounds=list(range(len(levels))), closed_micro=rs.randrange(10**rs.randint(1, 12)),
                              closed_windows=1)
        if rs.random() < 0.8:
            first = rs.randrange(len(levels))
            record.current = WindowRelease(window=WINDOW, value="x", first_step=first, last_step=len(levels) - 1,
                                           report_id="r")
        prior = 0.0 if case % 2 else rs.uniform(0, 5)
        spent, _ = record.spent(params)
        cost, _ = window_cost(params, levels[-1:])
        total = round_up(round_up(prior + spent) + cost)
        assert check_new_window(record, params, total, prior) == total
        with pytest.raises(BudgetExceeded):
            check_new_window(record, params, math.nextafter(total, 0.0), prior)
