"""Load shedding and rate limits: over a cap the answer is at once (503 / 429 with Retry-After), never a queue.

* Past ``max_connections`` the front answers new connections ``503`` with
  ``Retry-After: 1`` as soon as they speak (before, they waited in the
  kernel's backlog: health probes timed out at 10 s in the campaign),
  except from an address with (almost) none open, which may use a reserve.
* Per-address and per-token request rates (token buckets, bursts of twice
  the rate): ``429 too_many_requests`` with ``Retry-After``; off by default;
  probes are never limited.

Timing assumptions: the shed answer arrives within 5 s (it is written on
the first bytes); the rate-limit tests make their requests well within one
second of each other (a bucket refills at 1 request a second).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aggsupport import app_in, bearer
from frontsupport import running_front

from aggregator.server.front import FrontLimits


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


def test_connections_over_capacity_get_503_at_once() -> None:
    with running_front(app, FrontLimits(threads=2, max_connections=2), grace_seconds=1.0) as (port, _r, _t):
        held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
        time.sleep(0.3)  # the loop accepts both: the worker is at capacity
        with socket.create_connection(("127.0.0.1", port), timeout=5) as extra:
            extra.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = extra.recv(65536)
        assert answer.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in answer, answer
        with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0)) as device:
            device.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert device.recv(65536).startswith(b"HTTP/1.1 200")  # an address with none open: the reserve
        for sock in held:
            sock.close()
        time.sleep(0.3)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as again:
            again.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert again.recv(65536).startswith(b"HTTP/1.1 200")  # capacity back: served


def test_an_address_over_its_rate_gets_429_and_probes_do_not(tmp_path: Path) -> None:
    with app_in(tmp_path, rate_limit_per_address=1.0) as limited:
        client = limited.test_client()
        answers = [client.get("/v1/config") for _ in range(3)]  # a burst of 2, then the bucket is empty
        assert [a.status_code for a in answers] == [200, 200, 429]
        assert answers[2].get_json()["error"] == "too_many_requests" and answers[2].get_json()["field"] == "address"
        assert int(answers[2].headers["Retry-After"]) >= 1
        assert client.get("/v1/config", environ_base={"REMOTE_ADDR": "192.0.2.1"}).status_code == 200  # another
        assert all(client.get("/v1/livez").status_code == 200 for _ in range(5))


def test_a_token_over_its_rate_gets_429(tmp_path: Path) -> None:
    with app_in(tmp_path, rate_limit_per_token=1.0) as limited:
        storage = limited.extensions["onesided"].storage
        first, second = (storage.create_token(role="admin", name=n)[1] for n in ("a", "b"))
        client = limited.test_client()
        codes = [client.get("/v1/metrics", headers=bearer(first)).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        assert client.get("/v1/metrics", headers=bearer(second)).status_code == 200  # buckets are per token


def test_rate_limits_are_off_by_default(tmp_path: Path) -> None:
    with app_in(tmp_path) as unlimited:
        client = unlimited.test_client()
        assert {client.get("/v1/config").status_code for _ in range(30)} == {200}
