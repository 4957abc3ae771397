"""Helper processes die with their worker: a worker killed by SIGKILL leaves no helper behind.

The field campaign found 4 processes (~110 MiB) left per killed worker,
125 after 30 kills. A worker is played here by a child process that starts
a pool of two helpers; the test kills it with SIGKILL and waits for every
process it had started (the fork server and the helpers).

Timing assumptions: a helper checks its worker every 0.5 s and exits; the
test waits up to 15 s for all of them on a loaded machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
from aggsupport import REPO

WORKER = """
import os, sys
from aggregator.server.helper_pool import HelperPool
pool = HelperPool("decrypt_processes", 2)
pool.run(lambda ex: [ex.submit(os.getpid).result() for _ in range(4)], lambda: None, lost="")
print("ready", flush=True)
sys.stdin.read()
"""


def test_helpers_exit_when_their_worker_is_killed() -> None:
    worker = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              cwd=REPO, text=True)
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        started = psutil.Process(worker.pid).children(recursive=True)
        assert len(started) >= 3, started  # the fork server and two helpers
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                                                  for p in started):
            time.sleep(0.2)
        left = [p.pid for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not left, f"orphaned helper processes: {left}"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        for stream in (worker.stdin, worker.stdout):
            if stream is not None:
                stream.close()
