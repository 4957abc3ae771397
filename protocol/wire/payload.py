"""The report payload (the plaintext): ``u8 version || u16be cohort || f64be level || bits packed LSB-first``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ParameterError, ReportRejected
from .common import MAX_COHORT, PAYLOAD_HEADER, PAYLOAD_VERSION, BoolArray, _int, _number


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
