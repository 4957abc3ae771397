"""The compiled kernels (numba, ``protocol.kernels``) against the NumPy code: the same bits, the same counts.

Every check compares the two paths on the same seed or the same recorded bytes, exactly: the
sampler's output, the requests it makes of its source, and what the source gives afterwards
(the stream left in the same place). Sizes straddle the kernel's groups of 64, its blocks of
4,096 and the sampler's chunks; tables cover each cut mode (one probability, two selected by a
bit, any table, with and without ``upper``); ties are made frequent by tie-prone byte sources
and deep by handing the kernel fewer digits. Skipped, with the reason, where numba is not
installed; the import checks run everywhere.
"""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from test_exact_fast_path import (  # the recorded source of the NumPy path's tests
    SUE,
    Recorded,
    _tie_prone,
)

import protocol.exact as exact
from aggregator.analysis.decoding import BitCounts
from protocol import Randomizer, SecureRandom, SeededRandom, kernels
from protocol.exact import BERNOULLI_CHUNK, bernoulli_choose, bernoulli_exact
from protocol.rng import BULK_BYTES

needs_numba = pytest.mark.skipif(
    importlib.util.find_spec("numba") is None,
    reason="numba is not installed (pip install 'onesided[fast]')",
)

# (table, choices indexed (1: no index), dtype of the choices, with upper=): every cut mode
TABLES: list[tuple[list[Any], int, Any, bool]] = [
    ([Fraction(1, 3)], 1, None, False),  # one probability
    (SUE, 2, np.bool_, False),  # two, selected by the true bit (the simulate path)
    ([0.25, Fraction(5, 7)], 2, np.uint8, False),
    ([0.0, 2.0**-9, 0.999], 3, np.uint8, False),  # a table, 0 and a short dyadic
    ([math.exp(-1), 0.5 + 2.0**-40, Fraction(1, 3), 1.0], 4, np.uint16, False),
    ([0.1, 0.9], 1, None, True),  # two, selected by upper
    ([0.1, 0.7, Fraction(1, 3), 0.9], 2, np.bool_, True),
    ([Fraction(1 + 37 * i, 3 + 40 * i) for i in range(10)], 5, np.int64, True),
]
IDS = [f"{t[1]}-of-{len(t[0])}{'-upper' if t[3] else ''}" for t in TABLES]
SIZES = [1, 7, 63, 64, 65, 4_095, 4_097, 3 * 4_096 + 64 * 5 + 9]


@pytest.fixture(autouse=True)
def _kernels_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparisons need the kernels on (and loaded: small inputs run them only once they are), whatever
    the environment of the run says."""
    monkeypatch.delenv(kernels.ENVIRONMENT, raising=False)
    kernels.loaded()


def _inputs(index: int, n: int, seed: int) -> tuple[list[Any], np.ndarray, np.ndarray | None]:
    table, half, dtype, with_upper = TABLES[index]
    gen = np.random.default_rng(seed)
    choice = np.zeros(n, dtype=np.uint8) if half == 1 else gen.integers(0, half, n).astype(dtype)
    upper = (gen.random(n) < 0.4) if with_upper else None
    return table, choice, upper


def _both(draw: Callable[[], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    compiled = draw()
    with kernels.numpy_only():
        plain = draw()
    return compiled, plain


@needs_numba
def test_the_kernels_load_where_numba_is_installed() -> None:
    # Otherwise every comparison below would compare the NumPy code with itself.
    assert kernels.active() and kernels.loaded() is not None
    with kernels.numpy_only():
        assert kernels.loaded() is None and not kernels.active()


@needs_numba
def test_the_kernels_pcg64_words_are_random_raws() -> None:
    # Every count modulo the four lanes, in a row from one state; then NumPy goes on where the kernel stopped.
    module = kernels.loaded()
    assert module is not None
    for seed in (0, 1, 2**64 + 3):
        ours, numpy = np.random.PCG64(seed), np.random.PCG64(seed)
        with kernels.pcg64_state(ours) as pcg:
            assert pcg is not None
            for count in (1, 2, 3, 4, 5, 7, 8, 9, 1_000, 1_003):
                words = np.empty(count, dtype=np.uint64)
                module.pcg_words(*pcg, words)
                assert np.array_equal(words, numpy.random_raw(count))
        assert np.array_equal(ours.random_raw(5), numpy.random_raw(5))
        assert ours.state == numpy.state


@needs_numba
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("index", range(len(TABLES)), ids=IDS)
def test_seeded_bits_and_stream_equal_numpy(index: int, n: int) -> None:
    table, choice, upper = _inputs(index, n, seed=n)
    sources = SeededRandom(n + index), SeededRandom(n + index)
    compiled = bernoulli_choose(sources[0], table, choice, upper=upper)
    with kernels.numpy_only():
        plain = bernoulli_choose(sources[1], table, choice, upper=upper)
    assert compiled.dtype == np.bool_ and np.array_equal(compiled, plain)
    assert np.array_equal(
        sources[0].random_bytes(37), sources[1].random_bytes(37)
    )  # the stream in step


@needs_numba
@pytest.mark.parametrize("depths", [1, 2, exact._KERNEL_DEPTHS])
@pytest.mark.parametrize("index", [0, 1, 4, 7], ids=[IDS[i] for i in (0, 1, 4, 7)])
def test_seeded_chunks_and_deep_ties_equal_numpy(
    index: int, depths: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three chunks (the last one short), 2-D; the kernel handed fewer digits, so its ties go on outside it.
    monkeypatch.setattr(exact, "_KERNEL_DEPTHS", depths)
    n = 2 * BERNOULLI_CHUNK + 4_096 * 3 + 5
    table, choice, upper = _inputs(index, n, seed=depths)
    shape = (n // 5, 5)
    sources = SeededRandom(depths), SeededRandom(depths)
    args = (table, choice.reshape(shape))
    kwargs = {"upper": None if upper is None else upper.reshape(shape)}
    compiled = bernoulli_choose(sources[0], *args, **kwargs)
    with kernels.numpy_only():
        plain = bernoulli_choose(sources[1], *args, **kwargs)
    assert compiled.shape == shape and np.array_equal(compiled, plain)
    assert np.array_equal(sources[0].random_bytes(11), sources[1].random_bytes(11))


@needs_numba
@pytest.mark.parametrize("tie_prone", [False, True], ids=["uniform-bytes", "tie-prone-bytes"])
@pytest.mark.parametrize("index", range(len(TABLES)), ids=IDS)
def test_any_source_gets_the_same_requests_and_gives_the_same_bits(
    index: int, tie_prone: bool
) -> None:
    n = BERNOULLI_CHUNK + 4_096 + 77
    table, choice, upper = _inputs(index, n, seed=index)
    alphabet = _tie_prone(table) if tie_prone else None
    sources = Recorded(5, alphabet), Recorded(5, alphabet)
    compiled = bernoulli_choose(sources[0], table, choice, upper=upper)
    with kernels.numpy_only():
        plain = bernoulli_choose(sources[1], table, choice, upper=upper)
    assert np.array_equal(compiled, plain)
    assert sources[0].requests == sources[1].requests
    assert len(sources[1].requests) >= (
        6 if tie_prone else 3
    )  # two chunks, ties several bytes deep
    assert np.array_equal(sources[0].random_bytes(9), sources[1].random_bytes(9))


@needs_numba
@pytest.mark.parametrize("n", [1_000, BULK_BYTES, BERNOULLI_CHUNK + 3])
def test_the_secure_default_gives_the_same_bits_from_the_same_keystream(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SecureRandom's bytes: os.urandom below the bulk size, a ChaCha20 keystream under an os.urandom key above.
    # With os.urandom replayed from a seed, both paths must read the same bytes and give the same bits.
    def replay(seed: int) -> None:
        gen = np.random.default_rng(seed)
        monkeypatch.setattr(
            os, "urandom", lambda k: gen.integers(0, 256, k, dtype=np.uint8).tobytes()
        )

    choice = np.random.default_rng(n).random(n) < 0.3
    replay(1)
    compiled = Randomizer(mode="symmetric", level=2.0).simulate(choice, SecureRandom())
    replay(1)
    with kernels.numpy_only():
        plain = Randomizer(mode="symmetric", level=2.0).simulate(choice, SecureRandom())
    assert np.array_equal(compiled, plain)


@needs_numba
@pytest.mark.parametrize("mode", ["symmetric", "asymmetric"])
def test_the_randomizer_samplers_equal_numpy(mode: str) -> None:
    r = Randomizer(mode=mode, level=1.5, irr_p=0.3 if mode == "symmetric" else None, irr_q=0.6)
    bits = np.random.default_rng(2).random((3_001, 129)) < 0.1
    for sample in (r.simulate, r.sample_permanent, r.sample_instantaneous):
        compiled, plain = _both(lambda sample=sample: sample(bits, SeededRandom(4)))  # type: ignore[misc]
        assert np.array_equal(compiled, plain)
    permanent = r.sample_permanent(bits, SeededRandom(1))
    compiled, plain = _both(lambda: r.relax_permanent(bits, permanent, 3.0, SeededRandom(6)))
    assert np.array_equal(compiled, plain)
    compiled, plain = _both(lambda: bernoulli_exact(SeededRandom(8), Fraction(2, 3), (77, 1_001)))
    assert np.array_equal(compiled, plain)


class Strided(Recorded):
    """Recorded's bytes handed out as a strided view (every other byte of a larger array)."""

    def random_bytes(self, n: int) -> np.ndarray:
        return np.repeat(super().random_bytes(n), 2)[::2]


@needs_numba
def test_a_source_may_hand_out_strided_bytes() -> None:
    choice = np.random.default_rng(1).random(5_000) < 0.5
    compiled, plain = _both(lambda: bernoulli_choose(Strided(2), SUE, choice))
    assert np.array_equal(compiled, plain)
    assert np.array_equal(compiled, bernoulli_choose(Recorded(2), SUE, choice))


@needs_numba
def test_choices_out_of_range_are_refused_before_anything_is_drawn() -> None:
    source = Recorded(1)
    choice = np.zeros(BERNOULLI_CHUNK + 10, dtype=np.uint16)
    choice[-1] = 2
    with pytest.raises(Exception, match="must index"):
        bernoulli_choose(source, [0.1, 0.2], choice)
    assert source.requests == []


@needs_numba
@pytest.mark.parametrize("rows", [0, 1, 3, 254, 255, 256, 1_021, 16_321])
@pytest.mark.parametrize("bits", [1, 3, 64, 1_000])
def test_counts_equal_numpy(rows: int, bits: int) -> None:
    gen = np.random.default_rng(rows * 7 + bits)
    reports = gen.random((rows, bits)) < 0.6
    for cohorts, h in (
        (np.zeros(rows, dtype=np.int64), 1),
        (np.sort(gen.integers(0, 3, rows)), 3),
        (gen.integers(0, 5, rows), 5),
    ):
        compiled, plain = _both(
            lambda cohorts=cohorts, h=h: BitCounts.from_reports(reports, cohorts, h).ones
        )  # type: ignore[misc]
        assert np.array_equal(compiled, plain)
        if rows:
            assert np.array_equal(compiled.sum(0), reports.sum(0))


@needs_numba
@pytest.mark.parametrize("cohorts", [1, 2, 7])
def test_counts_of_dense_reports_do_not_wrap(cohorts: int) -> None:
    # Every bit set: the byte counters reach 255 and must be widened before the 256th row of a cohort
    # (sorted and shuffled cohorts, the counters of each cohort filled at different rows).
    reports = np.ones((3 * 256 * cohorts + 5, 65), dtype=bool)
    reports[::7, 3] = False
    for order in (np.sort, np.random.default_rng(cohorts).permutation):
        labels = order(np.arange(reports.shape[0]) % cohorts)
        compiled, plain = _both(
            lambda labels=labels: BitCounts.from_reports(reports, labels, cohorts).ones
        )  # type: ignore[misc]
        want = np.stack([reports[labels == c].sum(0) for c in range(cohorts)])
        assert np.array_equal(compiled, want) and np.array_equal(plain, want)


@needs_numba
@pytest.mark.parametrize("rows", [254, 255, 256, 766])
@pytest.mark.parametrize("bits", [8, 64, 65])
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "unaligned"])
def test_column_sums_by_words_and_by_bytes_are_exact_at_full_lanes(
        rows: int, bits: int, aligned: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # all ones but a few: each byte lane of a word reaches 255 and must be widened before the 256th row
    buffer = np.ones(rows * bits + 1, dtype=np.uint8)
    data = buffer[:-1] if aligned else buffer[1:]
    reports = data.reshape(rows, bits)
    reports[::5, bits // 2] = 0
    module = kernels.loaded()
    used: list[str] = []
    for name in ("column_words", "column_sums"):
        kernel = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, kernel=kernel, name=name: used.append(name) or kernel(*a))
    out = np.zeros(bits, dtype=np.int64)
    assert kernels.column_sums(reports, out)
    assert np.array_equal(out, reports.sum(0, dtype=np.int64))
    words = bits % 8 == 0 and reports.ctypes.data % 8 == 0
    assert used == ["column_words" if words else "column_sums"]


@needs_numba
def test_counts_of_read_only_and_strided_reports_equal_numpy() -> None:
    reports = np.random.default_rng(3).random((2_000, 300)) < 0.5
    reports.setflags(write=False)
    strided = reports[::2, ::3]
    for rep in (reports, strided):
        cohorts = np.zeros(rep.shape[0], dtype=np.int64)
        compiled, plain = _both(
            lambda rep=rep, cohorts=cohorts: BitCounts.from_reports(rep, cohorts, 1).ones
        )  # type: ignore[misc]
        assert np.array_equal(compiled, plain) and np.array_equal(plain[0], rep.sum(0))


def test_the_environment_variable_switches_the_kernels_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kernels.ENVIRONMENT, "numpy")
    assert kernels.loaded() is None and not kernels.active()
    assert bernoulli_exact(SeededRandom(1), 0.5, 100).shape == (100,)


def _python(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != kernels.ENVIRONMENT}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    return done.stdout.strip()


def test_importing_the_packages_does_not_import_numba() -> None:
    code = (
        "import sys, protocol, protocol.exact, protocol.kernels, client_sdk, aggregator.analysis.decoding\n"
        "print(sorted(m for m in ('numba', 'llvmlite') if m in sys.modules))"
    )
    assert _python(code) == "[]"


def test_without_numba_the_numpy_code_runs() -> None:
    # numba made unimportable: the kernels report themselves off and the samplers still run (the NumPy code).
    code = (
        "import sys\nsys.modules['numba'] = None\n"
        "import numpy as np\nfrom protocol import Randomizer, SeededRandom, kernels\n"
        "from aggregator.analysis.decoding import BitCounts\n"
        "bits = np.arange(5000) % 3 == 0\n"
        "out = Randomizer(mode='symmetric', level=2.0).simulate(bits, SeededRandom(1))\n"
        "ones = BitCounts.from_reports(out.reshape(50, 100), np.zeros(50, dtype=np.int64), 1).ones\n"
        "print(kernels.active(), kernels.loaded(), int(ones.sum()) == int(out.sum()))"
    )
    assert _python(code) == "False None True"


@needs_numba
def test_numba_is_imported_only_once_the_work_outlasts_its_import() -> None:
    # Small work (a fit, a decode, a short test) never imports numba (nor the SciPy it imports); once a
    # process has done LOAD_AFTER elements on the NumPy path the kernels load, with the same bits throughout.
    code = (
        "import sys\nimport numpy as np\nfrom protocol import Randomizer, SeededRandom, kernels\n"
        "from aggregator.analysis.decoding import BitCounts\n"
        "kernels.LOAD_AFTER = 200_000\n"
        "bits = np.arange(50_000) % 3 == 0\n"
        "r = Randomizer(mode='symmetric', level=2.0)\n"
        "first = r.simulate(bits, SeededRandom(1))\n"
        "BitCounts.from_reports(first.reshape(500, 100), np.zeros(500, dtype=np.int64), 1)\n"
        "before = 'numba' in sys.modules\n"
        "later = [r.simulate(bits, SeededRandom(1)) for _ in range(4)]\n"
        "with kernels.numpy_only():\n"
        "    plain = r.simulate(bits, SeededRandom(1))\n"
        "same = all(np.array_equal(x, first) and np.array_equal(x, plain) for x in later)\n"
        "print(before, 'numba' in sys.modules, kernels.loaded(1) is not None, same)"
    )
    assert _python(code) == "False True True True"
