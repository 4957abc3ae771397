"""Request ids on every response and log line, X-Forwarded-For only from trusted proxies, /metrics of operations.

No timing assumptions (flask's test client with made-up socket addresses).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aggsupport import app_in, bearer

from aggregator.server.logs import ACCESS_LOGGER, TextFormatter, access_log_middleware
from aggregator.server.settings import Settings
from protocol.errors import ParameterError

PROXY = {"REMOTE_ADDR": "10.0.0.5"}


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[Any]:
    with app_in(tmp_path, trusted_proxies="10.0.0.0/8") as app:
        yield app


@pytest.fixture
def logged(proxied: Any, caplog: pytest.LogCaptureFixture) -> Any:
    """The proxied app's test client, with the access log (full addresses) captured."""
    proxied.wsgi_app = access_log_middleware(proxied.wsgi_app, "full")
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    return proxied.test_client()


def test_every_response_carries_a_request_id_and_so_do_its_log_lines(
    logged: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    client = logged
    first, second = client.get("/v1/livez"), client.get("/v1/nothing")
    ids = {first.headers["X-Request-Id"], second.headers["X-Request-Id"]}
    assert len(ids) == 2 and all(len(i) == 32 for i in ids)  # one per request, errors included
    lines = [TextFormatter().format(r) for r in caplog.records]
    assert any(line.endswith(f"[request {first.headers['X-Request-Id']}]") for line in lines), lines


def test_x_forwarded_for_names_the_client_only_behind_a_trusted_proxy(
    logged: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    client = logged
    forged = {"X-Forwarded-For": "198.51.100.7"}
    client.get("/v1/livez", headers={**forged, "X-Request-Id": "from-proxy-123"}, environ_base=PROXY)
    answer = client.get("/v1/livez", headers={**forged, "X-Request-Id": "forged-id-123"},
                        environ_base={"REMOTE_ADDR": "203.0.113.9"})
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("198.51.100.7 "), lines  # the proxy's word: the client behind it
    assert lines[1].startswith("203.0.113.9 "), lines  # a client's own header is ignored
    assert answer.headers["X-Request-Id"] != "forged-id-123"


def test_audit_rows_see_the_forwarded_client(proxied: Any) -> None:
    storage = proxied.extensions["onesided"].storage
    admin = storage.create_token(role="admin", name="admin")[1]
    proxied.test_client().get("/v1/metrics", headers={**bearer(admin), "X-Forwarded-For": "198.51.100.7"},
                              environ_base=PROXY)
    entry = storage.audit_entries()[-1]
    assert entry.address == "198.51.100.0/24"  # not the proxy's 10.0.0.0/24


def test_trusted_proxies_must_be_networks() -> None:
    with pytest.raises(ParameterError) as caught:
        Settings(trusted_proxies="10.0.0.0/8, proxy.example")
    assert caught.value.field == "trusted_proxies"


def test_metrics_expose_process_build_dependency_and_pool(tmp_path: Path) -> None:
    with app_in(tmp_path) as app:
        text = app.test_client().get("/metrics").get_data(as_text=True)
    for name in ("process_resident_memory_bytes", "onesided_build_info{", 'onesided_dependency_up{dependency="database"} 1.0',
                 'onesided_dependency_up{dependency="keys"} 1.0', 'onesided_db_pool_connections{state="idle"}'):
        assert name in text, name
