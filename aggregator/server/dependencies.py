"""A worker that boots while its database or keys are away, and serves as soon as they are back.

gunicorn's master exits when a worker fails to boot, taking the healthy
workers with it; a worker that is replaced while PostgreSQL is down or the
key files are unreadable (a crash, an OOM kill, a SIGHUP) must therefore
boot anyway. :class:`DependencyGuard` holds such a worker's app until its
state can be built: every request but liveness, readiness, health and
``/metrics`` gets ``503 database_unavailable`` or ``503 keys_unavailable``
with ``Retry-After``, and the first request at least :data:`RETRY_SECONDS`
after the last try builds the state again. Once it is built the guard only
checks, on every request, that the SQLite file the server opened is still
the one at its path (a removed or replaced file is 503, never ``accepted``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from flask import Flask, request

from aggregator.server.context import EXTENSION_KEY, AppState
from aggregator.server.errors import DependencyFailed
from aggregator.server.settings import Settings

log = logging.getLogger(__name__)
GUARD_KEY = "onesided.guard"
RETRY_SECONDS = 1.0  # at most one try to reach the database or read the keys per second and worker
# Routes that answer without the app's state (or explain its absence themselves).
UNGUARDED_PATHS = frozenset({"/v1/livez", "/v1/readyz", "/v1/health", "/metrics"})


class DependencyGuard:
    """Builds the app's state once its dependencies answer; answers 503 until then.

    Args:
        app: the flask app whose ``extensions`` receive the state.
        build: makes the :class:`AppState`; raises :class:`DependencyFailed`
            while the database or the keys are away.
        failure: why the first build failed (``None``: it succeeded).
    """

    def __init__(
        self, app: Flask, settings: Settings, build: Callable[[], AppState], failure: DependencyFailed | None,
    ) -> None:
        self._app = app
        self.settings = settings
        self._build = build
        self._failure = failure
        self._lock = threading.Lock()
        self._next_try = time.monotonic() + RETRY_SECONDS

    @property
    def failure(self) -> DependencyFailed | None:
        """Why the state is not built yet (``None`` once it is)."""
        return self._failure

    def state(self) -> AppState:
        """The app's state, built now if its dependencies are back.

        Raises:
            DependencyFailed: the database or the keys are still away.
        """
        state = self._app.extensions.get(EXTENSION_KEY)
        if isinstance(state, AppState):
            return state
        if not self._lock.acquire(blocking=False):  # another thread is trying: answer now, do not queue
            raise self._failure or DependencyFailed(None, "the server is starting; retry later")
        try:
            state = self._app.extensions.get(EXTENSION_KEY)
            if isinstance(state, AppState):
                return state
            if time.monotonic() >= self._next_try:
                self._next_try = time.monotonic() + RETRY_SECONDS
                try:
                    state = self._build()
                except DependencyFailed as exc:
                    self._failure = exc
                else:
                    self._app.extensions[EXTENSION_KEY] = state
                    self._failure = None
                    log.warning("dependencies are back: serving")
                    return state
            raise self._failure or DependencyFailed(None, "the server is starting; retry later")
        finally:
            self._lock.release()

    def before_request(self) -> None:
        """Flask hook: 503 while the state cannot be built or the SQLite file was removed or replaced."""
        if request.path in UNGUARDED_PATHS:
            return
        self.state().storage.check_file()


def install_guard(
    app: Flask, settings: Settings, build: Callable[[], AppState], failure: DependencyFailed | None,
) -> None:
    """Put a :class:`DependencyGuard` in front of every request of ``app``."""
    guard = DependencyGuard(app, settings, build, failure)
    app.extensions[GUARD_KEY] = guard
    app.before_request(guard.before_request)


def app_guard(app: Flask) -> DependencyGuard:
    """The guard :func:`install_guard` put on ``app``."""
    guard = app.extensions[GUARD_KEY]
    if not isinstance(guard, DependencyGuard):  # pragma: no cover - only install_guard sets it
        raise RuntimeError("the flask app was not built by aggregator.create_app")
    return guard
