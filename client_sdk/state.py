"""The client's state: one encrypted file per client, written atomically.

What it holds (never sent anywhere): the 32-byte secret behind every
memoized noise, one :class:`~client_sdk.ledger.MetricRecord` per metric
(cohort, levels, the current window's value), the last verified signed config, the
signing keys learned from announcements in verified configs, the ledger events, any lost-state record and a generation counter. The outgoing
queue of sealed reports lives in its own file (:mod:`client_sdk.queue`).

File layout: ``"ONSC" || u8 version (2) || nonce (12) || AES-GCM(key, nonce,
json, aad = "onesided/client-state/v1")`` via :func:`protocol.crypto.encrypt_blob`.
The key is the host app's (16 or 32 bytes) or a 32-byte key file next to
the state, created with mode 0600 and refused when group or others may read it.

Writes go to a temporary file in the same folder, are fsync'ed, renamed
over the old file, and the folder is fsync'ed: a crash leaves the old or the
new state, never a mix. Any change to the file (one flipped byte) makes it
fail to open: :class:`StateCorrupted`. Temporary files a crash left behind
are removed on the next open.

Rollback: every save raises ``generation`` by one and then records it
outside the state file (:class:`GenerationFile`, ``<key_path>.gen``, or
:class:`KeyringGeneration` in the OS keyring). A state whose generation is
below the recorded one is an older copy put back (the ledger would forget
what was spent since): :class:`StateCorrupted` "rolled back". Undetectable:
the state restored together with its record, or an app key (``state_key``)
without the keyring (no record is kept then).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from protocol.crypto import b64d, b64e, decrypt_blob, encrypt_blob, key_id, write_private_file
from protocol.errors import DecryptError, OnesidedError, ParameterError, ReportRejected

from .ledger import LedgerEvent, MetricRecord
from .memo import SECRET_BYTES, check_secret

STATE_MAGIC = b"ONSC"
STATE_VERSION = 2  # 2: per-window memoization and ledger (a version-1 state does not open: its spend is charged as lost)
STATE_AAD = b"onesided/client-state/v1"
KEY_BYTES = 32
MAX_EVENTS = 200
KEYRING_SERVICE = "onesided-client"
# protocol.crypto.write_private_file's temporary names: "." + name + "." + 8 of [a-z2-7] + ".tmp"
# (8 of [a-z0-9_] from tempfile.mkstemp, which it used before: both are matched)
_TEMP_NAME = ".{name}.[a-z0-9_]{{8}}.tmp"

log = logging.getLogger("onesided.client")


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
    """Everything a client keeps between runs (mutable; guarded by the client's lock).

    ``waiting`` holds the values reported before the first verified config
    (metric, canonical value, kind, time): encrypted with the rest, never
    sent as they are; they are encoded, charged and queued when a config
    arrives. ``queue`` is a read-only view of the outgoing queue, which is stored in
    its own file (:class:`client_sdk.queue.ReportQueue`, attached by the
    client); it is not part of the state file. ``generation`` counts saves.
    ``learned_sign_keys`` maps key id to raw Ed25519 public key: signing keys
    announced (``aggregator.next_sign_public``) in configs that verified with a
    key this client already trusted (:class:`client_sdk.following.Following`).
    ``clock`` is the client's clock at the latest write, ``(trusted time,
    offset)`` (:meth:`client_sdk.servertime.ServerClock.checkpoint`, taken from
    ``clock_source`` at each write when set): after a restart, time never
    starts before it (a device clock set back while the app was not running).
    """

    secret: bytes
    metrics: dict[str, MetricRecord] = field(default_factory=dict)
    queue: Sequence[bytes] = field(default_factory=list, compare=False, repr=False)
    generation: int = 0
    events: list[LedgerEvent] = field(default_factory=list)
    lost: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] | None = None
    dropped: int = 0
    waiting: list[dict[str, Any]] = field(default_factory=list)
    learned_sign_keys: dict[str, bytes] = field(default_factory=dict)
    clock: tuple[float, float] | None = None
    clock_source: Callable[[], tuple[float, float]] | None = field(default=None, compare=False, repr=False)

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
        if self.clock_source is not None:
            self.clock = self.clock_source()
        data = {
            "version": STATE_VERSION,
            "secret": b64e(self.secret),
            "generation": self.generation,
            "metrics": {name: rec.to_dict() for name, rec in self.metrics.items()},
            "events": [e.to_dict() for e in self.events],
            "lost": self.lost,
            "config": self.config,
            "dropped": self.dropped,
            "waiting": self.waiting,
            "learned_sign_keys": {kid: b64e(raw) for kid, raw in sorted(self.learned_sign_keys.items())},
            **({} if self.clock is None else {"clock": {"trusted": self.clock[0], "offset": self.clock[1]}}),
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
            generation=int(data.get("generation", 0)),
            metrics={str(k): MetricRecord.from_dict(v) for k, v in data["metrics"].items()},
            events=[LedgerEvent.from_dict(e) for e in data["events"]],
            lost=list(data["lost"]),
            config=data["config"],
            dropped=int(data["dropped"]),
            waiting=[dict(w) for w in data.get("waiting", [])],
            learned_sign_keys=_sign_keys(data.get("learned_sign_keys", {})),
            clock=_clock_of(data.get("clock")),
        )


def _clock_of(data: Any) -> tuple[float, float] | None:
    """A state's ``clock`` (``None``: absent, as in a state written before it was kept, or not finite)."""
    if data is None:
        return None
    trusted, offset = float(data["trusted"]), float(data["offset"])
    return (trusted, offset) if math.isfinite(trusted) and math.isfinite(offset) else None


def _sign_keys(data: Any) -> dict[str, bytes]:
    """The learned signing keys of a state's JSON, each checked against its key id (``ValueError`` if not)."""
    if not isinstance(data, dict):
        raise ValueError("learned_sign_keys is not an object")
    keys = {}
    for kid, text in data.items():
        raw = b64d(text, "learned_sign_keys")
        if len(raw) != 32 or kid != key_id(raw):
            raise ValueError("learned_sign_keys holds a key that is not 32 bytes under its key id")
        keys[kid] = raw
    return keys


# Temp file in the same folder (0600), fsync, rename over the target, fsync the folder.
write_atomically = write_private_file


def _check_private(path: Path) -> None:
    try:
        info = path.stat()
    except OSError as exc:
        raise ParameterError("key_path", f"{path} cannot be read: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ParameterError("key_path", f"{path} is a directory, not a key file")
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ParameterError(
            "key_path", f"{path} must be readable by its owner only (0600), got {stat.S_IMODE(info.st_mode):04o}"
        )
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise ParameterError("key_path", f"{path} must belong to the user running the client")


def remove_temporary_files(path: Path) -> list[Path]:
    """Delete the temporary files a crashed atomic write of ``path`` left in its folder."""
    pattern = re.compile(_TEMP_NAME.format(name=re.escape(path.name)))
    prefix = f".{path.name}."
    removed = []
    with contextlib.suppress(OSError):
        # names as plain strings, filtered by prefix first: a folder shared by many clients' files
        # (an app with several states, the demo's hundreds) is read without a Path per entry
        for name in os.listdir(path.parent):
            if name.startswith(prefix) and pattern.fullmatch(name):
                candidate = path.parent / name
                with contextlib.suppress(OSError):
                    candidate.unlink()
                    removed.append(candidate)
    return removed


class GenerationRecord(Protocol):
    """Where the latest saved generation is kept, outside the state file."""

    def read(self) -> int | None:
        """The recorded generation (``None``: none recorded, or unreadable)."""

    def write(self, generation: int) -> None:
        """Record ``generation`` (best effort: a failure only weakens the check)."""


class GenerationFile:
    """``<key_path>.gen``: the generation as fixed-width decimal text, 0600, next to the key file.

    Created atomically, then overwritten in place (one fsync per save; the
    text never changes length). A torn or unreadable file reads as ``None``.
    """

    WIDTH = 20

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> int | None:
        try:
            text = self.path.read_text("ascii")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("generation record %s unreadable (%s); rollback not checked", self.path, type(exc).__name__)
            return None
        if not text.strip().isdigit():
            log.warning("generation record %s unreadable; rollback not checked", self.path)
            return None
        return int(text)

    def write(self, generation: int) -> None:
        data = f"{generation:0{self.WIDTH}d}\n".encode("ascii")
        try:
            if not self.path.exists():
                write_private_file(self.path, data)
                return
            fd = os.open(self.path, os.O_WRONLY)
            try:
                os.pwrite(fd, data, 0)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("generation record %s not written (%s)", self.path, exc.strerror)


class KeyringGeneration:
    """The generation in the OS keyring (the optional ``keyring`` package), one entry per state path."""

    def __init__(self, state_path: Path) -> None:
        try:
            import keyring  # noqa: PLC0415 - optional dependency, asked for by the app
        except ImportError:
            raise ParameterError(
                "rollback_keyring", "needs the optional 'keyring' package (pip install keyring)"
            ) from None
        self._keyring: Any = keyring
        self.username = str(state_path.resolve())

    def read(self) -> int | None:
        try:
            text = self._keyring.get_password(KEYRING_SERVICE, self.username)
        except Exception as exc:  # any backend failure: no record, never a crash
            log.warning("keyring unavailable (%s); rollback not checked", type(exc).__name__)
            return None
        return int(text) if isinstance(text, str) and text.isdigit() else None

    def write(self, generation: int) -> None:
        try:
            self._keyring.set_password(KEYRING_SERVICE, self.username, str(generation))
        except Exception as exc:  # best effort, as for the file
            log.warning("generation not written to the keyring (%s)", type(exc).__name__)


class StateStore:
    """Reads and writes one client's encrypted state file.

    Args:
        path: the state file.
        key: the host app's AES key (16 or 32 bytes); ``None`` uses ``key_path``.
        key_path: the key file (default ``<path>.key``), created on first use.
        rollback_keyring: record the generation in the OS keyring (needs
            ``keyring``) instead of ``<key_path>.gen``; the only record with an app key.
    """

    def __init__(self, path: str | os.PathLike[str], *, key: bytes | None = None,
                 key_path: str | os.PathLike[str] | None = None, rollback_keyring: bool = False) -> None:
        self.path = Path(path)
        if key is not None and (not isinstance(key, bytes) or len(key) not in (16, 32)):
            raise ParameterError("state_key", "must be 16 or 32 bytes")
        if key is not None and key_path is not None:
            raise ParameterError("key_path", "give either state_key or key_path, not both")
        self.key_path = None if key is not None else Path(key_path or f"{self.path}.key")
        self.queue_path = Path(f"{self.path}.queue")
        self._key = key
        self.generations: GenerationRecord | None = None
        if rollback_keyring:
            self.generations = KeyringGeneration(self.path)
        elif self.key_path is not None:
            self.generations = GenerationFile(Path(f"{self.key_path}.gen"))
        self._recorded = 0  # the highest generation seen recorded: a new state continues above it

    def key(self) -> bytes:
        """The AES key of the state and the queue (read once from the key file)."""
        if self._key is not None:
            return self._key
        if self.key_path is None:  # pragma: no cover - __init__ sets one of the two
            raise ParameterError("state_key", "is required")
        if not self.key_path.exists():
            raise StateCorrupted(self.path, f"its key file {self.key_path} is missing")
        _check_private(self.key_path)
        try:
            raw = b64d(self.key_path.read_text("ascii").strip(), "key_path")
        except (ReportRejected, UnicodeDecodeError) as exc:
            raise ParameterError("key_path", f"{self.key_path} is not a base64url key") from exc
        except OSError as exc:
            raise ParameterError("key_path", f"{self.key_path} cannot be read: {exc.strerror}") from None
        if len(raw) not in (16, 32):
            raise ParameterError("key_path", f"{self.key_path} must hold 16 or 32 bytes, got {len(raw)}")
        self._key = raw
        return raw

    def _create_key(self, key_path: Path) -> None:
        key_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(key_path, (b64e(os.urandom(KEY_BYTES)) + "\n").encode("ascii"))

    def _our_files(self) -> list[Path]:
        files = [self.path, self.queue_path]
        if self.key_path is not None:
            files += [self.key_path, Path(f"{self.key_path}.gen")]
        return files

    def load(self) -> ClientState | None:
        """The stored state, or ``None`` when this client has never run.

        Temporary files of interrupted writes are removed first.

        Raises:
            StateCorrupted: the file does not open or does not parse, it is
                missing while its key file exists (the state was lost), its
                key file is missing, or it is older than the recorded
                generation (rolled back).
            ParameterError: the state path is a directory (field ``state_path``);
                the key file is unreadable, a directory or too widely readable
                (field ``key_path``).
        """
        for path in self._our_files():
            for removed in remove_temporary_files(path):
                log.info("removed %s, left by an interrupted write", removed.name)
        self._recorded = (self.generations.read() if self.generations is not None else None) or 0
        if self.path.is_dir():
            raise ParameterError("state_path", f"{self.path} is a directory, not a state file")
        if not self.path.exists():
            if self.key_path is not None and self.key_path.exists():
                raise StateCorrupted(self.path, "the state file is missing but its key file exists")
            return None
        try:
            blob = self.path.read_bytes()
        except OSError as exc:
            raise ParameterError("state_path", f"{self.path} cannot be read: {exc.strerror}") from None
        state = self._decode(blob)
        if state.generation < self._recorded:
            raise StateCorrupted(
                self.path, f"rolled back: generation {state.generation} is older than the recorded {self._recorded} "
                "(an older copy of the state was put back)",
            )
        return state

    def _decode(self, blob: bytes) -> ClientState:
        header = STATE_MAGIC + bytes([STATE_VERSION])
        if blob[: len(header)] != header:
            raise StateCorrupted(self.path, "unknown file header")
        try:
            plain = decrypt_blob(self.key(), blob[len(header):], STATE_AAD)
        except DecryptError:
            raise StateCorrupted(self.path, "does not decrypt (tampered, truncated or wrong key)") from None
        try:
            return ClientState.from_json(plain)
        except (ValueError, KeyError, TypeError, ReportRejected) as exc:
            raise StateCorrupted(self.path, f"does not parse: {type(exc).__name__}") from None

    def save(self, state: ClientState) -> None:
        """Raise the generation, encrypt and write atomically, then record the generation.

        The key file is created on the first save. A new state (after a loss)
        continues above the recorded generation, so it is never taken for a rollback.
        """
        self.write(*self.seal(state))

    def seal(self, state: ClientState) -> tuple[bytes, int]:
        """:meth:`save` in two halves, for a write outside the client's lock: this half (under it)
        raises the generation and encrypts; :meth:`write` writes what it returns."""
        if self._key is None and self.key_path is not None and not self.key_path.exists():
            self._create_key(self.key_path)
        header = STATE_MAGIC + bytes([STATE_VERSION])
        generation = max(state.generation, self._recorded) + 1
        state.generation = generation
        return header + encrypt_blob(self.key(), state.to_json(), STATE_AAD), generation

    def write(self, blob: bytes, generation: int) -> None:
        """Write a sealed state atomically, then record its generation."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, blob)
        self._recorded = generation
        if self.generations is not None:
            self.generations.write(generation)

    def quarantine(self, suffix: str) -> Path | None:
        """Move an unreadable state file and its queue aside (kept for inspection, never sent)."""
        moved = None
        for path in (self.path, self.queue_path):
            if not path.exists() or path.is_dir():
                continue
            target = path.with_name(f"{path.name}.corrupt-{suffix}")
            os.replace(path, target)
            with contextlib.suppress(OSError):
                os.chmod(target, 0o600)
            moved = moved or target
        return moved


__all__ = [
    "ClientState",
    "GenerationFile",
    "KeyringGeneration",
    "StateCorrupted",
    "StateStore",
    "remove_temporary_files",
    "write_atomically",
]
