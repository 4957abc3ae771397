"""A good client's health probe and 100-report batch while 2,000 connections from many addresses attack.

Starts ``onesided serve`` (SQLite, one worker, default limits: 1,000
connections a worker, 64 an address) on loopback, opens ``--attackers``
connections from 40 loopback addresses (127.0.0.2...) that send a request
line and then one header byte a second (slow headers, cut at 10 s by the
server; an attacker reconnects 0.5 s after losing a connection), and every
second times, from 127.0.0.1, a health probe and an upload of 100 sealed
reports (a 503 is retried after its Retry-After, as the SDK does; the
figure is the time until the batch landed). Loopback only; bounded by
``--seconds`` (default 20).

    .venv/bin/python benchmarks/load_shedding.py [--attackers 2000] [--seconds 20] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from aggsupport import batch_json, bearer, free_port, make_params, make_reports  # noqa: E402

ADDRESSES = [f"127.0.0.{i}" for i in range(2, 42)]


def attack(port: int, count: int, stop: Any, results: Any) -> None:
    """Hold ``count`` slow-header connections open until ``stop``; reconnect 0.5 s after one closes.

    Runs in its own process (so its loop does not slow the good client's timing), puts its counts on
    ``results`` at the end.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 1024)), hard))
    stats = {"connections": 0, "shed_503": 0, "shed_429": 0, "timed_out_408": 0}
    selector = selectors.DefaultSelector()
    pending: list[tuple[float, str]] = [(0.0, ADDRESSES[i % len(ADDRESSES)]) for i in range(count)]
    open_socks: dict[socket.socket, str] = {}
    began: set[socket.socket] = set()
    last_trickle = 0.0
    while not stop.is_set():
        now = time.monotonic()
        due = [item for item in pending if item[0] <= now]
        pending = [item for item in pending if item[0] > now]
        for _, address in due:
            sock = socket.socket()
            sock.setblocking(False)
            sock.bind((address, 0))
            with contextlib.suppress(BlockingIOError):
                sock.connect(("127.0.0.1", port))
            selector.register(sock, selectors.EVENT_READ)
            open_socks[sock] = address
            stats["connections"] += 1
        if now - last_trickle >= 1.0:
            last_trickle = now
            for sock in list(open_socks):
                try:
                    sock.send(b"a" if sock in began else b"GET /v1/health HTTP/1.1\r\nX-Slow: ")
                except OSError:
                    continue
                began.add(sock)
        for key, _ in selector.select(timeout=0.1):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if data.startswith(b"HTTP/1.1 503"):
                stats["shed_503"] += 1
            elif data.startswith(b"HTTP/1.1 429"):
                stats["shed_429"] += 1
            elif data.startswith(b"HTTP/1.1 408"):
                stats["timed_out_408"] += 1
            if not data or data.startswith(b"HTTP/"):
                selector.unregister(sock)
                began.discard(sock)
                pending.append((time.monotonic() + 0.5, open_socks.pop(sock)))
                sock.close()
    for sock in open_socks:
        sock.close()
    results.put(stats)


def good_client(url: str, batches: list[dict[str, Any]], seconds: float) -> dict[str, list[float]]:
    """Every second: a health probe's time and a batch's time until it landed (503s retried)."""
    health: list[float] = []
    landed: list[float] = []
    first_answer: list[float] = []
    deadline = time.monotonic() + seconds
    for batch in batches:
        if time.monotonic() > deadline:
            break
        started = time.perf_counter()
        with contextlib.suppress(requests.RequestException):
            requests.get(f"{url}/v1/health", timeout=30)
        health.append(time.perf_counter() - started)
        started = time.perf_counter()
        answered = None
        while time.perf_counter() - started < 60:
            try:
                answer = requests.post(f"{url}/v1/reports", json=batch, timeout=30)
            except requests.RequestException:
                time.sleep(1)
                continue
            answered = answered or time.perf_counter() - started
            if answer.status_code == 200:
                break
            time.sleep(float(answer.headers.get("Retry-After", "1")))
        first_answer.append(answered or float("nan"))
        landed.append(time.perf_counter() - started)
        time.sleep(max(0.0, 1.0 - (time.perf_counter() - started)))
    return {"health_s": health, "batch_first_answer_s": first_answer, "batch_landed_s": landed}


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "max": round(max(values), 3), "n": len(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--attackers", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.attackers + 1024)), hard))
    from aggregator.server.storage import Storage
    from protocol.crypto import AggregatorKeys

    folder = Path(tempfile.mkdtemp(prefix="onesided-shed-"))
    folder.chmod(0o700)
    keys = AggregatorKeys.generate()
    keys.save(folder / "keys")
    storage = Storage.open(f"sqlite:///{folder}/onesided.db")
    admin = storage.create_token(role="admin", name="bench")[1]
    storage.close()
    params = make_params()
    batches = [batch_json(make_reports(params, keys.seal_public_raw, 100, seed=s).envelopes)
               for s in range(int(args.seconds) + 5)]
    port = free_port()
    code = "import sys; from aggregator.cli.main import main; sys.exit(main())"
    log = tempfile.TemporaryFile()
    server = subprocess.Popen([sys.executable, "-c", code, "serve", "--data-dir", str(folder), "--port", str(port)],
                              stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{url}/v1/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        assert requests.post(f"{url}/v1/metrics", json=params.to_dict(), headers=bearer(admin), timeout=30).ok
        stop, results = multiprocessing.Event(), multiprocessing.Queue()
        attacker = multiprocessing.Process(target=attack, args=(port, args.attackers, stop, results), daemon=True)
        attacker.start()
        time.sleep(3)  # the attack reaches its size
        figures = good_client(url, batches, args.seconds)
        stop.set()
        stats = results.get(timeout=30)
        attacker.join(timeout=10)
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    result = {"attackers": args.attackers, **stats, **{k: summary(v) for k, v in figures.items()}}
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
