"""Benchmark: report ingestion over HTTP (batch upload), SQLite and PostgreSQL, with a zero-loss check.

Run: .venv/bin/python benchmarks/ingest.py [--reports 100000] [--batch 1000] [--uploaders 2]
         [--backend sqlite|postgresql|both] [--form binary|json] [--pg-workers 1,2,4] [--decrypt-processes 2]
         [--tricklers 256]
     .venv/bin/python benchmarks/ingest.py --table [--reports 100000] [--batches 10,100,1000] [--forms json,binary]
     .venv/bin/python benchmarks/ingest.py --in-process [--reports 30000] [--batch 100] [--rounds 5]

What it does:

1. generates one aggregator key pair and ``--reports`` sealed reports (Bloom
   m=128, k=2, 16 cohorts, asymmetric) in parallel, and encodes the batches,
   all before any timing;
2. for each backend, starts ``onesided serve`` (SQLite: one worker process,
   without and with ``--decrypt-processes`` helper processes for opening
   envelopes; PostgreSQL: each of ``--pg-workers`` gunicorn workers, in a fresh
   schema of database ``test`` on 127.0.0.1:5432), registers the metric;
3. sends a warm-up batch of 200 reports (another window; it starts the
   decrypt helpers), then ``--uploaders`` processes post the pre-encoded
   batches (one kept-alive ``http.client`` connection each, retrying
   transport errors and 5xx) and the wall time from the first request to the
   last answer gives reports per second;
4. measures CPU time over the same span: the server's processes from
   ``/proc/PID/stat`` (the gunicorn master and its worker processes, and apart from them
   their descendants: the decrypt helpers and the forkserver), and the
   uploaders' own (``resource.getrusage``), each per report (PostgreSQL's
   own server processes are not counted);
5. checks zero loss: every report ``accepted``, the stored aggregates of the
   timed window equal the exact per-cohort bit sums of the reports, and the
   raw report count equals ``--reports`` plus the warm-up.

It also times the per-report CPU parts of the server (opening the X25519
envelope, checking the payload) on one core, to show what bounds the rate.
Client and server share this machine's cores: read reports/s with the CPU
per report and the load average printed beside them.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import requests

from aggregator.server.settings import Settings
from aggregator.server.storage import Storage
from aggregator.server.storage.engine import scratch_schema
from protocol.crypto import AggregatorKeys, open_sealed
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams
from protocol.rng import SeededRandom
from protocol.wire import (
    CONTENT_TYPE_BINARY,
    CONTENT_TYPE_JSON,
    ReportEnvelope,
    build_report,
    encode_batch_binary,
    encode_batch_json,
    unpack_payload,
)

PG_BASE = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
REPO = Path(__file__).resolve().parent.parent
PARAMS = MetricParams(
    name="bench",
    encoding=BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=16),
    mode="asymmetric",
    level=2.0,
    time_precision=3600,
)


def make_chunk(seal_public: bytes, start: int, count: int, window: int) -> tuple[list[ReportEnvelope], np.ndarray, np.ndarray]:
    """Reports ``start .. start + count`` (seeded by ``start``): envelopes, bits, cohorts."""
    rng = SeededRandom(start)
    bits = rng.bernoulli(0.2, (count, PARAMS.num_bits))
    cohorts = rng.integers(PARAMS.num_cohorts, (count,))
    envelopes = [
        build_report(
            params_digest=PARAMS.digest(), metric=PARAMS.name, round=0, window=window,
            cohort=int(cohorts[i]), level=PARAMS.level, bits=bits[i], seal_public=seal_public,
        )
        for i in range(count)
    ]
    return envelopes, bits, cohorts


def generate(seal_public: bytes, n: int, window: int) -> tuple[list[ReportEnvelope], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """All reports (in parallel) and the expected ``(ones, totals)``."""
    chunk = 5000
    jobs = [(seal_public, s, min(chunk, n - s), window) for s in range(0, n, chunk)]
    with multiprocessing.get_context("fork").Pool(os.cpu_count() or 2) as pool:
        parts = pool.starmap(make_chunk, jobs)
    envelopes = [e for part in parts for e in part[0]]
    ones = np.zeros((PARAMS.num_cohorts, PARAMS.num_bits), dtype=np.int64)
    totals = np.zeros(PARAMS.num_cohorts, dtype=np.int64)
    for _, bits, cohorts in parts:
        np.add.at(ones, cohorts, bits.astype(np.int64))
        totals += np.bincount(cohorts, minlength=PARAMS.num_cohorts)
    return envelopes, ones, totals


def encode(batches: list[list[ReportEnvelope]], form: str) -> tuple[list[bytes], str]:
    if form == "binary":
        return [encode_batch_binary(b) for b in batches], CONTENT_TYPE_BINARY
    return [json.dumps(encode_batch_json(b), separators=(",", ":")).encode() for b in batches], CONTENT_TYPE_JSON


def upload(url: str, bodies: list[bytes], content_type: str, start_at: float) -> tuple[int, int, float]:
    """Post every body (retrying transport errors and 5xx); return (accepted, retries, CPU seconds).

    One kept-alive connection (``http.client``: a tenth of ``requests``' CPU per
    request, which matters when the uploaders share the server's cores).
    """
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    headers = {"Content-Type": content_type}
    accepted = retries = 0
    time.sleep(max(0.0, start_at - time.time()))
    cpu = _own_cpu()
    for body in bodies:
        for attempt in range(20):
            status, text = 0, b""
            try:
                connection.request("POST", "/v1/reports", body=body, headers=headers)
                answer = connection.getresponse()
                status, text = answer.status, answer.read()
            except (OSError, http.client.HTTPException):
                connection.close()  # reconnects on the next request
            if 0 < status < 500:
                break
            retries += 1
            time.sleep(min(2.0, 0.05 * 2**attempt))
        if status != 200:
            raise RuntimeError(f"upload failed: {status} {text[:300]!r}")
        accepted += json.loads(text)["accepted"]
    connection.close()
    return accepted, retries, _own_cpu() - cpu


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _proc_stats() -> dict[int, tuple[int, float, float]]:
    """Every process's (parent pid, CPU seconds, of them in the kernel) from ``/proc``."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick, int(fields[12]) / tick)
    return stats


def server_cpu(root: int) -> dict[int, tuple[int, float, float]]:
    """CPU seconds of ``root`` and its descendants: ``{pid: (depth, seconds, system seconds)}`` (depth 0: ``root``)."""
    stats = _proc_stats()
    depth = {root: 0}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _, _) in stats.items():
            if ppid == parent and pid not in depth:
                depth[pid] = depth[parent] + 1
                frontier.append(pid)
    return {pid: (d, *stats[pid][1:]) for pid, d in depth.items() if pid in stats}


def cpu_spent(before: dict[int, tuple[int, float, float]],
              after: dict[int, tuple[int, float, float]]) -> tuple[float, float, float]:
    """(master + workers, their descendants, the kernel's part of the first) CPU seconds between two snapshots.

    Depth <= 1 is gunicorn's master and its workers (which parse, check and
    store); deeper are the workers' helper processes (decrypt helpers,
    forkserver, the analysts' decode helper). A process started in between
    counts whole; one that exited in between is missed (none do here).
    """
    spent = [0.0, 0.0, 0.0]
    for pid, (d, seconds, system) in after.items():
        _, seconds_before, system_before = before.get(pid, (d, 0.0, 0.0))
        spent[d > 1] += seconds - seconds_before
        if d <= 1:
            spent[2] += system - system_before
    return spent[0], spent[1], spent[2]


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def server(args: list[str]) -> Iterator[tuple[str, int]]:
    """``onesided serve ARGS`` as a child process until the block ends: its URL and pid."""
    port = free_port()
    code = "import sys; from aggregator.cli.main import main; sys.exit(main())"
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--init", "--port", str(port), *args], stdout=log, stderr=subprocess.STDOUT, cwd=REPO
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            if process.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"server exited: {log.read().decode(errors='replace')}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{url}/v1/health", timeout=2).ok:
                    break
            time.sleep(0.1)
        yield url, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        log.close()


@dataclass(frozen=True)
class Workload:
    """Pre-encoded batches of one window, their expected counts, and a warm-up batch of another window."""

    bodies: list[bytes]
    content_type: str
    reports: int
    window: int
    ones: npt.NDArray[np.int64]
    totals: npt.NDArray[np.int64]
    warmup: bytes
    warmup_reports: int


TRICKLE_HEAD = (b"POST /v1/reports HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100000\r\n\r\n" + b" " * 4096)


@contextlib.contextmanager
def trickling(url: str, count: int) -> Iterator[None]:
    """``count`` connections that each send a request a byte per second (never finishing) until the block ends."""
    host, port = url.removeprefix("http://").split(":")
    sockets = [socket.create_connection((host, int(port)), timeout=5) for _ in range(count)]
    stop = threading.Event()

    def drip() -> None:
        for i in range(len(TRICKLE_HEAD)):
            for sock in sockets:
                with contextlib.suppress(OSError):
                    sock.send(TRICKLE_HEAD[i:i + 1])
            if stop.wait(1.0):
                return

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        for sock in sockets:
            sock.close()


@contextlib.contextmanager
def health_probe(url: str, every: float = 0.25) -> Iterator[list[float]]:
    """Seconds of ``GET /v1/health`` (a new connection each) every ``every`` seconds until the block ends."""
    latencies: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.wait(every):
            started = time.perf_counter()
            with contextlib.suppress(requests.RequestException):
                requests.get(f"{url}/v1/health", timeout=30)
                latencies.append(time.perf_counter() - started)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    try:
        yield latencies
    finally:
        stop.set()
        thread.join()


def run_backend(label: str, db_url: str, serve_args: list[str], work: Workload, uploaders: int,
                tricklers: int = 0) -> dict[str, object]:
    storage = Storage.open(db_url)
    token = storage.create_token(role="admin", name="bench")[1]
    if tricklers:
        serve_args = [*serve_args, "--max-connections-per-address", "0"]
    with server(serve_args) as (url, pid), trickling(url, tricklers), health_probe(url) as latencies:
        answer = requests.post(f"{url}/v1/metrics", json=PARAMS.to_dict(), headers={"Authorization": f"Bearer {token}"}, timeout=30)
        answer.raise_for_status()
        warm = requests.post(f"{url}/v1/reports", data=work.warmup, headers={"Content-Type": work.content_type}, timeout=60)
        if warm.status_code != 200 or warm.json()["accepted"] != work.warmup_reports:
            raise RuntimeError(f"warm-up batch failed: {warm.text[:300]}")
        time.sleep(0.5)  # the helpers have started
        start_at = time.time() + 1.0
        shares = [work.bodies[i::uploaders] for i in range(uploaders)]
        load_before = load_average()
        with multiprocessing.get_context("fork").Pool(uploaders) as pool:
            pending = pool.starmap_async(upload, [(url, share, work.content_type, start_at) for share in shares])
            time.sleep(max(0.0, start_at - time.time() - 0.05))
            cpu_before = server_cpu(pid)
            outcome = pending.get()
        elapsed = time.time() - start_at
        cpu_after = server_cpu(pid)
        load_after = load_average()
    worker_cpu, helper_cpu, worker_system = cpu_spent(cpu_before, cpu_after)
    ones, totals = storage.bit_counts(PARAMS.name, window=work.window)
    counts = storage.table_counts()
    storage.close()
    n = work.reports
    accepted = sum(a for a, _, _ in outcome)
    lossless = (
        accepted == n
        and counts["reports"] == n + work.warmup_reports
        and np.array_equal(totals, work.totals)
        and np.array_equal(ones, work.ones)
    )
    return {
        "backend": label,
        "reports": n,
        "seconds": round(elapsed, 3),
        "reports_per_second": round(n / elapsed),
        "worker_cpu_us_per_report": round(worker_cpu / n * 1e6, 1),
        "worker_system_us_per_report": round(worker_system / n * 1e6, 1),
        "helpers_cpu_us_per_report": round(helper_cpu / n * 1e6, 1),
        "uploaders_cpu_us_per_report": round(sum(c for _, _, c in outcome) / n * 1e6, 1),
        "load_average": f"{load_before} -> {load_after}",
        "accepted": accepted,
        "retries": sum(r for _, r, _ in outcome),
        "zero_loss": lossless,
        "tricklers": tricklers,
        "health_median_ms": round(1000 * float(np.median(latencies)), 1) if latencies else None,
        "health_max_ms": round(1000 * max(latencies), 1) if latencies else None,
    }


@dataclass(frozen=True)
class Prepared:
    """Sealed reports of the current window with their expected counts, and 200 warm-up reports of the previous one."""

    envelopes: list[ReportEnvelope]
    window: int
    ones: npt.NDArray[np.int64]
    totals: npt.NDArray[np.int64]
    warmup: list[ReportEnvelope]

    @classmethod
    def make(cls, keys: AggregatorKeys, n: int) -> Prepared:
        window = int(time.time() // PARAMS.time_precision) * PARAMS.time_precision
        envelopes, ones, totals = generate(keys.seal_public_raw, n, window)
        warmup = make_chunk(keys.seal_public_raw, n, 200, window - PARAMS.time_precision)[0]
        return cls(envelopes=envelopes, window=window, ones=ones, totals=totals, warmup=warmup)

    def workload(self, size: int, form: str) -> Workload:
        """The reports in ``form`` batches of ``size``."""
        n = len(self.envelopes)
        bodies, content_type = encode([self.envelopes[i : i + size] for i in range(0, n, size)], form)
        return Workload(bodies=bodies, content_type=content_type, reports=n, window=self.window, ones=self.ones,
                        totals=self.totals, warmup=encode([self.warmup], form)[0][0], warmup_reports=len(self.warmup))


def cpu_parts(keys: AggregatorKeys, envelopes: list[ReportEnvelope]) -> dict[str, float]:
    """Per-report server CPU on one core (CPU time, as the runs' figures): opening the envelope, checking the payload."""
    sample = envelopes[:3000]
    t0 = time.process_time()
    plaintexts = [open_sealed(keys.seal_private, e.body, e.aad()) for e in sample]
    t1 = time.process_time()
    for p in plaintexts:
        unpack_payload(p, num_bits=PARAMS.num_bits, num_cohorts=PARAMS.num_cohorts)
    t2 = time.process_time()
    return {
        "open_sealed_us": round((t1 - t0) / len(sample) * 1e6, 1),
        "unpack_payload_us": round((t2 - t1) / len(sample) * 1e6, 1),
    }


def in_process(args: argparse.Namespace) -> None:
    """``--in-process``: parse + ``Ingestor.ingest`` of binary batches on SQLite in this thread, alternated with
    ``open_sealed`` of as many envelopes, in thread CPU time: ingestion over opening without HTTP, the uploaders
    or another thread (the load of other jobs then changes both sides of each pair alike)."""
    from aggregator.server.ingest import Ingestor
    from aggregator.server.opener import EnvelopeOpener
    from protocol.wire import parse_batch_binary

    keys = AggregatorKeys.generate()
    prepared = Prepared.make(keys, args.reports)
    work = prepared.workload(args.batch, "binary")
    folder = Path(tempfile.mkdtemp(prefix="onesided-bench-"))
    storage = Storage.open(Settings(data_dir=folder).database_url)
    storage.put_metric(PARAMS)
    ingestor = Ingestor(storage=storage, opener=EnvelopeOpener(keys, processes=0), settings=Settings())
    now = float(prepared.window + 1)
    rounds = args.rounds
    per_round = len(work.bodies) // rounds
    pairs = []
    accepted = 0
    for r in range(rounds):
        bodies = work.bodies[r * per_round : (r + 1) * per_round]
        n = per_round * args.batch
        sample = prepared.envelopes[r * n : (r + 1) * n]
        t0 = time.thread_time()
        for e in sample:
            open_sealed(keys.seal_private, e.body, e.aad())
        t1 = time.thread_time()
        for body in bodies:
            results = ingestor.ingest(parse_batch_binary(body, max_reports=args.batch), now=now)
            accepted += sum(result.status == "accepted" for result in results)
        t2 = time.thread_time()
        pairs.append(((t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6))
    stored = storage.table_counts()["reports"]
    storage.close()
    print(f"in process, SQLite, binary batches of {args.batch}, {rounds} rounds of {per_round * args.batch} reports "
          f"(load {load_average()}); accepted and stored {accepted} / {stored} of {rounds * per_round * args.batch}")
    for i, (opening, ingest) in enumerate(pairs):
        print(f"round {i + 1}: open_sealed {opening:.1f} us, parse + ingest {ingest:.1f} us a report: "
              f"{ingest / opening:.2f}x opening")
    ratios = sorted(ingest / opening for opening, ingest in pairs)
    print(f"median {ratios[len(ratios) // 2]:.2f}x, range {ratios[0]:.2f}-{ratios[-1]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reports", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--uploaders", type=int, default=2)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--form", choices=("binary", "json"), default="binary")
    parser.add_argument("--pg-workers", default="2",
                        help="PostgreSQL: gunicorn workers, comma-separated for one run each (e.g. 1,2,4)")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--decrypt-processes", type=int, default=2,
                        help="SQLite is also run with this many decrypt helper processes (0: only without)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--table", action="store_true",
                        help="SQLite, 1 worker + --decrypt-processes helpers: reports/s for JSON and binary "
                             "batches of 10, 100 and 1,000 (the table of benchmarks/RESULTS.md)")
    parser.add_argument("--in-process", action="store_true",
                        help="parse + ingest in this thread on SQLite, alternated with open_sealed (no HTTP)")
    parser.add_argument("--rounds", type=int, default=5, help="--in-process: alternations")
    parser.add_argument("--batches", default="10,100,1000", help="--table: batch sizes, comma-separated")
    parser.add_argument("--forms", default="json,binary", help="--table: forms, comma-separated")
    parser.add_argument("--tricklers", type=int, default=0,
                        help="connections that send a request a byte per second during the timed upload (slow "
                             "clients); /v1/health is timed every 0.25 s either way")
    args = parser.parse_args()
    if args.table:
        table(args)
        return
    if args.in_process:
        in_process(args)
        return

    folder = Path(tempfile.mkdtemp(prefix="onesided-bench-"))
    folder.chmod(0o700)
    keys = AggregatorKeys.generate()
    keys.save(folder / "keys")
    t0 = time.perf_counter()
    prepared = Prepared.make(keys, args.reports)
    work = prepared.workload(args.batch, args.form)
    results: dict[str, object] = {
        "setup": {"reports": args.reports, "batch": args.batch, "uploaders": args.uploaders, "form": args.form,
                  "cores": os.cpu_count(), "prepare_seconds": round(time.perf_counter() - t0, 1),
                  "mean_body_bytes": round(sum(map(len, work.bodies)) / len(work.bodies))},
        "cpu_per_report": cpu_parts(keys, prepared.envelopes),  # the floor, timed again after the runs
        "runs": [],
    }
    common = ["--key-dir", str(folder / "keys"), "--threads", str(args.threads), "--max-reports", str(max(args.batch, 1000))]
    runs: list[dict[str, object]] = []
    if args.backend in ("sqlite", "both"):
        for helpers in sorted({0, args.decrypt_processes}):
            data_dir = folder / f"sqlite-{helpers}"
            label = "sqlite (1 worker)" if helpers == 0 else f"sqlite (1 worker, {helpers} decrypt helpers)"
            runs.append(run_backend(label, Settings(data_dir=data_dir).database_url,
                                    ["--data-dir", str(data_dir), "--decrypt-processes", str(helpers), *common],
                                    work, args.uploaders, args.tricklers))
    if args.backend in ("postgresql", "both"):
        for workers in (int(w) for w in args.pg_workers.split(",")):
            with scratch_schema(PG_BASE, "onesided_bench") as url:
                runs.append(run_backend(f"postgresql ({workers} workers)", url,
                                        ["--db", url, "--workers", str(workers), *common], work, args.uploaders,
                                        args.tricklers))
    after = cpu_parts(keys, prepared.envelopes)
    floor = results["cpu_per_report"]
    floor["open_sealed_after_us"] = after["open_sealed_us"]  # type: ignore[index]
    opening = (floor["open_sealed_us"] + after["open_sealed_us"]) / 2  # type: ignore[index]
    for run in runs:  # server CPU (worker and helpers) per report against opening one, timed in this run
        spent = float(run["worker_cpu_us_per_report"]) + float(run["helpers_cpu_us_per_report"])  # type: ignore[arg-type]
        run["x_opening"] = round(spent / opening, 2)
    results["runs"] = runs
    if args.json:
        print(json.dumps(results, indent=2))
        return
    setup = results["setup"]
    print(f"prepared {args.reports} sealed reports in {setup['prepare_seconds']} s "  # type: ignore[index]
          f"({len(work.bodies)} {args.form} batches of {args.batch}, ~{setup['mean_body_bytes']} bytes each)")  # type: ignore[index]
    cpu = results["cpu_per_report"]
    print(f"server CPU per report on one core: open_sealed {cpu['open_sealed_us']} us "  # type: ignore[index]
          f"(after the runs {cpu['open_sealed_after_us']} us), "  # type: ignore[index]
          f"unpack_payload {cpu['unpack_payload_us']} us")  # type: ignore[index]
    for run in runs:
        print(f"{run['backend']:<38} {run['reports_per_second']:>8} reports/s  ({run['seconds']} s, retries "
              f"{run['retries']}); CPU us/report: worker {run['worker_cpu_us_per_report']} (kernel "
              f"{run['worker_system_us_per_report']}), helpers "
              f"{run['helpers_cpu_us_per_report']}, uploaders {run['uploaders_cpu_us_per_report']}; server "
              f"{run['x_opening']}x opening; "
              f"load {run['load_average']}; zero loss: {run['zero_loss']}; health median "
              f"{run['health_median_ms']} ms, max {run['health_max_ms']} ms with {run['tricklers']} tricklers")


TABLE_HEADER = (
    "| form | batch | reports/s | worker CPU us/report | helpers CPU us/report | uploaders CPU us/report "
    "| health median ms | load average (before -> after) | zero loss |\n|---|---:|---:|---:|---:|---:|---:|---|---|"
)


def table(args: argparse.Namespace) -> None:
    """Reports/s and CPU per report per (form, batch size) on SQLite with one worker and the decrypt helpers."""
    folder = Path(tempfile.mkdtemp(prefix="onesided-bench-"))
    folder.chmod(0o700)
    keys = AggregatorKeys.generate()
    keys.save(folder / "keys")
    prepared = Prepared.make(keys, args.reports)
    rows = []
    for form in args.forms.split(","):
        for size in (int(b) for b in args.batches.split(",")):
            data_dir = folder / f"sqlite-{form}-{size}"
            serve_args = ["--data-dir", str(data_dir), "--decrypt-processes", str(args.decrypt_processes),
                          "--key-dir", str(folder / "keys"), "--threads", str(args.threads),
                          "--max-reports", str(max(size, 1000))]
            run = run_backend(f"{form} {size}", Settings(data_dir=data_dir).database_url, serve_args,
                              prepared.workload(size, form), args.uploaders, args.tricklers)
            rows.append((form, size, run))
            print(f"  {form} {size}: {run['reports_per_second']:,} reports/s", file=sys.stderr)
    print(f"SQLite, 1 worker, {args.decrypt_processes} decrypt helpers, {args.threads} threads, {args.uploaders} "
          f"uploaders, {args.reports} reports, {args.tricklers} trickling connections, {os.cpu_count()} cores")
    print(TABLE_HEADER)
    for form, size, run in rows:
        print(f"| {form} | {size:,} | {run['reports_per_second']:,} | {run['worker_cpu_us_per_report']} "
              f"| {run['helpers_cpu_us_per_report']} | {run['uploaders_cpu_us_per_report']} "
              f"| {run['health_median_ms']} | {run['load_average']} "
              f"| {'yes' if run['zero_loss'] else 'NO'} |")


if __name__ == "__main__":
    main()
