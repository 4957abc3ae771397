"""The fused relaxation kernel (``aggregator.research.fused``), tested on a machine without a GPU.

The CUDA source is compiled for the host with g++ and run as a library
(``host_library``): its counts are checked bit for bit against a NumPy
reference of the same Philox stream, its laws by chi-square against the exact
probabilities (32-bit words, and 8- and 3-bit builds where ties are frequent
and the host finishes them), its tie buffer's overflow, and nvcc compiles the
same source to PTX. Tests needing g++ or nvcc skip with the reason when the
tool is missing.
"""

from __future__ import annotations

import shutil
import subprocess
import types
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from statsupport import P_MIN, chisquare_p

from aggregator.research import fused
from aggregator.research.arrays import ArrayEngine, array_block
from aggregator.research.fused import DrawLaw
from aggregator.research.scenarios.relaxation import (
    RELAXATION_SETUPS,
    relaxation,
    relaxation_block,
    relaxation_block_array,
    relaxation_block_fused,
)
from protocol.errors import ParameterError
from protocol.rng import SeededRandom

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ here: the host build of the kernel is untested")

# Random123's known answers for Philox4x32-10: (counter, key) -> four words.
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]

# Two draws: doubles, rationals (1/3: its 32-bit remainder is 1/3, its 3-bit one 2/3), the extremes 0 and 1.
LAWS = [
    DrawLaw(first=(0.25, Fraction(2, 3)), relaxed=(0.1, Fraction(1, 3), 0.3, 0.9),
            one_shot=(2.0**-20 + 0.25, 0.8), extra=(Fraction(1, 7), 0.6)),
    DrawLaw(first=(0.0, 1.0), relaxed=(0.5, 0.0, Fraction(5, 9), 1.0), one_shot=(Fraction(1, 3), 0.7),
            extra=(0.01, 0.99)),
]
EDGES = [0, 0, 700, 701, 701, 2_000]  # empty cohorts at the start and in the middle


def _bits(n: int, k: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random((n, k)) < 0.4).astype(np.uint8)


def _part_probabilities(law: DrawLaw, b: int) -> list[float]:
    """P(1) of each part given the Bloom bit ``b`` (the relaxed one through the permanent bit)."""
    first, rel = float(law.first[b]), [float(p) for p in law.relaxed]
    relaxed = first * rel[1 + 2 * b] + (1 - first) * rel[2 * b]
    return [first, relaxed, float(law.one_shot[b]), float(law.extra[b])]


def _check_law(counts: np.ndarray, laws: list[DrawLaw], per_column: int, b_of_column: np.ndarray) -> None:
    """One chi-square per (draw, part, b) at P_MIN; probabilities 0 and 1 checked exactly."""
    for d, law in enumerate(laws):
        for b in (0, 1):
            columns = b_of_column == b
            trials = per_column * int(columns.sum())
            for q, p in enumerate(_part_probabilities(law, b)):
                ones = int(counts[d, q][:, columns].sum())
                if p in (0.0, 1.0):
                    assert ones == trials * int(p), (d, q, b)
                else:
                    assert chisquare_p(np.array([trials - ones, ones]), np.array([1 - p, p])) > P_MIN, (d, q, b, p)


def test_philox_matches_the_known_answers() -> None:
    for counter, key, words in KNOWN_ANSWERS:
        assert tuple(int(w) for w in fused.philox4x32(counter, key)) == words


@needs_gxx
@pytest.mark.parametrize(("width", "per_thread"), [(32, None), (32, 3), (8, 7), (3, 640)])
def test_host_kernel_is_the_numpy_reference_bit_for_bit(width: int, per_thread: int | None) -> None:
    # counts and ties (as sets) identical whatever the clients per thread: a function of (key, counter)
    bits = _bits(2_000, 24, 1)
    cuts, _ = fused.cut_table(LAWS, width)
    key = (0x12345678, 0x9ABCDEF0)
    counts, ties = fused.fused_counts(np, bits, EDGES, cuts, key, width=width, per_thread=per_thread)
    ref_counts, ref_ties = fused.reference_counts(bits, EDGES, cuts, key, width)
    assert np.array_equal(counts, ref_counts)
    assert np.array_equal(ties, ref_ties)
    if width < 32:
        assert len(np.unique(ties[:, 3] & 3)) == 4  # ties at every step of the chain
    assert counts.sum() > 0


@needs_gxx
@pytest.mark.parametrize("width", [32, 8, 3])
def test_kernel_counts_have_the_exact_laws(width: int) -> None:
    # 16 chi-squares per width at P_MIN (false-failure rate 1.6e-5 per width), fixed seeds; at 8 and 3
    # bits about 1.6% and 41% of the chains tie and are finished on the host
    n, k = 40_000, 8
    b_of_column = np.arange(k) % 2
    bits = np.broadcast_to(b_of_column.astype(np.uint8), (n, k)).copy()
    edges = [0, 10_000, 10_000, 40_000]
    counts = fused.relaxation_counts(np, bits, edges, LAWS, (7, 11), SeededRandom(3), width=width)
    assert counts.shape == (2, 4, 3, k)
    assert not counts[:, :, 1].any()  # the empty cohort
    _check_law(counts, LAWS, n, b_of_column)


@needs_gxx
def test_host_finishes_ties_with_the_remainder_not_the_probability() -> None:
    # At 3 bits, 1/3 has T = 2 and remainder 2/3: the chains tied at their first part, finished on the
    # host, are 1 with probability 2/3 (1/3 if the host drew them at p); chi-square at P_MIN (rate 1e-6)
    law = [DrawLaw(first=(Fraction(1, 3), Fraction(1, 3)), relaxed=(0.5,) * 4, one_shot=(0.5, 0.5), extra=(0.5, 0.5))]
    n, k = 60_000, 4
    bits = np.zeros((n, k), dtype=np.uint8)
    cuts, rests = fused.cut_table(law, 3)
    assert cuts[0, 0] == 2 and rests[0][0] == Fraction(2, 3)
    counts, ties = fused.fused_counts(np, bits, [0, n], cuts, (5, 6), width=3)
    first = ties[(ties[:, 3] & 3) == 0]
    before = counts.copy()
    fused.finish_ties(counts, first, np.zeros(first.shape[0], dtype=np.int64), [0, n], law, SeededRandom(4), 3)
    ones = int(counts[0, 0].sum() - before[0, 0].sum())
    assert first.shape[0] > 20_000  # 1/8 of 240,000 chains
    assert chisquare_p(np.array([first.shape[0] - ones, ones]), np.array([1 / 3, 2 / 3])) > P_MIN


@needs_gxx
def test_a_full_tie_buffer_is_rerun_or_refused_never_lost() -> None:
    bits = _bits(2_000, 24, 2)
    cuts, _ = fused.cut_table(LAWS, 8)
    whole = fused.fused_counts(np, bits, EDGES, cuts, (1, 2), width=8)
    assert whole[1].shape[0] > 100
    again = fused.fused_counts(np, bits, EDGES, cuts, (1, 2), width=8, tie_capacity=5)  # rerun at the exact size
    assert all(np.array_equal(a, b) for a, b in zip(whole, again, strict=True))
    with pytest.raises(ParameterError) as err:
        fused.fused_counts(np, bits, EDGES, cuts, (1, 2), width=8, tie_capacity=5, rerun_on_overflow=False)
    assert err.value.field == "tie_capacity" and f"{whole[1].shape[0]:,} ties" in str(err.value)
    with pytest.raises(ParameterError) as err:
        fused.fused_counts(np, bits, [0, 1_000, 999, 2_000], cuts, (1, 2))
    assert err.value.field == "edges"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc here: the CUDA build of the kernel is untested")
@pytest.mark.parametrize("width", [32, 8])
def test_nvcc_compiles_the_kernel_to_ptx(tmp_path: Path, width: int) -> None:
    source = tmp_path / "relax.cu"
    source.write_text(fused.KERNEL_SOURCE)
    done = subprocess.run(["nvcc", "--ptx", f"-DWORD_BITS={width}", "-o", str(tmp_path / "relax.ptx"), str(source)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    ptx = (tmp_path / "relax.ptx").read_text()
    assert ".entry relax_fused" in ptx and "atom.global.add.u64" in ptx


@needs_gxx
def test_the_fused_block_shares_the_array_blocks_population() -> None:
    setup = replace(RELAXATION_SETUPS["small"], levels=(1.0, 4.0), repetitions=1, clients=2_000, chunk=2_000)
    array = relaxation_block_array(np, setup, 0, np.random.SeedSequence(5))
    kernel = relaxation_block_fused(np, setup, 0, np.random.SeedSequence(5))
    assert sorted(array) == sorted(kernel)
    assert np.array_equal(array["truth"], kernel["truth"]) and np.array_equal(array["totals"], kernel["totals"])
    twin = relaxation_block_fused(np, setup, 0, np.random.SeedSequence(5))
    assert all(np.array_equal(kernel[key], twin[key]) for key in kernel)  # reproducible from the seed


@needs_gxx
def test_relaxation_on_the_fused_engine_costs_no_accuracy() -> None:
    # the array engine's test, through the host-built kernel: 32,768 squared errors per point, sd ~1.2%,
    # 0.9-1.1 is > 5.8 sd (false-failure rate < 1e-7 per check)
    setup = replace(RELAXATION_SETUPS["small"], levels=(1.0, 4.0))
    f = relaxation(setup, SeededRandom(8), engine=ArrayEngine("numpy", fused=True))
    assert f["engine"] == "fused-numpy"
    for c in f["grid"]:
        assert c["cells"] == 32_768
        assert 0.9 <= c["ratio"] <= 1.1, c
        assert 0.9 <= c["theory_ratio"] <= 1.1, c
        assert c["composition_ratio"] > c["ratio"]


def test_the_engine_picks_the_fused_block_on_cupy_by_default() -> None:
    assert ArrayEngine("cupy").uses_fused is None and ArrayEngine("cupy").name == "gpu"
    assert ArrayEngine("cupy", fused=False).name == "gpu-array"
    assert ArrayEngine("numpy").uses_fused is False and ArrayEngine("numpy").name == "array-numpy"
    assert array_block(relaxation_block, None) is relaxation_block_fused
    assert array_block(relaxation_block, False) is relaxation_block_array
    with pytest.raises(ParameterError) as err:
        DrawLaw(first=(0.1,), relaxed=(0.1,) * 4, one_shot=(0.1, 0.2), extra=(0.1, 0.2))
    assert err.value.field == "first"


class FakeKernel:
    """``RawModule(...).get_function`` of :class:`FakeCuPy`: the host build called as CuPy calls a kernel."""

    def __init__(self, width: int) -> None:
        self.lib = fused.host_library(width)

    def __call__(self, grid: tuple[int], block: tuple[int], args: tuple[object, ...]) -> None:
        raw = [a.ctypes.data if isinstance(a, np.ndarray) else int(a) for a in args]  # type: ignore[call-overload]
        assert [type(a) for a in args[6:]] == [np.uint32] * 9  # the scalars CuPy passes as unsigned int
        self.lib.host_launch(grid[0], block[0], *raw)


def fake_cupy() -> types.SimpleNamespace:
    """NumPy dressed as the part of CuPy that ``fused`` uses, the kernel being its host build."""

    def raw_module(code: str, options: tuple[str, ...]) -> types.SimpleNamespace:
        assert code == fused.KERNEL_SOURCE
        width = int(options[0].removeprefix("-DWORD_BITS="))
        return types.SimpleNamespace(get_function=lambda name: FakeKernel(width))

    return types.SimpleNamespace(RawModule=raw_module, zeros=np.zeros, asarray=np.asarray, asnumpy=np.asarray,
                                 ascontiguousarray=np.ascontiguousarray, uint8=np.uint8, uint32=np.uint32,
                                 uint64=np.uint64, bool_=np.bool_)


@needs_gxx
@pytest.mark.parametrize("width", [32, 8])
def test_the_device_launch_passes_what_the_kernel_expects(width: int) -> None:
    # the CuPy launch code (cannot run here) driving the host build through a CuPy-shaped NumPy
    bits = _bits(2_000, 24, 3) != 0  # bool, as the block's bits are: viewed as bytes
    cuts, _ = fused.cut_table(LAWS, width)
    got = fused.fused_counts(fake_cupy(), bits, EDGES, cuts, (9, 10), width=width, tie_capacity=4)
    ref = fused.reference_counts(bits.astype(np.uint8), EDGES, cuts, (9, 10), width)
    assert all(np.array_equal(a, b) for a, b in zip(got, ref, strict=True))
    on_device = fused.relaxation_counts(fake_cupy(), bits, EDGES, LAWS, (9, 10), SeededRandom(1), width=width)
    on_host = fused.relaxation_counts(np, bits, EDGES, LAWS, (9, 10), SeededRandom(1), width=width)
    assert np.array_equal(on_device, on_host)  # ties gathered from the device, finished alike
