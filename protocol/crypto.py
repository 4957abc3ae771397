"""Crypto envelopes: sealed reports, signed documents, aggregator keys, blobs at rest.

All primitives come from ``cryptography`` (docs/wire.md); the exact byte
layouts are specified in ``docs/wire.md`` sections 1, 6, 8 and 9. Where
PyNaCl is installed (``pip install 'onesided[sodium]'``), a sealing key's
public half and its exchange use libsodium's X25519 instead (the same RFC 7748
function, so the same bytes; its fixed-base key generation takes about half
of OpenSSL's time): :func:`x25519_backend` says which is in use.

* Sealing (DAP-like, HPKE-style base mode): ephemeral X25519, HKDF-SHA256,
  AES-128-GCM. ``envelope = pkE || ciphertext || tag``.
* Signing: Ed25519 over ``"onesided/sign/v1" || canonical_json(payload)``.
* :class:`AggregatorKeys`: the aggregator's two private keys and their files.
* :func:`encrypt_blob` / :func:`decrypt_blob`: AES-GCM for client state at rest.

>>> keys = AggregatorKeys.generate()
>>> env = seal(keys.seal_public_raw, b"bits", b"aad")
>>> open_sealed(keys.seal_private, env, b"aad")
b'bits'
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .canonical import canonical_json
from .errors import DecryptError, ParameterError, ReportRejected, SignatureError

SEAL_INFO = b"onesided/seal/v1"
SIGN_CONTEXT = b"onesided/sign/v1"
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
TAG_BYTES = 16
NONCE_BYTES = 12
SEAL_KEY_BYTES = 16
SEAL_OVERHEAD = PUBLIC_KEY_BYTES + TAG_BYTES
SEAL_KEY_FILE = "seal_x25519.key"
SIGN_KEY_FILE = "sign_ed25519.key"

_B64URL = re.compile(r"^[A-Za-z0-9_-]*$")


# --- base64url ------------------------------------------------------------


_TO_URL = bytes.maketrans(b"+/", b"-_")


def b64e(data: bytes) -> str:
    """Base64url without padding (RFC 4648 section 5)."""
    return binascii.b2a_base64(data, newline=False).translate(_TO_URL).rstrip(b"=").decode("ascii")


def b64d(text: Any, field: str) -> bytes:
    """Strict inverse of :func:`b64e`; any other text raises ``ReportRejected(field, ...)``.

    Padding, whitespace, characters outside the alphabet and non-canonical
    trailing bits are refused, so each byte string has exactly one text.
    """
    if not isinstance(text, str):
        raise ReportRejected(field, f"must be a base64url string, got {type(text).__name__}")
    if not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise ReportRejected(field, "is not unpadded base64url")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:  # pragma: no cover - the regex catches these first
        raise ReportRejected(field, "is not unpadded base64url") from exc
    if b64e(data) != text:
        raise ReportRejected(field, "is not canonical base64url (non-zero trailing bits)")
    return data


# --- sealing --------------------------------------------------------------


# HKDF-SHA256 (RFC 5869) written out over hashlib's SHA-256, for the one shape sealing uses: no salt
# (HMAC keyed with 32 zero bytes) and 28 bytes out (one block of the expand step). The same bytes as
# ``cryptography``'s HKDF at about two thirds of its cost: the extract step's two padded-key blocks are
# hashed once here, and no HKDF and HMAC objects are built per report (tests/test_device_cost.py
# compares the two).
_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))
_SHA256_BLOCK = 64
_EXTRACT_INNER = hashlib.sha256(bytes(_SHA256_BLOCK).translate(_IPAD))
_EXTRACT_OUTER = hashlib.sha256(bytes(_SHA256_BLOCK).translate(_OPAD))


def seal_key_nonce(shared: bytes, ephemeral_public: bytes, recipient_public: bytes) -> tuple[bytes, bytes]:
    """``HKDF-SHA256(salt=none, ikm=shared, info=SEAL_INFO || pkE || pkR, L=28)`` split 16 + 12: the AES key
    and nonce of a sealed report, for sealing and for opening (the server's opener calls it too)."""
    inner = _EXTRACT_INNER.copy()
    inner.update(shared)
    outer = _EXTRACT_OUTER.copy()
    outer.update(inner.digest())
    prk = outer.digest().ljust(_SHA256_BLOCK, b"\0")  # HKDF-Extract: HMAC(zeros, shared), as an HMAC key block
    info = SEAL_INFO + ephemeral_public + recipient_public + b"\x01"
    okm = hashlib.sha256(prk.translate(_OPAD) + hashlib.sha256(prk.translate(_IPAD) + info).digest()).digest()
    return okm[:SEAL_KEY_BYTES], okm[SEAL_KEY_BYTES:SEAL_KEY_BYTES + NONCE_BYTES]


X25519_BACKEND_ENV = "ONESIDED_X25519"  # "cryptography" keeps every X25519 operation in cryptography (OpenSSL)


@functools.lru_cache(maxsize=1)
def _sodium() -> tuple[Any, Any] | None:
    """libsodium's ``(crypto_scalarmult_base, crypto_scalarmult)`` through PyNaCl, loaded on first use
    (~20 ms: a sealing key is usually made off the caller's thread), or ``None``: PyNaCl not installed,
    or ``ONESIDED_X25519=cryptography``."""
    if os.environ.get(X25519_BACKEND_ENV, "").strip().lower() == "cryptography":
        return None
    try:
        from nacl.bindings import crypto_scalarmult, crypto_scalarmult_base
    except Exception:  # not installed, or a broken install: cryptography does the same work
        return None
    return crypto_scalarmult_base, crypto_scalarmult


def x25519_loaded() -> bool:
    """Whether the choice of :func:`x25519_backend` is made (libsodium loaded, or found absent): a thread
    that must not wait ~20 ms for PyNaCl's first import asks this first."""
    return _sodium.cache_info().currsize > 0


def x25519_backend() -> str:
    """``"libsodium"`` or ``"cryptography"``: which library makes sealing keys and their exchanges here."""
    return "cryptography" if _sodium() is None else "libsodium"


def _clamped(secret: bytes) -> bytes:
    """An X25519 private key in the form OpenSSL stores a generated one (RFC 7748's clamping applied;
    the function clamps anyway, so the key is the same)."""
    key = bytearray(secret)
    key[0] &= 248
    key[31] = (key[31] & 127) | 64
    return bytes(key)


def _x25519_private(key: X25519PrivateKey | bytes, field: str) -> X25519PrivateKey:
    if isinstance(key, X25519PrivateKey):
        return key
    if isinstance(key, bytes) and len(key) == PUBLIC_KEY_BYTES:
        return X25519PrivateKey.from_private_bytes(key)
    raise ParameterError(field, "must be an X25519 private key or its 32 raw bytes")


def ephemeral_keypair() -> tuple[bytes, bytes]:
    """A fresh X25519 key pair for one sealed report: ``(private, public)``, 32 raw bytes each.

    :func:`seal` with ``ephemeral_private=private`` produces an envelope that
    starts with ``public``, so a report's id can be fixed before it is sealed.
    With libsodium (:func:`x25519_backend`) the public half is its fixed-base
    multiplication (~17 us against OpenSSL's ~33 us for a key object with its
    halves); ``seal(..., ephemeral_private=private, ephemeral_public=public)``
    then exchanges with libsodium too, never loading a key object.
    """
    sodium = _sodium()
    if sodium is None:
        _, private, public = ephemeral_key()
        return private, public
    private = _clamped(os.urandom(PUBLIC_KEY_BYTES))
    return private, bytes(sodium[0](private))


def raw_public_half(private: bytes) -> bytes | None:
    """The public half of a raw 32-byte X25519 private key by libsodium (~17 us), or ``None`` where
    libsodium is not in use or ``private`` is not 32 bytes (the caller loads a key object)."""
    sodium = _sodium()
    if sodium is None or not isinstance(private, bytes) or len(private) != PUBLIC_KEY_BYTES:
        return None
    public: bytes = sodium[0](private)
    return public


def ephemeral_key() -> tuple[X25519PrivateKey, bytes, bytes]:
    """:func:`ephemeral_keypair` with the key object as well.

    Sealing with the object skips loading the raw bytes again, which derives
    the public half anew (an X25519 scalar multiplication, ~30 us).
    """
    key = X25519PrivateKey.generate()
    return key, key.private_bytes_raw(), key.public_key().public_bytes_raw()


@functools.lru_cache(maxsize=8)
def _recipient_key(recipient_public: bytes) -> X25519PublicKey:
    """The recipient's key object, loaded once: a client seals every report to the same aggregator key."""
    return X25519PublicKey.from_public_bytes(recipient_public)


def seal(
    recipient_public: bytes,
    plaintext: bytes,
    aad: bytes,
    *,
    ephemeral_private: X25519PrivateKey | bytes | None = None,
    ephemeral_public: bytes | None = None,
) -> bytes:
    """Seal ``plaintext`` to an X25519 public key (docs/wire.md section 6).

    Args:
        recipient_public: the aggregator's raw 32-byte X25519 public key.
        plaintext: the report payload.
        aad: associated data, authenticated but not encrypted.
        ephemeral_private: the report's own key, used for this report only
            (``None`` draws a fresh one).
        ephemeral_public: the raw public half of ``ephemeral_private``, when
            the caller has derived it already (a report's id is its hash);
            ``None`` derives it. A wrong one gives an envelope that does not
            open (the key schedule binds it).

    Returns:
        ``pkE (32) || AES-128-GCM(key, nonce, plaintext, aad) (len + 16)``.

    Raises:
        ParameterError: ``seal_public`` is not a valid X25519 public key.
    """
    if not isinstance(recipient_public, bytes) or len(recipient_public) != PUBLIC_KEY_BYTES:
        raise ParameterError("seal_public", f"must be {PUBLIC_KEY_BYTES} raw bytes")
    if ephemeral_public is not None and ephemeral_private is None:
        raise ParameterError("ephemeral_public", "is given only with ephemeral_private")
    raw = ephemeral_private if ephemeral_public is not None and isinstance(ephemeral_private, bytes) else None
    sodium = None if raw is None else _sodium()
    if raw is not None and ephemeral_public is not None and sodium is not None:
        # raw halves (ephemeral_keypair): libsodium's exchange, no key object to load
        if len(raw) != PUBLIC_KEY_BYTES:
            raise ParameterError("ephemeral_private", "must be an X25519 private key or its 32 raw bytes")
        eph_public = ephemeral_public
        try:
            shared = sodium[1](raw, recipient_public)
        except RuntimeError as exc:  # libsodium refuses an all-zero result (a low-order point), as OpenSSL does
            raise ParameterError("seal_public", "is a low-order point") from exc
    else:
        eph = X25519PrivateKey.generate() if ephemeral_private is None else _x25519_private(
            ephemeral_private, "ephemeral_private"
        )
        eph_public = eph.public_key().public_bytes_raw() if ephemeral_public is None else ephemeral_public
        try:
            shared = eph.exchange(_recipient_key(recipient_public))
        except ValueError as exc:
            raise ParameterError("seal_public", "is a low-order point") from exc
    key, nonce = seal_key_nonce(shared, eph_public, recipient_public)
    return eph_public + AESGCM(key).encrypt(nonce, plaintext, aad)


def open_sealed(recipient_private: X25519PrivateKey | bytes, envelope: bytes, aad: bytes) -> bytes:
    """Open an envelope made by :func:`seal`.

    Raises:
        DecryptError: short envelope, bad tag, wrong AAD, wrong key, low-order ``pkE``.
    """
    private = _x25519_private(recipient_private, "seal_private")
    if not isinstance(envelope, bytes) or len(envelope) < SEAL_OVERHEAD:
        raise DecryptError("sealed", f"envelope shorter than {SEAL_OVERHEAD} bytes")
    eph_public = envelope[:PUBLIC_KEY_BYTES]
    recipient_public = private.public_key().public_bytes_raw()
    try:
        shared = private.exchange(X25519PublicKey.from_public_bytes(eph_public))
    except ValueError as exc:
        raise DecryptError("sealed", "ephemeral key is a low-order point") from exc
    key, nonce = seal_key_nonce(shared, eph_public, recipient_public)
    try:
        return AESGCM(key).decrypt(nonce, envelope[PUBLIC_KEY_BYTES:], aad)
    except InvalidTag as exc:
        raise DecryptError("sealed", "envelope does not open (tampered, wrong key or wrong metadata)") from exc


# --- signatures -----------------------------------------------------------


def key_id(public_raw: bytes) -> str:
    """Hex of the first 8 bytes of ``SHA-256(raw public key)``."""
    return hashlib.sha256(public_raw).digest()[:8].hex()


def _signed_message(payload: Any, error: type[ParameterError] | type[SignatureError]) -> bytes:
    """``"onesided/sign/v1" || canonical_json(payload)``; ``error("payload", ...)`` if not JSON."""
    try:
        return SIGN_CONTEXT + canonical_json(payload)
    except (TypeError, ValueError) as exc:
        raise error("payload", f"is not canonical JSON: {exc}") from exc


def sign_document(private: Ed25519PrivateKey, payload: dict[str, Any]) -> dict[str, Any]:
    """``{"payload", "key_id", "signature"}`` with an Ed25519 signature (docs/wire.md 8.1).

    Raises:
        ParameterError: ``payload`` is not a JSON object of finite values.
    """
    if not isinstance(payload, dict):
        raise ParameterError("payload", "must be a JSON object")
    message = _signed_message(payload, ParameterError)
    public_raw = private.public_key().public_bytes_raw()
    return {"payload": payload, "key_id": key_id(public_raw), "signature": b64e(private.sign(message))}


def verify_document(public_raw: bytes, document: Any) -> dict[str, Any]:
    """Check a signed document against a pinned Ed25519 public key; return its payload.

    Raises:
        SignatureError: missing or extra fields (field named), a ``key_id``
            that is not the pinned key's, a malformed or wrong signature,
            a tampered payload.
    """
    if not isinstance(document, dict):
        raise SignatureError("document", "must be a JSON object")
    for name in ("payload", "key_id", "signature"):
        if name not in document:
            raise SignatureError(name, "is required")
    extra = sorted(set(document) - {"payload", "key_id", "signature"})
    if extra:
        raise SignatureError(extra[0], "is not a known field")
    payload = document["payload"]
    if not isinstance(payload, dict):
        raise SignatureError("payload", "must be a JSON object")
    if document["key_id"] != key_id(public_raw):
        raise SignatureError("key_id", "is not the pinned signing key")
    try:
        signature = b64d(document["signature"], "signature")
    except ReportRejected as exc:
        raise SignatureError("signature", exc.reason) from exc
    if len(signature) != SIGNATURE_BYTES:
        raise SignatureError("signature", f"must be {SIGNATURE_BYTES} bytes")
    try:
        Ed25519PublicKey.from_public_bytes(public_raw).verify(signature, _signed_message(payload, SignatureError))
    except InvalidSignature as exc:
        raise SignatureError("signature", "does not verify (wrong key or tampered payload)") from exc
    return payload


def public_key_info(
    seal_public: bytes, sign_public: bytes, next_sign_public: bytes | None = None
) -> dict[str, str]:
    """``{"seal_public", "seal_key_id", "sign_public", "sign_key_id"}`` (base64url keys, hex ids).

    During a signing-key rotation the config also announces the next signing key
    (``next_sign_public``, ``next_sign_key_id``): a client that verified the config with a
    key it trusts starts trusting the announced one, so configs signed by it verify after
    the switch.
    """
    info = {
        "seal_public": b64e(seal_public),
        "seal_key_id": key_id(seal_public),
        "sign_public": b64e(sign_public),
        "sign_key_id": key_id(sign_public),
    }
    if next_sign_public is not None:
        info["next_sign_public"] = b64e(next_sign_public)
        info["next_sign_key_id"] = key_id(next_sign_public)
    return info


# --- aggregator keys --------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AggregatorKeys:
    """The aggregator's private keys: X25519 (opening reports) and Ed25519 (signing).

    Stored as two files of raw 32-byte private keys, base64url text, mode 0600,
    in a 0700 directory.
    """

    seal_private: X25519PrivateKey
    sign_private: Ed25519PrivateKey

    def __post_init__(self) -> None:
        if not isinstance(self.seal_private, X25519PrivateKey):
            raise ParameterError("seal_private", "must be an X25519PrivateKey")
        if not isinstance(self.sign_private, Ed25519PrivateKey):
            raise ParameterError("sign_private", "must be an Ed25519PrivateKey")

    @classmethod
    def generate(cls) -> AggregatorKeys:
        return cls(seal_private=X25519PrivateKey.generate(), sign_private=Ed25519PrivateKey.generate())

    @property
    def seal_public_raw(self) -> bytes:
        return self.seal_private.public_key().public_bytes_raw()

    @property
    def sign_public_raw(self) -> bytes:
        return self.sign_private.public_key().public_bytes_raw()

    def public_info(self) -> dict[str, str]:
        """The ``aggregator`` object of the config (docs/wire.md 8.2)."""
        return public_key_info(self.seal_public_raw, self.sign_public_raw)

    def sign(self, payload: dict[str, Any]) -> dict[str, Any]:
        """:func:`sign_document` with this aggregator's signing key."""
        return sign_document(self.sign_private, payload)

    def save(self, directory: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        """Write both key files atomically (0600) into ``directory`` (created or set to 0700).

        Raises:
            ParameterError: a key file exists and ``overwrite`` is false.
        """
        folder = Path(directory)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        files = {
            SEAL_KEY_FILE: self.seal_private.private_bytes_raw(),
            SIGN_KEY_FILE: self.sign_private.private_bytes_raw(),
        }
        if not overwrite:
            for name in files:
                if (folder / name).exists():
                    raise ParameterError(name, f"{folder / name} exists; refusing to replace keys")
        for name, raw in files.items():
            write_private_file(folder / name, (b64e(raw) + "\n").encode("ascii"))

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> AggregatorKeys:
        """Read the key files written by :meth:`save`.

        Raises:
            ParameterError: a file is missing or corrupt; ``field`` is the file name.
        """
        folder = Path(directory)
        seal_raw = _read_private_file(folder / SEAL_KEY_FILE)
        sign_raw = _read_private_file(folder / SIGN_KEY_FILE)
        return cls(
            seal_private=X25519PrivateKey.from_private_bytes(seal_raw),
            sign_private=Ed25519PrivateKey.from_private_bytes(sign_raw),
        )


def write_private_file(path: Path, data: bytes) -> None:
    """Write ``data`` atomically with mode 0600: temp file in the same folder, fsync, rename, fsync the folder.

    The temporary file is ``"." + name + "." + 8 characters of [a-z2-7] + ".tmp"`` (the names
    :func:`tempfile.mkstemp` gives, with [a-z0-9_]), made with ``O_EXCL`` and written with
    ``os.write``: a client writes its state this way after every change, so no file object or
    name generator is built per write.
    """
    target = os.fspath(path)  # plain strings: this runs after every change of a client's state
    folder, name = os.path.split(target)
    folder = folder or "."
    while True:
        tmp = os.path.join(folder, f".{name}.{_temp_suffix()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        except FileExistsError:  # pragma: no cover - 40 random bits taken: draw again
            continue
        break
    try:
        try:
            os.fchmod(fd, 0o600)  # exactly 0600 whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _temp_suffix() -> str:
    """8 random characters of [a-z2-7] (base32 of 40 random bits)."""
    return base64.b32encode(os.urandom(5)).decode("ascii").lower()


def _read_private_file(path: Path) -> bytes:
    try:
        text = path.read_text("ascii").strip()
    except FileNotFoundError as exc:
        raise ParameterError(path.name, f"key file {path} is missing") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ParameterError(path.name, f"key file {path} cannot be read: {exc}") from exc
    try:
        raw = b64d(text, path.name)
    except ReportRejected as exc:
        raise ParameterError(path.name, f"key file {path} is corrupt: {exc.reason}") from exc
    if len(raw) != PUBLIC_KEY_BYTES:
        raise ParameterError(path.name, f"key file {path} is corrupt: {len(raw)} bytes, expected 32")
    return raw


# --- blobs at rest ---------------------------------------------------------


def _blob_cipher(key: bytes) -> AESGCM:
    if not isinstance(key, bytes) or len(key) not in (16, 32):
        raise ParameterError("key", "must be 16 or 32 bytes (AES-128-GCM or AES-256-GCM)")
    return AESGCM(key)


def encrypt_blob(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """``nonce (12 random bytes) || AES-GCM(key, nonce, plaintext, aad)``."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + _blob_cipher(key).encrypt(nonce, plaintext, aad)


def decrypt_blob(key: bytes, blob: bytes, aad: bytes) -> bytes:
    """Inverse of :func:`encrypt_blob`.

    Raises:
        DecryptError: short blob, wrong key, wrong ``aad`` or tampered bytes (field ``blob``).
    """
    cipher = _blob_cipher(key)
    if not isinstance(blob, bytes) or len(blob) < NONCE_BYTES + TAG_BYTES:
        raise DecryptError("blob", f"shorter than {NONCE_BYTES + TAG_BYTES} bytes")
    try:
        return cipher.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], aad)
    except InvalidTag as exc:
        raise DecryptError("blob", "does not open (wrong key, wrong aad or tampered)") from exc


__all__ = [
    "AggregatorKeys",
    "b64d",
    "b64e",
    "decrypt_blob",
    "ephemeral_key",
    "ephemeral_keypair",
    "encrypt_blob",
    "key_id",
    "open_sealed",
    "public_key_info",
    "raw_public_half",
    "seal",
    "seal_key_nonce",
    "sign_document",
    "verify_document",
    "write_private_file",
    "x25519_backend",
    "x25519_loaded",
]
