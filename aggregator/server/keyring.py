"""The aggregator's key directory: current keys, retired sealing keys, the announced next signing key,
and passphrase-encrypted backups of it all.

Layout of the key directory (mode 0700, every file 0600):

* ``seal_x25519.key``, ``sign_ed25519.key``: the current keys
  (:class:`protocol.crypto.AggregatorKeys`);
* ``retired/seal-<key id>.key`` with ``retired/retired.json``
  (``{key id: {"until": unix seconds}}``): sealing keys replaced by
  ``onesided keys rotate --seal``. Devices that fetched the config before the
  rotation keep sealing to the old key (offline queues); the server keeps
  opening such reports until the stated date, then the key is ignored.
* ``next_sign_ed25519.key``: a signing key announced by ``onesided keys
  rotate --sign``. The signed config carries it (``next_sign_public``,
  ``next_sign_key_id``); a device that verified the config with the key it
  pins starts trusting the announced one. The second ``rotate --sign`` makes
  it the current key.

Backups (``onesided keys backup``) hold every file of the directory,
encrypted with AES-256-GCM under a key derived from a passphrase with scrypt
(n = 2**17, r = 8, p = 1: ~128 MiB and a fraction of a second per try).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from protocol.crypto import (
    SEAL_KEY_FILE,
    AggregatorKeys,
    b64d,
    b64e,
    key_id,
    write_private_file,
)
from protocol.errors import OnesidedError, ParameterError

NEXT_SIGN_FILE = "next_sign_ed25519.key"
RETIRED_DIR = "retired"
RETIRED_INDEX = "retired.json"
BACKUP_FORMAT = "onesided-keys"
BACKUP_AAD = b"onesided-keys-v1"
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**17, 8, 1
MIN_PASSPHRASE = 12
MAX_BACKUP_BYTES = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class RetiredSealKey:
    """A sealing key that still opens reports sealed to it until ``until`` (Unix seconds)."""

    private: X25519PrivateKey
    until: int

    @property
    def key_id(self) -> str:
        return key_id(self.private.public_key().public_bytes_raw())


@dataclass(frozen=True, kw_only=True)
class KeyRing:
    """Everything in a key directory."""

    keys: AggregatorKeys
    retired: tuple[RetiredSealKey, ...] = ()
    next_sign: Ed25519PrivateKey | None = None

    def public_info(self) -> dict[str, str]:
        """The config's ``aggregator`` object, with the next signing key while one is announced."""
        from protocol.crypto import public_key_info

        nxt = None if self.next_sign is None else self.next_sign.public_key().public_bytes_raw()
        return public_key_info(self.keys.seal_public_raw, self.keys.sign_public_raw, next_sign_public=nxt)

    def open_until(self, now: float) -> list[X25519PrivateKey]:
        """The retired sealing keys still honoured at ``now``."""
        return [r.private for r in self.retired if now < r.until]

    def summary(self, now: float) -> dict[str, Any]:
        """The public keys, and the retired sealing keys (with their dates) when there are any."""
        info: dict[str, Any] = dict(self.public_info())
        if self.retired:
            info["retired_seal_keys"] = [
                {"key_id": r.key_id, "until": r.until, "honoured": now < r.until} for r in self.retired
            ]
        return info


def _read_key(path: Path) -> bytes:
    try:
        raw = b64d(path.read_text("ascii").strip(), path.name)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ParameterError(path.name, f"cannot read {path}: {exc}") from exc
    if len(raw) != 32:
        raise ParameterError(path.name, f"{path} does not hold a 32-byte key")
    return raw


def _write_key(path: Path, raw: bytes) -> None:
    write_private_file(path, (b64e(raw) + "\n").encode("ascii"))


def _private_dir(folder: Path) -> None:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)


def _retired_index(folder: Path) -> dict[str, dict[str, int]]:
    index = folder / RETIRED_DIR / RETIRED_INDEX
    if not index.exists():
        return {}
    try:
        data = json.loads(index.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ParameterError(RETIRED_INDEX, f"cannot read {index}: {exc}") from exc
    if not isinstance(data, dict):
        raise ParameterError(RETIRED_INDEX, f"{index} is not a JSON object")
    return data


def load_keyring(folder: str | os.PathLike[str]) -> KeyRing:
    """Read a key directory.

    Raises:
        ParameterError: a file is missing or damaged (field: its name).
    """
    path = Path(folder)
    if not path.is_dir():
        raise ParameterError("key_dir", f"{path} has no keys; run `onesided keys init` first")
    keys = AggregatorKeys.load(path)
    retired = tuple(
        RetiredSealKey(
            private=X25519PrivateKey.from_private_bytes(_read_key(path / RETIRED_DIR / f"seal-{kid}.key")),
            until=int(entry["until"]),
        )
        for kid, entry in sorted(_retired_index(path).items())
    )
    nxt_path = path / NEXT_SIGN_FILE
    nxt = Ed25519PrivateKey.from_private_bytes(_read_key(nxt_path)) if nxt_path.exists() else None
    return KeyRing(keys=keys, retired=retired, next_sign=nxt)


def rotate_seal(folder: str | os.PathLike[str], keep_seconds: int, *, now: float | None = None) -> KeyRing:
    """A new sealing key; the old one opens reports until ``now + keep_seconds``.

    The old key is written to ``retired/`` before the new one replaces it,
    so a crash in between loses nothing.
    """
    path = Path(folder)
    ring = load_keyring(path)
    stamp = time.time() if now is None else now
    old = ring.keys.seal_private
    old_id = key_id(old.public_key().public_bytes_raw())
    _private_dir(path / RETIRED_DIR)
    _write_key(path / RETIRED_DIR / f"seal-{old_id}.key", old.private_bytes_raw())
    index = _retired_index(path)
    index[old_id] = {"until": int(stamp + keep_seconds)}
    write_private_file(path / RETIRED_DIR / RETIRED_INDEX, json.dumps(index, sort_keys=True).encode("utf-8"))
    AggregatorKeys(seal_private=X25519PrivateKey.generate(), sign_private=ring.keys.sign_private).save(
        path, overwrite=True
    )
    return load_keyring(path)


def rotate_sign(folder: str | os.PathLike[str]) -> tuple[KeyRing, str]:
    """First call: announce a next signing key (``announced``); second: switch to it (``switched``)."""
    path = Path(folder)
    ring = load_keyring(path)
    if ring.next_sign is None:
        _write_key(path / NEXT_SIGN_FILE, Ed25519PrivateKey.generate().private_bytes_raw())
        return load_keyring(path), "announced"
    AggregatorKeys(seal_private=ring.keys.seal_private, sign_private=ring.next_sign).save(path, overwrite=True)
    (path / NEXT_SIGN_FILE).unlink()
    return load_keyring(path), "switched"


# --- backups ----------------------------------------------------------------


def _derive(passphrase: str, salt: bytes) -> bytes:
    return Scrypt(salt=salt, length=32, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P).derive(passphrase.encode("utf-8"))


def check_passphrase(passphrase: str) -> None:
    """Raises ParameterError (field ``passphrase``) for one under 12 characters."""
    if len(passphrase) < MIN_PASSPHRASE:
        raise ParameterError("passphrase", f"must be at least {MIN_PASSPHRASE} characters")


def backup_keys(folder: str | os.PathLike[str], destination: str | os.PathLike[str], passphrase: str) -> dict[str, Any]:
    """Write every file of the key directory, encrypted with ``passphrase``, to ``destination`` (0600).

    Raises:
        ParameterError: a short passphrase, or keys that do not load.
    """
    check_passphrase(passphrase)
    path = Path(folder)
    ring = load_keyring(path)  # refuses to back up a damaged directory
    files = {
        str(item.relative_to(path)): b64e(item.read_bytes())
        for item in sorted(path.rglob("*")) if item.is_file() and not item.name.startswith(".")
    }
    salt, nonce = os.urandom(16), os.urandom(12)
    plain = json.dumps({"files": files}, sort_keys=True).encode("utf-8")
    sealed = AESGCM(_derive(passphrase, salt)).encrypt(nonce, plain, BACKUP_AAD)
    document = {"format": BACKUP_FORMAT, "version": 1, "kdf": "scrypt", "n": SCRYPT_N, "r": SCRYPT_R,
                "p": SCRYPT_P, "salt": b64e(salt), "nonce": b64e(nonce), "ciphertext": b64e(sealed)}
    target = Path(destination)
    write_private_file(target, json.dumps(document, indent=1).encode("utf-8"))
    return {"destination": str(target), "files": sorted(files), **ring.public_info()}


def restore_keys(source: str | os.PathLike[str], folder: str | os.PathLike[str], passphrase: str, *,
                 overwrite: bool = False) -> KeyRing:
    """Write the files of a backup into the key directory (0700, files 0600) and load them.

    Raises:
        ParameterError: not a backup (``backup``), a wrong passphrase or a
            damaged file (``passphrase``), or keys exist and ``overwrite`` is
            false (``key_dir``).
    """
    return write_backup_files(open_backup(source, passphrase), folder, overwrite=overwrite)


def open_backup(source: str | os.PathLike[str], passphrase: str) -> dict[str, str]:
    """The files of a backup (name: base64url), decrypted; nothing is written.

    Raises:
        ParameterError: not a backup (``backup``), or a wrong passphrase or a
            damaged file (``passphrase``).
    """
    document = _read_backup(Path(source))
    try:
        key = _derive(passphrase, b64d(document["salt"], "salt"))
        plain = AESGCM(key).decrypt(b64d(document["nonce"], "nonce"), b64d(document["ciphertext"], "ciphertext"),
                                    BACKUP_AAD)
    except (InvalidTag, OnesidedError, ValueError, KeyError) as exc:
        raise ParameterError("passphrase", "does not open this backup (wrong passphrase, or a damaged file)") \
            from exc
    files: dict[str, str] = json.loads(plain)["files"]
    return files


def write_backup_files(files: dict[str, str], folder: str | os.PathLike[str], *, overwrite: bool = False) -> KeyRing:
    """Write the files of :func:`open_backup` into the key directory (0700, files 0600) and load them.

    Raises:
        ParameterError: keys exist and ``overwrite`` is false (``key_dir``),
            or a name points outside the directory (``backup``).
    """
    path = Path(folder)
    if (path / SEAL_KEY_FILE).exists() and not overwrite:
        raise ParameterError("key_dir", f"{path} already holds keys; restore into an empty folder or use --force")
    for name in files:  # every name is checked before the first file is written
        relative = Path(name)
        if relative.is_absolute() or ".." in relative.parts:
            raise ParameterError("backup", f"names a file outside the key directory: {name!r}")
    _private_dir(path)
    for name, text in files.items():
        relative = Path(name)
        if len(relative.parts) > 1:
            _private_dir(path / relative.parent)
        write_private_file(path / relative, b64d(text, name))
    return load_keyring(path)


def _read_backup(source: Path) -> dict[str, Any]:
    try:
        if source.stat().st_size > MAX_BACKUP_BYTES:
            raise ParameterError("backup", f"{source} is larger than a key backup can be")
        document = json.loads(source.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ParameterError("backup", f"cannot read {source}: {exc}") from exc
    if not isinstance(document, dict) or document.get("format") != BACKUP_FORMAT or document.get("version") != 1:
        raise ParameterError("backup", f"{source} is not a onesided key backup (version 1)")
    if (document.get("kdf"), document.get("n"), document.get("r"), document.get("p")) != (
            "scrypt", SCRYPT_N, SCRYPT_R, SCRYPT_P):
        raise ParameterError("backup", f"{source} uses key derivation parameters this version does not read")
    return document
