"""onesided client SDK: on-device encoding, memoized randomization, ledger, sealed transport.

The host app embeds :class:`Client`; see ``docs/client.md``. Every exception
an app may see is importable from here. The SDK logs to the ``onesided``
logger, which has a ``NullHandler``: it is silent unless the app configures
logging (``logging.getLogger("onesided").setLevel(logging.INFO)`` and a handler).
"""

import logging

from protocol.errors import (
    BudgetExceeded,
    OnesidedError,
    ParameterError,
    PolicyError,
    ReportRejected,
    SignatureError,
    TighteningRefused,
)

from .client import AlreadyReported, Client, ClockBehind, FlushResult, ReportsDropped
from .ledger import Budget, Ceiling, Ledger, LedgerEntry, LedgerEvent
from .lock import StateLocked
from .options import ClientOptions
from .state import StateCorrupted
from .status import ClientEvent, ReportsClipped, ReportStatus
from .transport import RetryPolicy, Transport, TransportError

logging.getLogger("onesided").addHandler(logging.NullHandler())

__all__ = [
    "AlreadyReported",
    "Budget",
    "BudgetExceeded",
    "Ceiling",
    "Client",
    "ClientEvent",
    "ClientOptions",
    "ClockBehind",
    "FlushResult",
    "Ledger",
    "LedgerEntry",
    "LedgerEvent",
    "OnesidedError",
    "ParameterError",
    "PolicyError",
    "ReportRejected",
    "ReportStatus",
    "ReportsClipped",
    "ReportsDropped",
    "RetryPolicy",
    "SignatureError",
    "StateCorrupted",
    "StateLocked",
    "TighteningRefused",
    "Transport",
    "TransportError",
]
