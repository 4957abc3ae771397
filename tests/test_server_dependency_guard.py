"""The guard of a worker whose dependencies are away answers at once while another thread tries them.

A database host that drops packets makes one try last until the connect
timeout (10 s); the other request threads must answer 503 meanwhile, not
queue behind it. No timing assumption beyond "at once" (< 2 s of a 30 s block).
"""

from __future__ import annotations

import threading
import time

import pytest
from flask import Flask

from aggregator.server.context import AppState
from aggregator.server.dependencies import DependencyGuard
from aggregator.server.errors import DatabaseUnavailable
from aggregator.server.settings import Settings


def test_a_request_does_not_wait_for_another_threads_try() -> None:
    entered, release = threading.Event(), threading.Event()

    def build() -> AppState:
        entered.set()
        release.wait(30)
        raise DatabaseUnavailable("database", "still away")

    guard = DependencyGuard(Flask("t"), Settings(), build, DatabaseUnavailable("database", "away"))
    guard._next_try = 0.0  # the first request tries now
    trying = threading.Thread(target=lambda: pytest.raises(DatabaseUnavailable, guard.state), daemon=True)
    trying.start()
    assert entered.wait(10)
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable):
        guard.state()  # answered while the other thread is still blocked in its try
    assert time.monotonic() - started < 2.0
    release.set()
    trying.join(10)
