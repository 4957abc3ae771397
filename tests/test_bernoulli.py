"""The exact Bernoulli sampler: random bytes against the probability's base-256 expansion.

Exactness is checked by enumerating every byte sequence up to a depth (no statistics);
the statistical tests state their false-failure rate (P_MIN = 1e-6 each, under the null).
"""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction

import numpy as np
import pytest
from statsupport import P_MIN, chisquare_p

from protocol.errors import ParameterError
from protocol.exact import BERNOULLI_CHUNK, bernoulli_choose, bernoulli_exact, exact_probability
from protocol.rng import (
    BULK_BYTES,
    FloatArray,
    KeyedRandom,
    RandomSource,
    SecureRandom,
    SeededRandom,
    Shape,
)


class Odometer(RandomSource):
    """Every byte sequence of length ``depth``, one per element, then fixed terminal bytes.

    The sampler asks for ``256**depth`` bytes first; the elements still tied after
    ``k`` bytes are those whose first ``k`` bytes equal ``p``'s digits, in index
    order, so a request of ``256**j`` bytes is answered with digit ``depth - j``
    of the index. A request for one byte past the depth gets the next terminal byte.
    """

    def __init__(self, depth: int, terminal: list[int]) -> None:
        self.depth = depth
        self.terminal = list(terminal)
        self.calls: list[int] = []

    def uniform(self, shape: Shape) -> FloatArray:
        raise AssertionError("the Bernoulli sampler reads bytes only")

    def random_bytes(self, n: int) -> np.ndarray:
        self.calls.append(n)
        j = round(math.log(n, 256)) if n > 1 else 0
        if n > 1 or len(self.calls) <= self.depth:
            assert n == 256**j
            return ((np.arange(n) >> (8 * (j - 1))) & 255).astype(np.uint8) if j else np.zeros(1, np.uint8)
        return np.array([self.terminal.pop(0)], dtype=np.uint8)


def _count_true(p: Fraction | float, depth: int, terminal: list[int]) -> int:
    source = Odometer(depth, terminal)
    return int(bernoulli_exact(source, p, 256**depth).sum())


@pytest.mark.parametrize(
    ("p", "depth"),
    [
        (Fraction(0x4D, 256), 1),
        (Fraction(0x4D02, 256**2), 2),
        (Fraction(0x00FF, 256**2), 2),
        (Fraction(0xFF01, 256**2), 2),
        (0.5, 1),
        (0.75, 2),
        (0.0, 2),
    ],
)
def test_every_byte_sequence_gives_exactly_p(p: Fraction | float, depth: int) -> None:
    # p has at most `depth` base-256 digits: among the 256**depth sequences exactly p * 256**depth
    # give True, and the one sequence equal to p's digits resolves to False on the next byte.
    assert _count_true(p, depth, [1]) == Fraction(p) * 256**depth
    assert _count_true(p, depth, [0, 7]) == Fraction(p) * 256**depth  # a zero byte ties a zero digit again


def test_one_is_always_true_and_a_third_is_read_past_the_depth() -> None:
    assert _count_true(1.0, 2, [0]) == 256**2  # 1 = 0.FFFF...: the all-FF sequence is decided later
    assert _count_true(1.0, 1, [255, 3]) == 256
    # 1/3 = 0.5555... (base 256): every sequence below 0x5555 is True, the tie 0x5555 then reads 0 < 0x55.
    assert _count_true(Fraction(1, 3), 2, [0]) == 0x5555 + 1
    assert _count_true(Fraction(1, 3), 2, [0x56]) == 0x5555


def test_doubles_are_sampled_at_their_exact_binary_value() -> None:
    # The double nearest 0.1 has a 55-bit mantissa expansion: it is a dyadic rational, read exactly.
    p = exact_probability(0.1)
    assert p == Fraction(0.1) and p.denominator == 2**55
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(ParameterError) as err:
            exact_probability(bad)
        assert err.value.field == "p"


def test_choose_validates_its_index() -> None:
    with pytest.raises(ParameterError) as err:
        bernoulli_choose(SeededRandom(1), [0.1, 0.2], np.array([0, 2]))
    assert err.value.field == "choice"
    for unsigned in (np.uint8, np.uint16):  # checked chunk by chunk, the bad index in a later chunk
        choice = np.zeros(BERNOULLI_CHUNK + 5, dtype=unsigned)
        choice[-1] = 256 if unsigned == np.uint16 else 2
        with pytest.raises(ParameterError) as err:
            bernoulli_choose(SeededRandom(1), [0.1, 0.2], choice)
        assert err.value.field == "choice"
    with pytest.raises(ParameterError):
        bernoulli_choose(SeededRandom(1), [], np.zeros(3, dtype=int))


@pytest.mark.parametrize(
    "probs",
    [
        (math.exp(-1), 0.5 + 2.0**-40, Fraction(1, 3)),
        (math.exp(-16 / 2), 1 - math.exp(-16 / 2), 1.0),
        (0.0, 2.0**-9, 0.999),
    ],
)
def test_frequencies_match_at_p_min(probs: tuple[float | Fraction, ...]) -> None:
    # Chi-square on (class, bit) cells at P_MIN = 1e-6 (fixed seed: deterministic; false-failure 1e-6).
    n = 3 * BERNOULLI_CHUNK + 12_345  # several chunks and a short one
    choice = SeededRandom(5).integers(len(probs), n)
    out = bernoulli_choose(SeededRandom(6), probs, choice)
    observed, expected = [], []
    for k, p in enumerate(probs):
        sel = choice == k
        ones = int(out[sel].sum())
        observed += [ones, int(sel.sum()) - ones]
        expected += [float(p) * sel.sum(), (1 - float(p)) * sel.sum()]
        if float(p) in (0.0, 1.0):
            assert ones == (sel.sum() if p == 1 else 0)  # exact, not statistical
    obs, exp = np.array(observed), np.array(expected)
    keep = exp > 0
    assert chisquare_p(obs[keep], exp[keep] / exp.sum()) > P_MIN


def test_seeded_twins_and_secure_default() -> None:
    choice = np.arange(10_000) % 2
    a = bernoulli_choose(SeededRandom(3), (0.2, 0.9), choice)
    assert np.array_equal(a, bernoulli_choose(SeededRandom(3), (0.2, 0.9), choice))
    assert not np.array_equal(a, bernoulli_choose(SeededRandom(4), (0.2, 0.9), choice))
    secure = bernoulli_choose(None, (0.2, 0.9), choice)
    assert secure.shape == choice.shape and secure.dtype == np.bool_
    assert not np.array_equal(secure, bernoulli_choose(None, (0.2, 0.9), choice))  # fails w.p. ~2**-7000


@pytest.mark.parametrize("n", [100, BULK_BYTES + 17])
def test_secure_bytes_are_uniform(n: int) -> None:
    # Both paths (os.urandom; ChaCha20 under a fresh OS key): chi-square of 2**20 bytes over 256 cells,
    # false-failure rate 1e-6 (the source is random, not seeded). Consecutive requests differ.
    source = SecureRandom()
    data = np.concatenate([source.random_bytes(n) for _ in range(-(-(1 << 20) // n))])
    counts = np.bincount(data, minlength=256)
    assert chisquare_p(counts, np.full(256, 1 / 256)) > P_MIN
    assert not np.array_equal(source.random_bytes(n), source.random_bytes(n))


def test_default_bytes_are_the_top_48_bits_of_each_uniform() -> None:
    # KeyedRandom has no byte stream of its own: 6 bytes per uniform, floor(u * 2**48) = w >> 16.
    seed = bytes(range(32))
    got = KeyedRandom(seed).random_bytes(20)
    words = np.frombuffer(hashlib.shake_256(seed).digest(32), dtype="<u8") >> np.uint64(16)
    want = words.astype("<u8").view(np.uint8).reshape(-1, 8)[:, :6].reshape(-1)[:20]
    assert np.array_equal(got, want)


def test_seeded_bytes_are_the_raw_pcg64_stream() -> None:
    raw = np.random.Generator(np.random.PCG64(9)).bit_generator.random_raw(2)
    assert np.array_equal(SeededRandom(9).random_bytes(13), raw.astype("<u8").view(np.uint8)[:13])


@pytest.mark.parametrize("size", range(2, 10))
def test_arithmetic_select_equals_a_gather(size: int) -> None:
    # The wrapping uint8 select (up to 4 digits) and the gather must pick the same digit; deterministic.
    from protocol.exact import _select

    gen = np.random.default_rng(size)
    for _ in range(50):
        digits = gen.integers(0, 256, size).astype(np.uint8)
        choice = gen.integers(0, size, 5_000).astype(np.uint8)
        assert np.array_equal(_select(digits, choice), digits[choice])


@pytest.mark.parametrize("half", [1, 2, 3, 4])
def test_every_byte_sequence_gives_exactly_p_through_upper(half: int) -> None:
    # Each entry of a table of 2 * half dyadic probabilities of 2 digits, chosen through (choice, upper):
    # among the 256**2 byte sequences exactly p * 256**2 give True (no statistics).
    table = [Fraction((0x1234 + 0x2F11 * i) % 256**2, 256**2) for i in range(2 * half)]
    for i, p in enumerate(table):
        choice = np.full(256**2, i % half, dtype=np.uint8)
        upper = np.full(256**2, i >= half)
        for terminal in ([1], [0, 7]):
            got = bernoulli_choose(Odometer(2, list(terminal)), table, choice, upper=upper)
            assert int(got.sum()) == p * 256**2, (half, i)


@pytest.mark.parametrize("half", [1, 2, 3, 4, 5])
def test_upper_is_the_index_of_the_second_half(half: int) -> None:
    # Same stream, same bits as the explicit index choice + upper * half (deterministic); argument checks.
    gen = np.random.default_rng(3)
    table = [Fraction(1 + 37 * i, 3 + 40 * i) for i in range(2 * half)]
    choice = gen.integers(0, half, 3 * BERNOULLI_CHUNK // 2).astype(np.uint8)
    upper = gen.random(choice.size) < 0.5
    got = bernoulli_choose(SeededRandom(8), table, choice, upper=upper)
    assert np.array_equal(got, bernoulli_choose(SeededRandom(8), table, choice + half * upper))
    table = (0.1, 0.7, Fraction(1, 3), 0.9)
    choice = choice % 2
    with pytest.raises(ParameterError) as err:
        bernoulli_choose(SeededRandom(1), (0.1, 0.2, 0.3), choice, upper=upper)
    assert err.value.field == "upper"
    with pytest.raises(ParameterError) as err:
        bernoulli_choose(SeededRandom(1), table, np.full(choice.size, 2), upper=upper)
    assert err.value.field == "choice"
