"""What a request handler needs from the running app: settings, storage, keys, envelope opener, offloader, faults.

``create_app`` stores one :class:`AppState` in ``app.extensions``;
blueprints (ours and those of later modules: rounds, estimates, releases)
read it with :func:`app_state` instead of importing globals.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from flask import current_app

from aggregator.server.clock_watch import ClockWatch
from aggregator.server.faults import Faults
from aggregator.server.keyring import KeyRing
from aggregator.server.opener import EnvelopeOpener
from aggregator.server.services.offload import Offloader
from aggregator.server.settings import Settings
from aggregator.server.storage import Storage
from protocol.crypto import AggregatorKeys

EXTENSION_KEY = "onesided"


@dataclass(frozen=True, kw_only=True)
class AppState:
    """The aggregator's process-wide state (thread-safe: storage pools its connections)."""

    settings: Settings
    storage: Storage
    keys: AggregatorKeys
    opener: EnvelopeOpener
    offloader: Offloader
    faults: Faults = field(default_factory=Faults)
    keyring: KeyRing | None = None  # retired sealing keys and the announced next signing key
    clock: Callable[[], float] = time.time  # injectable (create_app's ``clock``: simulated time in tests)
    clock_watch: ClockWatch = field(default_factory=ClockWatch)  # is the server's clock suspect?

    def now(self) -> float:
        """The server's clock (Unix seconds); one place to read it."""
        return self.clock()


def app_state() -> AppState:
    """The state of the app handling the current request."""
    state = current_app.extensions[EXTENSION_KEY]
    if not isinstance(state, AppState):  # pragma: no cover - only create_app sets it
        raise RuntimeError("the flask app was not built by aggregator.create_app")
    return state
