"""Benchmark: ``Client.report()`` against RAPPOR's own ``Encoder.encode``, timed alternately in one process.

Run: .venv/bin/python benchmarks/client.py [--reports N] [--rappor-dir DIR] [--bits M]

Same parameters on both sides (RAPPOR's defaults): a 16-bit Bloom filter,
2 hashes, MD5 hashing (``hashing="rappor-md5"``), 64 cohorts, f = 0.5
(symmetric level ``-2 ln f``), IRR p = 0.5, q = 0.75, one categorical value.

RAPPOR's encoder: ``DIR/rappor.py`` is google/rappor's
``client/python/rappor.py`` (Python 2), loaded at run time and ported
minimally to Python 3 on load (``xrange`` -> ``range``, ``ord()`` of a byte,
one ``print >>`` line); none of its code is in this repository. Get it with
``git clone https://github.com/google/rappor`` and pass
``--rappor-dir rappor/client/python`` (or set ``ONESIDED_RAPPOR_DIR``).
Without it the benchmark times :class:`RapporReimplementation`, a
pure-Python reimplementation of the same published algorithm, and says so.

Two alternating series in one process: RAPPOR's ``encode`` then
``report()`` with ``autosave=False``, repeated; then RAPPOR's ``encode``
then ``report()`` with ``autosave=True`` (state write and queue append,
fsync'ed), repeated. Every report is in a new window (an injected clock
advances one ``time_precision`` per report), so each is a full report, never
a repeat. The ceiling is finite (1e9), so the ledger check runs for real.
Between timed calls, untimed, every ``--flush-every`` reports, each client
does what its sender does: ``flush()`` to an in-memory fake aggregator
(seal, upload, refill the ephemeral keys and the IRR uniforms). The sender's
own cost is timed separately. Numbers go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import statistics
import struct
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from random import SystemRandom
from typing import Any

from client_sdk import Client
from client_sdk.queue import envelope_of
from client_sdk.testing import FakeAggregator
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams
from protocol.randomizers import laplace_rate_from_f

F, P, Q = 0.5, 0.5, 0.75
# The minimal Python 3 port of rappor.py, applied as text on load: (old, new, expected count).
PORT = (
    ("xrange", "range", 4),
    ("ord(digest[i])", "digest[i]", 1),
    ("byte = ord(ch)", "byte = ch", 1),
    ("print >>sys.stderr, msg", "sys.stderr.write(msg + '\\n')", 1),
)


def load_rappor(folder: Path) -> types.ModuleType:
    """google/rappor's ``rappor.py`` from ``folder``, ported on load (see :data:`PORT`)."""
    source = (folder / "rappor.py").read_text()
    for old, new, count in PORT:
        if source.count(old) != count:
            raise ValueError(f"{folder / 'rappor.py'} is not the expected file: {old!r} appears "
                             f"{source.count(old)} times, not {count}")
        source = source.replace(old, new)
    module = types.ModuleType("rappor")
    exec(compile(source, str(folder / "rappor.py"), "exec"), module.__dict__)  # noqa: S102 - the user's file
    return module


class RapporReimplementation:
    """A REIMPLEMENTATION (not Google's code) of RAPPOR's client encoder, from the paper and its client.

    Bloom bits: ``MD5(u32be(cohort) || word)``, byte ``i`` mod ``m`` for hash
    ``i``. PRR: ``HMAC-SHA256(secret, u32be(bloom))``, byte ``j`` gives bit
    ``j``: its low bit is the uniform bit, its upper 7 bits ``< f * 128`` the
    mask ``f``; ``prr = (bloom & ~f) | (uniform & f)``. IRR: per bit, a fresh
    ``SystemRandom().random() < p`` (or ``< q`` where the PRR bit is 1).
    """

    def __init__(self, *, num_bits: int, num_hashes: int, cohort: int, secret: bytes) -> None:
        self.num_bits, self.num_hashes, self.cohort, self.secret = num_bits, num_hashes, cohort, secret

    def _bits(self, prob: float) -> int:
        rand = SystemRandom()
        return sum((rand.random() < prob) << i for i in range(self.num_bits))

    def encode(self, word: bytes) -> int:
        digest = hashlib.md5(struct.pack(">L", self.cohort) + word).digest()  # noqa: S324 - RAPPOR's hash
        bloom = 0
        for i in range(self.num_hashes):
            bloom |= 1 << (digest[i] % self.num_bits)
        prr_bytes = hmac.new(self.secret, struct.pack(">L", bloom), hashlib.sha256).digest()
        uniform = f_mask = 0
        for j in range(self.num_bits):
            uniform |= (prr_bytes[j] & 1) << j
            f_mask |= ((prr_bytes[j] >> 1) < F * 128) << j
        prr = (bloom & ~f_mask) | (uniform & f_mask)
        p_bits, q_bits = self._bits(P), self._bits(Q)
        return (p_bits & ~prr) | (q_bits & prr)


def rappor_encoder(folder: str | None, num_bits: int, cohort: int, secret: bytes) -> tuple[Any, str]:
    """RAPPOR's ``Encoder`` when ``folder`` holds rappor.py, else the labelled reimplementation."""
    if folder and (Path(folder) / "rappor.py").is_file():
        rappor = load_rappor(Path(folder))
        params = rappor.Params()
        params.num_bloombits, params.num_hashes, params.num_cohorts = num_bits, 2, 64
        params.prob_f, params.prob_p, params.prob_q = F, P, Q
        return rappor.Encoder(params, cohort, secret, rappor.SecureIrrRand(params)), \
            f"google/rappor Encoder.encode ({Path(folder) / 'rappor.py'}, ported on load)"
    if num_bits > 32:
        raise SystemExit("RAPPOR's PRR takes one HMAC byte per bit: at most 32 bits")
    return RapporReimplementation(num_bits=num_bits, num_hashes=2, cohort=cohort, secret=secret), \
        "RAPPOR encoder, REIMPLEMENTED here (no --rappor-dir given)"


class Clock:
    """An injected clock: one window later after every report."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def make_client(folder: Path, fake: FakeAggregator, clock: Clock, *, autosave: bool) -> Client:
    client = Client("http://agg.invalid", folder / "state", server_public_keys=fake.sign_public,
                    max_epsilon=1e9, session=fake, max_queue=10**7, autosave=autosave, clock=clock)
    client.sync()
    return client


def stats(times: list[int]) -> str:
    ordered = sorted(times)
    median = statistics.median(ordered) / 1e3
    p90 = ordered[int(0.9 * (len(ordered) - 1))] / 1e3
    return f"median {median:7.1f} us, p90 {p90:7.1f} us"


def timed(fn: Callable[[], object], into: list[int]) -> None:
    t0 = time.perf_counter_ns()
    fn()
    into.append(time.perf_counter_ns() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=int, default=3000)
    ap.add_argument("--bits", type=int, default=16)
    ap.add_argument("--rappor-dir", default=os.environ.get("ONESIDED_RAPPOR_DIR"))
    ap.add_argument("--flush-every", type=int, default=16, help="untimed sender work every this many reports")
    args = ap.parse_args()
    params = MetricParams(
        name="word", encoding=BloomEncoding(num_bits=args.bits, num_hashes=2, num_cohorts=64, hashing="rappor-md5"),
        mode="symmetric", level=laplace_rate_from_f(F), irr_p=P, irr_q=Q, value_kind="categorical", time_precision=1,
    )
    words = [f"value-{i}" for i in range(50)]
    fake = FakeAggregator([params])
    with tempfile.TemporaryDirectory() as tmp:
        clocks = {"off": Clock(), "on": Clock()}
        clients = {k: make_client(Path(tmp) / k, fake, clocks[k], autosave=k == "on") for k in clocks}
        encoder, label = rappor_encoder(args.rappor_dir, args.bits, 7, os.urandom(32))
        print(f"Bloom m={args.bits}, k=2, md5, f={F}, p={P}, q={Q}; {args.reports} reports a pair, timed alternately")
        returned: list[str] = []
        for key, what in (("off", "autosave off"), ("on", "autosave on (fsync'ed)")):
            times: dict[str, list[int]] = {"rappor": [], key: []}
            client = clients[key]
            for i in range(args.reports):
                word = words[i % len(words)]
                raw = word.encode()
                timed(lambda: encoder.encode(raw), times["rappor"])  # noqa: B023 - called at once
                clocks[key].now += 1
                t0 = time.perf_counter_ns()
                returned.append(client.report("word", word))
                times[key].append(time.perf_counter_ns() - t0)
                if (i + 1) % args.flush_every == 0:
                    client.flush()  # untimed: the sender's work
            client.flush()
            print(f"  {label}: {stats(times['rappor'])}")
            print(f"  Client.report(), {what}: {stats(times[key])}")
        received = {rid for metric, rid in fake.stored if metric == "word"}
        assert set(returned) <= received, "a returned id was not delivered"  # noqa: S101 - a benchmark's check
        sender_and_fallback(clients["off"], clocks["off"], words, min(args.reports, 1000))
        for client in clients.values():
            client.close()


def sender_and_fallback(client: Client, clock: Clock, words: list[str], n: int) -> None:
    """What moved off the caller's thread, and report() when nothing was made ahead of time."""
    empty: list[int] = []
    for i in range(n):
        client._ephemeral.clear()  # as after a restart, before the first sync() or flush()
        clock.now += 1
        word = words[i % len(words)]
        timed(lambda: client.report("word", word), empty)  # noqa: B023 - called at once
    print(f"  Client.report(), no key made ahead (inline X25519 key generation): {stats(empty)}")
    items = list(client._queue)[-n:]
    sealing: list[int] = []
    for item in items:
        timed(lambda: envelope_of(item), sealing)  # noqa: B023 - called at once
    print(f"  sender: seal one queued report (X25519, HKDF, AES-GCM):           {stats(sealing)}")
    keys: list[int] = []
    for _ in range(n):
        client._ephemeral.clear()
        timed(lambda: client._ephemeral.refill(), keys)
    per_key = statistics.median(keys) / client._ephemeral.size / 1e3
    print(f"  sender: make one ephemeral key ahead of time:                     median {per_key:7.1f} us")
    client.flush()


if __name__ == "__main__":
    main()
