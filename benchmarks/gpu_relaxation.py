"""Benchmark and check: the fused relaxation kernel on a GPU (one run does all), or its host build on the CPU.

GPU (CuPy and a CUDA device; one call, a few minutes on an H100):
    .venv/bin/python benchmarks/gpu_relaxation.py [--clients 1e9] [--block-clients 8000000] [--budget 420]
  1. bit for bit: the device kernel's counts and ties on a small block equal the NumPy Philox
     reference (:func:`aggregator.research.fused.reference_counts`), with 32-bit words and an 8-bit
     build (ties every 64 chains: the device tie buffer and the host finish);
  2. law: 10^6 clients through the fused block and through the array block (the reference path):
     per (draw, part), each total of ones against its exact expectation given the block's truth, and
     the two blocks against each other (2 x 2 chi-square), each at 1e-6;
  3. timing: the kernel alone on one block of bits, then ``relaxation`` (the per-client scenario,
     paper encoding: 128 bits, 64 cohorts; levels 1 -> 4, both modes: two relaxation draws per client)
     at ``--clients`` if the projection from the first block fits ``--budget`` seconds.
CPU (``--cpu``): the same block on NumPy, host-built kernel vs array block, clients/s:
    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/gpu_relaxation.py --cpu [--clients 20000]
Numbers go to benchmarks/RESULTS.md ("Fused relaxation kernel").
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from typing import Any

import numpy as np

from aggregator.research import fused
from aggregator.research.arrays import ArrayEngine, namespace
from aggregator.research.scenarios.relaxation import (
    _DRAW_PARTS,
    RELAXATION_SETUPS,
    RelaxationSetup,
    _block_population,
    _grid_laws,
    relaxation,
    relaxation_block_array,
    relaxation_block_fused,
)
from protocol.errors import ParameterError
from protocol.rng import SeededRandom

P_MIN = 1e-6


def setup_for(clients: int, block: int) -> RelaxationSetup:
    return dataclasses.replace(RELAXATION_SETUPS["paper"], clients=clients, chunk=min(clients, block),
                               levels=(1.0, 4.0), repetitions=1)


def sync(xp: Any) -> None:
    if xp is not np:
        xp.cuda.Device().synchronize()


def timed(xp: Any, fn: Any) -> tuple[float, Any]:
    sync(xp)
    t0 = time.perf_counter()
    out = fn()
    sync(xp)
    return time.perf_counter() - t0, out


def bit_for_bit(xp: Any) -> bool:
    """Device counts and ties equal the NumPy reference, 32- and 8-bit words."""
    rng = np.random.default_rng(1)
    bits = (rng.random((3_000, 128)) < 0.3).astype(np.uint8)
    edges = [0, 0, 1_000, 1_001, 1_001, 3_000]
    laws = [law for _, law in _grid_laws(setup_for(3_000, 3_000))]
    ok = True
    for width in (32, 8):
        cuts, _ = fused.cut_table(laws, width)
        got = fused.fused_counts(xp, xp.asarray(bits), edges, cuts, (0xDEADBEEF, 12345), width=width)
        ref = fused.reference_counts(bits, edges, cuts, (0xDEADBEEF, 12345), width)
        same = all(np.array_equal(a, b) for a, b in zip(got, ref, strict=True))
        print(f"bit for bit, {width}-bit words: {'same' if same else 'DIFFERENT'} "
              f"({int(got[0].sum()):,} ones, {got[1].shape[0]:,} ties)")
        ok &= same
    return ok


def expected_ones(counts: dict[str, np.ndarray], key: str, law: fused.DrawLaw) -> list[tuple[float, float]]:
    """Per part: (mean, variance) of the block's total ones given its truth (exact probabilities)."""
    ones_b = float(counts["truth"].sum())
    zeros_b = float(counts["totals"].sum()) * counts["truth"].shape[1] - ones_b
    out = []
    for q in range(4):
        probs = []
        for b in (0, 1):
            first = float(law.first[b])
            relaxed = first * float(law.relaxed[1 + 2 * b]) + (1 - first) * float(law.relaxed[2 * b])
            probs.append((first, relaxed, float(law.one_shot[b]), float(law.extra[b]))[q])
        mean = zeros_b * probs[0] + ones_b * probs[1]
        var = zeros_b * probs[0] * (1 - probs[0]) + ones_b * probs[1] * (1 - probs[1])
        out.append((mean, var))
    return out


def in_law(xp: Any, clients: int) -> bool:
    """Fused and array blocks at ``clients``: each total against its expectation, and each other."""
    from scipy import stats  # noqa: PLC0415

    setup = setup_for(clients, clients)
    blocks = {"fused": relaxation_block_fused(xp, setup, 0, np.random.SeedSequence(21)),
              "array": relaxation_block_array(xp, setup, 0, np.random.SeedSequence(22))}
    worst = 1.0
    for key, law in _grid_laws(setup):
        for q, part in enumerate(_DRAW_PARTS):
            trials = [float(b["totals"].sum()) * b["truth"].shape[1] for b in blocks.values()]
            ones = [float(b[f"{key}/{part}"].sum()) for b in blocks.values()]
            for name, block in blocks.items():
                mean, var = expected_ones(block, key, law)[q]
                z = (float(block[f"{key}/{part}"].sum()) - mean) / math.sqrt(var)
                worst = min(worst, float(2 * stats.norm.sf(abs(z))))
                print(f"  {name:5s} {key}/{part}: z = {z:+.2f}")
            table = np.array([[o, t - o] for o, t in zip(ones, trials, strict=True)])
            worst = min(worst, float(stats.chi2_contingency(table).pvalue))
    print(f"law, {clients:,} clients: smallest p-value {worst:.3g} ({'pass' if worst > P_MIN else 'FAIL'} at 1e-6)")
    return worst > P_MIN


def kernel_time(xp: Any, clients: int) -> tuple[float, float, int]:
    """(bits seconds, kernel seconds, draws) for one block of ``clients`` on ``xp``."""
    setup = setup_for(clients, clients)
    device, _, host, key = np.random.SeedSequence(31).spawn(4)
    laws = [law for _, law in _grid_laws(setup)]
    gen = xp.random.default_rng(device)
    bits_s, (_, edges, bits) = timed(xp, lambda: _block_population(xp, setup, 0, gen, host))
    keys = key.generate_state(2, dtype=np.uint32)
    kernel_s, _ = timed(xp, lambda: fused.relaxation_counts(xp, bits, edges, laws, keys, SeededRandom(1)))
    return bits_s, kernel_s, len(laws)


def gpu(args: argparse.Namespace) -> int:
    xp = namespace("cupy")
    print(f"device: {xp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, CuPy {xp.__version__}")
    ok = bit_for_bit(xp)
    ok &= in_law(xp, 1_000_000)
    kernel_time(xp, 100_000)  # compile and warm up
    bits_s, kernel_s, draws = kernel_time(xp, args.block_clients)
    per_s = args.block_clients / (bits_s + kernel_s)
    philox = args.block_clients * 128 * draws / kernel_s
    print(f"one block of {args.block_clients:,} clients x 128 bits, {draws} relaxation draws: bits {bits_s:.3f} s, "
          f"fused kernel {kernel_s:.3f} s ({philox:.3g} Philox calls/s); {per_s:,.0f} clients/s")
    projected = args.clients / per_s
    rows = [("one block, bits + kernel", args.block_clients, bits_s + kernel_s)]
    if projected <= args.budget:
        setup = setup_for(args.clients, args.block_clients)
        whole, figures = timed(xp, lambda: relaxation(setup, SeededRandom(2026), engine=ArrayEngine(
            "cupy", block_clients=args.block_clients)))
        rows.append((f"relaxation scenario ({figures['engine']})", args.clients, whole))
        print(f"relaxed/one-shot in [{figures['ratio_min']:.3f}, {figures['ratio_max']:.3f}]")
    else:
        print(f"{args.clients:,} clients projected at {projected:.0f} s > --budget {args.budget:.0f} s: not run")
    print("\n| run | clients | draws | seconds | clients/s |\n|---|--:|--:|--:|--:|")
    for name, n, s in rows:
        print(f"| {name} | {n:,} | {draws} | {s:.2f} | {n / s:,.0f} |")
    return 0 if ok else 1


def cpu(args: argparse.Namespace) -> int:
    """Host-built kernel vs the array block on NumPy, one block of ``--clients``."""
    clients = args.clients if args.clients < 1e8 else 20_000
    setup = setup_for(clients, clients)
    fused.host_library(32)  # built before timing
    ok = bit_for_bit(np)
    bits_s, kernel_s, draws = kernel_time(np, clients)
    rows = [("population (bits) only", bits_s)]
    for name, block in (("array block (reference path)", relaxation_block_array),
                        ("fused block (host-built kernel)", relaxation_block_fused)):
        seconds, _ = timed(np, lambda block=block: block(np, setup, 0, np.random.SeedSequence(7)))
        rows.append((name, seconds))
    rows.append(("fused kernel alone (bits given)", kernel_s))
    print(f"\n{clients:,} clients x 128 bits, {draws} relaxation draws (levels 1 -> 4, both modes), one block")
    print("| path | seconds | clients/s |\n|---|--:|--:|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} | {clients / seconds:,.0f} |")
    print(f"fused kernel: {clients * 128 * draws / kernel_s:.3g} Philox calls/s on one core")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="NumPy and the host-built kernel (no GPU needed)")
    ap.add_argument("--clients", type=lambda s: int(float(s)), default=1_000_000_000)
    ap.add_argument("--block-clients", type=lambda s: int(float(s)), default=8_000_000)
    ap.add_argument("--budget", type=float, default=420.0, help="seconds the whole-scenario run may take")
    args = ap.parse_args()
    try:
        return cpu(args) if args.cpu else gpu(args)
    except ParameterError as exc:  # no CuPy or device, no g++: one line
        print(f"gpu_relaxation: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
