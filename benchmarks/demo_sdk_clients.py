"""The demo's SDK-client phase alone: N SDK clients created, then synced, reporting once and sent.

Usage: ``python benchmarks/demo_sdk_clients.py 200 time`` (the demo's threads; wall and CPU-seconds)
or ``... 200 profile`` (one at a time under cProfile, with the tables).
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

from aggregator.demo import run as demo_run
from aggregator.demo.config import DemoConfig
from aggregator.demo.local import local_aggregator
from aggregator.research.populations import SyntheticCity, make_population
from protocol.rng import SeededRandom


def main(count: int, mode: str) -> None:
    cfg = DemoConfig(sdk_clients=count)
    with tempfile.TemporaryDirectory() as tmp, local_aggregator(Path(tmp)) as agg:
        city = SyntheticCity(num_places=cfg.places, zipf_exponent=cfg.zipf_exponent, mean_places=cfg.mean_places)
        params = demo_run._metric_params(cfg, city)
        agg.admin.post("/v1/metrics", params.to_dict())
        population = make_population(city, max(count, 100), params.encoding, SeededRandom(1))
        profile = cProfile.Profile() if mode == "profile" else None
        if profile is not None:
            profile.enable()
        t0, c0 = time.perf_counter(), time.process_time()
        sdk = demo_run._sdk_clients(cfg, agg, Path(tmp))
        t1, c1 = time.perf_counter(), time.process_time()
        if profile is not None:
            for i, client in enumerate(sdk):
                client.sync()
                client.report("places", population.member_sets(i))
                client.flush()
        else:
            demo_run._drive(sdk, population, lambda n: None)
        t2, c2 = time.perf_counter(), time.process_time()
        if profile is not None:
            profile.disable()
        for client in sdk:
            client.close()
        print(f"{count} SDK clients: created {t1 - t0:.2f} s wall ({c1 - c0:.2f} CPU-s), sync+report+flush "
              f"{t2 - t1:.2f} s wall ({c2 - c1:.2f} CPU-s), total {t2 - t0:.2f} s wall ({c2 - c0:.2f} CPU-s)")
        if profile is not None:
            stats = pstats.Stats(profile)
            stats.sort_stats("cumulative").print_stats(40)
            stats.sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200, sys.argv[2] if len(sys.argv) > 2 else "time")
