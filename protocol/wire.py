"""Versioned, validated wire schemas (the layouts are specified in ``docs/wire.md``).

* Report payload (the plaintext): ``u8 version || u16be cohort || f64be level
  || bits packed LSB-first`` (:func:`pack_payload`, :func:`unpack_payload`).
* Report envelope: clear metadata (``report_id``, ``metric``, ``round``,
  ``window``, ``params_digest``) plus a sealed or plain payload, whose AAD
  binds the metadata (:func:`report_aad`).
* Batches: JSON (:func:`parse_batch_json`) and binary
  ``application/vnd.onesided.batch`` (:func:`parse_batch_binary`).
* Per-report results (:class:`ReportResult`) and the upload response.
* The signed config and round announcements (:func:`verify_config`,
  :func:`validate_round_announcement`).

Every violation raises :class:`~protocol.errors.ReportRejected` whose
``field`` is a path such as ``reports[3].report_id`` or ``payload.cohort``.

>>> import numpy as np
>>> p = ReportPayload(cohort=3, level=1.5, bits=np.array([1, 0, 0, 0, 0, 0, 0, 0, 1], dtype=bool))
>>> pack_payload(p).hex()
'0100033ff80000000000000101'
>>> unpack_payload(pack_payload(p), num_bits=9, num_cohorts=4) == p
True
"""

from __future__ import annotations

import binascii
import hashlib
import math
import os
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from .crypto import (
    PUBLIC_KEY_BYTES,
    b64d,
    b64e,
    key_id,
    open_sealed,
    public_key_info,
    seal,
    verify_document,
)
from .errors import ParameterError, ReportRejected, SignatureError
from .params import NAME_PATTERN, MetricParams
from .randomizers import MAX_LEVEL

BoolArray = npt.NDArray[np.bool_]

WIRE_VERSION = 1
PAYLOAD_VERSION = 1
CONFIG_VERSION = 1
ROUND_VERSION = 1
REPORT_ID_BYTES = 16
DIGEST_BYTES = 32
MAX_BODY_BYTES = 2048
MAX_COHORT = 2**16 - 1
MAX_ROUND = 2**32 - 1
MAX_WINDOW = 2**63 - 1
PAYLOAD_HEADER = struct.Struct(">BHd")
REPORT_AAD_LABEL = b"onesided/report/v1"
CONTENT_TYPE_JSON = "application/json"
CONTENT_TYPE_BINARY = "application/vnd.onesided.batch"
BATCH_MAGIC = b"ONSB"
BODY_SEALED = 1
BODY_PLAIN = 2

STATUS_ACCEPTED = "accepted"
STATUS_REPLAYED = "replayed"
STATUS_INVALID_MESSAGE = "invalid_message"
STATUS_DECRYPT_ERROR = "decrypt_error"
STATUS_OUTDATED_CONFIG = "outdated_config"
STATUS_TOO_EARLY = "too_early"
STATUS_EXPIRED = "expired"
STATUS_UNKNOWN_METRIC = "unknown_metric"
#: Statuses a clock decides (the report's window against the server's clock). With a
#: ``retry_after`` they are not final: the client keeps the report and resends it later.
CLOCK_STATUSES: frozenset[str] = frozenset((STATUS_TOO_EARLY, STATUS_EXPIRED))
#: Request header a client sends to say it reads ``retry_after`` and ``server_time`` in upload
#: answers; without it the server answers as before (clients that predate the fields reject
#: unknown keys, so the server never sends them one).
WIRE_HEADER = "Onesided-Wire"
#: The value of :data:`WIRE_HEADER` that asks for them.
CLOCK_ANSWERS_VERSION = "2"
#: Longest ``retry_after`` the wire carries (one year, in seconds); clients cap it lower.
MAX_RETRY_AFTER = 366 * 86400
STATUSES: tuple[str, ...] = (
    STATUS_ACCEPTED,
    STATUS_REPLAYED,
    STATUS_INVALID_MESSAGE,
    STATUS_DECRYPT_ERROR,
    STATUS_OUTDATED_CONFIG,
    STATUS_TOO_EARLY,
    STATUS_EXPIRED,
    STATUS_UNKNOWN_METRIC,
)
CODE_TOO_MANY_REPORTS = "too_many_reports"
CODE_DUPLICATE_REPORT_ID = "duplicate_report_id"

_HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")


# --- small validators -------------------------------------------------------


def _int(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ReportRejected(field, f"must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise ReportRejected(field, f"must be in [{low}, {high}], got {value}")
    return int(value)


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
        raise ReportRejected(field, f"must be a number, got {type(value).__name__}")
    if math.isnan(value):
        raise ReportRejected(field, "must not be NaN")
    return float(value)


def _digest(value: Any, field: str) -> str:
    if not isinstance(value, str) or not _HEX_DIGEST.fullmatch(value):
        raise ReportRejected(field, "must be 64 lowercase hex characters (SHA-256)")
    return value


def _metric_name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise ReportRejected(field, f"must match {NAME_PATTERN.pattern}")
    return value


def _object(value: Any, field: str, required: Sequence[str], optional: Sequence[str] = ()) -> dict[str, Any]:
    """A JSON object with exactly the ``required`` keys and some of the ``optional`` ones."""
    if not isinstance(value, dict):
        raise ReportRejected(field, "must be a JSON object")
    prefix = f"{field}." if field else ""
    for name in required:
        if name not in value:
            raise ReportRejected(f"{prefix}{name}", "is required")
    unknown = sorted(set(value) - set(required) - set(optional))
    if unknown:
        raise ReportRejected(f"{prefix}{unknown[0]}", "is not a known field")
    return value


def _under(prefix: str, exc: ReportRejected) -> ReportRejected:
    """The same error with its field moved under ``prefix``."""
    field = ".".join(part for part in (prefix, exc.field) if part)
    return ReportRejected(field, exc.reason, exc.code)


def window_start(timestamp: float, time_precision: int) -> int:
    """``floor(timestamp / time_precision) * time_precision``: the report's ``window``."""
    if isinstance(time_precision, bool) or not isinstance(time_precision, int) or time_precision < 1:
        raise ParameterError("time_precision", f"must be an integer >= 1, got {time_precision!r}")
    return (math.floor(timestamp) // time_precision) * time_precision


# --- payload ---------------------------------------------------------------


def _as_bits(bits: Any) -> BoolArray:
    arr = np.asarray(bits)
    if arr.ndim != 1 or arr.size == 0:
        raise ReportRejected("payload.bits", f"must be a non-empty 1-D array, got shape {arr.shape}")
    if arr.dtype != np.bool_:
        if not np.issubdtype(arr.dtype, np.integer) or not np.isin(arr, (0, 1)).all():
            raise ReportRejected("payload.bits", "must be booleans or 0/1 integers")
        arr = arr.astype(bool)
    out = arr.copy()
    out.flags.writeable = False
    return out


@dataclass(frozen=True, kw_only=True, eq=False)
class ReportPayload:
    """What a report says, once opened.

    Attributes:
        cohort: the client's cohort, ``0 <= cohort <= 65535``.
        level: the noise level of the memoized bits (``> 0``, ``inf`` when trusted).
        bits: the reported bits, a read-only 1-D bool array.
    """

    cohort: int
    level: float
    bits: BoolArray

    def __post_init__(self) -> None:
        self.check_header(self.cohort, self.level)
        object.__setattr__(self, "bits", _as_bits(self.bits))

    @staticmethod
    def check_header(cohort: int, level: float) -> None:
        """The cohort is a u16, the level a number > 0 (``inf`` allowed, NaN not)."""
        _int(cohort, "payload.cohort", 0, MAX_COHORT)
        if not _number(level, "payload.level") > 0:
            raise ReportRejected("payload.level", f"must be > 0, got {level}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReportPayload):
            return NotImplemented
        return (
            self.cohort == other.cohort
            and self.level == other.level
            and np.array_equal(self.bits, other.bits)
        )

    __hash__ = None  # type: ignore[assignment]


def payload_size(num_bits: int) -> int:
    """``11 + ceil(num_bits / 8)``."""
    return PAYLOAD_HEADER.size + (num_bits + 7) // 8


def pack_payload(payload: ReportPayload) -> bytes:
    """``u8 1 || u16be cohort || f64be level || bits packed LSB-first`` (docs/wire.md 4)."""
    packed = np.packbits(payload.bits, bitorder="little").tobytes()
    return PAYLOAD_HEADER.pack(PAYLOAD_VERSION, payload.cohort, payload.level) + packed


def pack_payload_mask(*, cohort: int, level: float, mask: int, num_bits: int) -> bytes:
    """:func:`pack_payload` of bits given as an int (bit ``i`` of ``mask`` is bit ``i``): the same bytes.

    Packing LSB first is the little-endian bytes of the mask. For the
    client's one-report path, which never builds a bit array.
    """
    if isinstance(mask, bool) or not isinstance(mask, int) or mask < 0 or mask >> num_bits:
        raise ParameterError("bits", f"must be a mask of {num_bits} bits")
    return payload_header(cohort, level) + mask.to_bytes((num_bits + 7) // 8, "little")


def payload_header(cohort: int, level: float) -> bytes:
    """The payload's first 11 bytes, ``u8 1 || u16be cohort || f64be level``, checked.

    The bits follow, packed LSB first (:func:`pack_payload_mask`); the client
    makes the header once per metric and level.
    """
    ReportPayload.check_header(cohort, level)
    return PAYLOAD_HEADER.pack(PAYLOAD_VERSION, cohort, level)


class PayloadCheck:
    """The checks of :func:`unpack_payload` for one metric's ``num_bits`` and ``num_cohorts``, made once.

    :meth:`header` validates a payload exactly as :func:`unpack_payload` does
    (same order, same fields and messages) without building its bit array:
    the aggregator checks every report of a batch against the same metric and
    keeps the packed bits as they are.
    """

    __slots__ = ("num_bits", "num_cohorts", "size", "spare")

    def __init__(self, num_bits: int, num_cohorts: int) -> None:
        if isinstance(num_bits, bool) or not isinstance(num_bits, int) or num_bits < 1:
            raise ParameterError("num_bits", f"must be an integer >= 1, got {num_bits!r}")
        if isinstance(num_cohorts, bool) or not isinstance(num_cohorts, int) or not 1 <= num_cohorts <= MAX_COHORT + 1:
            raise ParameterError("num_cohorts", f"must be an integer in [1, 65536], got {num_cohorts!r}")
        self.num_bits = num_bits
        self.num_cohorts = num_cohorts
        self.size = payload_size(num_bits)
        self.spare = num_bits % 8

    def header(self, data: bytes) -> tuple[int, float]:
        """The payload's ``(cohort, level)``, all of it checked (bits: their padding).

        Raises:
            ReportRejected: fields ``payload`` (length), ``payload.version``,
                ``payload.cohort``, ``payload.bits`` (padding), ``payload.level``.
        """
        if len(data) != self.size:
            raise ReportRejected("payload", f"must be {self.size} bytes for {self.num_bits} bits, got {len(data)}")
        version, cohort, level = _PAYLOAD_HEADER_UNPACK(data)
        if version != PAYLOAD_VERSION:
            raise ReportRejected("payload.version", f"must be {PAYLOAD_VERSION}, got {version}")
        if cohort >= self.num_cohorts:
            raise ReportRejected("payload.cohort", f"must be < {self.num_cohorts}, got {cohort}")
        if self.spare and data[-1] >> self.spare:
            raise ReportRejected("payload.bits", "unused high bits of the last byte must be zero")
        if not level > 0:  # NaN too: ReportPayload.check_header tells the two apart
            ReportPayload.check_header(cohort, level)
        return cohort, level


_PAYLOAD_HEADER_UNPACK = PAYLOAD_HEADER.unpack_from


def unpack_payload(data: bytes, *, num_bits: int, num_cohorts: int) -> ReportPayload:
    """Parse and validate a payload for a metric of ``num_bits`` and ``num_cohorts``.

    Raises:
        ReportRejected: fields ``payload`` (length), ``payload.version``,
            ``payload.cohort``, ``payload.bits`` (padding), ``payload.level``.
    """
    cohort, level = PayloadCheck(num_bits, num_cohorts).header(data)
    packed = np.frombuffer(data, dtype=np.uint8, offset=PAYLOAD_HEADER.size)
    bits = np.unpackbits(packed, count=num_bits, bitorder="little").astype(bool)
    return ReportPayload(cohort=cohort, level=level, bits=bits)


# --- envelopes ---------------------------------------------------------------


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


def _check_batch_size(count: int, max_reports: int) -> None:
    if count == 0:
        raise ReportRejected("reports", "must contain at least one report")
    if count > max_reports:
        raise ReportRejected(
            "reports", f"has {count} reports, the limit is {max_reports}", code=CODE_TOO_MANY_REPORTS
        )


def check_report_id(report: ReportEnvelope, field: str = "report_id") -> None:
    """A sealed report's id must be :func:`sealed_report_id` of its body (status ``invalid_message``)."""
    if report.sealed is not None and report.report_id != sealed_report_id(report.sealed):
        raise ReportRejected(field, "does not match the sealed body (it is derived from the ephemeral key: "
                             "docs/wire.md 5)")


def _check_unique(reports: Sequence[ReportEnvelope]) -> None:
    seen: set[bytes] = set()
    for i, report in enumerate(reports):
        if report.report_id in seen:
            raise ReportRejected(
                f"reports[{i}].report_id", "repeats an earlier report_id of this batch", code=CODE_DUPLICATE_REPORT_ID
            )
        seen.add(report.report_id)


def parse_batch_json(obj: Any, *, max_reports: int) -> list[ReportEnvelope]:
    """Validate a JSON batch ``{"version": 1, "reports": [...]}`` (docs/wire.md 7.1, 7.3).

    Raises:
        ReportRejected: the first violation, field by path; code
            ``too_many_reports`` or ``duplicate_report_id`` where they apply.
    """
    data = _object(obj, "", ("version", "reports"))
    if isinstance(data["version"], bool) or data["version"] != WIRE_VERSION:
        raise ReportRejected("version", f"must be {WIRE_VERSION}, got {data['version']!r}")
    items = data["reports"]
    if not isinstance(items, list):
        raise ReportRejected("reports", "must be a list")
    _check_batch_size(len(items), max_reports)
    fast = _fast_json_reports(items)
    if fast is not None:
        return fast
    reports = []
    for i, item in enumerate(items):
        try:
            reports.append(ReportEnvelope.from_json(item))
        except ReportRejected as exc:
            raise _under(f"reports[{i}]", exc) from None
    for i, report in enumerate(reports):
        check_report_id(report, f"reports[{i}].report_id")
    _check_unique(reports)
    return reports


def encode_batch_json(reports: Sequence[ReportEnvelope]) -> dict[str, Any]:
    """The JSON form of a batch."""
    return {"version": WIRE_VERSION, "reports": [r.to_json() for r in reports]}


def encode_batch_binary(reports: Sequence[ReportEnvelope]) -> bytes:
    """The binary form (docs/wire.md 7.2): magic, version, count, records."""
    parts = [BATCH_MAGIC, struct.pack(">BI", WIRE_VERSION, len(reports))]
    for r in reports:
        kind = BODY_SEALED if r.sealed is not None else BODY_PLAIN
        parts.append(_record_header(r.report_id, r.metric, r.params_digest, r.round, r.window))
        parts.append(struct.pack(">BH", kind, len(r.body)))
        parts.append(r.body)
    return b"".join(parts)


class _Reader:
    """A cursor over a binary batch; running out names the field."""

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int, field: str) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise ReportRejected(field, "truncated")
        out = bytes(self.data[self.pos : end])
        self.pos = end
        return out

    def unpack(self, fmt: str, field: str) -> tuple[int, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), field))


def _read_record(reader: _Reader) -> ReportEnvelope:
    report_id = reader.take(REPORT_ID_BYTES, "report_id")
    (name_len,) = reader.unpack(">B", "metric")
    try:
        metric = reader.take(name_len, "metric").decode("ascii")
    except UnicodeDecodeError:
        raise ReportRejected("metric", "must be ASCII") from None
    digest = reader.take(DIGEST_BYTES, "params_digest").hex()
    round_, window = reader.unpack(">IQ", "window")
    kind, length = reader.unpack(">BH", "kind")
    if kind not in (BODY_SEALED, BODY_PLAIN):
        raise ReportRejected("kind", f"must be {BODY_SEALED} (sealed) or {BODY_PLAIN} (plain), got {kind}")
    name = "sealed" if kind == BODY_SEALED else "plain"
    body = reader.take(length, name)
    return ReportEnvelope(
        report_id=report_id, metric=metric, round=round_, window=window, params_digest=digest, **{name: body}
    )


def parse_batch_binary(data: bytes, *, max_reports: int) -> list[ReportEnvelope]:
    """Validate a binary batch; the same errors as :func:`parse_batch_json`.

    Raises:
        ReportRejected: ``magic``, ``version``, ``reports`` (count, trailing
            bytes), ``reports[i].<field>``.
    """
    reader = _Reader(data)
    if reader.take(len(BATCH_MAGIC), "magic") != BATCH_MAGIC:
        raise ReportRejected("magic", f"must be {BATCH_MAGIC!r}")
    (version,) = reader.unpack(">B", "version")
    if version != WIRE_VERSION:
        raise ReportRejected("version", f"must be {WIRE_VERSION}, got {version}")
    (count,) = reader.unpack(">I", "reports")
    _check_batch_size(count, max_reports)
    fast = _fast_binary_reports(data, reader.pos, count)
    if fast is not None:
        return fast
    reports = []
    for i in range(count):
        try:
            reports.append(_read_record(reader))
        except ReportRejected as exc:
            raise _under(f"reports[{i}]", exc) from None
    if reader.pos != len(reader.data):
        raise ReportRejected("reports", f"{len(reader.data) - reader.pos} trailing bytes after the last report")
    for i, report in enumerate(reports):
        check_report_id(report, f"reports[{i}].report_id")
    _check_unique(reports)
    return reports


# --- batch fast paths ------------------------------------------------------------
#
# A batch is parsed by a fast path that validates every report at once and
# gives up (``None``) at the first thing it does not expect; the careful
# parser then runs on the whole batch, so every rejection (which error, which
# field, which report first) and every unusual but valid batch (mixed sealed
# and plain reports, bodies that need padding) takes the careful path. The
# fast path accepts only batches the careful one accepts, with equal
# envelopes: tests/test_wire_fast.py compares the two.

_SEALED_KEYS = frozenset(("report_id", "metric", "round", "window", "params_digest", "sealed"))
_PLAIN_KEYS = frozenset(("report_id", "metric", "round", "window", "params_digest", "plain"))
_B64URL_TEXT = re.compile(r"[A-Za-z0-9_-]*")
_URL_TO_STD = bytes.maketrans(b"-_", b"+/")
_MAX_BODY_TEXT = (MAX_BODY_BYTES * 4 + 2) // 3
_REPORT_ID_TEXT = (REPORT_ID_BYTES * 4 + 2) // 3
# Canonical unpadded base64url: after 2 (3) characters of a last quad, the last one's low 4 (2) bits are unused.
_LAST_CHARS = {
    2: frozenset("AQgw"),
    3: frozenset("AEIMQUYcgkosw048"),
}
_FILL = ("", "", "AA", "A")
_ROUND_WINDOW = struct.Struct(">IQ")
_RECORD_FIXED = struct.Struct(">16sB")
_KIND_LENGTH = struct.Struct(">BH")


def _b64_many(texts: list[str]) -> list[bytes] | None:
    """Strict base64url decoding (as :func:`~protocol.crypto.b64d`) of many strings in one C call.

    ``None`` when any is not canonical unpadded base64url. Each text is
    completed to whole quads with ``A`` (zero bits) and the decoded bytes cut
    back to its own length.
    """
    filled = []
    for text in texts:
        rest = len(text) % 4
        if rest:
            if rest == 1 or text[-1] not in _LAST_CHARS[rest]:
                return None
            text += _FILL[rest]
        filled.append(text)
    joined = "".join(filled)
    if not _B64URL_TEXT.fullmatch(joined):
        return None
    raw = binascii.a2b_base64(joined.encode("ascii").translate(_URL_TO_STD))
    out = []
    start = 0
    for text in texts:
        out.append(raw[start : start + len(text) * 3 // 4])
        start += (len(text) + 3) // 4 * 3
    return out


def _valid_once(values: list[Any], check: Any, field: str) -> bool:
    """Every distinct value passes ``check(value, field)`` (a ``_metric_name``-like validator)."""
    try:
        for value in set(values):
            check(value, field)
    except (TypeError, ReportRejected):  # unhashable, or invalid: the careful parser names it
        return False
    return True


def _ints_in(values: list[Any], high: int) -> bool:
    """All plain ``int`` (not ``bool``) in ``[0, high]``."""
    return set(map(type, values)) == {int} and min(values) >= 0 and max(values) <= high


def _aad_parts(metrics: list[str], digests: list[str]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    names = {m: bytes([len(m)]) + m.encode("ascii") for m in set(metrics)}
    return names, {d: bytes.fromhex(d) for d in set(digests)}


def _finish(reports: list[ReportEnvelope]) -> list[ReportEnvelope] | None:
    """The batch's whole-batch checks (sealed ids, unique ids); ``None`` if one fails."""
    if len({r.report_id for r in reports}) != len(reports):
        return None
    for r in reports:
        if r.sealed is not None and r.report_id != sealed_report_id(r.sealed):
            return None
    return reports


def _fast_json_reports(items: list[Any]) -> list[ReportEnvelope] | None:
    """:func:`parse_batch_json`'s reports for a batch of only sealed (or only plain) reports, or ``None``."""
    first = items[0]
    if type(first) is not dict:
        return None
    body_name = "sealed" if "sealed" in first else "plain"
    keys = _SEALED_KEYS if body_name == "sealed" else _PLAIN_KEYS
    for item in items:
        if type(item) is not dict or item.keys() != keys:
            return None
    id_texts = [item["report_id"] for item in items]
    metrics = [item["metric"] for item in items]
    rounds = [item["round"] for item in items]
    windows = [item["window"] for item in items]
    digests = [item["params_digest"] for item in items]
    texts = [item[body_name] for item in items]
    if set(map(type, id_texts)) != {str} or set(map(type, texts)) != {str}:
        return None
    if set(map(len, id_texts)) != {_REPORT_ID_TEXT} or not all(0 < len(t) <= _MAX_BODY_TEXT for t in texts):
        return None
    if not (_ints_in(rounds, MAX_ROUND) and _ints_in(windows, MAX_WINDOW)):
        return None
    if not (_valid_once(metrics, _metric_name, "metric") and _valid_once(digests, _digest, "params_digest")):
        return None
    report_ids = _b64_many(id_texts)
    bodies = _b64_many(texts)
    if report_ids is None or bodies is None or not all(0 < len(b) <= MAX_BODY_BYTES for b in bodies):
        return None
    names, digest_bytes = _aad_parts(metrics, digests)
    pack = _ROUND_WINDOW.pack
    checked = ReportEnvelope._checked
    return _finish([
        checked(rid, metric, round_, window, digest, body_name, body, text,
                REPORT_AAD_LABEL + rid + names[metric] + digest_bytes[digest] + pack(round_, window))
        for rid, text, metric, round_, window, digest, body in zip(
            report_ids, id_texts, metrics, rounds, windows, digests, bodies, strict=True)
    ])


def _fast_binary_reports(data: bytes, pos: int, count: int) -> list[ReportEnvelope] | None:
    """:func:`parse_batch_binary`'s reports read from ``pos``, or ``None`` at anything unexpected."""
    data = bytes(data)
    size = len(data)
    names: dict[bytes, str | None] = {}
    digests: dict[bytes, str] = {}
    unpack_fixed, unpack_rw, unpack_kl = _RECORD_FIXED.unpack_from, _ROUND_WINDOW.unpack_from, _KIND_LENGTH.unpack_from
    checked = ReportEnvelope._checked
    reports = []
    for _ in range(count):
        start = pos
        if pos + 17 > size:
            return None
        report_id, name_len = unpack_fixed(data, pos)
        pos += 17
        name_raw = data[pos : pos + name_len]
        pos += name_len
        digest_raw = data[pos : pos + DIGEST_BYTES]
        pos += DIGEST_BYTES
        if pos + 15 > size:
            return None
        round_, window = unpack_rw(data, pos)
        kind, length = unpack_kl(data, pos + 12)
        header_end = pos + 12
        pos += 15
        body = data[pos : pos + length]
        pos += length
        if pos > size or kind not in (BODY_SEALED, BODY_PLAIN) or not 0 < length <= MAX_BODY_BYTES:
            return None
        if window > MAX_WINDOW:
            return None
        metric = names.get(name_raw, "")
        if metric == "":
            metric = names[name_raw] = _binary_metric_name(name_raw)
        if metric is None:
            return None
        digest = digests.get(digest_raw)
        if digest is None:
            digest = digests[digest_raw] = digest_raw.hex()
        reports.append(checked(report_id, metric, round_, window, digest,
                               "sealed" if kind == BODY_SEALED else "plain", body, None,
                               REPORT_AAD_LABEL + data[start:header_end]))
    if pos != size:
        return None
    return _finish(reports)


def _binary_metric_name(raw: bytes) -> str | None:
    """A record's metric name as the careful parser reads it, or ``None`` if it would refuse it."""
    try:
        return _metric_name(raw.decode("ascii"), "metric")
    except (UnicodeDecodeError, ReportRejected):
        return None


# --- client and aggregator ends ---------------------------------------------------


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
    ephemeral = ephemeral_private if ephemeral_private is not None else X25519PrivateKey.generate()
    if isinstance(ephemeral, bytes):
        ephemeral = X25519PrivateKey.from_private_bytes(ephemeral)
    enc = ephemeral.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    rid = sealed_report_id(enc)
    if report_id is not None and report_id != rid:
        raise ParameterError("report_id", "is not the id of this ephemeral key")
    aad = report_aad(report_id=rid, metric=metric, params_digest=params_digest, round=round, window=window)
    envelope = seal(seal_public, payload, aad, ephemeral_private=ephemeral)
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


# --- results ------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ReportResult:
    """The outcome of one report of a batch (``report_id`` in base64url).

    ``retry_after`` (seconds, ``1 <= retry_after <= MAX_RETRY_AFTER``) is set only on a
    clock status (``too_early``, ``expired``) the server does not hold final: the report
    was refused by a clock that may be wrong (the device's or the server's), so the client
    keeps it and resends it no sooner than that many seconds later. ``None`` (the key absent
    on the wire): the status is final, as every status was before the field existed.
    """

    report_id: str
    status: str
    field: str | None = None
    detail: str | None = None
    retry_after: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.report_id, str):
            raise ReportRejected("report_id", "must be a base64url string")
        if self.status not in STATUSES:
            raise ReportRejected("status", f"must be one of {STATUSES}, got {self.status!r}")
        for name in ("field", "detail"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise ReportRejected(name, "must be a string or null")
        if self.retry_after is not None:
            _int(self.retry_after, "retry_after", 1, MAX_RETRY_AFTER)
            if self.status not in CLOCK_STATUSES:
                raise ReportRejected("retry_after", f"only on {sorted(CLOCK_STATUSES)}, got {self.status!r}")

    @property
    def final(self) -> bool:
        """Whether the client is done with this report (``False``: keep it, resend later)."""
        return self.retry_after is None

    @classmethod
    def of(
        cls, report_id: str, status: str, detail: str | None = None, retry_after: int | None = None
    ) -> ReportResult:
        """A result the aggregator makes itself: ``status`` one of :data:`STATUSES`, ``report_id`` and
        ``detail`` strings (or ``detail`` ``None``), ``retry_after`` as the class says, taken as they
        are (no checks, no field)."""
        result = object.__new__(cls)
        result.__dict__.update(
            {"report_id": report_id, "status": status, "field": None, "detail": detail, "retry_after": retry_after}
        )
        return result

    @classmethod
    def from_error(cls, report_id: bytes, error: ReportRejected) -> ReportResult:
        """A rejection: the status is the error's code when it is a status, else ``invalid_message``."""
        status = error.code if error.code in STATUSES else STATUS_INVALID_MESSAGE
        return cls(report_id=b64e(report_id), status=status, field=error.field, detail=error.reason)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object; ``retry_after`` only when set (so final results are as before)."""
        item: dict[str, Any] = {"report_id": self.report_id, "status": self.status, "field": self.field, "detail": self.detail}
        if self.retry_after is not None:
            item["retry_after"] = self.retry_after
        return item

    @classmethod
    def from_dict(cls, obj: Any) -> ReportResult:
        data = _object(obj, "", ("report_id", "status"), ("field", "detail", "retry_after"))
        return cls(
            report_id=data["report_id"], status=data["status"], field=data.get("field"), detail=data.get("detail"),
            retry_after=data.get("retry_after"),
        )


def upload_response(results: Sequence[ReportResult], server_time: int | None = None) -> dict[str, Any]:
    """``{"results": [...], "accepted": n}``, with ``"server_time"`` (Unix seconds of the server's
    clock when it judged the batch) when given: a client compares it with its own clock."""
    items = [r.to_dict() for r in results]
    body: dict[str, Any] = {
        "results": items, "accepted": [item["status"] for item in items].count(STATUS_ACCEPTED)
    }
    if server_time is not None:
        body["server_time"] = server_time
    return body


def parse_upload_response(obj: Any) -> list[ReportResult]:
    """Validate a ``POST /v1/reports`` 200 body (client side); :func:`upload_server_time` reads
    its optional ``server_time``."""
    data = _object(obj, "", ("results", "accepted"), ("server_time",))
    if not isinstance(data["results"], list):
        raise ReportRejected("results", "must be a list")
    results = []
    for i, item in enumerate(data["results"]):
        try:
            results.append(ReportResult.from_dict(item))
        except ReportRejected as exc:
            raise _under(f"results[{i}]", exc) from None
    accepted = sum(r.status == STATUS_ACCEPTED for r in results)
    if _int(data["accepted"], "accepted", 0, len(results)) != accepted:
        raise ReportRejected("accepted", f"says {data['accepted']} but {accepted} results are accepted")
    upload_server_time(data)
    return results


def upload_server_time(obj: Any) -> int | None:
    """The ``server_time`` of an upload response (Unix seconds), or ``None`` when absent."""
    if not isinstance(obj, dict) or obj.get("server_time") is None:
        return None
    return _int(obj["server_time"], "server_time", 0, MAX_WINDOW)


# --- round announcements --------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RoundAnnouncement:
    """A signed relaxation round (docs/wire.md 8.3). Errors name the field.

    ``irr_p``, ``irr_q``: the metric's instantaneous randomized response after the round
    (asymmetric mode: ``irr_q`` only), or both ``None``: the IRR is unchanged (and neither
    key is on the wire, so an announcement without them is byte for byte as before). A round
    that sets an IRR may keep the level (``level_to == level_from``); one that does not must
    raise it. Whether the IRR is a relaxation depends on the metric and on what the client
    sent before: :meth:`check_irr`.
    """

    round_id: int
    metric: str
    params_digest: str
    level_from: float
    level_to: float
    cohorts: tuple[int, ...] | None
    opened_at: int
    expires_at: int
    irr_p: float | None = None
    irr_q: float | None = None

    def __post_init__(self) -> None:
        _int(self.round_id, "round_id", 1, MAX_ROUND)
        _metric_name(self.metric, "metric")
        _digest(self.params_digest, "params_digest")
        low = _number(self.level_from, "level_from")
        high = _number(self.level_to, "level_to")
        if not 0 < low < math.inf:
            raise ReportRejected("level_from", f"must be > 0 and finite, got {low}")
        irr_only = self._check_irr_fields() and high == low  # the memoized bits kept, the IRR chain steps
        if not (low < high or irr_only) or high > MAX_LEVEL:  # the cap every client and the server share
            raise ReportRejected(
                "level_to", f"must be > level_from ({low}), or equal to it in a round that sets irr_q, and "
                f"<= {MAX_LEVEL:g} (MAX_LEVEL), got {high}"
            )
        if self.cohorts is not None:
            if not isinstance(self.cohorts, tuple) or not self.cohorts:
                raise ReportRejected("cohorts", "must be null or a non-empty list")
            for i, c in enumerate(self.cohorts):
                _int(c, f"cohorts[{i}]", 0, MAX_COHORT)
                if i and c <= self.cohorts[i - 1]:
                    raise ReportRejected(f"cohorts[{i}]", "cohorts must be strictly increasing")
        _int(self.opened_at, "opened_at", 0, MAX_WINDOW)
        if _int(self.expires_at, "expires_at", 0, MAX_WINDOW) <= self.opened_at:
            raise ReportRejected("expires_at", f"must be > opened_at ({self.opened_at})")

    def _check_irr_fields(self) -> bool:
        """The IRR fields alone: probabilities, ``irr_p`` only with ``irr_q``; ``True`` when set."""
        if self.irr_q is None:
            if self.irr_p is not None:
                raise ReportRejected("irr_q", "is required with irr_p")
            return False
        for name, value in (("irr_p", self.irr_p), ("irr_q", self.irr_q)):
            if value is not None and not 0.0 <= _number(value, name) <= 1.0:
                raise ReportRejected(name, f"must be a probability in [0, 1], got {value}")
        return True

    @property
    def irr(self) -> tuple[float | None, float | None] | None:
        """``(irr_p, irr_q)`` after the round, or ``None``: the round keeps the IRR."""
        return None if self.irr_q is None else (self.irr_p, self.irr_q)

    def check_irr(self, params: MetricParams, before: tuple[float | None, float | None] | None = None) -> None:
        """Refuse an IRR that is not one of the metric's mode or not a relaxation of ``before``.

        ``before``: the IRR the reports were made with so far (default: the
        metric's own ``(irr_p, irr_q)``). A round without an IRR passes.

        Raises:
            ReportRejected: field ``irr_p`` / ``irr_q`` (not an IRR of the mode),
                ``irr`` (``before`` is not a post-processing of it: the step would
                tighten the IRR), or ``mode`` (a mode without an IRR to relax).
        """
        if self.irr is None:
            return
        from .irr_relaxation import check_irr_step

        held = (params.irr_p, params.irr_q) if before is None else before
        try:
            check_irr_step(params.mode, held, self.irr)
        except ParameterError as exc:
            raise ReportRejected(exc.field, exc.detail) from None

    def to_payload(self) -> dict[str, Any]:
        """The payload to sign with :func:`protocol.crypto.sign_document` (no IRR keys when it keeps the IRR)."""
        payload = {
            "version": ROUND_VERSION,
            "round_id": self.round_id,
            "metric": self.metric,
            "params_digest": self.params_digest,
            "level_from": self.level_from,
            "level_to": self.level_to,
            "cohorts": None if self.cohorts is None else list(self.cohorts),
            "opened_at": self.opened_at,
            "expires_at": self.expires_at,
        }
        if self.irr_q is not None:
            payload["irr_q"] = self.irr_q
            if self.irr_p is not None:
                payload["irr_p"] = self.irr_p
        return payload


ROUND_FIELDS = ("version", "round_id", "metric", "params_digest", "level_from", "level_to", "cohorts",
                "opened_at", "expires_at")
ROUND_IRR_FIELDS = ("irr_p", "irr_q")


def validate_round_announcement(payload: Any) -> RoundAnnouncement:
    """Validate a round announcement payload (already signature-checked)."""
    data = _object(payload, "", ROUND_FIELDS, ROUND_IRR_FIELDS)
    if isinstance(data["version"], bool) or data["version"] != ROUND_VERSION:
        raise ReportRejected("version", f"must be {ROUND_VERSION}, got {data['version']!r}")
    cohorts = data["cohorts"]
    if cohorts is not None and not isinstance(cohorts, list):
        raise ReportRejected("cohorts", "must be null or a list of integers")
    for name in ROUND_IRR_FIELDS:
        if name in data and data[name] is None:
            raise ReportRejected(name, "must be a number when present (leave it out to keep the IRR)")
    return RoundAnnouncement(
        round_id=data["round_id"],
        metric=data["metric"],
        params_digest=data["params_digest"],
        level_from=data["level_from"],
        level_to=data["level_to"],
        cohorts=None if cohorts is None else tuple(cohorts),
        opened_at=data["opened_at"],
        expires_at=data["expires_at"],
        irr_p=data.get("irr_p"),
        irr_q=data.get("irr_q"),
    )


# --- config ------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AggregatorInfo:
    """The aggregator's public keys as published in the config.

    ``next_sign_public`` is set only while the signing key is being rotated: the key that
    will sign configs after the switch, announced under the current one.
    """

    seal_public: bytes
    sign_public: bytes
    next_sign_public: bytes | None = None

    @classmethod
    def from_dict(cls, obj: Any) -> AggregatorInfo:
        fields = ("seal_public", "seal_key_id", "sign_public", "sign_key_id")
        data = _object(obj, "", fields, ("next_sign_public", "next_sign_key_id"))
        if ("next_sign_public" in data) != ("next_sign_key_id" in data):
            missing = "next_sign_key_id" if "next_sign_public" in data else "next_sign_public"
            raise ReportRejected(missing, "is required with the other next_sign field")
        keys: dict[str, bytes] = {}
        for name in ("seal", "sign", "next_sign"):
            if f"{name}_public" not in data:
                continue
            raw = b64d(data[f"{name}_public"], f"{name}_public")
            if len(raw) != 32:
                raise ReportRejected(f"{name}_public", "must be 32 bytes")
            if data[f"{name}_key_id"] != key_id(raw):
                raise ReportRejected(f"{name}_key_id", f"is not the key id of {name}_public")
            keys[f"{name}_public"] = raw
        return cls(**keys)

    def to_dict(self) -> dict[str, str]:
        return public_key_info(self.seal_public, self.sign_public, self.next_sign_public)


@dataclass(frozen=True, kw_only=True)
class MetricEntry:
    """One metric in the config: its parameters, digest and current round and level."""

    params: MetricParams
    digest: str
    current_round: int
    current_level: float

    def __post_init__(self) -> None:
        if not isinstance(self.params, MetricParams):
            raise ReportRejected("params", "must be MetricParams")
        _digest(self.digest, "digest")
        _int(self.current_round, "current_round", 0, MAX_ROUND)
        if not _number(self.current_level, "current_level") > 0:
            raise ReportRejected("current_level", f"must be > 0, got {self.current_level}")

    @classmethod
    def of(cls, params: MetricParams, *, current_round: int = 0, current_level: float | None = None) -> MetricEntry:
        """An entry with the digest computed from ``params`` (aggregator side)."""
        level = params.level if current_level is None else current_level
        return cls(params=params, digest=params.digest(), current_round=current_round, current_level=level)

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": self.params.to_dict(),
            "digest": self.digest,
            "current_round": self.current_round,
            "current_level": None if math.isinf(self.current_level) else self.current_level,
        }

    @classmethod
    def from_dict(cls, obj: Any) -> MetricEntry:
        data = _object(obj, "", ("params", "digest", "current_round", "current_level"))
        try:
            params = MetricParams.from_dict(data["params"])
        except ParameterError as exc:
            raise ReportRejected(f"params.{exc.field}", exc.detail) from None
        level = math.inf if data["current_level"] is None else data["current_level"]
        return cls(params=params, digest=data["digest"], current_round=data["current_round"], current_level=level)


@dataclass(frozen=True, kw_only=True)
class ConfigPayload:
    """A verified config: keys, metrics, open rounds (and their signed documents, kept as sent).

    ``sync_interval`` (optional): the seconds the aggregator asks clients to wait before fetching the
    config again (:data:`SYNC_INTERVAL_RANGE`); ``None`` when it does not say.
    """

    issued_at: int
    aggregator: AggregatorInfo
    metrics: tuple[MetricEntry, ...]
    rounds: tuple[RoundAnnouncement, ...]
    round_documents: tuple[dict[str, Any], ...]
    sync_interval: int | None = None

    def metric(self, name: str) -> MetricEntry | None:
        return next((m for m in self.metrics if m.params.name == name), None)


# The re-sync schedule a config may announce: from a minute to a week.
SYNC_INTERVAL_RANGE = (60, 7 * 86_400)


def build_config_payload(
    *,
    issued_at: int,
    aggregator: dict[str, str],
    metrics: Sequence[MetricEntry],
    rounds: Sequence[dict[str, Any]],
    sync_interval: int | None = None,
) -> dict[str, Any]:
    """The config payload to sign (docs/wire.md 8.2).

    Args:
        issued_at: Unix seconds.
        aggregator: :meth:`protocol.crypto.AggregatorKeys.public_info`.
        metrics: one entry per metric.
        rounds: signed round announcement documents (open rounds).
        sync_interval: seconds clients should wait before fetching the config again (optional:
            left out when ``None``, so clients that predate the field accept the config).
    """
    payload = {
        "version": CONFIG_VERSION,
        "issued_at": issued_at,
        "aggregator": aggregator,
        "metrics": [m.to_dict() for m in metrics],
        "rounds": list(rounds),
    }
    if sync_interval is not None:
        payload["sync_interval"] = _int(sync_interval, "sync_interval", *SYNC_INTERVAL_RANGE)
    return payload


def _validate_metrics(items: Any) -> tuple[MetricEntry, ...]:
    if not isinstance(items, list):
        raise ReportRejected("metrics", "must be a list")
    entries: list[MetricEntry] = []
    for i, item in enumerate(items):
        try:
            entry = MetricEntry.from_dict(item)
        except ReportRejected as exc:
            raise _under(f"metrics[{i}]", exc) from None
        if any(e.params.name == entry.params.name for e in entries):
            raise ReportRejected(f"metrics[{i}].params.name", f"repeats metric {entry.params.name!r}")
        entries.append(entry)
    return tuple(entries)


def _validate_round_document(document: Any, sign_public: bytes, metrics: tuple[MetricEntry, ...]) -> RoundAnnouncement:
    """Verify one signed round and check it against the config's metrics (fields under ``payload``)."""
    payload = verify_document(sign_public, document)
    try:
        announcement = validate_round_announcement(payload)
    except ReportRejected as exc:
        raise _under("payload", exc) from None
    entry = next((m for m in metrics if m.params.name == announcement.metric), None)
    if entry is None:
        raise ReportRejected("payload.metric", f"{announcement.metric!r} is not a metric of this config")
    if entry.digest != announcement.params_digest:
        raise ReportRejected("payload.params_digest", "is not the metric's digest")
    for i, cohort in enumerate(announcement.cohorts or ()):
        if cohort >= entry.params.num_cohorts:
            raise ReportRejected(f"payload.cohorts[{i}]", f"must be < {entry.params.num_cohorts}, got {cohort}")
    try:  # a round's IRR relaxes the metric's own (the client checks it against what it sent, too)
        announcement.check_irr(entry.params)
    except ReportRejected as exc:
        raise _under("payload", exc) from None
    return announcement


def validate_config_payload(payload: Any, *, sign_public: bytes) -> ConfigPayload:
    """Validate a config payload and verify each round with ``sign_public``.

    Raises:
        ReportRejected: field by path (``metrics[0].params.mode``,
            ``rounds[1].payload.level_to``); ``SignatureError`` for a round
            that does not verify (field ``rounds[i].signature``...).
    """
    data = _object(payload, "", ("version", "issued_at", "aggregator", "metrics", "rounds"), ("sync_interval",))
    if isinstance(data["version"], bool) or data["version"] != CONFIG_VERSION:
        raise ReportRejected("version", f"must be {CONFIG_VERSION}, got {data['version']!r}")
    issued_at = _int(data["issued_at"], "issued_at", 0, MAX_WINDOW)
    try:
        aggregator = AggregatorInfo.from_dict(data["aggregator"])
    except ReportRejected as exc:
        raise _under("aggregator", exc) from None
    metrics = _validate_metrics(data["metrics"])
    if not isinstance(data["rounds"], list):
        raise ReportRejected("rounds", "must be a list")
    rounds = []
    for i, document in enumerate(data["rounds"]):
        try:
            rounds.append(_validate_round_document(document, sign_public, metrics))
        except SignatureError as exc:
            raise SignatureError(f"rounds[{i}].{exc.field}", exc.reason) from None
        except ReportRejected as exc:
            raise _under(f"rounds[{i}]", exc) from None
    sync_interval = data.get("sync_interval")
    return ConfigPayload(
        issued_at=issued_at,
        aggregator=aggregator,
        metrics=metrics,
        rounds=tuple(rounds),
        round_documents=tuple(data["rounds"]),
        sync_interval=None if sync_interval is None else _int(sync_interval, "sync_interval", *SYNC_INTERVAL_RANGE),
    )


def verify_config(document: Any, *, sign_public: bytes) -> ConfigPayload:
    """Verify a ``GET /v1/config`` body against the pinned Ed25519 key and validate it.

    Raises:
        SignatureError: the document does not verify, or
            ``aggregator.sign_public`` is not the pinned key.
        ReportRejected: the payload is malformed (field by path).
    """
    config = validate_config_payload(verify_document(sign_public, document), sign_public=sign_public)
    if config.aggregator.sign_public != sign_public:
        raise SignatureError("aggregator.sign_public", "is not the pinned signing key")
    return config


__all__ = [
    "STATUSES",
    "CLOCK_STATUSES",
    "WIRE_HEADER",
    "CLOCK_ANSWERS_VERSION",
    "MAX_RETRY_AFTER",
    "SYNC_INTERVAL_RANGE",
    "AggregatorInfo",
    "ConfigPayload",
    "MetricEntry",
    "ReportEnvelope",
    "ReportPayload",
    "ReportResult",
    "RoundAnnouncement",
    "build_config_payload",
    "build_report",
    "encode_batch_binary",
    "encode_batch_json",
    "open_report",
    "pack_payload",
    "pack_payload_mask",
    "parse_batch_binary",
    "parse_batch_json",
    "parse_upload_response",
    "upload_server_time",
    "payload_header",
    "report_aad",
    "seal_report",
    "sealed_report_id",
    "unpack_payload",
    "upload_response",
    "validate_config_payload",
    "validate_round_announcement",
    "verify_config",
    "window_start",
]
