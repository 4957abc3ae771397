"""Benchmark: report ingestion over HTTP (batch upload), SQLite and PostgreSQL, with a zero-loss check.

Run: .venv/bin/python benchmarks/ingest.py [--reports 100000] [--batch 1000] [--uploaders 2]
         [--backend sqlite|postgresql|both] [--form binary|json] [--pg-workers 2] [--decrypt-processes 2]
     .venv/bin/python benchmarks/ingest.py --table [--reports 20000]   (JSON and binary x batches 10/100/1000)

What it does:

1. generates one aggregator key pair and ``--reports`` sealed reports (Bloom
   m=128, k=2, 16 cohorts, asymmetric) in parallel, and encodes the batches,
   all before any timing;
2. for each backend, starts ``onesided serve`` (SQLite: one worker process,
   without and with ``--decrypt-processes`` helper processes for opening
   envelopes; PostgreSQL: ``--pg-workers`` gunicorn workers, in a fresh
   schema of database ``test`` on 127.0.0.1:5432), registers the metric;
3. ``--uploaders`` processes post the pre-encoded batches (keep-alive
   a connection per batch, retrying transport errors and 5xx) and the wall time from the
   first request to the last answer gives reports per second;
4. checks zero loss: every report ``accepted``, the stored aggregates equal
   the exact per-cohort bit sums of the reports, and the raw report count
   equals ``--reports``.

It also times the per-report CPU parts of the server (opening the X25519
envelope, checking the payload) on one core, to show what bounds the rate.
Client and server share this machine's cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
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


def upload(url: str, bodies: list[bytes], content_type: str, start_at: float) -> tuple[int, int]:
    """Post every body (retrying transport errors and 5xx); return (accepted, retries)."""
    session = requests.Session()
    # A new connection per batch lets whichever worker is free accept it; a kept-alive
    # connection stays with one worker process even when the other is idle.
    headers = {"Content-Type": content_type, "Connection": "close"}
    accepted = retries = 0
    time.sleep(max(0.0, start_at - time.time()))
    for body in bodies:
        for attempt in range(20):
            try:
                answer = session.post(f"{url}/v1/reports", data=body, headers=headers, timeout=120)
            except requests.RequestException:
                answer = None
            if answer is not None and answer.status_code < 500:
                break
            retries += 1
            time.sleep(min(2.0, 0.05 * 2**attempt))
        if answer is None or answer.status_code != 200:
            raise RuntimeError(f"upload failed: {None if answer is None else answer.text}")
        accepted += answer.json()["accepted"]
    return accepted, retries


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def server(args: list[str]) -> Iterator[str]:
    """``onesided serve ARGS`` as a child process until the block ends."""
    port = free_port()
    code = "import sys; from aggregator.cli.main import main; sys.exit(main())"
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--port", str(port), *args], stdout=log, stderr=subprocess.STDOUT, cwd=REPO
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
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        log.close()


def run_backend(label: str, db_url: str, serve_args: list[str], bodies: list[bytes], content_type: str,
                n: int, expected: tuple[np.ndarray, np.ndarray], uploaders: int) -> dict[str, object]:
    storage = Storage.open(db_url)
    token = storage.create_token(role="admin", name="bench")[1]
    with server(serve_args) as url:
        answer = requests.post(f"{url}/v1/metrics", json=PARAMS.to_dict(), headers={"Authorization": f"Bearer {token}"}, timeout=30)
        answer.raise_for_status()
        start_at = time.time() + 1.0
        shares = [bodies[i::uploaders] for i in range(uploaders)]
        with multiprocessing.get_context("fork").Pool(uploaders) as pool:
            pending = pool.starmap_async(upload, [(url, share, content_type, start_at) for share in shares])
            outcome = pending.get()
        elapsed = time.time() - start_at
    ones, totals = storage.bit_counts(PARAMS.name)
    counts = storage.table_counts()
    storage.close()
    accepted = sum(a for a, _ in outcome)
    lossless = (
        accepted == n
        and counts["reports"] == n
        and np.array_equal(totals, expected[1])
        and np.array_equal(ones, expected[0])
    )
    return {
        "backend": label,
        "reports": n,
        "seconds": round(elapsed, 3),
        "reports_per_second": round(n / elapsed),
        "accepted": accepted,
        "retries": sum(r for _, r in outcome),
        "zero_loss": lossless,
    }


def cpu_parts(keys: AggregatorKeys, envelopes: list[ReportEnvelope]) -> dict[str, float]:
    """Per-report server CPU on one core: opening the envelope, and checking the payload."""
    sample = envelopes[:3000]
    t0 = time.perf_counter()
    plaintexts = [open_sealed(keys.seal_private, e.body, e.aad()) for e in sample]
    t1 = time.perf_counter()
    for p in plaintexts:
        unpack_payload(p, num_bits=PARAMS.num_bits, num_cohorts=PARAMS.num_cohorts)
    t2 = time.perf_counter()
    return {
        "open_sealed_us": round((t1 - t0) / len(sample) * 1e6, 1),
        "unpack_payload_us": round((t2 - t1) / len(sample) * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reports", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--uploaders", type=int, default=2)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--form", choices=("binary", "json"), default="binary")
    parser.add_argument("--pg-workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--decrypt-processes", type=int, default=2,
                        help="SQLite is also run with this many decrypt helper processes (0: only without)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--table", action="store_true",
                        help="SQLite, 1 worker + --decrypt-processes helpers: reports/s for JSON and binary "
                             "batches of 10, 100 and 1,000 (the table of benchmarks/RESULTS.md)")
    args = parser.parse_args()
    if args.table:
        table(args)
        return

    folder = Path(tempfile.mkdtemp(prefix="onesided-bench-"))
    keys = AggregatorKeys.generate()
    keys.save(folder / "keys")
    window = int(time.time() // PARAMS.time_precision) * PARAMS.time_precision
    t0 = time.perf_counter()
    envelopes, ones, totals = generate(keys.seal_public_raw, args.reports, window)
    batches = [envelopes[i : i + args.batch] for i in range(0, len(envelopes), args.batch)]
    bodies, content_type = encode(batches, args.form)
    prepared = time.perf_counter() - t0
    results: dict[str, object] = {
        "setup": {"reports": args.reports, "batch": args.batch, "uploaders": args.uploaders, "form": args.form,
                  "cores": os.cpu_count(), "prepare_seconds": round(prepared, 1),
                  "mean_body_bytes": round(sum(map(len, bodies)) / len(bodies))},
        "cpu_per_report": cpu_parts(keys, envelopes),
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
                                    bodies, content_type, args.reports, (ones, totals), args.uploaders))
    if args.backend in ("postgresql", "both"):
        with scratch_schema(PG_BASE, "onesided_bench") as url:
            runs.append(run_backend(f"postgresql ({args.pg_workers} workers)", url,
                                    ["--db", url, "--workers", str(args.pg_workers), *common],
                                    bodies, content_type, args.reports, (ones, totals), args.uploaders))
    results["runs"] = runs
    if args.json:
        print(json.dumps(results, indent=2))
        return
    setup = results["setup"]
    print(f"prepared {args.reports} sealed reports in {setup['prepare_seconds']} s "  # type: ignore[index]
          f"({len(bodies)} {args.form} batches of {args.batch}, ~{setup['mean_body_bytes']} bytes each)")  # type: ignore[index]
    cpu = results["cpu_per_report"]
    print(f"server CPU per report on one core: open_sealed {cpu['open_sealed_us']} us, "  # type: ignore[index]
          f"unpack_payload {cpu['unpack_payload_us']} us")  # type: ignore[index]
    for run in runs:
        print(f"{run['backend']:<26} {run['reports_per_second']:>8} reports/s  ({run['seconds']} s, "
              f"{args.uploaders} uploaders, retries {run['retries']})  zero loss: {run['zero_loss']}")


def table(args: argparse.Namespace) -> None:
    """Reports/s per (form, batch size) on SQLite with one worker and the decrypt helpers."""
    folder = Path(tempfile.mkdtemp(prefix="onesided-bench-"))
    folder.chmod(0o700)
    keys = AggregatorKeys.generate()
    keys.save(folder / "keys")
    window = int(time.time() // PARAMS.time_precision) * PARAMS.time_precision
    envelopes, ones, totals = generate(keys.seal_public_raw, args.reports, window)
    rows = []
    for form in ("json", "binary"):
        for size in (10, 100, 1000):
            bodies, content_type = encode([envelopes[i : i + size] for i in range(0, len(envelopes), size)], form)
            data_dir = folder / f"sqlite-{form}-{size}"
            serve_args = ["--data-dir", str(data_dir), "--decrypt-processes", str(args.decrypt_processes),
                          "--key-dir", str(folder / "keys"), "--threads", str(args.threads), "--max-reports", "1000"]
            run = run_backend(f"{form} {size}", Settings(data_dir=data_dir).database_url, serve_args, bodies,
                              content_type, args.reports, (ones, totals), args.uploaders)
            rows.append((form, size, run["reports_per_second"], run["zero_loss"]))
    print(f"SQLite, 1 worker, {args.decrypt_processes} decrypt helpers, {args.uploaders} uploaders, "
          f"{args.reports} reports, {os.cpu_count()} cores")
    print("| form | batch | reports/s | zero loss |\n|---|---|---|---|")
    for form, size, rate, lossless in rows:
        print(f"| {form} | {size} | {rate:,} | {lossless} |")


if __name__ == "__main__":
    main()
