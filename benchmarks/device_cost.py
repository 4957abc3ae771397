"""Benchmark: the device's whole CPU cost per report, on the caller's thread and in total.

Run: .venv/bin/python benchmarks/device_cost.py [--reports N] [--flush-every K] [--repeat R]

One ``Client`` (Bloom 128 bits, 2 hashes, 64 cohorts, asymmetric + IRR q .1, autosave off, no
background sender) reports ``--reports`` times, one new window per report, and hands its queue to
an in-memory aggregator every ``--flush-every`` reports (the sender's work: sealing, the upload's
encoding, refilling the ephemeral keys and the IRR masks). Measured with CPU clocks, which a busy
machine inflates far less than wall time:

* caller's thread: ``time.thread_time_ns`` around each ``report()`` (median and mean);
* total: ``time.process_time_ns`` over the whole loop, every thread of the process (the key
  filler's included), minus what the in-memory aggregator spends receiving and opening the
  reports (timed around its upload handler), divided by the reports;
* the sender's share: ``thread_time_ns`` around each ``flush()`` (here on the caller's thread; in an
  app the background sender's), less the aggregator's part; other threads: the rest of the total;
* ``--alone`` reports each uploaded on its own (an app that reports now and then: every report
  pays a whole upload's state saves and request);
* the parts, alone: one ephemeral X25519 key, one seal of a queued report, the X25519 exchange.

The energy line is CPU time times an assumed power for one busy phone core (``--core-watts``,
default 1.5 W: a performance core of a current phone SoC; efficiency cores draw less and run
longer); the battery is ``--battery-wh`` (default 15 Wh, a 4,000 mAh cell at 3.85 V). The
figures are this machine's CPU time: a phone's core may take longer per report.
Numbers go to benchmarks/RESULTS.md (``benchmarks/run_all.py`` runs it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

import client_sdk.pools as pools
from client_sdk import Client
from client_sdk.testing import FakeAggregator
from protocol import crypto
from protocol.crypto import AggregatorKeys, ephemeral_key, seal
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams


class ServerTimed(FakeAggregator):
    """The in-memory aggregator, with the CPU time of its own work (parsing, opening, storing) counted apart."""

    server_ns = 0

    def _upload(self, data: bytes, content_type: str, *rest: Any) -> Any:
        t0 = time.thread_time_ns()
        try:
            return super()._upload(data, content_type, *rest)
        finally:
            self.server_ns += time.thread_time_ns() - t0


def params() -> MetricParams:
    return MetricParams(
        name="places", encoding=BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=64),
        mode="asymmetric", level=2.0, irr_q=0.1, value_kind="set", time_precision=1,
    )


class KeyCount:
    """Counts the ephemeral keys the SDK generates, on any thread (the pool's own maker, wrapped)."""

    def __init__(self) -> None:
        self.made = 0
        self._original = pools._ephemeral

    def __enter__(self) -> KeyCount:
        def counted() -> Any:
            self.made += 1  # a race between two threads may lose a count: at most a few in a burst
            return self._original()
        pools._ephemeral = counted
        return self

    def __exit__(self, *exc: object) -> None:
        pools._ephemeral = self._original


def new_client(fake: FakeAggregator, folder: str, now: list[float], **options: Any) -> Client:
    """``options``: more client options (``budget_period`` for a renewing budget; none: a lifetime ceiling)."""
    return Client("http://agg.invalid", Path(folder) / "state", background=False, server_public_keys=fake.sign_public,
                  max_epsilon=1e9, session=fake, max_queue=10**7, autosave=False, clock=lambda: now[0], **options)


def run_once(reports: int, flush_every: int, step: float = 1.0, **options: Any) -> dict[str, float]:
    """One client, ``reports`` reports ``step`` seconds apart (each a new window): caller's-thread and total
    device CPU per report, in us."""
    fake = ServerTimed([params()], max_reports=max(1000, flush_every))
    now = [1_700_000_000.0]
    with tempfile.TemporaryDirectory(prefix="onesided-device-") as folder, KeyCount() as keys:
        client = new_client(fake, folder, now, **options)
        client.sync()
        values = [(f"place-{i}", f"place-{i + 7}") for i in range(50)]
        caller: list[int] = []
        fake.server_ns = 0
        flushing = 0
        start = time.process_time_ns()
        for i in range(reports):
            now[0] += step
            t0 = time.thread_time_ns()
            client.report("places", values[i % len(values)])
            caller.append(time.thread_time_ns() - t0)
            if (i + 1) % flush_every == 0:
                t0 = time.thread_time_ns()
                client.flush()
                flushing += time.thread_time_ns() - t0
        t0 = time.thread_time_ns()
        client.flush()
        flushing += time.thread_time_ns() - t0
        total = time.process_time_ns() - start - fake.server_ns
        if len(fake.stored) < reports:
            raise SystemExit(f"only {len(fake.stored)} of {reports} reports were delivered")
        client.close()
    return {"caller_median": statistics.median(caller) / 1e3, "caller_mean": sum(caller) / len(caller) / 1e3,
            "total": total / reports / 1e3, "server": fake.server_ns / reports / 1e3, "keys": keys.made / reports,
            "sender": (flushing - fake.server_ns) / reports / 1e3,
            "others": (total - sum(caller) - flushing + fake.server_ns) / reports / 1e3}


def run_new_clients(count: int, **options: Any) -> dict[str, float]:
    """``count`` new clients (an app's first launch, or the demo's SDK clients), each made, synced, reporting
    once, flushed and closed: total device CPU per client in us (aggregator excluded), keys made per client."""
    fake = ServerTimed([params()])
    now = [1_700_000_000.0]
    with tempfile.TemporaryDirectory(prefix="onesided-device-") as folder, KeyCount() as keys:
        start = time.process_time_ns()
        for i in range(count):
            client = new_client(fake, f"{folder}/{i}", now, **options)
            client.sync()
            client.report("places", ("home", "work"))
            client.flush()
            client.close()
        total = time.process_time_ns() - start - fake.server_ns
    if len(fake.stored) < count:
        raise SystemExit(f"only {len(fake.stored)} of {count} reports were delivered")
    return {"client": total / count / 1e3, "keys": keys.made / count}


def per_call_us(fn: Any, n: int) -> float:
    """Median over 5 runs of the thread CPU time of one call, in us."""
    runs = []
    for _ in range(5):
        t0 = time.thread_time_ns()
        for _ in range(n):
            fn()
        runs.append((time.thread_time_ns() - t0) / n / 1e3)
    return statistics.median(runs)


def parts(n: int) -> dict[str, float]:
    """The sealing floor's parts, each alone: OpenSSL's X25519 (through ``cryptography``), HKDF, AES-GCM, and
    libsodium's key pair and seal where the SDK uses them (the ``sodium`` extra)."""
    keys = AggregatorKeys.generate()
    recipient = keys.seal_public_raw
    recipient_key = keys.seal_private.public_key()
    key = ephemeral_key()[0]
    plain, aad = os.urandom(40), os.urandom(96)
    shared = key.exchange(recipient_key)
    info = b"onesided/seal/v1" + recipient + recipient
    cipher_key, nonce = os.urandom(16), os.urandom(12)
    schedule: Any = getattr(crypto, "seal_key_nonce", None)
    if schedule is None:  # the code before its rename
        schedule = vars(crypto)["_seal_key_nonce"]
    found = {
        "X25519 key generation (`X25519PrivateKey.generate`)": per_call_us(X25519PrivateKey.generate, n),
        "X25519 exchange": per_call_us(lambda: key.exchange(recipient_key), n),
        "X25519 key generation + exchange (the floor of one key per report)":
            per_call_us(lambda: X25519PrivateKey.generate().exchange(recipient_key), n),
        "HKDF-SHA256 (28 bytes), `cryptography`'s HKDF": per_call_us(
            lambda: HKDF(algorithm=hashes.SHA256(), length=28, salt=None, info=info).derive(shared), n),
        "the same key schedule as `seal` computes it (`seal_key_nonce`)": per_call_us(
            lambda: schedule(shared, recipient, recipient), n),
        "AES-128-GCM of a 40-byte payload (key schedule + encrypt)": per_call_us(
            lambda: AESGCM(cipher_key).encrypt(nonce, plain, aad), n),
        "ephemeral key with its raw halves (`ephemeral_key`)": per_call_us(ephemeral_key, n),
        "one seal with the key object (`seal`)": per_call_us(
            lambda: seal(recipient, plain, aad, ephemeral_private=key), n),
    }
    if backend() == "libsodium":  # what the SDK's key pool and sender use then
        private, public = crypto.ephemeral_keypair()
        found.update({
            "X25519 key pair with its raw halves by libsodium (`ephemeral_keypair`)":
                per_call_us(crypto.ephemeral_keypair, n),
            "one seal from the raw halves, libsodium's exchange (`seal`)": per_call_us(
                lambda: seal(recipient, plain, aad, ephemeral_private=private, ephemeral_public=public), n),
        })
    return found


def backend() -> str:
    """The library the SDK makes its X25519 keys with (code before the choice existed: ``cryptography``)."""
    choose = getattr(crypto, "x25519_backend", None)
    return "cryptography" if choose is None else str(choose())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=int, default=3000)
    ap.add_argument("--flush-every", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--new-clients", type=int, default=100, help="new clients that report once each (0: skip)")
    ap.add_argument("--alone", type=int, default=300,
                    help="reports each uploaded on its own, as an app that reports now and then does (0: skip)")
    ap.add_argument("--budget-period", default=None,
                    help="a renewing budget (day, week, ... or seconds): each save writes the kept periods' "
                         "high-water mark (default: a lifetime ceiling)")
    ap.add_argument("--step", type=float, default=1.0,
                    help="seconds between two reports (86400 with --budget-period day: a report a day, so the "
                         "state keeps 64 periods' totals)")
    ap.add_argument("--core-watts", type=float, default=1.5)
    ap.add_argument("--battery-wh", type=float, default=15.0)
    args = ap.parse_args()
    options: dict[str, Any] = {}
    if args.budget_period is not None:
        options["budget_period"] = int(args.budget_period) if args.budget_period.isdigit() else args.budget_period
    load_before = os.getloadavg()
    runs = [run_once(args.reports, args.flush_every, args.step, **options) for _ in range(args.repeat)]
    best = min(runs, key=lambda r: r["total"])
    print(f"{args.reports:,} reports, flush every {args.flush_every}, {args.repeat} runs (CPU time, us per report); "
          f"the SDK's X25519 keys by {backend()}")
    print("| what | us per report (best run) | all runs |")
    print("|---|--:|---|")
    rows = (("caller_median", "caller's thread, median report()"),
            ("caller_mean", "caller's thread, mean report()"),
            ("sender", "the sender's work (flush(): sealing, upload, state saves, work ahead; aggregator excluded)"),
            ("others", "other threads (the key pool's filler)"),
            ("total", "total device CPU (all threads, aggregator excluded)"),
            ("server", "(excluded: the in-memory aggregator's receiving and opening)"),
            ("keys", "ephemeral keys made per report sent (count, not us)"))
    for key, label in rows:
        print(f"| {label} | {best[key]:.2f} | {', '.join(f'{r[key]:.2f}' for r in runs)} |")
    if args.alone:
        alone = [run_once(args.alone, 1, args.step, **options) for _ in range(args.repeat)]
        lone = min(alone, key=lambda r: r["total"])
        for key, label in rows[:5]:
            print(f"| each report uploaded alone ({args.alone}): {label} | {lone[key]:.2f} "
                  f"| {', '.join(f'{r[key]:.2f}' for r in alone)} |")
    for label, us in parts(500).items():
        print(f"| part alone: {label} | {us:.1f} | |")
    if args.new_clients:
        fresh = [run_new_clients(args.new_clients, **options) for _ in range(args.repeat)]
        each = ", ".join(f"{r['client']:.0f}" for r in fresh)
        print(f"| {args.new_clients} new clients, each made, synced, reporting once, flushed, closed: CPU us per client "
              f"| {min(r['client'] for r in fresh):.0f} | {each} |")
        print(f"| ... ephemeral keys made per new client (count) | {fresh[0]['keys']:.2f} | |")
    joules = best["total"] * 1e-6 * args.core_watts
    one_percent = args.battery_wh * 36  # joules in 1% of the battery
    print(f"energy at {args.core_watts:g} W per busy core: {joules * 1e6:.0f} uJ per report; 1% of a {args.battery_wh:g} Wh "
          f"battery ({one_percent:.0f} J) pays for {one_percent / joules:.3g} reports (1,000 reports a day: "
          f"{1000 * joules / one_percent:.2g}% of a charge a day)")
    print("load average (1, 5, 15 min): before " + " ".join(f"{x:.2f}" for x in load_before)
          + ", after " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
