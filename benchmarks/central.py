"""Benchmark: central releases (ALap, AGeo, SALap), relaxation, and one-sided accuracy vs DP.

Run: .venv/bin/python benchmarks/central.py [--places N] [--queries D]
Prints one line per measurement; numbers go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable

import numpy as np

from aggregator.research.bounds import dp_beta_upper_bound
from aggregator.research.collusion import colluders_needed, collusion_experiment
from protocol.central import AGeoMechanism, ALapMechanism, ageo, alap, geometric_mechanism, salap
from protocol.exact import geometric_exact
from protocol.releases import make_release, relax_release
from protocol.rng import RandomSource, SecureRandom, SeededRandom


def best_of(fn: Callable[[], object], repeat: int, *, warm: bool = True) -> float:
    """The fastest of ``repeat`` timed calls, after one untimed call (imports, caches, first allocations)."""
    if warm:
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def timings(n: int, d: int) -> None:
    gen = np.random.Generator(np.random.PCG64(1))  # data only; noise comes from the sources below
    counts = gen.poisson(3.0, n)
    n_max = int(counts.max()) + 1000
    sparse = np.zeros(d)
    sources: list[tuple[str, RandomSource]] = [("secure", SecureRandom()), ("seeded", SeededRandom(2))]
    for label, src in sources:
        for eps in (1.0, 0.1):
            t = best_of(lambda e=eps, s=src: alap(counts, e, rng=s), 5)  # type: ignore[misc]
            print(f"alap     {n:,} counts, eps={eps:<4} {label}: {t * 1e3:7.1f} ms")
            t = best_of(lambda e=eps, s=src: ageo(counts, e, n_max=n_max, rng=s), 5)  # type: ignore[misc]
            print(f"ageo     {n:,} counts, eps={eps:<4} {label}: {t * 1e3:7.1f} ms (exact integer sampler)")
        t = best_of(lambda s=src: geometric_mechanism(counts, 0.5, rng=s), 3)  # type: ignore[misc]
        print(f"two-sided geometric {n:,} counts, eps=0.5 {label}: {t * 1e3:7.1f} ms")
        t = best_of(lambda s=src: salap(sparse, 50.0, 1.0, rng=s), 5)  # type: ignore[misc]
        print(f"salap    {d:,} queries (all below threshold), eps=1 {label}: {t * 1e3:7.1f} ms")
    rng = SeededRandom(3)
    rel = make_release("ageo", counts, 0.2, n_max=n_max, rng=rng)
    t = best_of(lambda: relax_release(rel, 1.0, rng=rng), 3)
    print(f"relax_release ageo {n:,} counts 0.2 -> 1.0: {t * 1e3:7.1f} ms")
    rel = make_release("alap", counts, 0.2, rng=rng)
    t = best_of(lambda: relax_release(rel, 1.0, rng=rng), 3)
    print(f"relax_release alap {n:,} counts 0.2 -> 1.0: {t * 1e3:7.1f} ms")
    t = best_of(lambda: json.dumps(rel.to_json_dict(), allow_nan=False), 3)
    print(f"Release.to_json_dict + json.dumps, {n:,} counts: {t * 1e3:7.1f} ms")
    geometric_exact(rng, 0.1, 10**3)  # a small warm-up: a second 10^6-draw call would double the run
    t = best_of(lambda: geometric_exact(rng, 0.1, 10**6), 1, warm=False)
    print(f"geometric_exact 1,000,000 draws, rate 0.1 seeded: {t * 1e3:7.1f} ms")


def accuracy() -> None:
    """E[beta] (P(safe | count <= t)) for ALap/AGeo vs the best (eps, delta)-DP sanitizer (Sec. VI-A)."""
    t, alpha, delta = 5, 1e-3, 1e-4
    print(f"\nP(safe | count c <= t={t}): ADP (alpha = 0) vs the virtual (eps, 1e-4)-DP bound at alpha = 1e-3")
    print("eps   c  ALap<=t ALap<t+1 AGeo    DP-bound")
    for eps in (0.5, 1.0, 2.0):
        for c in (0, 3, 5):
            mech = ALapMechanism(epsilon=eps)
            a, cert = mech.safe_probability(c, t), mech.certificate_probability(c, t)
            g = AGeoMechanism(epsilon=eps, n_max=10**6).certificate_probability(c, t)
            b = dp_beta_upper_bound(alpha=alpha, epsilon=eps, delta=delta, k=t + 1 - c)
            print(f"{eps:<5} {c}  {a:.4f}  {cert:.4f}   {g:.4f}  {b:.4f}")


def collusion() -> None:
    eps, margin = 0.5, 1.0
    need = colluders_needed(margin, eps)
    sizes = [1, 4, 16, need, 256]
    print(f"\naveraging attack, eps={eps}, margin m={margin}, paper's i = max(30, 18/(m^2 eps^2)) = {need}")
    runs = [
        ("independent", {}),
        ("mechanism_a", {"location": (1.5, 2.5)}),
        ("mechanism_a_calibrated", {"location": (1.5, 2.5)}),
        ("correlated", {"levels": list(np.linspace(eps, 2 * eps, 256))}),
    ]
    for scheme, extra in runs:
        res = collusion_experiment(scheme, sizes, epsilon=eps, margin=margin, trials=4000, rng=5, **extra)  # type: ignore[arg-type]
        cells = ", ".join(f"i={i}: rmse {r:.3f} P(<m) {w:.3f}" for i, r, w in zip(sizes, res.rmse, res.within_margin, strict=True))
        print(f"{scheme:24s} {cells}")
    print(f"(correlated best member at i=256: rmse {math.sqrt(2) / (2 * eps):.3f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--places", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=10_000)
    args = ap.parse_args()
    timings(args.places, args.queries)
    accuracy()
    collusion()


if __name__ == "__main__":
    main()
