"""Shared helpers for the aggregator tests: databases, live servers, reports, tokens.

* :func:`database_url` yields a fresh SQLite file or a fresh PostgreSQL
  schema (created and dropped per use). PostgreSQL is found by actually
  connecting to 127.0.0.1:5432 (database ``test``, user ``postgres`` or
  ``root``, trust auth); only when that fails does a test skip, with the
  connection error as the reason.
* :class:`LiveServer` runs ``create_app`` under werkzeug's ``make_server``
  in a thread on a free loopback port; :func:`serve_subprocess` runs
  ``onesided serve`` (gunicorn master, event-loop workers) as a child process.
* :func:`make_reports` builds sealed reports with known bits, so tests can
  assert exact aggregate counts.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import requests
import sqlalchemy as sa
from werkzeug.serving import BaseWSGIServer, make_server

from aggregator import create_app
from aggregator.server.settings import Settings
from aggregator.server.storage import Storage
from aggregator.server.storage.engine import scratch_schema
from protocol.crypto import AggregatorKeys
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams
from protocol.rng import SeededRandom
from protocol.wire import (
    CONTENT_TYPE_BINARY,
    ReportEnvelope,
    build_report,
    encode_batch_binary,
    encode_batch_json,
)

PG_CANDIDATES = (
    "postgresql+psycopg://postgres@127.0.0.1:5432/test",
    "postgresql+psycopg://root@127.0.0.1:5432/test",
)
BACKENDS = ("sqlite", "postgresql")
WINDOW = 3600
REPO = Path(__file__).resolve().parent.parent


@functools.cache
def postgres_base_url() -> tuple[str | None, str]:
    """The first PostgreSQL URL that accepts a connection, or ``None`` and why not."""
    reasons = []
    for url in PG_CANDIDATES:
        engine = sa.create_engine(url, connect_args={"connect_timeout": 3})
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
            return url, ""
        except sa.exc.OperationalError as exc:
            reasons.append(f"{url}: {str(exc.orig).strip().splitlines()[0]}")
        finally:
            engine.dispose()
    return None, "; ".join(reasons)


@contextlib.contextmanager
def postgres_schema() -> Iterator[str]:
    """A URL whose ``search_path`` is a new, uniquely named schema (dropped afterwards)."""
    base, reason = postgres_base_url()
    if base is None:
        pytest.skip(f"PostgreSQL is not reachable on 127.0.0.1:5432 ({reason})")
    with scratch_schema(base, "onesided_test") as url:
        yield url


@contextlib.contextmanager
def database_url(backend: str, folder: Path) -> Iterator[str]:
    """A fresh database of ``backend`` (``sqlite`` in ``folder``, or ``postgresql``)."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'aggregator.db'}"
    else:
        with postgres_schema() as url:
            yield url


def make_params(
    name: str = "places",
    *,
    num_bits: int = 20,
    num_hashes: int = 2,
    num_cohorts: int = 4,
    mode: str = "asymmetric",
    level: float = 2.0,
    time_precision: int = WINDOW,
) -> MetricParams:
    """A small Bloom metric (20 bits: the last byte has unused bits, which tests use)."""
    return MetricParams(
        name=name,
        encoding=BloomEncoding(num_bits=num_bits, num_hashes=num_hashes, num_cohorts=num_cohorts),
        mode=mode,  # type: ignore[arg-type]
        level=level,
        time_precision=time_precision,
    )


def current_window(params: MetricParams, now: float | None = None) -> int:
    stamp = time.time() if now is None else now
    return int(stamp // params.time_precision) * params.time_precision


@dataclass(frozen=True, kw_only=True)
class ReportSet:
    """Reports with the bits and cohorts inside them (for exact expected counts)."""

    envelopes: list[ReportEnvelope]
    bits: npt.NDArray[np.bool_]
    cohorts: npt.NDArray[np.int64]

    def expected(self, num_cohorts: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(ones, totals)`` as ``Storage.bit_counts`` should return them."""
        ones = np.zeros((num_cohorts, self.bits.shape[1]), dtype=np.int64)
        np.add.at(ones, self.cohorts, self.bits.astype(np.int64))
        return ones, np.bincount(self.cohorts, minlength=num_cohorts).astype(np.int64)


def make_reports(
    params: MetricParams,
    seal_public: bytes | None,
    n: int,
    *,
    seed: int,
    window: int | None = None,
    round: int = 0,
    level: float | None = None,
    digest: str | None = None,
) -> ReportSet:
    """``n`` reports with random bits (seeded), sealed to ``seal_public`` (``None``: plain)."""
    rng = SeededRandom(seed)
    bits = rng.bernoulli(0.3, (n, params.num_bits))
    cohorts = rng.integers(params.num_cohorts, (n,))
    win = current_window(params) if window is None else window
    envelopes = [
        build_report(
            params_digest=params.digest() if digest is None else digest,
            metric=params.name,
            round=round,
            window=win,
            cohort=int(cohorts[i]),
            level=params.level if level is None else level,
            bits=bits[i],
            seal_public=seal_public,
            # seeded ids (a sealed report's id is derived from its ephemeral key, so seed that)
            report_id=None if seal_public is not None else bytes(rng.integers(256, (16,)).astype(np.uint8)),
            ephemeral_private=None if seal_public is None else bytes(rng.integers(256, (32,)).astype(np.uint8)),
        )
        for i in range(n)
    ]
    return ReportSet(envelopes=envelopes, bits=bits, cohorts=cohorts)


def batch_json(envelopes: Sequence[ReportEnvelope]) -> dict[str, Any]:
    return encode_batch_json(envelopes)


def post_reports(url: str, envelopes: Sequence[ReportEnvelope], *, form: str = "json") -> requests.Response:
    """``POST /v1/reports`` in the JSON or binary form."""
    if form == "binary":
        return requests.post(
            f"{url}/v1/reports", data=encode_batch_binary(envelopes),
            headers={"Content-Type": CONTENT_TYPE_BINARY}, timeout=60,
        )
    return requests.post(f"{url}/v1/reports", json=encode_batch_json(envelopes), timeout=60)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class LiveServer:
    """``create_app`` served by werkzeug in a thread on 127.0.0.1 (a real TCP server)."""

    def __init__(self, settings: Settings, keys: AggregatorKeys, storage: Storage) -> None:
        self.settings = settings
        self.keys = keys
        self.storage = storage
        self.app = create_app(settings, storage=storage, keys=keys)
        self._server: BaseWSGIServer = make_server("127.0.0.1", 0, self.app, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def admin_token(self, name: str = "admin") -> str:
        return self.storage.create_token(role="admin", name=name)[1]

    def analyst_token(self, name: str = "analyst") -> str:
        return self.storage.create_token(role="analyst", name=name)[1]

    def register(self, params: MetricParams, token: str) -> requests.Response:
        return requests.post(f"{self.url}/v1/metrics", json=params.to_dict(), headers=bearer(token), timeout=30)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
        self.app.extensions["onesided"].opener.close()
        self.app.extensions["onesided"].offloader.close()


@contextlib.contextmanager
def live_server(url: str, folder: Path, **settings: Any) -> Iterator[LiveServer]:
    """A :class:`LiveServer` on the database ``url`` with fresh keys in ``folder``."""
    keys = AggregatorKeys.generate()
    config = Settings(data_dir=folder, db_url=url, **settings)
    storage = Storage.open(url)
    server = LiveServer(config, keys, storage)
    try:
        yield server
    finally:
        server.close()
        storage.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``onesided ARGS`` in a child process (the console script's entry point)."""
    code = "import sys; from aggregator.cli.main import main; sys.exit(main())"
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=REPO
    )


@contextlib.contextmanager
def serve_subprocess(*args: str, env: dict[str, str] | None = None, ready_within: float = 60) -> Iterator[str]:
    """``onesided serve ARGS --port P`` as a child process; yields its URL once ``/v1/health`` answers."""
    port = free_port()
    code = "import sys; from aggregator.cli.main import main; sys.exit(main())"
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--init", "--host", "127.0.0.1", "--port", str(port), *args],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(process, log, url, ready_within)
        yield url
    finally:
        stop_server(process)
        log.close()


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (a graceful stop), SIGKILL after 30 s."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_ready(process: subprocess.Popen[bytes], log: Any, url: str, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            output = log.read().decode("utf-8", "replace")
            raise RuntimeError(f"onesided serve exited with {process.returncode}:\n{output}")
        try:
            if requests.get(f"{url}/v1/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"onesided serve did not answer on {url} within {within} s")


def upload_worker(url: str, batches: list[list[ReportEnvelope]], seed: int, batch_format: str) -> list[str]:
    """Upload each batch twice, as a device whose first answer got lost would.

    The first attempt has a 5 ms timeout, so the answer is usually lost while
    the server still stores the batch; the second (patient, with the client's
    retry policy) repeats the same batch. Runs in a child process.
    """
    from client_sdk.transport import RetryPolicy, Transport, TransportError

    hasty = Transport(url, retry=RetryPolicy(max_attempts=1, timeout=0.005), rng=seed, batch_format=batch_format)
    patient = Transport(
        url, retry=RetryPolicy(max_attempts=10, base_delay=0.05, max_delay=1.0, timeout=120), rng=seed + 1,
        batch_format=batch_format,
    )
    statuses: list[str] = []
    for batch in batches:
        with contextlib.suppress(TransportError):
            hasty.upload(batch)
        statuses.extend(r.status for r in patient.upload(batch))
    hasty.close()
    patient.close()
    return statuses


@contextlib.contextmanager
def app_in(folder: Path, **settings: Any) -> Iterator[Any]:
    """``create_app`` on SQLite in ``folder`` with fresh keys (for flask's test client); closed afterwards."""
    AggregatorKeys.generate().save(folder / "keys")
    app = create_app({"data_dir": str(folder), **settings})
    try:
        yield app
    finally:
        state = app.extensions["onesided"]
        state.opener.close()
        state.offloader.close()
        state.storage.close()
