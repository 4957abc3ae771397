"""Benchmark: per-client randomization, the same work as the peers, in one run.

The work: ``--users`` users x ``--items`` items, unary encoding (one true bit per
user), symmetric randomized response at epsilon 2 (SUE / basic one-time RAPPOR:
``P(1 | 0) = 1 / (e + 1)``, ``P(1 | 1) = e / (e + 1)``). Rows:

* plain NumPy: ``random(float32)`` then ``where`` (seeded PCG64), always;
* onesided ``Randomizer.simulate``: seeded and the secure default (``rng=None``), with the
  compiled kernels (numba, ``pip install 'onesided[fast]'``; the same bits) and with the
  NumPy code (``protocol.kernels.numpy_only``), and the previous uniform path
  (``permanent_from_uniforms`` + ``instantaneous``);
* bit-level relaxation (``relax_permanent``): asymmetric, symmetric (one round
  after the first release), and a symmetric second round from each bit's
  2-release pattern (``relax_laplace_bits``); the noise-level steps the device
  runs (``relax_exponential``, ``relax_laplace``); each seeded and secure;
* multi-freq-ldpy (``UE_Client``) and pure-ldp (``UEClient``), installed from
  PyPI into a venv under a temporary folder. Each is warmed up on 200 users
  first (untimed: multi-freq-ldpy compiles numba kernels on its first call,
  a one-time cost), then timed on ``--peer-users`` users (default: all of
  ``--users``; a smaller number is scaled to ``--users`` and the row says
  so). Skipped with a printed note when they cannot be installed, or left out
  with ``--no-peers``.

Every row works in chunks of ``--chunk`` users (memory stays flat) and is the
best of ``--repeat`` runs. Run: .venv/bin/python benchmarks/randomizer.py
Numbers go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from protocol import BloomEncoding, KeyedRandom, Randomizer, SeededRandom, canonical_value, kernels
from protocol.relaxation import extend_pattern, relax_exponential, relax_laplace, relax_laplace_bits
from protocol.rng import RandomSource, SecureRandom, as_rng

EPSILON = 2.0
# PyPI name -> (what to install: pure-ldp imports scikit-learn and statsmodels undeclared, the module the benchmark imports)
PEERS = {
    "multi-freq-ldpy": (["multi-freq-ldpy"], "multi_freq_ldpy.pure_frequency_oracles.UE"),
    "pure-ldp": (
        ["pure-ldp", "scikit-learn", "statsmodels"],
        "pure_ldp.frequency_oracles.unary_encoding",
    ),
}
PEER_SCRIPT = """
import sys, time, numpy as np
which, users, items, eps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
values = np.random.default_rng(1).integers(items, size=users)
if which == "multi-freq-ldpy":
    from multi_freq_ldpy.pure_frequency_oracles.UE import UE_Client
    run = lambda vs: [UE_Client(int(v), items, eps, optimal=False) for v in vs]
else:
    from pure_ldp.frequency_oracles.unary_encoding import UEClient
    client = UEClient(epsilon=eps, d=items, use_oue=False, index_mapper=lambda x: x)
    run = lambda vs: [client.privatise(int(v)) for v in vs]
run(values[:200])  # warm-up, untimed: multi-freq-ldpy compiles its numba kernels on the first call
t0 = time.perf_counter()
reports = run(values)
assert len(reports) == users and len(reports[0]) == items
print(time.perf_counter() - t0)
"""


def best_of(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def sue_randomizer() -> Randomizer:
    """Symmetric randomizer with flip probability ``1 / (e^{eps/2} + 1)``: SUE at ``EPSILON``."""
    flip = 1.0 / (math.exp(EPSILON / 2) + 1.0)
    return Randomizer(mode="symmetric", level=-2.0 * math.log(2.0 * flip))


def old_simulate(r: Randomizer, bits: np.ndarray, rng: RandomSource | None) -> np.ndarray:
    """The previous ``simulate``: one double uniform per bit for the noise, one for the IRR."""
    source = as_rng(rng)
    return r.instantaneous(r.permanent_from_uniforms(bits, source.uniform(bits.shape)), source)


def peer_seconds(name: str, users: int, items: int, venv: Path) -> float | str:
    """Seconds for ``users`` users in the peer's own venv, or why it was skipped."""
    python = venv / "bin" / "python"
    if not python.exists():
        made = subprocess.run(
            [sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True
        )
        if made.returncode:
            return f"skipped: no venv ({made.stderr.strip()[-200:]})"
    packages, module = PEERS[name]
    if subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode:
        pip = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *packages], capture_output=True, text=True
        )
        if pip.returncode:
            return f"skipped: pip install {name} failed ({pip.stderr.strip()[-200:]})"
    run = subprocess.run(
        [str(python), "-c", PEER_SCRIPT, name, str(users), str(items), str(EPSILON)],
        capture_output=True,
        text=True,
    )
    if run.returncode:
        return f"skipped: {name} failed ({run.stderr.strip()[-200:]})"
    return float(run.stdout.strip().splitlines()[-1])


def chunked(
    work: Callable[[np.ndarray], object], bits: np.ndarray, chunks: int
) -> Callable[[], None]:
    def run() -> None:
        for _ in range(chunks):
            work(bits)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--items", type=int, default=1_000)
    ap.add_argument("--chunk", type=int, default=10_000, help="users per chunk")
    ap.add_argument(
        "--peer-users",
        type=int,
        default=None,
        help="users the peers are timed on (default: --users; fewer are scaled up, and say so)",
    )
    ap.add_argument("--peer-venv", type=Path, default=None, help="reuse this venv for the peers")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--no-peers", action="store_true", help="leave out the peers (no venv, no install)"
    )
    args = ap.parse_args()
    n, m, chunks = args.users, args.items, max(1, args.users // args.chunk)
    bits = np.zeros((args.chunk, m), dtype=bool)
    bits[np.arange(args.chunk), np.random.default_rng(0).integers(m, size=args.chunk)] = True
    r = sue_randomizer()
    p0, p1 = r.permanent_probabilities()
    numpy_rng = np.random.Generator(np.random.PCG64(1))

    def plain_numpy(b: np.ndarray) -> np.ndarray:
        u = numpy_rng.random(b.shape, dtype=np.float32)
        return np.where(b, u < p1, u < p0)

    asym = Randomizer(mode="asymmetric", level=2.0)
    perm = asym.sample_permanent(bits, SeededRandom(2))
    noise = asym.draw_noise(bits.shape, SeededRandom(3))
    lap = r.draw_noise(bits.shape, SeededRandom(4))
    sym_perm = r.sample_permanent(bits, SeededRandom(6))
    history = extend_pattern(sym_perm, r.relax_permanent(bits, sym_perm, 3.0, SeededRandom(7)), 1)
    chain = (r.level, 3.0)
    seeded = SeededRandom(5)
    r.simulate(bits, seeded)  # compiles (or loads) the kernels, untimed
    kernel = "kernel" if kernels.loaded() is not None else "NumPy: no numba"

    def numpy_path(work: Callable[[np.ndarray], object]) -> Callable[[np.ndarray], object]:
        return kernels.numpy_only()(work)

    # (label, the work on one chunk, repeats): each row the best of its repeats over every chunk
    work: list[tuple[str, Callable[[np.ndarray], object], int]] = [
        ("plain numpy random(float32) + where", plain_numpy, args.repeat),
        (f"simulate, seeded ({kernel})", lambda b: r.simulate(b, seeded), args.repeat),
        (f"simulate, secure default ({kernel})", lambda b: r.simulate(b), args.repeat),
        ("simulate, seeded (NumPy path)", numpy_path(lambda b: r.simulate(b, seeded)), args.repeat),
        ("simulate, secure default (NumPy path)", numpy_path(lambda b: r.simulate(b)), args.repeat),
        ("previous simulate (uniforms), seeded", lambda b: old_simulate(r, b, seeded), 1),
        ("previous simulate (uniforms), secure", lambda b: old_simulate(r, b, None), 1),
        (
            "relax_permanent (asym bits), seeded",
            lambda b: asym.relax_permanent(b, perm, 3.0, seeded),
            args.repeat,
        ),
        (
            "relax_permanent (asym bits), secure",
            lambda b: asym.relax_permanent(b, perm, 3.0),
            args.repeat,
        ),
        (
            "relax_permanent (sym bits), seeded",
            lambda b: r.relax_permanent(b, sym_perm, 3.0, seeded),
            args.repeat,
        ),
        (
            "relax_permanent (sym bits), secure",
            lambda b: r.relax_permanent(b, sym_perm, 3.0),
            args.repeat,
        ),
        (
            "relax_laplace_bits (sym, 2nd round: 2-bit history), seeded",
            lambda b: relax_laplace_bits(b, history, chain, 5.0, seeded),
            args.repeat,
        ),
        (
            "relax_laplace_bits (sym, 2nd round: 2-bit history), secure",
            lambda b: relax_laplace_bits(b, history, chain, 5.0),
            args.repeat,
        ),
        (
            "relax_exponential (noise), seeded",
            lambda b: relax_exponential(noise, 2.0, 3.0, seeded),
            1,
        ),
        ("relax_exponential (noise), secure", lambda b: relax_exponential(noise, 2.0, 3.0), 1),
        ("relax_laplace (noise), seeded", lambda b: relax_laplace(lap, r.level, 3.0, seeded), 1),
        ("relax_laplace (noise), secure", lambda b: relax_laplace(lap, r.level, 3.0), 1),
    ]
    rows: list[tuple[str, float | str]] = [
        (label, best_of(chunked(fn, bits, chunks), repeat)) for label, fn, repeat in work
    ]
    peer_users = args.peer_users or n
    with tempfile.TemporaryDirectory(prefix="onesided-peers-") as tmp:
        venv = args.peer_venv or Path(tmp) / "venv"
        for name in () if args.no_peers else PEERS:
            got = peer_seconds(name, peer_users, m, venv)
            label = f"{name} UE client, warm" + (
                f" (scaled from {peer_users:,} users)" if peer_users != n else ""
            )
            rows.append((label, got * n / peer_users if isinstance(got, float) else got))

    base = rows[0][1]
    print(
        f"load average (1, 5, 15 min) after the rows: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"{n:,} users x {m:,} items (SUE, eps {EPSILON:g}), chunks of {args.chunk:,} users, best of {args.repeat}"
    )
    print(f"| {'path':62s} | {'seconds':>8s} | {'vs numpy':>8s} |")
    print(f"|{'-' * 64}|{'-' * 10}:|{'-' * 10}:|")
    for name, value in rows:
        if isinstance(value, str):
            print(f"| {name:62s} | {value}")
            continue
        ratio = f"{base / value:.2f}x" if isinstance(base, float) else "-"
        print(f"| {name:62s} | {value:8.3f} | {ratio:>8s} |")

    enc = BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=64)
    one = Randomizer(mode="asymmetric", level=2.0, irr_q=0.1)
    secure = SecureRandom()

    def one_report() -> None:
        value = ["cafe-17", "park-3"]
        b = enc.encode(value, 5)
        v = one.draw_noise(
            128, KeyedRandom.for_value(bytes(32), "places", canonical_value(value), 0)
        )
        one.report(b, v, secure)

    reps = 20_000

    def many_reports() -> None:
        for _ in range(reps):
            one_report()

    t = best_of(many_reports, 3)
    print(
        f"one report (Bloom m=128, k=2, asymmetric + IRR, keyed noise, no sealing): {t / reps * 1e6:.1f} us"
    )


if __name__ == "__main__":
    main()
