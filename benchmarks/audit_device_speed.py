"""Clients per second of the device-path audit (``aggregator.research.audit_device``), one process.

    python benchmarks/audit_device_speed.py [--clients 200] [--target device-asymmetric-round]

Runs ``device_reports`` (the per-client loop every device target samples with) on one history and prints
the clients per second of this process. Run it against another checkout with ``PYTHONPATH=that/checkout``
to compare two versions on the same machine.
"""

from __future__ import annotations

import argparse
import os
import time

from aggregator.research import audit_device
from protocol.rng import SeededRandom


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--target", default="device-asymmetric-round")
    args = parser.parse_args()
    scenario = audit_device._SCENARIOS[args.target]()
    audit_device.device_reports(scenario, scenario.history_a, 4, SeededRandom(0))  # warm the imports
    start, cpu = time.perf_counter(), time.process_time()
    audit_device.device_reports(scenario, scenario.history_a, args.clients, SeededRandom(1))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"{os.path.dirname(os.path.dirname(audit_device.__file__))}: {args.target} {args.clients} clients "
          f"{wall:.2f} s wall, {cpu:.2f} s CPU: {args.clients / wall:.1f} clients/s wall, "
          f"{args.clients / cpu:.1f} per CPU-second; load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
