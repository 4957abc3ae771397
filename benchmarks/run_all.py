"""Regenerate the kernel rows of benchmarks/RESULTS.md: each benchmark as its own process, in Markdown.

Run: .venv/bin/python benchmarks/run_all.py [--only NAME ...] [--peer-venv DIR] [--out FILE] [--out-dir DIR]

Sections (``--only`` picks some; the default runs all, about 10-15 minutes on a busy 2-core machine):

* ``ratios``: ``benchmarks/counting.py --ratios 5``: the randomizer and the counting kernel against
  the generator's byte rate and a streaming read, interleaved, the load beside each round, each
  with the compiled kernels (numba, ``onesided[fast]``) and with the NumPy code (same results);
* ``counting``: ``benchmarks/counting.py``: counting and the frequency oracle (plain and tuned NumPy,
  onesided's NumPy path and its compiled kernels);
* ``randomizer``: ``benchmarks/randomizer.py`` (the peers only with ``--peer-venv``, which installs
  them there if needed);
* ``device``: ``benchmarks/device_cost.py``: the device's CPU per report and its battery figure;
* ``per-client``: ``onesided simulate SCENARIO --clients 100000`` (per-client, local engine; the
  relaxation and city scenarios), with and without the engine's allocator setting
  (:func:`aggregator.research.engine.retain_freed_memory`), alternated twice: wall, user and system
  seconds, minor page faults, and whether the figures are identical;
* ``fused``: ``benchmarks/gpu_relaxation.py --cpu --clients 200000``: the fused kernel's host build
  against the array block (needs g++);
* ``scale`` (not in the default run: 10-20 minutes here): the rows of docs/simulation.md's
  "Measurements" table, each ``onesided simulate SCENARIO --scale paper --clients N --method M
  [--engine dask]`` as its own process at seed 2026: wall, CPU and peak RSS of the process (its
  reaped children included), the traced peak and the row's key figure; ``--long`` adds the rows of
  a quarter of an hour and more (relaxation at 10^7 and city at 10^8 on Dask, keyed noise);
* ``before-after --before REV`` (not in the default run): the same per-client commands
  (``--scenarios``, ``--clients``) on the code of commit ``REV`` (a temporary ``git worktree``)
  and on this checkout, alternated twice: docs/simulation.md's table "before the bit-level steps" is
  ``--before 5328134~1 --scenarios relaxation --clients 1000000`` and ``--before d1ec3ae~1
  --scenarios city --clients 1000000``.

``--out-dir DIR`` also writes each table as ``SECTION.csv`` beside ``results.md`` (the Markdown) and
``run.json`` (the command, seed, machine, start and end time in UTC, the load average before and
after).

Every section prints its command, the UTC date and the load average before and after it. The
machine is whatever runs this: on a shared machine compare figures within a section only.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aggregator.research.reproduce import machine

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SINGLE_BLAS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# The relaxation scenario as `onesided simulate` runs it; NO_RETAIN first turns the engine's allocator setting off.
SIMULATE = ("import sys; from aggregator.cli.main import main; "
            "import aggregator.research.engine as engine; "
            "engine.retain_freed_memory = (lambda: False) if sys.argv[1] == 'off' else engine.retain_freed_memory; "
            "sys.argv = ['onesided'] + sys.argv[2:]; main()")
RUN_KEYS = {"seconds", "peak_rss_mib", "plot", "data"}  # timings and file paths: differ run to run
SEED = 2026  # every simulate command's seed (its default)
TABLES: dict[str, list[dict[str, object]]] = {}  # section -> its rows, written as SECTION.csv with --out-dir
# docs/simulation.md's "Measurements": (scenario, clients, method, engine); LONG_ROWS with --long
SCALE_ROWS = [(scenario, clients, method, engine)
              for scenario in ("relaxation", "asymmetric-advantage", "certificates", "city")
              for clients, method, engine in ((10**9, "aggregate", "local"), (10**5, "aggregate", "local"),
                                              (10**6, "per-client", "local"), (10**6, "per-client", "dask"))]
LONG_ROWS = [("relaxation", 10**7, "per-client", "dask"), ("city", 10**8, "per-client", "dask"),
             ("city", 10**5, "per-client-keyed", "dask"), ("city", 10**6, "per-client-keyed", "dask")]


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


def child(argv: list[str], cwd: Path = ROOT) -> dict[str, float]:
    """Run ``argv`` as a process (single-threaded BLAS): wall, user and system seconds, peak RSS and page faults.

    ``os.wait4`` gives the process's own usage with its reaped children's (Dask's workers included).
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env={**os.environ, **SINGLE_BLAS}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    with proc.stderr if proc.stderr else open(os.devnull, "rb") as stream:
        err = stream.read().decode(errors="replace")  # to its end first: the child never blocks on a full pipe
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv[:6])}...: failed: {err.strip()[-400:]}")
    return {"wall_s": round(wall, 2), "user_s": round(usage.ru_utime, 2), "sys_s": round(usage.ru_stime, 2),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "minor_faults": usage.ru_minflt}


def simulate_argv(scenario: str, clients: int, method: str, engine: str, out: Path) -> list[str]:
    keyed = method.endswith("-keyed")
    return [PYTHON, "-m", "aggregator.cli.main", "simulate", scenario, "--scale", "paper", "--seed", str(SEED),
            "--clients", str(clients), "--method", method.removesuffix("-keyed"), "--engine", engine,
            *(["--noise", "keyed"] if keyed else []), "--out", str(out), "--json"]


def key_figure(scenario: str, g: dict[str, Any]) -> str:
    """The figure docs/simulation.md's "Measurements" quotes per scenario."""
    if scenario == "relaxation":
        return f"relaxed/one-shot MSE {g['ratio_min']:.3f}-{g['ratio_max']:.3f}"
    if scenario == "asymmetric-advantage":
        return f"asym/sym variance vs 1-e^-eps: max gap {100 * g['max_relative_gap']:.1f}%"
    if scenario == "certificates":
        return f"never-wrong mechanisms' errors: {g['never_wrong_errors']}"
    cert = g["certificates"]
    return (f"round MSE/theory {g['round']['ratio']:.3f}; alpha=0 false-safe {cert['alpha0']['false_safe']}; "
            f"alpha={cert['alpha']['alpha']:g} certifies {cert['alpha']['certified_safe']}/{cert['truly_safe']}")


def scale(long: bool) -> None:
    header("Simulations at scale (docs/simulation.md, Measurements)",
           f"onesided simulate SCENARIO --scale paper --seed {SEED} --clients N --method M --engine E --json")
    print("| scenario | N | method | engine | load (1 min) | wall s | CPU s | peak RSS MiB | traced MiB | key figure |")
    print("|---|--:|---|---|--:|--:|--:|--:|--:|---|")
    with tempfile.TemporaryDirectory(prefix="onesided-scale-") as folder:
        for scenario, clients, method, engine in SCALE_ROWS + (LONG_ROWS if long else []):
            out, load1 = Path(folder) / f"{scenario}-{clients}-{method}-{engine}", os.getloadavg()[0]
            used = child(simulate_argv(scenario, clients, method, engine, out))
            record = json.loads((out / f"{scenario}.json").read_text())
            row = {"scenario": scenario, "clients": clients, "method": method, "engine": engine, "seed": SEED,
                   "load_1min": round(load1, 2), **used, "traced_mib": record.get("peak_traced_mib"),
                   "key_figure": key_figure(scenario, record.get("figures", record))}
            TABLES.setdefault("scale", []).append(row)
            print(f"| {scenario} | {clients:,} | {method} | {engine} | {load1:.2f} | {used['wall_s']:.1f} | "
                  f"{used['user_s'] + used['sys_s']:.1f} | {used['peak_rss_mib']:.0f} | {row['traced_mib']} | "
                  f"{row['key_figure']} |", flush=True)
    print(f"\nload average after: {load()}")


def before_after(rev: str, scenarios: list[str], clients: int) -> None:
    """The per-client commands on commit ``rev`` and on this checkout, alternated twice, same seed."""
    header(f"Per-client simulation before ({rev}) and now", f"onesided simulate SCENARIO --clients {clients} "
           f"--method per-client --json, at {rev} and here, alternated twice")
    print("| scenario | code | load (1 min) | wall s | CPU s | peak RSS MiB | figures identical to the first run |")
    print("|---|---|--:|--:|--:|--:|---|")
    with tempfile.TemporaryDirectory(prefix="onesided-before-") as folder:
        old = Path(folder) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), rev], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            for scenario in scenarios:
                seen: dict[str, object] = {}
                for i, (code, cwd) in enumerate([("before", old), ("now", ROOT)] * 2):
                    out, load1 = Path(folder) / f"{scenario}-{i}", os.getloadavg()[0]
                    used = child(simulate_argv(scenario, clients, "per-client", "local", out), cwd=cwd)
                    got = figures(out / f"{scenario}.json")
                    same = seen.setdefault(code, got) == got
                    TABLES.setdefault("before-after", []).append(
                        {"scenario": scenario, "clients": clients, "code": rev if code == "before" else "HEAD",
                         "seed": SEED, "load_1min": round(load1, 2), **used, "same_figures": same})
                    print(f"| {scenario} | {code} | {load1:.2f} | {used['wall_s']:.1f} | "
                          f"{used['user_s'] + used['sys_s']:.1f} | {used['peak_rss_mib']:.0f} | {same} |", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    print(f"\nload average after: {load()}")


def write_tables(folder: Path, facts: dict[str, object]) -> None:
    """``SECTION.csv`` per table and ``run.json`` into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in TABLES.items():
        with (folder / f"{name}.csv").open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    (folder / "run.json").write_text(json.dumps(facts, indent=2) + "\n")


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
            TABLES.setdefault("per-client", []).append(
                {"scenario": scenario, "clients": clients, "seed": SEED, "run": i + 1, "allocator_setting": setting,
                 "load_1min": round(load1, 2), "wall_s": round(wall, 2),
                 "user_s": round(after.ru_utime - before.ru_utime, 2),
                 "sys_s": round(after.ru_stime - before.ru_stime, 2), "minor_faults": after.ru_minflt - before.ru_minflt})
            print(f"| {i + 1} | {setting} | {load1:.2f} | {wall:.1f} | {after.ru_utime - before.ru_utime:.2f} | "
                  f"{after.ru_stime - before.ru_stime:.2f} | {after.ru_minflt - before.ru_minflt:,} |", flush=True)
            seen.setdefault(setting, figures(out / f"{scenario}.json"))
    print(f"\nfigures identical with and without the setting: {seen['off'] == seen['on']}; "
          f"load average after: {load()}")


DEFAULT = ["ratios", "counting", "randomizer", "device", "per-client", "fused"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", default=None, choices=[*DEFAULT, "scale", "before-after"])
    ap.add_argument("--peer-venv", type=Path, default=None)
    ap.add_argument("--clients", type=int, default=100_000, help="clients of the per-client comparisons")
    ap.add_argument("--scenarios", nargs="*", default=["relaxation", "city"],
                    help="scenarios of the per-client comparisons")
    ap.add_argument("--long", action="store_true", help="scale: add the rows of a quarter of an hour and more")
    ap.add_argument("--before", default=None, metavar="REV", help="before-after: the commit to compare with")
    ap.add_argument("--out", type=Path, default=None, help="also write the Markdown here")
    ap.add_argument("--out-dir", type=Path, default=None,
                    help="write results.md, one CSV per table and run.json (machine, times, load) here")
    args = ap.parse_args()
    wanted = set(args.only or DEFAULT)
    if "before-after" in wanted and not args.before:
        ap.error("--only before-after needs --before REV")
    if args.out_dir is not None:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        args.out = args.out or args.out_dir / "results.md"
    if args.out is None:
        run(args, wanted)
        return
    previous = sys.stdout
    with open(args.out, "w", buffering=1) as markdown:
        sys.stdout = markdown  # for the rest of the run
        try:
            run(args, wanted)
        finally:
            sys.stdout = previous


def run(args: argparse.Namespace, wanted: set[str]) -> None:
    """The chosen sections, in order, and the CSV files and ``run.json`` with ``--out-dir``."""
    facts: dict[str, object] = {
        "command": " ".join(["python", "benchmarks/run_all.py", *sys.argv[1:]]), "seed": SEED,
        "started_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "load_before": [round(x, 2) for x in os.getloadavg()]}
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
    if "scale" in wanted:
        scale(args.long)
    if "before-after" in wanted:
        before_after(args.before, args.scenarios, args.clients)
    if args.out_dir is not None:
        write_tables(args.out_dir, {**facts, "ended_utc": datetime.datetime.now(datetime.UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"), "load_after": [round(x, 2) for x in os.getloadavg()]})


if __name__ == "__main__":
    main()
