"""The client's state: one encrypted file per client, written atomically.

What it holds (never sent anywhere): the 32-byte secret behind every
memoized noise, one :class:`~client_sdk.ledger.MetricRecord` per metric
(cohort, levels, value fingerprints), the outgoing queue of sealed reports,
the last verified signed config, the ledger events and any lost-state record.

File layout: ``"ONSC" || u8 version (1) || nonce (12) || AES-GCM(key, nonce,
json, aad = "onesided/client-state/v1")`` via :func:`protocol.crypto.encrypt_blob`.
The key is the host app's (16 or 32 bytes) or a 32-byte key file next to
the state, created with mode 0600 and refused when group or others may read it.

Writes go to a temporary file in the same folder, are fsync'ed, renamed
over the old file, and the folder is fsync'ed: a crash leaves the old or the
new state, never a mix. Any change to the file (one flipped byte) makes it
fail to open: :class:`StateCorrupted`.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.crypto import b64d, b64e, decrypt_blob, encrypt_blob, write_private_file
from protocol.errors import DecryptError, OnesidedError, ParameterError, ReportRejected

from .ledger import LedgerEvent, MetricRecord
from .memo import SECRET_BYTES, check_secret

STATE_MAGIC = b"ONSC"
STATE_VERSION = 2  # 2: per-window memoization and ledger (a version-1 state does not open: its spend is charged as lost)
STATE_AAD = b"onesided/client-state/v1"
KEY_BYTES = 32
MAX_EVENTS = 200


class StateCorrupted(OnesidedError):
    """The state file does not open: tampered, truncated, wrong key, or missing next to its key file.

    The client never replaces it silently with a fresh secret; see the
    ``on_corrupt`` policy of :class:`client_sdk.Client`.
    """

    code = "state_corrupted"

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"client state {path}: {reason}")
        self.path = path
        self.reason = reason
        self.field = "state"


@dataclass(kw_only=True)
class ClientState:
    """Everything a client keeps between runs (mutable; guarded by the client's lock)."""

    secret: bytes
    metrics: dict[str, MetricRecord] = field(default_factory=dict)
    queue: list[dict[str, Any]] = field(default_factory=list)
    events: list[LedgerEvent] = field(default_factory=list)
    lost: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] | None = None
    dropped: int = 0

    def __post_init__(self) -> None:
        check_secret(self.secret)

    @classmethod
    def fresh(cls) -> ClientState:
        """A new state with a new secret from the operating system's CSPRNG."""
        return cls(secret=os.urandom(SECRET_BYTES))

    def record_event(self, event: LedgerEvent) -> None:
        """Keep the latest :data:`MAX_EVENTS` events."""
        self.events.append(event)
        del self.events[:-MAX_EVENTS]

    def to_json(self) -> bytes:
        data = {
            "version": STATE_VERSION,
            "secret": b64e(self.secret),
            "metrics": {name: rec.to_dict() for name, rec in self.metrics.items()},
            "queue": self.queue,
            "events": [e.to_dict() for e in self.events],
            "lost": self.lost,
            "config": self.config,
            "dropped": self.dropped,
        }
        return json.dumps(data, separators=(",", ":"), allow_nan=False).encode("utf-8")

    @classmethod
    def from_json(cls, text: bytes) -> ClientState:
        """Inverse of :meth:`to_json`; raises ``ValueError``/``KeyError``/``TypeError`` if malformed."""
        data = json.loads(text)
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"state version {data.get('version')!r} is not {STATE_VERSION}")
        return cls(
            secret=b64d(data["secret"], "secret"),
            metrics={str(k): MetricRecord.from_dict(v) for k, v in data["metrics"].items()},
            queue=list(data["queue"]),
            events=[LedgerEvent.from_dict(e) for e in data["events"]],
            lost=list(data["lost"]),
            config=data["config"],
            dropped=int(data["dropped"]),
        )


# Temp file in the same folder (0600), fsync, rename over the target, fsync the folder.
write_atomically = write_private_file


def _check_private(path: Path) -> None:
    info = path.stat()
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ParameterError(
            "key_path", f"{path} must be readable by its owner only (0600), got {stat.S_IMODE(info.st_mode):04o}"
        )
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise ParameterError("key_path", f"{path} must belong to the user running the client")


class StateStore:
    """Reads and writes one client's encrypted state file.

    Args:
        path: the state file.
        key: the host app's AES key (16 or 32 bytes); ``None`` uses ``key_path``.
        key_path: the key file (default ``<path>.key``), created on first use.
    """

    def __init__(self, path: str | os.PathLike[str], *, key: bytes | None = None,
                 key_path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path)
        if key is not None and (not isinstance(key, bytes) or len(key) not in (16, 32)):
            raise ParameterError("state_key", "must be 16 or 32 bytes")
        if key is not None and key_path is not None:
            raise ParameterError("key_path", "give either state_key or key_path, not both")
        self.key_path = None if key is not None else Path(key_path or f"{self.path}.key")
        self._key = key

    def _load_key(self) -> bytes:
        if self._key is not None:
            return self._key
        if self.key_path is None:  # pragma: no cover - __init__ sets one of the two
            raise ParameterError("state_key", "is required")
        _check_private(self.key_path)
        try:
            raw = b64d(self.key_path.read_text("ascii").strip(), "key_path")
        except (ReportRejected, UnicodeDecodeError) as exc:
            raise ParameterError("key_path", f"{self.key_path} is not a base64url key") from exc
        if len(raw) not in (16, 32):
            raise ParameterError("key_path", f"{self.key_path} must hold 16 or 32 bytes, got {len(raw)}")
        self._key = raw
        return raw

    def _create_key(self, key_path: Path) -> None:
        key_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(key_path, (b64e(os.urandom(KEY_BYTES)) + "\n").encode("ascii"))

    def load(self) -> ClientState | None:
        """The stored state, or ``None`` when this client has never run.

        Raises:
            StateCorrupted: the file does not open or does not parse, or it is
                missing while its key file exists (the state was lost).
            ParameterError: the key file is unreadable or too widely readable.
        """
        if not self.path.exists():
            if self.key_path is not None and self.key_path.exists():
                raise StateCorrupted(self.path, "the state file is missing but its key file exists")
            return None
        blob = self.path.read_bytes()
        header = STATE_MAGIC + bytes([STATE_VERSION])
        if blob[: len(header)] != header:
            raise StateCorrupted(self.path, "unknown file header")
        try:
            plain = decrypt_blob(self._load_key(), blob[len(header):], STATE_AAD)
        except DecryptError:
            raise StateCorrupted(self.path, "does not decrypt (tampered, truncated or wrong key)") from None
        try:
            return ClientState.from_json(plain)
        except (ValueError, KeyError, TypeError, ReportRejected) as exc:
            raise StateCorrupted(self.path, f"does not parse: {type(exc).__name__}") from None

    def save(self, state: ClientState) -> None:
        """Encrypt and write atomically (the key file is created on the first save)."""
        if self._key is None and self.key_path is not None and not self.key_path.exists():
            self._create_key(self.key_path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        header = STATE_MAGIC + bytes([STATE_VERSION])
        write_atomically(self.path, header + encrypt_blob(self._load_key(), state.to_json(), STATE_AAD))

    def quarantine(self, suffix: str) -> Path | None:
        """Move an unreadable state file aside (kept for inspection); returns its new path."""
        if not self.path.exists():
            return None
        target = self.path.with_name(f"{self.path.name}.corrupt-{suffix}")
        os.replace(self.path, target)
        with contextlib.suppress(OSError):
            os.chmod(target, 0o600)
        return target


__all__ = ["ClientState", "StateCorrupted", "StateStore", "write_atomically"]
