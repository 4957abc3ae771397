"""The report envelope: clear metadata whose AAD binds the sealed or plain payload; sealing and opening."""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy.typing as npt
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ..crypto import (
    PUBLIC_KEY_BYTES,
    b64d,
    b64e,
    ephemeral_keypair,
    open_sealed,
    raw_public_half,
    seal,
    x25519_backend,
)
from ..errors import ParameterError, ReportRejected
from .common import (
    MAX_BODY_BYTES,
    MAX_ROUND,
    MAX_WINDOW,
    REPORT_AAD_LABEL,
    REPORT_ID_BYTES,
    _digest,
    _int,
    _metric_name,
    _object,
)
from .payload import ReportPayload, _as_bits, pack_payload, unpack_payload


def report_aad(*, report_id: bytes, metric: str, params_digest: str, round: int, window: int) -> bytes:
    """``"onesided/report/v1" || report_id || u8 len || metric || digest || u32be round || u64be window``."""
    return REPORT_AAD_LABEL + _record_header(report_id, metric, params_digest, round, window)


def _record_header(report_id: bytes, metric: str, params_digest: str, round: int, window: int) -> bytes:
    name = metric.encode("ascii")
    return (
        report_id
        + bytes([len(name)])
        + name
        + bytes.fromhex(params_digest)
        + struct.pack(">IQ", round, window)
    )


@dataclass(frozen=True, kw_only=True)
class ReportEnvelope:
    """A report as sent: clear metadata plus exactly one of ``sealed`` or ``plain`` bytes.

    Validated at construction; errors name the bare field (``report_id``);
    the batch parsers put them under ``reports[i]``.
    """

    report_id: bytes
    metric: str
    round: int
    window: int
    params_digest: str
    sealed: bytes | None = None
    plain: bytes | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.report_id, bytes) or len(self.report_id) != REPORT_ID_BYTES:
            raise ReportRejected("report_id", f"must be {REPORT_ID_BYTES} bytes")
        _metric_name(self.metric, "metric")
        _int(self.round, "round", 0, MAX_ROUND)
        _int(self.window, "window", 0, MAX_WINDOW)
        _digest(self.params_digest, "params_digest")
        if (self.sealed is None) == (self.plain is None):
            raise ReportRejected("sealed", "exactly one of sealed and plain is required")
        name = "sealed" if self.sealed is not None else "plain"
        body = self.body
        if not isinstance(body, bytes) or not 0 < len(body) <= MAX_BODY_BYTES:
            raise ReportRejected(name, f"must be 1 to {MAX_BODY_BYTES} bytes")

    @property
    def body(self) -> bytes:
        """The sealed envelope or the plain payload."""
        return self.sealed if self.sealed is not None else self.plain  # type: ignore[return-value]

    @property
    def report_id_text(self) -> str:
        """``report_id`` in base64url, as in JSON and in results."""
        text: str | None = self.__dict__.get("_report_id_text")
        return b64e(self.report_id) if text is None else text

    def aad(self) -> bytes:
        """:func:`report_aad` of the metadata (kept from the batch by the parsers' fast paths)."""
        aad: bytes | None = self.__dict__.get("_aad")
        if aad is not None:
            return aad
        return report_aad(
            report_id=self.report_id,
            metric=self.metric,
            params_digest=self.params_digest,
            round=self.round,
            window=self.window,
        )

    @classmethod
    def _checked(
        cls, report_id: bytes, metric: str, round: int, window: int, params_digest: str, body_name: str,
        body: bytes, report_id_text: str | None, aad: bytes,
    ) -> ReportEnvelope:
        """An envelope whose fields a batch parser has already validated as ``__post_init__`` would.

        ``report_id_text`` (the canonical text of ``report_id``, when the
        batch had it) and ``aad`` are kept beside the fields (not fields:
        ``dataclasses.replace`` and ``==`` do not see them).
        """
        env = object.__new__(cls)
        env.__dict__.update({
            "report_id": report_id, "metric": metric, "round": round, "window": window,
            "params_digest": params_digest, "sealed": body if body_name == "sealed" else None,
            "plain": body if body_name == "plain" else None, "_report_id_text": report_id_text, "_aad": aad,
        })
        return env

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "report_id": self.report_id_text,
            "metric": self.metric,
            "round": self.round,
            "window": self.window,
            "params_digest": self.params_digest,
        }
        if self.sealed is not None:
            out["sealed"] = b64e(self.sealed)
        else:
            out["plain"] = b64e(self.plain)  # type: ignore[arg-type]
        return out

    @classmethod
    def from_json(cls, obj: Any) -> ReportEnvelope:
        """One report object of a JSON batch; errors name the bare field."""
        required = ("report_id", "metric", "round", "window", "params_digest")
        data = _object(obj, "", required, ("sealed", "plain"))
        if ("sealed" in data) == ("plain" in data):
            raise ReportRejected("sealed", "exactly one of sealed and plain is required")
        body_name = "sealed" if "sealed" in data else "plain"
        text = data[body_name]
        if isinstance(text, str) and len(text) > (MAX_BODY_BYTES * 4 + 2) // 3:
            raise ReportRejected(body_name, f"must be at most {MAX_BODY_BYTES} bytes")
        return cls(
            report_id=b64d(data["report_id"], "report_id"),
            metric=_metric_name(data["metric"], "metric"),
            round=_int(data["round"], "round", 0, MAX_ROUND),
            window=_int(data["window"], "window", 0, MAX_WINDOW),
            params_digest=_digest(data["params_digest"], "params_digest"),
            **{body_name: b64d(text, body_name)},
        )




REPORT_ID_LABEL = b"onesided/report-id/v1"


def sealed_report_id(sealed: bytes) -> bytes:
    """The id of a sealed report: ``SHA-256("onesided/report-id/v1" || enc)[:16]``, ``enc`` its ephemeral key.

    Binding the id to the body means whoever learns a queued id cannot post a
    forged report under it first: a forger would need a key whose hash is the
    id, and a body sealed under a known ``enc`` without its private key does
    not open. (A body shorter than a key gets an id that cannot match.)
    """
    return hashlib.sha256(REPORT_ID_LABEL + sealed[:PUBLIC_KEY_BYTES]).digest()[:REPORT_ID_BYTES]


def build_report(
    *,
    params_digest: str,
    metric: str,
    round: int,
    window: int,
    cohort: int,
    level: float,
    bits: npt.ArrayLike,
    seal_public: bytes | None,
    report_id: bytes | None = None,
    ephemeral_private: X25519PrivateKey | bytes | None = None,
) -> ReportEnvelope:
    """Pack and seal one report (``seal_public=None``: a plain report, simulations only).

    A sealed report's id is :func:`sealed_report_id` of its ephemeral key
    (``report_id`` may not be given); a plain report's id is ``report_id`` or
    16 bytes from ``os.urandom``. ``ephemeral_private`` is for test vectors only.
    """
    payload = pack_payload(ReportPayload(cohort=cohort, level=level, bits=_as_bits(bits)))
    if seal_public is None:
        return ReportEnvelope(
            report_id=os.urandom(REPORT_ID_BYTES) if report_id is None else report_id,
            metric=metric, round=round, window=window, params_digest=params_digest, plain=payload,
        )
    if report_id is not None:
        raise ParameterError("report_id", "a sealed report's id is derived from its ephemeral key; do not pass one")
    return seal_report(payload=payload, metric=metric, round=round, window=window, params_digest=params_digest,
                       seal_public=seal_public, ephemeral_private=ephemeral_private)


def seal_report(
    *,
    payload: bytes,
    metric: str,
    round: int,
    window: int,
    params_digest: str,
    seal_public: bytes,
    ephemeral_private: X25519PrivateKey | bytes | None = None,
    report_id: bytes | None = None,
) -> ReportEnvelope:
    """The seal step of :func:`build_report`: a packed payload sealed, its id taken from the ephemeral key.

    Sealing is a function of its inputs: the same payload, metadata and
    ephemeral key give the same envelope byte for byte (the nonce comes from
    the key schedule), so a report can be queued with its key and sealed later.

    Args:
        ephemeral_private: the report's ephemeral X25519 key (``None``: a fresh one).
        report_id: the id the caller fixed from the key's public half
            (:func:`sealed_report_id`); checked, never trusted.

    Raises:
        ParameterError: ``report_id`` is not the id of ``ephemeral_private`` (field ``report_id``).
    """
    ephemeral: X25519PrivateKey | bytes
    raw: bytes | None = None  # the public half, where libsodium made it (sealed from the raw halves then)
    if ephemeral_private is None:
        if x25519_backend() == "libsodium":
            ephemeral, raw = ephemeral_keypair()
        else:
            ephemeral = X25519PrivateKey.generate()
    elif isinstance(ephemeral_private, bytes):
        raw = raw_public_half(ephemeral_private)
        ephemeral = ephemeral_private if raw is not None else X25519PrivateKey.from_private_bytes(ephemeral_private)
    else:
        ephemeral = ephemeral_private
    enc = raw if raw is not None else ephemeral.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)  # type: ignore[union-attr]
    rid = sealed_report_id(enc)
    if report_id is not None and report_id != rid:
        raise ParameterError("report_id", "is not the id of this ephemeral key")
    aad = report_aad(report_id=rid, metric=metric, params_digest=params_digest, round=round, window=window)
    envelope = seal(seal_public, payload, aad, ephemeral_private=ephemeral, ephemeral_public=enc)
    return ReportEnvelope(report_id=rid, metric=metric, round=round, window=window, params_digest=params_digest,
                          sealed=envelope)


def open_report(
    envelope: ReportEnvelope,
    *,
    seal_private: X25519PrivateKey | bytes | None,
    num_bits: int,
    num_cohorts: int,
    allow_plain: bool,
) -> ReportPayload:
    """Open (or read, if plain and allowed) and validate a report's payload.

    Raises:
        DecryptError: the envelope does not open (status ``decrypt_error``).
        ReportRejected: ``plain`` when plaintext is not allowed, ``payload.*``
            when the payload is malformed (status ``invalid_message``).
    """
    if envelope.plain is not None:
        if not allow_plain:
            raise ReportRejected("plain", "plaintext reports are not accepted by this aggregator")
        data = envelope.plain
    else:
        if seal_private is None:
            raise ParameterError("seal_private", "is required to open a sealed report")
        check_report_id(envelope)
        data = open_sealed(seal_private, envelope.body, envelope.aad())
    return unpack_payload(data, num_bits=num_bits, num_cohorts=num_cohorts)


def check_report_id(report: ReportEnvelope, field: str = "report_id") -> None:
    """A sealed report's id must be :func:`sealed_report_id` of its body (status ``invalid_message``)."""
    if report.sealed is not None and report.report_id != sealed_report_id(report.sealed):
        raise ReportRejected(field, "does not match the sealed body (it is derived from the ephemeral key: "
                             "docs/wire.md 5)")
