"""Benchmark: ``Client.report()`` against RAPPOR's own ``Encoder.encode``, timed alternately in one process.

Run: .venv/bin/python benchmarks/client.py [--reports N] [--rappor-dir DIR] [--bits M] [--table] [--callgrind]

Default parameters (RAPPOR's defaults): a 16-bit Bloom filter, 2 hashes,
MD5 hashing (``hashing="rappor-md5"``), 64 cohorts, f = 0.5 (symmetric
level ``-2 ln f``), IRR p = 0.5, q = 0.75, one categorical value.

RAPPOR's encoder: ``DIR/rappor.py`` is google/rappor's
``client/python/rappor.py`` (Python 2), loaded at run time and ported
minimally to Python 3 on load (``xrange`` -> ``range``, ``ord()`` of a byte,
one ``print >>`` line); none of its code is in this repository. Get it with
``git clone https://github.com/google/rappor`` and pass
``--rappor-dir rappor/client/python`` (or set ``ONESIDED_RAPPOR_DIR``).
Without it the benchmark times :class:`RapporReimplementation`, a
pure-Python reimplementation of the same published algorithm, and says so.
RAPPOR's PRR takes one byte of one HMAC-SHA256 per bit, so its encoder
stops at 32 bits: cases with more bits time it at 32 bits beside ours.

Two alternating series in one process: RAPPOR's ``encode`` then
``report()`` with ``autosave=False``, repeated; then RAPPOR's ``encode``
then ``report()`` with ``autosave=True`` (state write and queue append,
fsync'ed), repeated. Every report is in a new window (an injected clock
advances one ``time_precision`` per report), so each is a full report, never
a repeat. The ceiling is finite (1e9), so the ledger check runs for real.
Between timed calls, untimed, every ``--flush-every`` reports, each client
does what its sender does: ``flush()`` to an in-memory fake aggregator
(seal, upload, refill the ephemeral keys and the IRR masks). The sender's
own cost is timed separately.

``--table``: the autosave-off series for each case (Bloom 16 and 128 bits,
a direct encoding of 128 items, and a set of three places in an asymmetric
direct metric: RAPPOR encodes one string there, so that row only places
the set path beside it) as a Markdown table, load average included.
``--callgrind``: the same calls counted in instructions instead of time
(``valgrind --tool=callgrind``, counting only inside the two calls: each
series runs inside a C function of its own, ``functools.reduce`` for RAPPOR
and ``itertools.starmap`` for ``report()``, toggled with
``--toggle-collect``); insensitive to the machine's load. Numbers go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import collections
import functools
import hashlib
import hmac
import itertools
import os
import shutil
import statistics
import struct
import subprocess
import sys
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
from protocol.encodings import BloomEncoding, DirectEncoding
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
    client = Client("http://agg.invalid", folder / "state", background=False, server_public_keys=fake.sign_public,
                    max_epsilon=1e9, session=fake, max_queue=10**7, autosave=autosave, clock=clock)
    client.sync()
    return client


def bloom_params(bits: int) -> MetricParams:
    """RAPPOR's defaults (f .5, p .5, q .75, 2 md5 hashes, 64 cohorts), one categorical value."""
    return MetricParams(
        name="word", encoding=BloomEncoding(num_bits=bits, num_hashes=2, num_cohorts=64, hashing="rappor-md5"),
        mode="symmetric", level=laplace_rate_from_f(F), irr_p=P, irr_q=Q, value_kind="categorical", time_precision=1,
    )


def direct_params(items: int) -> MetricParams:
    """One bit per item of a declared domain, the same f, p and q."""
    return MetricParams(
        name="word", encoding=DirectEncoding(domain=tuple(f"value-{i}" for i in range(items))),
        mode="symmetric", level=laplace_rate_from_f(F), irr_p=P, irr_q=Q, value_kind="categorical", time_precision=1,
    )


def places_params(items: int) -> MetricParams:
    """The demo's kind of metric: the set of places visited, asymmetric (Mangat) with a one-sided IRR."""
    return MetricParams(
        name="word", encoding=DirectEncoding(domain=tuple(f"value-{i}" for i in range(items))),
        mode="asymmetric", level=2.0, irr_q=0.1, value_kind="set", time_precision=1,
    )


def three_places(word: str) -> tuple[str, ...]:
    """A set of three places around ``word`` (report()'s value in the set case)."""
    i = int(word.rsplit("-", 1)[1])
    return tuple(f"value-{(i + d) % 50}" for d in (0, 7, 19))


CASES: dict[str, tuple[MetricParams, int, Callable[[str], Any]]] = {
    # name: (params, RAPPOR's number of bits, report()'s value of RAPPOR's word)
    "Bloom 16 bits (RAPPOR's defaults)": (bloom_params(16), 16, str),
    "Bloom 128 bits": (bloom_params(128), 32, str),
    "direct, 128 items": (direct_params(128), 32, str),
    "direct, 128 items, a set of 3 (asymmetric, IRR q .1)": (places_params(128), 32, three_places),
}


def stats(times: list[int]) -> str:
    ordered = sorted(times)
    median = statistics.median(ordered) / 1e3
    p90 = ordered[int(0.9 * (len(ordered) - 1))] / 1e3
    return f"median {median:7.1f} us, p90 {p90:7.1f} us"


def median_us(times: list[int]) -> float:
    return statistics.median(times) / 1e3


def timed(fn: Callable[[], object], into: list[int]) -> None:
    t0 = time.perf_counter_ns()
    fn()
    into.append(time.perf_counter_ns() - t0)


class Series:
    """One client and one RAPPOR encoder, called alternately, one new window per report."""

    def __init__(self, folder: Path, params: MetricParams, rappor_dir: str | None, rappor_bits: int, *,
                 autosave: bool, value: Callable[[str], Any] = str) -> None:
        self.fake = FakeAggregator([params])
        self.clock = Clock()
        self.client = make_client(folder, self.fake, self.clock, autosave=autosave)
        self.encoder, self.label = rappor_encoder(rappor_dir, rappor_bits, 7, os.urandom(32))
        self.words = [f"value-{i}" for i in range(50)]
        self.values = [value(word) for word in self.words]
        self.returned: list[str] = []

    def report(self, i: int) -> str:
        self.clock.now += 1
        rid = self.client.report("word", self.values[i % len(self.values)])
        self.returned.append(rid)
        return rid

    def encode(self, i: int) -> int:
        return int(self.encoder.encode(self.words[i % len(self.words)].encode()))

    def timed(self, reports: int, flush_every: int) -> tuple[list[int], list[int]]:
        """RAPPOR's encode then report(), ``reports`` times; the sender's work between, untimed."""
        rappor: list[int] = []
        ours: list[int] = []
        for i in range(reports):
            timed(lambda: self.encode(i), rappor)  # noqa: B023 - called at once
            timed(lambda: self.report(i), ours)  # noqa: B023 - called at once
            if (i + 1) % flush_every == 0:
                self.client.flush()  # untimed: the sender's work
        self.client.flush()
        return rappor, ours

    def counted(self, reports: int, flush_every: int) -> None:
        """The same calls for callgrind: RAPPOR's inside ``functools.reduce``, report()'s inside ``starmap``.

        Callgrind counts only inside those two C functions (``--toggle-collect``), which nothing else here calls.
        """
        for start in range(0, reports, flush_every):
            chunk = range(start, min(reports, start + flush_every))
            functools.reduce(lambda _, i: self.encode(i), chunk, 0)
            collections.deque(itertools.starmap(self.report, ((i,) for i in chunk)), maxlen=0)
            self.client.flush()

    def check_delivered(self) -> None:
        received = {rid for metric, rid in self.fake.stored if metric == "word"}
        if not set(self.returned) <= received:
            raise SystemExit("a returned report id was not delivered")

    def close(self) -> None:
        self.client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=int, default=3000)
    ap.add_argument("--bits", type=int, default=16)
    ap.add_argument("--rappor-dir", default=os.environ.get("ONESIDED_RAPPOR_DIR"))
    ap.add_argument("--flush-every", type=int, default=16, help="untimed sender work every this many reports")
    ap.add_argument("--table", action="store_true", help="every case (Bloom 16/128 bits, direct), autosave off")
    ap.add_argument("--callgrind", action="store_true", help="instruction counts under valgrind instead of times")
    ap.add_argument("--case", help=argparse.SUPPRESS)  # the case one --callgrind child counts
    ap.add_argument("--burst", type=int, metavar="N",
                    help="N report() calls back to to back (no sender) against the primed path")
    args = ap.parse_args()
    if args.burst:
        burst(args)
    elif args.case is not None:
        count_case(args)
    elif args.callgrind:
        callgrind(args)
    elif args.table:
        table(args)
    else:
        default(args)


def default(args: argparse.Namespace) -> None:
    params = bloom_params(args.bits)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"Bloom m={args.bits}, k=2, md5, f={F}, p={P}, q={Q}; {args.reports} reports a pair, timed alternately; "
              f"load average {load_average()}")
        for autosave, what in ((False, "autosave off"), (True, "autosave on (fsync'ed)")):
            series = Series(Path(tmp) / what.split()[1], params, args.rappor_dir, min(args.bits, 32), autosave=autosave)
            rappor, ours = series.timed(args.reports, args.flush_every)
            series.check_delivered()
            print(f"  {series.label}: {stats(rappor)}")
            print(f"  Client.report(), {what}: {stats(ours)}")
            if not autosave:
                sender_and_fallback(series, min(args.reports, 1000))
            series.close()


def table(args: argparse.Namespace) -> None:
    print(f"`benchmarks/client.py --table --reports {args.reports}`, load average before: {load_average()}\n")
    print("| case | RAPPOR `Encoder.encode` median (bits) | `Client.report()` median, autosave off | p90 | ratio |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n, (name, (params, rappor_bits, value)) in enumerate(CASES.items()):
            series = Series(Path(tmp) / str(n), params, args.rappor_dir, rappor_bits, autosave=False, value=value)
            rappor, ours = series.timed(args.reports, args.flush_every)
            series.check_delivered()
            series.close()
            p90 = sorted(ours)[int(0.9 * (len(ours) - 1))] / 1e3
            print(f"| {name} | {median_us(rappor):.1f} us ({rappor_bits}) | {median_us(ours):.1f} us | {p90:.1f} us "
                  f"| {median_us(ours) / median_us(rappor):.2f} |")
    print(f"\nRAPPOR's encoder: {series.label}; load average after: {load_average()}")


def callgrind(args: argparse.Namespace) -> None:
    """Run each case under callgrind in a child process and print instructions per call."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--callgrind needs valgrind (apt-get install valgrind)")
    print(f"Instructions per call (callgrind, {args.reports} calls each, alternating in chunks of {args.flush_every})\n")
    print("| case | RAPPOR `Encoder.encode` (bits) | `Client.report()`, autosave off | ratio |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (_, rappor_bits, _) in CASES.items():
            out = Path(tmp) / "callgrind.out"
            command = [
                "valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=functools_reduce",
                "--toggle-collect=starmap_next", f"--callgrind-out-file={out}", sys.executable, __file__,
                "--case", name, "--reports", str(args.reports), "--flush-every", str(args.flush_every),
            ] + (["--rappor-dir", args.rappor_dir] if args.rappor_dir else [])
            subprocess.run(command, check=True, capture_output=True)
            counts = inclusive_counts(out, ("functools_reduce", "starmap_next"))
            rappor, ours = counts["functools_reduce"] / args.reports, counts["starmap_next"] / args.reports
            print(f"| {name} | {rappor:,.0f} ({rappor_bits}) | {ours:,.0f} | {ours / rappor:.2f} |")


def count_case(args: argparse.Namespace) -> None:
    """The child of :func:`callgrind`: one case's calls, each kind inside its own builtin."""
    params, rappor_bits, value = CASES[args.case]
    with tempfile.TemporaryDirectory() as tmp:
        series = Series(Path(tmp), params, args.rappor_dir, rappor_bits, autosave=False, value=value)
        series.counted(args.reports, args.flush_every)
        series.check_delivered()
        series.close()


def inclusive_counts(out: Path, functions: tuple[str, ...]) -> dict[str, int]:
    """Inclusive instruction counts of ``functions`` from a callgrind output file (callgrind_annotate)."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(out)], check=True, capture_output=True,
                          text=True).stdout
    counts: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        for name in functions:
            if fields and any(f.endswith(":" + name) or f == name for f in fields[1:]) and name not in counts:
                counts[name] = int(fields[0].replace(",", ""))
    missing = set(functions) - set(counts)
    if missing:
        raise SystemExit(f"callgrind_annotate did not list {sorted(missing)}")
    return counts


def burst(args: argparse.Namespace) -> None:
    """``--burst N``: N report() calls in new windows with nothing between them (no flush, no background
    sender), against the primed path (both pools refilled, untimed, before every call), one process."""
    params = bloom_params(args.bits)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"Bloom m={args.bits}, k=2; {args.burst} reports each; load average {load_average()}")
        primed = Series(Path(tmp) / "primed", params, None, min(args.bits, 32), autosave=False)
        times: list[int] = []
        for i in range(args.burst):
            primed.client._prepare()  # untimed: keys and IRR made ahead, as after the sender's turn
            timed(lambda: primed.report(i), times)  # noqa: B023 - called at once
        print(f"  primed (pools full before each call): {stats(times)}")
        primed.client.flush()
        primed.check_delivered()
        primed.close()
        for label, filler in (("burst (back to back, no sender):     ", True),
                              ("burst, keys made inline (as before): ", False)):
            series = Series(Path(tmp) / label.split()[0] / str(filler), params, None, min(args.bits, 32),
                            autosave=False)
            pool = series.client._ephemeral
            if not filler:  # the pool as it was: 32 keys, no thread, a key made on the spot once empty
                pool._wake = lambda: None  # type: ignore[method-assign]
                pool.max_size = pool.size
            bursty: list[int] = []
            for i in range(args.burst):
                timed(lambda: series.report(i), bursty)  # noqa: B023 - called at once
            ratio = median_us(bursty) / median_us(times)
            print(f"  {label} {stats(bursty)}  ({ratio:.2f}x primed; key pool {pool.size}); "
                  f"load average {load_average()}")
            series.client.flush()
            series.check_delivered()
            series.close()


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def sender_and_fallback(series: Series, n: int) -> None:
    """What moved off the caller's thread, and report() when nothing was made ahead of time."""
    client = series.client
    empty: list[int] = []
    for i in range(n):
        client._ephemeral.clear()  # as after a restart, before the first sync() or flush()
        timed(lambda: series.report(i), empty)  # noqa: B023 - called at once
    print(f"  Client.report(), no key made ahead (inline X25519 key generation): {stats(empty)}")
    ids = client._queue.ids()[-n:]  # the same in older checkouts, whose items were dicts
    sealing: list[int] = []
    loading: list[int] = []
    for report_id, item in zip(ids, list(client._queue)[-n:], strict=True):
        held = client._held.get(report_id)
        timed(lambda: envelope_of(item, held), sealing)  # noqa: B023 - called at once
        timed(lambda: envelope_of(item), loading)  # noqa: B023 - called at once
    print(f"  sender: seal one queued report (X25519, HKDF, AES-GCM):           {stats(sealing)}")
    print(f"  sender: the same after a restart (key loaded from the queue):     {stats(loading)}")
    keys: list[int] = []
    for _ in range(n):
        client._ephemeral.clear()
        timed(lambda: client._ephemeral.refill(), keys)
    per_key = statistics.median(keys) / client._ephemeral.size / 1e3
    print(f"  sender: make one ephemeral key ahead of time:                     median {per_key:7.1f} us")
    client.flush()
    series.check_delivered()


if __name__ == "__main__":
    main()
