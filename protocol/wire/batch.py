"""Batches of envelopes: JSON and binary ``application/vnd.onesided.batch``, with their fast paths."""

from __future__ import annotations

import binascii
import re
import struct
from collections.abc import Sequence
from typing import Any

from ..errors import ReportRejected
from .common import (
    BATCH_MAGIC,
    BODY_PLAIN,
    BODY_SEALED,
    CODE_DUPLICATE_REPORT_ID,
    CODE_TOO_MANY_REPORTS,
    DIGEST_BYTES,
    MAX_BODY_BYTES,
    MAX_ROUND,
    MAX_WINDOW,
    REPORT_AAD_LABEL,
    REPORT_ID_BYTES,
    WIRE_VERSION,
    _digest,
    _metric_name,
    _object,
    _under,
)
from .envelope import ReportEnvelope, _record_header, check_report_id, sealed_report_id


def _check_batch_size(count: int, max_reports: int) -> None:
    if count == 0:
        raise ReportRejected("reports", "must contain at least one report")
    if count > max_reports:
        raise ReportRejected(
            "reports", f"has {count} reports, the limit is {max_reports}", code=CODE_TOO_MANY_REPORTS
        )


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
