"""Regenerate the kernel rows of benchmarks/RESULTS.md: each benchmark as its own process, in Markdown.

Run: .venv/bin/python benchmarks/run_all.py [--only NAME ...] [--peer-venv DIR] [--out FILE]

Sections (``--only`` picks some; the default runs all, about 10-15 minutes on a busy 2-core machine):

* ``ratios``: ``benchmarks/counting.py --ratios 5``: the randomizer and the counting kernel against
  the generator's byte rate and a streaming read, interleaved, the load beside each round;
* ``counting``: ``benchmarks/counting.py``: counting and the frequency oracle (plain and tuned NumPy);
* ``randomizer``: ``benchmarks/randomizer.py`` (the peers only with ``--peer-venv``, which installs
  them there if needed);
* ``device``: ``benchmarks/device_cost.py``: the device's CPU per report and its battery figure;
* ``per-client``: ``onesided simulate SCENARIO --clients 100000`` (per-client, local engine; the
  relaxation and city scenarios), with and without the engine's allocator setting
  (:func:`aggregator.research.engine.retain_freed_memory`), alternated twice: wall, user and system
  seconds, minor page faults, and whether the figures are identical;
* ``fused``: ``benchmarks/gpu_relaxation.py --cpu --clients 200000``: the fused kernel's host build
  against the array block (needs g++).

Every section prints its command, the UTC date and the load average before and after it. The
machine is whatever runs this: on a shared machine compare figures within a section only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SINGLE_BLAS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# The relaxation scenario as `onesided simulate` runs it; NO_RETAIN first turns the engine's allocator setting off.
SIMULATE = ("import sys; from aggregator.cli.main import main; "
            "import aggregator.research.engine as engine; "
            "engine.retain_freed_memory = (lambda: False) if sys.argv[1] == 'off' else engine.retain_freed_memory; "
            "sys.argv = ['onesided'] + sys.argv[2:]; main()")
RUN_KEYS = {"seconds", "peak_rss_mib", "plot", "data"}  # timings and file paths: differ run to run


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def header(title: str, command: str) -> None:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"\n### {title}\n\n`{command}` ({now}, load average before: {load()})\n", flush=True)


def run_script(title: str, args: list[str], env: dict[str, str] | None = None) -> None:
    command = " ".join(["python", *args])
    header(title, ("OPENBLAS_NUM_THREADS=1 " if env else "") + command)
    done = subprocess.run([PYTHON, *args], cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True,
                          text=True)
    print(done.stdout.rstrip())
    if done.returncode:
        print(f"(failed, exit {done.returncode}: {done.stderr.strip()[-400:]})")
    print(f"\nload average after: {load()}", flush=True)


def figures(path: Path) -> object:
    """The scenario's JSON without its timings and file paths (what must be identical)."""
    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in RUN_KEYS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return strip(json.loads(path.read_text()))


def per_client(scenario: str, clients: int) -> None:
    header(f"Per-client simulation ({scenario}) with and without the engine's allocator setting",
           f"onesided simulate {scenario} --clients {clients} --json, the setting off / on, alternated twice")
    print("| run | allocator setting | load (1 min) | wall s | user s | sys s | minor page faults |")
    print("|--:|---|--:|--:|--:|--:|--:|")
    seen: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="onesided-bench-") as folder:
        for i, setting in enumerate(["off", "on", "off", "on"]):
            out = Path(folder) / f"{i}"
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            load1 = os.getloadavg()[0]
            t0 = time.perf_counter()
            subprocess.run([PYTHON, "-c", SIMULATE, setting, "simulate", scenario, "--clients", str(clients),
                            "--method", "per-client", "--out", str(out), "--json"], cwd=ROOT, check=True,
                           env={**os.environ, **SINGLE_BLAS}, capture_output=True)
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            print(f"| {i + 1} | {setting} | {load1:.2f} | {wall:.1f} | {after.ru_utime - before.ru_utime:.2f} | "
                  f"{after.ru_stime - before.ru_stime:.2f} | {after.ru_minflt - before.ru_minflt:,} |", flush=True)
            seen.setdefault(setting, figures(out / f"{scenario}.json"))
    print(f"\nfigures identical with and without the setting: {seen['off'] == seen['on']}; "
          f"load average after: {load()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", default=None,
                    choices=["ratios", "counting", "randomizer", "device", "per-client", "fused"])
    ap.add_argument("--peer-venv", type=Path, default=None)
    ap.add_argument("--clients", type=int, default=100_000, help="clients of the per-client comparison")
    ap.add_argument("--scenarios", nargs="*", default=["relaxation", "city"],
                    help="scenarios of the per-client comparison")
    ap.add_argument("--out", type=Path, default=None, help="also write the Markdown here")
    args = ap.parse_args()
    if args.out is not None:
        sys.stdout = open(args.out, "w", buffering=1)  # noqa: SIM115 - for the rest of the run
    wanted = set(args.only or ["ratios", "counting", "randomizer", "device", "per-client", "fused"])
    print(f"# Kernel rows, regenerated by benchmarks/run_all.py on {os.cpu_count()} cores", flush=True)
    if "ratios" in wanted:
        run_script("Kernels against the machine", ["benchmarks/counting.py", "--ratios", "5"], SINGLE_BLAS)
    if "counting" in wanted:
        run_script("Counting and the frequency oracle", ["benchmarks/counting.py"], SINGLE_BLAS)
    if "randomizer" in wanted:
        peers = ["--peer-venv", str(args.peer_venv)] if args.peer_venv else ["--no-peers"]
        run_script("Randomizer rows", ["benchmarks/randomizer.py", *peers])
    if "device" in wanted:
        run_script("The device's CPU per report", ["benchmarks/device_cost.py"])
    if "per-client" in wanted:
        for scenario in args.scenarios:
            per_client(scenario, args.clients)
    if "fused" in wanted:
        run_script("Fused kernel, host build", ["benchmarks/gpu_relaxation.py", "--cpu", "--clients", "200000"],
                   SINGLE_BLAS)


if __name__ == "__main__":
    main()
