"""The flask app factory.

>>> import tempfile
>>> from protocol.crypto import AggregatorKeys
>>> folder = tempfile.mkdtemp()
>>> AggregatorKeys.generate().save(f"{folder}/keys")
>>> app = create_app({"data_dir": folder})
>>> app.test_client().get("/v1/health").get_json()["status"]
'ok'
>>> app.test_client().get("/v1/nothing").get_json()["error"]
'not_found'
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from flask import Flask

from aggregator.server.api.errors import register_error_handlers
from aggregator.server.context import EXTENSION_KEY, AppState
from aggregator.server.dependencies import install_guard
from aggregator.server.errors import DependencyFailed, KeysUnavailable
from aggregator.server.faults import Faults
from aggregator.server.keyring import KeyRing, load_keyring
from aggregator.server.monitoring import instrument
from aggregator.server.openapi import install_openapi
from aggregator.server.opener import EnvelopeOpener
from aggregator.server.private_files import prepare_data_dir
from aggregator.server.rate_limits import install_rate_limits
from aggregator.server.request_context import parse_networks, request_middleware
from aggregator.server.routes import API_MODULES
from aggregator.server.services.offload import Offloader
from aggregator.server.settings import Settings
from aggregator.server.storage import Storage
from protocol.crypto import AggregatorKeys
from protocol.errors import ParameterError

log = logging.getLogger(__name__)

def load_keys(settings: Settings) -> AggregatorKeys:
    """The aggregator's keys from ``settings.key_path``.

    Raises:
        ParameterError: no keys there (field ``key_dir``; run ``onesided keys init``).
    """
    if not settings.key_path.is_dir():
        raise ParameterError("key_dir", f"{settings.key_path} has no keys; run `onesided keys init` first")
    return AggregatorKeys.load(settings.key_path)


def create_app(
    config: Settings | Mapping[str, Any] | None = None,
    *,
    storage: Storage | None = None,
    keys: AggregatorKeys | None = None,
    clock: Callable[[], float] = time.time,
    wait_for_dependencies: bool = False,
) -> Flask:
    """Build the aggregator's flask app.

    Args:
        config: a :class:`Settings`, a mapping of its field names, or ``None``
            for the ``ONESIDED_*`` environment (see :meth:`Settings.from_env`).
        storage: an open storage to share (tests); default: open
            ``settings.database_url`` and migrate it.
        keys: the aggregator's keys (tests); default: load them from
            ``settings.key_path``.
        clock: the server's clock in Unix seconds (tests inject simulated
            time: report windows, rounds, retired sealing keys' dates).
        wait_for_dependencies: a database that does not answer or keys that
            cannot be read do not raise: the app answers 503
            ``database_unavailable`` / ``keys_unavailable`` until they are back
            (``onesided serve``'s workers: gunicorn's master exits when a
            worker fails to boot).

    Raises:
        ParameterError: the data directory is open to group or others (field
            ``data_dir``; see ``allow_shared_data_dir``).
        KeysUnavailable: no keys, or unreadable ones (unless ``wait_for_dependencies``).
        DatabaseUnavailable: the database does not answer (unless ``wait_for_dependencies``).

    Returns:
        The app with every blueprint of ``aggregator.server.api`` registered and JSON
        errors for every 4xx and 5xx.
    """
    if config is None:
        settings = Settings.from_env()
    elif isinstance(config, Settings):
        settings = config
    else:
        settings = Settings.from_mapping(config)
    if settings.uses_data_dir:
        prepare_data_dir(settings.data_dir, allow_shared=settings.allow_shared_data_dir)
    app = Flask("aggregator")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.wsgi_app = request_middleware(app.wsgi_app, parse_networks(settings.trusted_proxies))  # type: ignore[method-assign,assignment]

    def build() -> AppState:
        return build_state(settings, storage=storage, keys=keys, clock=clock, wait=not wait_for_dependencies)

    failure: DependencyFailed | None = None
    try:
        app.extensions[EXTENSION_KEY] = build()
    except DependencyFailed as exc:
        if not wait_for_dependencies:
            raise
        failure = exc
        log.warning("starting without %s: %s; answering 503 until it is back", _dependency(exc), exc.detail)
    register_error_handlers(app)
    instrument(app)
    install_rate_limits(app, settings.rate_limit_per_address, settings.rate_limit_per_token)
    install_guard(app, settings, build, failure)
    install_openapi(app)
    for module in API_MODULES:
        app.register_blueprint(module.blueprint)
    return app


def _dependency(exc: DependencyFailed) -> str:
    return "its keys" if isinstance(exc, KeysUnavailable) else "its database"


def build_state(
    settings: Settings, *, storage: Storage | None, keys: AggregatorKeys | None, clock: Callable[[], float],
    wait: bool = True,
) -> AppState:
    """Read the keys, open the storage and start the helpers: the app's :class:`AppState`.

    Args:
        wait: wait ``settings.db_wait_seconds`` for an unreachable PostgreSQL
            (``False``: one try, for a worker that answers 503 meanwhile).

    Raises:
        KeysUnavailable: the key files are missing, unreadable or damaged.
        DatabaseUnavailable: the database does not answer (StorageFull: its disk is full).
    """
    try:
        keyring = load_keyring(settings.key_path) if keys is None and settings.key_path.is_dir() else None
        keys = load_keys(settings) if keys is None else keys
    except (ParameterError, OSError, ValueError) as exc:
        raise KeysUnavailable("key_dir", f"cannot read the keys in {settings.key_path}: {exc}") from None
    if keyring is None:
        keyring = KeyRing(keys=keys)
    if storage is None:
        storage = Storage.open(settings.database_url, attempts=settings.db_retries,
                               wait_seconds=settings.db_wait_seconds if wait else 0.0)
    opener = EnvelopeOpener(keys, processes=settings.decrypt_processes, retired=keyring.retired,
                            clock=clock)
    offloader = Offloader(processes=settings.decode_processes)
    sqlite_dir = Path(storage.engine.url.database or ".").parent if storage.dialect == "sqlite" else None
    return AppState(
        settings=settings, storage=storage, keys=keys, opener=opener, offloader=offloader,
        faults=Faults(data_dir=sqlite_dir), keyring=keyring, clock=clock,
    )
