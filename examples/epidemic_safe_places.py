"""Epidemic safe places: "is place i safe (at most t visitors)?", answered without ever being wrong.

The scenario of the ADP paper (Sec. I): people report the places they
visited; health authorities want to publish which places were visited by
few people ("safe"), and a "safe" that is wrong is the one error that must
not happen.

1. An aggregator starts on SQLite in a temporary folder (in this process).
2. Two metrics over the same places (direct encoding: one bit per place):
   * ``places``, asymmetric (one-sided) local noise: a visited place is
     always reported, an unvisited one is reported with probability
     ``exp(-level/2)``. That someone *visited* a place is protected; that
     they did *not* may be revealed (the policy declares it non-sensitive).
   * ``places-exact``, trusted: the exact set, sealed to the aggregator,
     for central releases (AGeo, ALap) with the same one-sided promise.
3. A few hundred real ``client_sdk.Client`` instances (each with its own
   encrypted state file) report the places they visited.
4. The strict level certifies little, so the operator opens a relaxation
   round; clients verify the signed announcement, check their privacy
   ceiling, relax their memoized noise and report again.
5. The analyst asks for certificates (upper bounds on each place's count)
   and, for comparison, for central releases of the exact counts.

Run: ``.venv/bin/python examples/epidemic_safe_places.py [--clients 200]``
"""

from __future__ import annotations

import argparse
import hashlib
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from aggregator.demo.local import LocalAggregator, local_aggregator
from aggregator.research.populations import SyntheticCity
from client_sdk import Client
from protocol import DirectEncoding, MetricParams, SeededRandom
from protocol.wire import window_start


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=200, help="real SDK clients (default 200)")
    parser.add_argument("--places", type=int, default=40, help="places in the city (default 40)")
    parser.add_argument("--level-from", type=float, default=1.0, help="strict noise level (default 1)")
    parser.add_argument("--level-to", type=float, default=8.0, help="the round's level (default 8)")
    parser.add_argument("--ceiling", type=float, default=5.0, help="each client's epsilon ceiling (default 5)")
    parser.add_argument("--threshold", type=int, default=20, help="safe means at most this many visitors (default 20)")
    parser.add_argument("--alpha", type=float, default=0.0,
                        help="certificate error level; 0 (default): a 'safe' is never wrong")
    parser.add_argument("--epsilon", type=float, default=1.0, help="epsilon of the central releases (default 1)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the simulated city (default 7)")
    return parser.parse_args()


def register_metrics(agg: LocalAggregator, places: tuple[str, ...], level: float, max_items: int) -> None:
    domain = DirectEncoding(domain=places)
    local = MetricParams(name="places", encoding=domain, mode="asymmetric", level=level, min_batch_size=50)
    # max_items: the most places one person's exact set may add (larger sets are clipped at random on
    # ingestion); central releases protect a whole person, with L1 sensitivity max_items.
    exact = MetricParams(name="places-exact", encoding=domain, mode="trusted", level=math.inf, min_batch_size=50,
                         max_items=max_items)
    for params in (local, exact):
        agg.admin.post("/v1/metrics", params.to_dict())


def make_clients(agg: LocalAggregator, folder: Path, n: int, ceiling: float, seed: int) -> list[Client]:
    # One state file per client, encrypted with the host app's key (here a fixed one). The ceiling
    # is per metric: the exact metric needs an infinite one (the device adds no noise there).
    key = hashlib.sha256(b"example-state-key").digest()
    return [
        Client(agg.url, folder / f"client-{i:04d}.state", background=False, server_public_keys=agg.keys.sign_public_raw,
               max_epsilon={"places": ceiling, "places-exact": math.inf}, state_key=key, autosave=False,
               rng=seed * 10_000 + i, insecure_rng_for_testing=True)
        for i in range(n)
    ]


def certificates(agg: LocalAggregator, round_id: int, args: argparse.Namespace) -> dict[str, int]:
    """Upper bound per place from the one-sided reports of one collection (round)."""
    answer = agg.analyst.get("/v1/metrics/places/certificates",
                             {"round": round_id, "threshold": args.threshold, "alpha": args.alpha})
    return {row["candidate"]: row["upper_bound"] for row in answer["rows"]}


def central_release(agg: LocalAggregator, mechanism: str, window: int, args: argparse.Namespace) -> dict[str, Any]:
    body = {"metric": "places-exact", "window": window, "mechanism": mechanism, "epsilon": args.epsilon,
            "threshold": args.threshold}
    return {row["place"]: row for row in agg.analyst.post("/v1/releases", body)["answers"]}


def main() -> None:
    args = parse_args()
    city = SyntheticCity(num_places=args.places, zipf_exponent=1.1, mean_places=2.0)
    places = tuple(city.names())
    visited = city.draw_sets(args.clients, SeededRandom(args.seed))  # place indices, -1 padded
    truth = {p: int((visited == i).sum()) for i, p in enumerate(places)}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, local_aggregator(Path(tmp) / "aggregator") as agg:
        largest = int((visited >= 0).sum(axis=1).max())  # nothing clipped: the truth below is what is stored
        register_metrics(agg, places, args.level_from, largest)
        clients = make_clients(agg, Path(tmp) / "clients", args.clients, args.ceiling, args.seed)
        sets = [[places[j] for j in row if j >= 0] for row in visited]
        for client, visits in zip(clients, sets, strict=True):
            client.sync()                                # signed config, verified against the pinned key
            client.report("places", visits)              # memoized one-sided noise at the strict level
            client.report("places-exact", visits)        # sealed exact set (trusted metric)
            client.flush()
        window = window_start(time.time(), 86400)

        # The operator relaxes the metric: a signed round announcement in the config.
        opened = agg.admin.post("/v1/metrics/places/rounds", {"level_to": args.level_to, "expires_in": 3600})
        for client, visits in zip(clients, sets, strict=True):
            client.sync()                                # verifies the round, checks the ceiling, relaxes
            client.report("places", visits)              # tagged with the round, at the new level
            client.flush()
        refused = sum(1 for c in clients if c.ledger()["places"].levels[-1] < args.level_to)
        agg.admin.post(f"/v1/rounds/{opened['id']}/close")
        ledger = clients[0].ledger()["places"]
        for client in clients:
            client.close()

        strict, relaxed = certificates(agg, 0, args), certificates(agg, int(opened["id"]), args)
        ageo, alap = central_release(agg, "ageo", window, args), central_release(agg, "alap", window, args)
    report(args, truth, strict, relaxed, ageo, alap)
    print(f"round {opened['id']}: level {args.level_from:g} -> {args.level_to:g}; {refused} clients refused it; "
          f"a client's ledger: spent {ledger.spent:g} of {ledger.ceiling:g} (levels {list(ledger.levels)})")
    print(f"protected: {ledger.protects}; revealed: {ledger.reveals}")
    print(f"done in {time.perf_counter() - t0:.1f} s")


def report(args: argparse.Namespace, truth: dict[str, int], strict: dict[str, int], relaxed: dict[str, int],
           ageo: dict[str, Any], alap: dict[str, Any]) -> None:
    t = args.threshold
    print(f"{'place':10s} {'visitors':>8s} {'bound@' + format(args.level_from, 'g'):>9s} "
          f"{'bound@' + format(args.level_to, 'g'):>9s} {'AGeo':>6s} {'ALap':>7s}")
    for place, count in sorted(truth.items(), key=lambda kv: -kv[1]):
        print(f"{place:10s} {count:8d} {strict[place]:9d} {relaxed[place]:9d} {ageo[place]['answer']:6d} "
              f"{alap[place]['answer']:7.1f}")
    truly_safe = {p for p, c in truth.items() if c <= t}
    print(f"\nthreshold t = {t}: {len(truly_safe)} of {len(truth)} places are truly safe")
    # local: the upper bound <= t; central: the server's verdict, answer < floor(t) + 1 (integer counts)
    for name, safe in (
        (f"local certificate, level {args.level_from:g}, alpha {args.alpha:g}", {p for p, a in strict.items() if a <= t}),
        (f"local certificate, level {args.level_to:g}, alpha {args.alpha:g}", {p for p, a in relaxed.items() if a <= t}),
        (f"central AGeo, epsilon {args.epsilon:g}", {p for p, row in ageo.items() if row["safe"]}),
        (f"central ALap, epsilon {args.epsilon:g}", {p for p, row in alap.items() if row["safe"]}),
    ):
        wrong = sorted(safe - truly_safe)
        print(f"safe places ({name}): {len(safe)}; wrong: {len(wrong)}" + (f" {wrong}" if wrong else ""))


if __name__ == "__main__":
    main()
