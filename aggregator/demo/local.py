"""An aggregator and many clients in one process: the demo's, the examples' and the tests' harness.

* :func:`local_aggregator`: the aggregator app on SQLite in a data folder, on
  a free loopback port in a background thread, with an admin and an analyst
  :class:`ApiClient`.
* :class:`SimulatedClients`: clients that run the client SDK's report
  pipeline (:class:`~client_sdk.memo.ReportPlan`: memoized noise from their
  own secret, then sealed) without a state file, so that tens of thousands
  fit in a minute; :func:`upload` posts their reports in binary batches.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import requests
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from aggregator.api_client import ApiClient
from aggregator.research.populations import Population
from aggregator.server.app import create_app
from aggregator.server.settings import Settings
from aggregator.server.storage import Storage
from client_sdk.memo import ReportPlan, noise_key
from client_sdk.pools import IrrPool
from protocol.crypto import AggregatorKeys
from protocol.encodings import canonical_value
from protocol.params import MetricParams
from protocol.rng import SecureRandom
from protocol.wire import CONTENT_TYPE_BINARY, encode_batch_binary, seal_report

BATCH = 1000  # reports per upload request


@dataclass
class LocalAggregator:
    """An aggregator app on a free loopback port, in a background thread."""

    url: str
    admin: ApiClient
    analyst: ApiClient
    keys: AggregatorKeys
    server: BaseWSGIServer
    storage: Storage


class _QuietHandler(WSGIRequestHandler):
    """No access log lines between the progress bars."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return None


@contextmanager
def local_aggregator(data_dir: Path) -> Iterator[LocalAggregator]:
    settings = Settings(data_dir=str(data_dir))
    keys = AggregatorKeys.generate()
    keys.save(settings.key_path)
    storage = Storage.open(settings.database_url)
    _, admin_token = storage.create_token(role="admin", name="demo-admin")
    _, analyst_token = storage.create_token(role="analyst", name="demo-analyst")
    app = create_app(settings, storage=storage, keys=keys)
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="onesided-demo-server", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield LocalAggregator(
            url=url, admin=ApiClient(url, admin_token), analyst=ApiClient(url, analyst_token),
            keys=keys, server=server, storage=storage,
        )
    finally:
        server.shutdown()
        thread.join(timeout=10)
        storage.close()


# --------------------------------------------------------------------------
# simulated clients: the client SDK's functions without a state file
# --------------------------------------------------------------------------


@dataclass
class SimulatedClients:
    """Clients ``first..n`` of a population, each with its own secret and ceiling."""

    params: MetricParams
    digest: str
    population: Population
    first: int
    secrets: list[bytes]
    ceilings: np.ndarray

    def reports(self, *, levels: list[float], round_id: int, seal_public: bytes, window: int,
                who: np.ndarray) -> Iterator[Any]:
        """Sealed reports of the clients in ``who`` at the end of the level chain ``levels``.

        Every report takes the client's own pipeline, :class:`~client_sdk.memo.ReportPlan`
        (encode, memoized noise through ``levels``, fresh IRR, packed payload), with
        the IRR drawn ahead in blocks as the client does (:class:`~client_sdk.pools.IrrPool`):
        a window's first report passes one level, a round's re-send the window's chain.
        """
        level = levels[-1]
        chain = tuple(levels)
        irr = IrrPool(SecureRandom(), self.params.randomizer(level), self.params.num_bits)
        cohort_plans: dict[int, ReportPlan] = {}
        for i in who:
            secret = self.secrets[i - self.first]
            cohort = int(self.population.cohorts[i])
            template = cohort_plans.get(cohort)
            if template is None:
                template = cohort_plans[cohort] = ReportPlan(secret, self.params, cohort, level)
            members = self.population.member_sets(int(i))
            key = noise_key(window, canonical_value(members))
            payload = template.for_secret(secret).payload(members, key, irr.take(), chain=chain)
            yield seal_report(payload=payload, metric=self.params.name, round=round_id, window=window,
                              params_digest=self.digest, seal_public=seal_public)


def client_secrets(count: int, seed: int | None) -> list[bytes]:
    if seed is None:
        return [SecureRandom().integers(256, 32).astype(np.uint8).tobytes() for _ in range(count)]
    root = hashlib.sha256(f"onesided-demo-{seed}".encode()).digest()
    return [hmac.new(root, i.to_bytes(8, "big"), hashlib.sha256).digest() for i in range(count)]


def upload(url: str, envelopes: Iterator[Any], *, total: int, progress: Callable[[int], None]) -> dict[str, int]:
    """POST the reports in binary batches; returns the count of each per-report status."""
    counts: dict[str, int] = {}
    session = requests.Session()
    batch: list[Any] = []

    def send() -> None:
        response = session.post(f"{url}/v1/reports", data=encode_batch_binary(batch),
                                headers={"Content-Type": CONTENT_TYPE_BINARY}, timeout=120)
        response.raise_for_status()
        for result in response.json()["results"]:
            counts[result["status"]] = counts.get(result["status"], 0) + 1
        progress(len(batch))
        batch.clear()

    for envelope in envelopes:
        batch.append(envelope)
        if len(batch) >= BATCH:
            send()
    if batch:
        send()
    return counts
