"""URL telemetry with a relaxation round: a suspected malware URL prompts looser privacy, estimates tighten.

A browser vendor collects, RAPPOR-style, which of a known list of URLs
(the candidates) its users visited today:

1. An aggregator starts on SQLite in a temporary folder (in this process)
   with a symmetric (two-sided, RAPPOR PRR) Bloom metric ``urls``:
   64 bits, 2 hashes, 8 cohorts, at a strict level.
2. Clients report their set of visited URLs. A few are real
   ``client_sdk.Client`` instances with state files; the rest are simulated
   clients running the same client functions (memoized noise from their own
   secret, sealed reports) without a state file, so that thousands fit in
   seconds.
3. The analyst reads the estimates at the strict level: the suspected
   malware URL's estimate is too noisy to act on.
4. The operator opens a relaxation round. Every client relaxes its memoized
   noise with the lazy Laplace step (gradual-release paper, Algorithm 1) and
   reports again: the pair of reports reveals no more than one report at the
   new level, and the new estimates are as accurate as a fresh collection
   at that level.
5. The analyst reads the estimates of the round: they tighten.

Run: ``.venv/bin/python examples/url_telemetry_relaxation.py [--clients 4000]``
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from aggregator.demo.local import LocalAggregator, SimulatedClients, local_aggregator, upload
from aggregator.research.populations import Population, SyntheticCity
from client_sdk import Client
from protocol import BloomEncoding, MetricParams, SeededRandom, encode_population
from protocol.wire import window_start

MALWARE = "http://free-codecs.example/setup.exe"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=4_000, help="clients in all (default 4000)")
    parser.add_argument("--sdk-clients", type=int, default=20, help="of them, real SDK clients (default 20)")
    parser.add_argument("--urls", type=int, default=60, help="candidate URLs (default 60)")
    parser.add_argument("--level-from", type=float, default=1.0, help="strict Laplace rate (default 1)")
    parser.add_argument("--level-to", type=float, default=4.0, help="the round's Laplace rate (default 4)")
    parser.add_argument("--seed", type=int, default=11, help="seed of the simulated browsing (default 11)")
    return parser.parse_args()


def browsing(args: argparse.Namespace, encoding: BloomEncoding) -> Population:
    """Who visited what: Zipf popularity over the URLs, the malware one ranked 15th (a few percent of users)."""
    urls = [f"https://site-{i:03d}.example/" for i in range(args.urls)]
    urls[14] = MALWARE
    city = SyntheticCity(num_places=args.urls, zipf_exponent=1.0, mean_places=3.0)
    rng = SeededRandom(args.seed)
    sets = city.draw_sets(args.clients, rng)
    cohorts = rng.integers(encoding.num_cohorts, args.clients)
    bits = encode_population(encoding, sets, cohorts, encoding.bit_table(urls))
    return Population(item_sets=sets, cohorts=cohorts, bits=bits, names=tuple(urls))


def estimates(agg: LocalAggregator, round_id: int, urls: list[str]) -> dict[str, dict[str, Any]]:
    """Candidate fit of one collection (POST: the candidate list is long)."""
    answer = agg.analyst.post("/v1/metrics/urls/estimates", {"round": round_id, "candidates": urls})
    return {row["candidate"]: row for row in answer["rows"]}


def main() -> None:
    args = parse_args()
    encoding = BloomEncoding(num_bits=64, num_hashes=2, num_cohorts=8)
    params = MetricParams(name="urls", encoding=encoding, mode="symmetric", level=args.level_from)
    pop = browsing(args, encoding)
    urls = list(pop.names)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, local_aggregator(Path(tmp) / "aggregator") as agg:
        digest = agg.admin.post("/v1/metrics", params.to_dict())["digest"]
        key = hashlib.sha256(b"example-state-key").digest()
        sdk = [Client(agg.url, Path(tmp) / f"client-{i}.state", background=False, server_public_keys=agg.keys.sign_public_raw,
                      max_epsilon=8.0, state_key=key, autosave=False, rng=args.seed * 1000 + i,
                      insecure_rng_for_testing=True)
               for i in range(args.sdk_clients)]
        n_sdk = len(sdk)
        sim = SimulatedClients(params=params, digest=digest, population=pop, first=n_sdk,
                               secrets=[hashlib.sha256(f"browser-{i}".encode()).digest() for i in range(n_sdk, args.clients)],
                               ceilings=np.full(args.clients - n_sdk, 8.0))
        window = window_start(time.time(), params.time_precision)

        def collect(levels: list[float], round_id: int) -> None:
            for i, client in enumerate(sdk):
                client.sync()  # verifies the config; in a round, applies the signed announcement (relax)
                client.report("urls", pop.member_sets(i))
                client.flush()
            upload(agg.url, sim.reports(levels=levels, round_id=round_id, seal_public=agg.keys.seal_public_raw,
                                        window=window, who=np.arange(n_sdk, args.clients)),
                   total=args.clients - n_sdk, progress=lambda n: None)

        collect([args.level_from], 0)
        strict = estimates(agg, 0, urls)
        opened = agg.admin.post("/v1/metrics/urls/rounds", {"level_to": args.level_to, "expires_in": 3600})
        collect([args.level_from, args.level_to], int(opened["id"]))
        agg.admin.post(f"/v1/rounds/{opened['id']}/close")
        relaxed = estimates(agg, int(opened["id"]), urls)
        ledger = sdk[0].ledger()["urls"] if sdk else None
        for client in sdk:
            client.close()
    show(args, pop, strict, relaxed)
    if ledger is not None:
        print(f"a client's ledger: levels {list(ledger.levels)}, spent {ledger.spent:g} of {ledger.ceiling:g} "
              f"(one set of URLs; the pair of reports costs the last level's sequence, not the sum)")
    print(f"done in {time.perf_counter() - t0:.1f} s")


def show(args: argparse.Namespace, pop: Population, strict: dict[str, Any], relaxed: dict[str, Any]) -> None:
    truth = pop.true_counts(len(pop.names))
    print(f"{args.clients:,} clients, {len(pop.names)} candidate URLs; "
          f"estimates at level {args.level_from:g} and after the round at level {args.level_to:g}")
    print(f"{'url':40s} {'truth':>6s} {'strict':>16s} {'after the round':>16s}")
    order = sorted(range(len(pop.names)), key=lambda j: -truth[j])[:12]
    malware = pop.names.index(MALWARE)
    for j in order + ([malware] if malware not in order else []):
        name = pop.names[j]
        a, b = strict[name], relaxed[name]
        mark = "  <- suspected malware" if name == MALWARE else ""
        print(f"{name:40s} {truth[j]:6d} {a['estimate']:8.0f} +- {a['std_error']:4.0f} "
              f"{b['estimate']:8.0f} +- {b['std_error']:4.0f}{mark}")
    for label, rows in (("strict", strict), ("after the round", relaxed)):
        m = rows[MALWARE]
        errors = np.array([rows[n]["estimate"] - truth[j] for j, n in enumerate(pop.names)])
        print(f"{label:16s}: malware URL {m['estimate']:.0f} +- {m['std_error']:.0f} (truth {truth[malware]}), "
              f"detected: {m['detected']}; RMSE over all URLs {np.sqrt(np.mean(errors ** 2)):.1f}; "
              f"{sum(r['detected'] for r in rows.values())} URLs detected")


if __name__ == "__main__":
    main()
