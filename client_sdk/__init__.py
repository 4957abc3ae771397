"""onesided client SDK: on-device encoding, memoized randomization, ledger, sealed transport.

The host app embeds :class:`Client`; see ``docs/client.md``.
"""

from .client import AlreadyReported, Client, FlushResult, ReportsDropped
from .ledger import Ceiling, Ledger, LedgerEntry, LedgerEvent
from .lock import StateLocked
from .options import ClientOptions
from .state import StateCorrupted
from .transport import RetryPolicy, Transport, TransportError

__all__ = [
    "AlreadyReported",
    "Ceiling",
    "Client",
    "ClientOptions",
    "FlushResult",
    "Ledger",
    "LedgerEntry",
    "LedgerEvent",
    "ReportsDropped",
    "RetryPolicy",
    "StateCorrupted",
    "StateLocked",
    "Transport",
    "TransportError",
]
