"""The blocked pass of the exact Bernoulli sampler against the plain pass: same bytes, same bits.

``bernoulli_choose`` compares a large chunk's first bytes block by block and finds the
ties through coarse flags (``_bernoulli_pass_blocked``); chunks under a block take the
plain pass (``_bernoulli_pass``). Both must give the same bits from the same bytes and
make the same byte requests (seeded outputs and test vectors depend on it). Every check
here is deterministic (fixed seeds, exact equality): no false failures.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from protocol.exact import (
    _BLOCK,
    BERNOULLI_CHUNK,
    _bernoulli_pass,
    _bernoulli_pass_blocked,
    _Expansion,
    _sparse_positions,
    bernoulli_choose,
    exact_probability,
)
from protocol.rng import FloatArray, RandomSource, Shape


class Recorded(RandomSource):
    """Seeded bytes, optionally from a small alphabet (most bytes then tie a digit); logs each request."""

    def __init__(self, seed: int, alphabet: list[int] | None = None) -> None:
        self.gen = np.random.default_rng(seed)
        self.alphabet = None if alphabet is None else np.array(sorted(set(alphabet)), dtype=np.uint8)
        self.requests: list[int] = []

    def uniform(self, shape: Shape) -> FloatArray:
        raise AssertionError("the Bernoulli sampler reads bytes only")

    def random_bytes(self, n: int) -> np.ndarray:
        self.requests.append(n)
        if self.alphabet is None:
            return self.gen.integers(0, 256, n, dtype=np.uint8)
        return self.gen.choice(self.alphabet, n)


def _tie_prone(table: list[float | Fraction]) -> list[int]:
    """The first four digits of every probability, and the first digits' neighbours: frequent, deep ties."""
    expansion = _Expansion([exact_probability(p) for p in table])
    digits = [int(d) for depth in range(4) for d in expansion.digits(depth)]
    return digits + [(int(d) + step) % 256 for d in expansion.digits(0) for step in (-1, 1)]


SUE = [1.0 / (math.exp(1.0) + 1.0), math.exp(1.0) / (math.exp(1.0) + 1.0)]  # epsilon 2, as the benchmark

# (table, number of choices indexed (1: no index), dtype of the choices, with upper=)
Case = tuple[list[Any], int, Any, bool]
CASES: list[Case] = [
    ([Fraction(1, 3)], 1, None, False),
    (SUE, 2, np.bool_, False),
    ([0.25, Fraction(5, 7)], 2, np.uint8, False),
    ([0.0, 2.0**-9, 0.999], 3, np.uint8, False),
    ([math.exp(-1), 0.5 + 2.0**-40, Fraction(1, 3), 1.0], 4, np.uint8, False),
    ([0.1, 0.2, Fraction(2, 7), 0.4, 0.5], 5, np.uint8, False),  # a gather
    ([0.1, 0.9], 1, None, True),
    ([0.1, 0.7, Fraction(1, 3), 0.9], 2, np.bool_, True),
    ([Fraction(1 + 37 * i, 3 + 40 * i) for i in range(6)], 3, np.uint8, True),  # the 8-digit polynomial
    ([Fraction(1 + 37 * i, 3 + 40 * i) for i in range(8)], 4, np.uint8, True),
    ([Fraction(1 + 37 * i, 3 + 40 * i) for i in range(10)], 5, np.uint8, True),
]


def _inputs(case: Case, n: int, seed: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    _, half, dtype, with_upper = case
    gen = np.random.default_rng(seed)
    choice = None if half == 1 else gen.integers(0, half, n).astype(dtype)
    upper = (gen.random(n) < 0.4) if with_upper else None
    return choice, upper


@pytest.mark.parametrize("tie_prone", [False, True], ids=["uniform-bytes", "tie-prone-bytes"])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[1]}-of-{len(c[0])}{'-upper' if c[3] else ''}" for c in CASES])
def test_blocked_pass_equals_the_plain_pass(case: Case, tie_prone: bool) -> None:
    # A chunk of two full blocks and a partial one, its size not a multiple of 64; the tie buffer is larger
    # and full of stale True from an earlier chunk. Same bits, same requests, same bytes left in the stream.
    table = [exact_probability(p) for p in case[0]]
    n = 2 * _BLOCK + 1_013
    choice, upper = _inputs(case, n, seed=len(table))
    as_index = None if choice is None else choice.view(np.uint8)
    as_upper = None if upper is None else upper.view(np.uint8)
    alphabet = _tie_prone(case[0]) if tie_prone else None
    plain_source, blocked_source = Recorded(7, alphabet), Recorded(7, alphabet)
    plain = np.empty(n, dtype=bool)
    _bernoulli_pass(plain_source, _Expansion(table), as_index, as_upper, plain)
    blocked = np.empty(n, dtype=bool)
    stale = np.ones(n + 1_000, dtype=bool)
    _bernoulli_pass_blocked(blocked_source, _Expansion(table), as_index, as_upper, blocked, stale)
    assert np.array_equal(blocked, plain)
    assert blocked_source.requests == plain_source.requests
    assert len(plain_source.requests) >= (4 if tie_prone else 2)  # there were ties, several bytes deep
    assert np.array_equal(blocked_source.random_bytes(16), plain_source.random_bytes(16))
    if plain.size and 0 < plain.mean() < 1:
        assert 0 < blocked.mean() < 1


@pytest.mark.parametrize("case", [CASES[1], CASES[2], CASES[4], CASES[7], CASES[9]],
                         ids=["bool", "uint8-of-2", "uint8-of-4", "bool-upper", "uint8-upper"])
def test_choose_equals_plain_passes_chunk_by_chunk(case: Case) -> None:
    # The public sampler over a full chunk (blocked) and a short last one (plain), a 2-D shape: the same
    # bits as the plain pass run on every chunk from the same stream.
    table = [exact_probability(p) for p in case[0]]
    shape = ((BERNOULLI_CHUNK + _BLOCK // 2) // 7, 7)
    n = shape[0] * shape[1]
    choice, upper = _inputs(case, n, seed=11)
    choice_arg = np.zeros(shape, dtype=np.uint8) if choice is None else choice.reshape(shape)
    got = bernoulli_choose(Recorded(3), case[0], choice_arg, upper=None if upper is None else upper.reshape(shape))
    assert got.shape == shape and got.dtype == np.bool_
    source = Recorded(3)
    want = np.empty(n, dtype=bool)
    expansion = _Expansion(table)
    for start in range(0, n, BERNOULLI_CHUNK):
        stop = min(start + BERNOULLI_CHUNK, n)
        index = None if choice is None else choice[start:stop].view(np.uint8)
        high = None if upper is None else upper[start:stop].view(np.uint8)
        _bernoulli_pass(source, expansion, index, high, want[start:stop])
    assert np.array_equal(got.reshape(-1), want)


@pytest.mark.parametrize("size", [64, 128, 4_096, 1 << 17])
def test_sparse_positions_equal_flatnonzero(size: int) -> None:
    # Any density (the flags are exact, only the speed depends on sparsity); the first and last element.
    gen = np.random.default_rng(size)
    for density in (0.0, 1 / 256, 0.05, 0.5, 1.0):
        mask = gen.random(size) < density
        assert np.array_equal(_sparse_positions(mask), np.flatnonzero(mask))
        for edge in (0, size - 1, size // 2 + 7):
            only = np.zeros(size, dtype=bool)
            only[edge] = True
            assert np.array_equal(_sparse_positions(only), [edge])
