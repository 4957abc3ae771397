"""One state file, one client: a second opener (another process, or this one) is refused, naming the holder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from clocks import Clock

from client_sdk import Client
from client_sdk.lock import StateLock, StateLocked
from client_sdk.testing import FakeAggregator
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams

ASYM = MetricParams(name="places", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                    mode="asymmetric", level=1.0)
DAY = 86400.0

HOLDER = textwrap.dedent("""
    import sys
    from client_sdk import Client
    client = Client("http://agg.test", sys.argv[1], background=False, strict=True, server_public_keys=sys.argv[2], max_epsilon=4.0)
    print("open", flush=True)
    sys.stdin.readline()  # hold the state until told
    client.close(flush=False)
    print("closed", flush=True)
""")


def make_client(fake: FakeAggregator, path: Path, clock: Clock | None = None, **kwargs: Any) -> Client:
    return Client("http://agg.test", path, background=False, strict=True, server_public_keys=fake.sign_public, max_epsilon=4.0, session=fake,
                  clock=clock or Clock(1_700_000_000.0), **kwargs)


def start_holder(path: Path, key: str) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), key], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
    return holder


def close_pipes(holder: subprocess.Popen[str]) -> None:
    for pipe in (holder.stdin, holder.stdout):
        if pipe is not None:
            pipe.close()


def test_a_second_process_is_refused_naming_the_path_and_the_holders_pid(tmp_path: Path) -> None:
    fake, path = FakeAggregator([ASYM]), tmp_path / "app" / "onesided.state"
    holder = start_holder(path, fake.sign_public)
    try:
        with pytest.raises(StateLocked) as info:
            make_client(fake, path)
        assert info.value.pid == holder.pid and info.value.path == path
        assert str(path) in str(info.value) and f"process {holder.pid}" in str(info.value)
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "closed"
    finally:
        close_pipes(holder)
        assert holder.wait(30) == 0
    client = make_client(fake, path)  # the holder closed: the state is free
    client.sync()
    client.report("places", {"home"})
    client.close()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    fake, path = FakeAggregator([ASYM]), tmp_path / "s"
    holder = start_holder(path, fake.sign_public)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(30)
    close_pipes(holder)
    make_client(fake, path).close()  # the kernel released the lock with the process


def test_two_processes_never_spend_one_ceiling_twice(tmp_path: Path) -> None:
    # The child tries to report on the parent's open state: refused before it reads the ledger.
    fake, path = FakeAggregator([ASYM]), tmp_path / "s"
    client = make_client(fake, path)
    client.sync()
    client.report("places", {"home"})
    code = ("import sys; from client_sdk import Client; from client_sdk.lock import StateLocked\n"
            "try:\n    Client('http://agg.test', sys.argv[1], background=False, strict=True, server_public_keys=sys.argv[2], max_epsilon=4.0)\n"
            "except StateLocked as exc:\n    print(exc.pid)\n")
    out = subprocess.run([sys.executable, "-c", code, str(path), fake.sign_public], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == str(os.getpid())
    client.close()


def test_one_process_two_clients_and_a_closed_client_reused(tmp_path: Path) -> None:
    fake, path, clock = FakeAggregator([ASYM]), tmp_path / "s", Clock(1_700_000_000.0)
    first = make_client(fake, path, clock)
    first.sync()
    first.report("places", {"home"})
    with pytest.raises(StateLocked, match="this process") as info:
        make_client(fake, path, clock)
    assert info.value.pid == os.getpid()
    first.close()
    second = make_client(fake, path, clock)  # free once closed
    clock.advance(DAY)
    second.report("places", {"cafe"})
    with pytest.raises(StateLocked):
        first.report("places", {"park"})  # a closed client takes the lock back to be used: held
    second.close()
    clock.advance(DAY)
    first.report("places", {"park"})  # reopened: it reads the state the other client left
    assert first.ledger()["places"].windows == 3 and first.ledger()["places"].spent == 3.0
    first.close()


def test_lock_file_records_the_holder_and_is_private(tmp_path: Path) -> None:
    lock = StateLock(tmp_path / "s")
    lock.acquire()
    lock.acquire()  # held already: nothing
    assert lock.path.read_text().strip() == str(os.getpid())
    assert (lock.path.stat().st_mode & 0o777) == 0o600
    lock.release()
    lock.release()
    assert not lock.held
