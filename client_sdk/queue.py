"""The outgoing queue: reports in their own append-only, encrypted file, sealed before upload.

Why a file of its own: the state (ledger, secret, config) is rewritten
atomically on every change; with the queue inside it, every ``report()``
re-encrypted and fsync'ed every queued report (3.7 ms with 10 queued, 96 ms
with 10,000). Here a report costs one appended record and one fsync,
whatever the queue's length.

File layout (``<state_path>.queue``, mode 0600), format 2::

    header  = "ONSQ" || u8 version (2) || file_id (16 random bytes)
    record  = 0xA5 || kind || u32be length || nonce (12) || AES-GCM(key, nonce, body, aad)
    aad     = "onesided/client-queue/v2" || file_id || kind

``kind`` is ``G`` (reports: ``u64be gen || (u32be length || item)*``, every
report one group commit wrote, in one record) or ``T`` (a tombstone: the
JSON ``{"ids": [report ids]}``). The key is the state's key; each record
has its own random nonce; the AAD binds a record to this file and to its
kind, so a record cannot be moved to another queue or turned from reports
into a tombstone.

An item is one report in **one form from** ``report()`` **to sealing**:
the same bytes are what ``report()`` queues in memory, what the record
holds (encrypted) and what the sender reads to seal, with no text or
base64 between them::

    pending = "P" || u8 len || report_id || skE (32) || pkR (32) || u32be round || u64be window
              || u8 len || metric || u8 len || params_digest || payload

the report's id (base64url of ``sealed_report_id`` of the key's public
half, as ``report()`` returned it and the aggregator answers it), its own
ephemeral X25519 private key, the aggregator key it is sealed to, its
clear metadata and the packed payload (docs/wire.md 4). The sender seals
it when it builds a batch (:func:`envelope_of`). Sealing is deterministic
given the key, so a resent batch is byte-identical. A pending item holds
what the envelope would hide, so it never leaves this encrypted file; it
is deleted (tombstoned) once delivered, like any report. ``"S" || json``
is a report sealed before it was queued (read from format 1 files only).

Format 1 (``u8 version 1``, aad ``"onesided/client-queue/v1" || file_id ||
kind``, kind ``R``: ``{"gen": g, "report": <json item>}`` one report a
record, the pending report as base64url text beside its metadata) is still
read: its reports become items of this form and the file is rewritten in
format 2 when it is opened.

* ``gen`` is the state generation saved *before* the record was appended
  (:class:`~client_sdk.state.StateStore`): the ledger of that state already
  charges the report. A record whose ``gen`` is above the state's opened
  generation is not covered by the ledger in hand (an older state came
  back) and is dropped on open.
* Deletion appends a tombstone; when dead reports and tombstones
  outnumber the live reports (and at least :data:`COMPACT_MIN`), the file
  is rewritten atomically with the live reports only, or, when none is
  left, cut back to its header (a truncate and an fsync).
* Open: a torn last record (a crash mid-append) is cut off; a record that
  does not decrypt or parse is dropped and counted (:class:`QueueDamage`),
  so the client records a ledger event instead of failing every later flush.

Not thread-safe by itself: the client calls it under its lock.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import struct
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, overload

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from protocol.crypto import (
    PUBLIC_KEY_BYTES,
    b64d,
    b64e,
    decrypt_blob,
    encrypt_blob,
    seal,
    write_private_file,
)
from protocol.errors import DecryptError, ReportRejected
from protocol.wire import (
    MAX_BODY_BYTES,
    MAX_WINDOW,
    REPORT_ID_BYTES,
    ReportEnvelope,
    report_aad,
    seal_report,
)

from .pools import SealingKey

QUEUE_MAGIC = b"ONSQ"
QUEUE_VERSION = 2
QUEUE_AADS = {1: b"onesided/client-queue/v1", 2: b"onesided/client-queue/v2"}  # by format
FILE_ID_BYTES = 16
HEADER_BYTES = len(QUEUE_MAGIC) + 1 + FILE_ID_BYTES
RECORD_MARK = 0xA5
RECORD_HEAD = struct.Struct(">BcI")  # mark, kind, length of nonce || ciphertext
KIND_REPORTS = b"G"  # format 2: the reports of one write
KIND_REPORT = b"R"  # format 1: one report
KIND_TOMBSTONE = b"T"
KINDS = {1: (KIND_REPORT, KIND_TOMBSTONE), 2: (KIND_REPORTS, KIND_TOMBSTONE)}
COMPACT_MIN = 64
MAX_RECORD_BYTES = 1 << 24  # a length above this is damage, not a record
GROUP_MAX_BYTES = 1 << 20  # a compaction writes its reports in records of about this size
UNSAVED = -1  # the generation of a report queued in memory, before the state that charges it was saved

PENDING = b"P"[0]
SEALED = b"S"[0]
_PENDING_KEYS = struct.Struct(">32s32sIQB")  # after the id: skE, pkR, round, window, metric length
_GEN = struct.Struct(">Q")
_LENGTH = struct.Struct(">I")

Item = bytes  # one queued report (module docstring)


@dataclass(frozen=True, kw_only=True)
class QueueDamage:
    """What opening the queue file had to throw away.

    Attributes:
        dropped: reports lost (records that did not open or parse, or not covered by the state).
        detail: what happened, for the ledger event (no report content).
    """

    dropped: int
    detail: str


class PendingReport(NamedTuple):
    """The fields of a pending item (:func:`read_pending`)."""

    report_id_text: str
    ephemeral_private: bytes
    seal_public: bytes
    round: int
    window: int
    metric: str
    params_digest: str
    payload: bytes


def pending_item(
    *,
    report_id: str,
    metric: str,
    round: int,
    window: int,
    params_digest: str,
    payload: bytes,
    ephemeral_private: bytes,
    seal_public: bytes,
) -> Item:
    """A report queued before sealing (module docstring); ``report_id`` is the id of the key's public half
    (base64url)."""
    rid, name, digest = report_id.encode("ascii"), metric.encode("utf-8"), params_digest.encode("ascii")
    return b"P%c%b%b%b%c%b%b" % (  # one C call (a length above 255 raises, as bytes((n,)) would)
        len(rid), rid, _PENDING_KEYS.pack(ephemeral_private, seal_public, round, window, len(name)),
        name, len(digest), digest, payload,
    )


def read_pending(item: Item) -> PendingReport:
    """The fields of a pending item, as they are (:func:`check_item` validates them).

    Raises:
        ValueError, struct.error, IndexError: not a pending item.
    """
    if item[:1] != b"P":
        raise ValueError("not a pending queue item")
    keys = 2 + item[1]
    private, public, round_, window, name_length = _PENDING_KEYS.unpack_from(item, keys)
    at = keys + _PENDING_KEYS.size + name_length
    metric = item[keys + _PENDING_KEYS.size:at].decode("utf-8")
    digest_end = at + 1 + item[at]
    return PendingReport(item[2:keys].decode("ascii"), private, public, round_, window, metric,
                         item[at + 1:digest_end].decode("ascii"), item[digest_end:])


def item_id(item: Item) -> str:
    """The report id of an item (base64url)."""
    if item[:1] == b"P":
        return item[2:2 + item[1]].decode("ascii")
    return str(json.loads(item[1:])["report_id"])


def legacy_item(report: Any) -> Item:
    """A format-1 record's report (a pending report's JSON, or a sealed envelope's) as an item of this form.

    Raises:
        ReportRejected, ValueError, KeyError, TypeError: a malformed report.
    """
    if not isinstance(report, dict):
        raise TypeError("a queued report must be an object")
    if "pending" not in report:
        return b"S" + _dumps(ReportEnvelope.from_json(report).to_json())
    raw = b64d(report["pending"], "pending")
    keys = 2 * PUBLIC_KEY_BYTES
    if len(raw) <= keys:
        raise ReportRejected("pending", f"must be longer than {keys} bytes")
    plain = ReportEnvelope.from_json({k: v for k, v in report.items() if k != "pending"} | {"plain": b64e(raw[keys:])})
    return pending_item(report_id=plain.report_id_text, metric=plain.metric, round=plain.round, window=plain.window,
                        params_digest=plain.params_digest, payload=plain.body,
                        ephemeral_private=raw[:PUBLIC_KEY_BYTES], seal_public=raw[PUBLIC_KEY_BYTES:keys])


def _plain(pending: PendingReport) -> ReportEnvelope:
    """The pending report's metadata and payload, checked as a plain envelope (the same rules as the wire's)."""
    return ReportEnvelope(report_id=b64d(pending.report_id_text, "report_id"), metric=pending.metric,
                          round=pending.round, window=pending.window, params_digest=pending.params_digest,
                          plain=pending.payload)


def check_item(item: Item) -> None:
    """Raise unless ``item`` is a report that can be sent (sealing is left for :func:`envelope_of`).

    Raises:
        ReportRejected, ValueError, KeyError, TypeError: a malformed item.
    """
    if not isinstance(item, bytes):
        raise TypeError("a queue item is bytes")
    if item[:1] == b"P":
        _plain(read_pending(item))
    elif item[:1] == b"S":
        ReportEnvelope.from_json(json.loads(item[1:]))
    else:
        raise ValueError("unknown queue item form")


def envelope_of(item: Item, ephemeral: SealingKey | X25519PrivateKey | None = None) -> ReportEnvelope:
    """The envelope to upload: a pending item sealed now (the same bytes every time), a sealed one as it is.

    ``ephemeral``: the item's key as the pool made it (:class:`~client_sdk.pools.SealingKey`, kept in
    memory since ``report()``) or as a key object; used only if its raw bytes are the item's (else the
    queued bytes are loaded anew). A :class:`~client_sdk.pools.SealingKey` whose id is the item's seals
    without deriving the key's public half or hashing its id again (the pool did both when it made the
    key); the envelope is the same byte for byte.

    Raises:
        ReportRejected, ValueError, KeyError, TypeError: a malformed item, or a
            pending item whose key does not give its report id.
    """
    if item[:1] != b"P":
        check_item(item)
        return ReportEnvelope.from_json(json.loads(item[1:]))
    p = read_pending(item)
    if isinstance(ephemeral, SealingKey):
        if ephemeral.private == p.ephemeral_private and ephemeral.report_id_text == p.report_id_text:
            return _sealed_with(p, ephemeral)
        ephemeral = None
    key = ephemeral if ephemeral is not None and ephemeral.private_bytes_raw() == p.ephemeral_private \
        else p.ephemeral_private
    envelope = seal_report(payload=p.payload, metric=p.metric, round=p.round, window=p.window,
                           params_digest=p.params_digest, seal_public=p.seal_public, ephemeral_private=key)
    if envelope.report_id_text != p.report_id_text:  # the id report() returned must be the key's
        raise ReportRejected("report_id", "is not the id of the queued report's ephemeral key")
    return envelope


def _sealed_with(p: PendingReport, key: SealingKey) -> ReportEnvelope:
    """A pending report sealed with the pool's key (its public half and id made with it): what
    :func:`~protocol.wire.seal_report` returns, without deriving them again.

    The metadata passes the envelope's rules (checked once per metric and digest, then the window and
    the body's length here; anything else takes the validating constructor, which names the field).
    """
    aad = report_aad(report_id=key.report_id, metric=p.metric, params_digest=p.params_digest, round=p.round,
                     window=p.window)
    sealed = seal(p.seal_public, p.payload, aad, ephemeral_private=key.private if key.key is None else key.key,
                  ephemeral_public=key.public)
    if _valid_metadata(p.metric, p.params_digest) and p.window <= MAX_WINDOW and len(sealed) <= MAX_BODY_BYTES:
        return ReportEnvelope._checked(key.report_id, p.metric, p.round, p.window, p.params_digest, "sealed",
                                       sealed, key.report_id_text, aad)
    return ReportEnvelope(report_id=key.report_id, metric=p.metric, round=p.round, window=p.window,
                          params_digest=p.params_digest, sealed=sealed)


@functools.lru_cache(maxsize=64)
def _valid_metadata(metric: str, params_digest: str) -> bool:
    """Whether a metric name and a parameter digest pass :class:`ReportEnvelope`'s rules (once per pair: a
    client's reports carry a few)."""
    try:
        ReportEnvelope(report_id=bytes(REPORT_ID_BYTES), metric=metric, round=0, window=0,
                       params_digest=params_digest, plain=b"\0")
    except ReportRejected:
        return False
    return True


class ReportQueue(Sequence[Item]):
    """The queue of reports (items: see the module docstring), oldest first.

    Args:
        path: the queue file.
        key: returns the state's AES key (called only when a record is read or written).
    """

    def __init__(self, path: Path, key: Callable[[], bytes]) -> None:
        self.path = path
        self._key = key
        self._items: dict[str, tuple[int, Item]] = {}  # report id -> (generation charging it, item)
        self._pending: list[tuple[bytes, list[str]]] = []  # (kind, report ids) not yet appended
        self._file_id: bytes | None = None
        self._dead = 0

    # --- reading ----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Item]:
        return (item for _, item in self._items.values())

    @overload
    def __getitem__(self, index: int) -> Item: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Item]: ...
    def __getitem__(self, index: int | slice) -> Item | Sequence[Item]:
        return list(self)[index]

    def holds(self, report_id: str) -> bool:
        """Whether the report ``report_id`` is queued."""
        return report_id in self._items

    def get(self, report_id: str) -> Item | None:
        """The item of report ``report_id`` (``None``: not queued)."""
        entry = self._items.get(report_id)
        return None if entry is None else entry[1]

    def ids(self) -> list[str]:
        """The report ids, oldest first."""
        return list(self._items)

    def oldest(self, count: int, skip: Collection[str] = ()) -> list[str]:
        """The ids of the ``count`` oldest reports, passing over those in ``skip``."""
        ids: Iterable[str] = self._items if not skip else (rid for rid in self._items if rid not in skip)
        return list(itertools.islice(ids, count))

    @property
    def dirty(self) -> bool:
        """Changes not yet appended to the file."""
        return bool(self._pending)

    # --- changing (in memory, then :meth:`persist`) ----------------------------------

    def append(self, item: Item, report_id: str | None = None) -> None:
        """Queue one item (:func:`pending_item`; ``report_id``: its id, when the caller has it); charged
        by the next state save."""
        rid = item_id(item) if report_id is None else report_id
        self._items[rid] = (UNSAVED, item)
        self._pending.append((KIND_REPORTS, [rid]))

    def remove(self, ids: Collection[str]) -> int:
        """Delete these reports (a tombstone); returns how many were queued."""
        gone = [rid for rid in ids if self._items.pop(rid, None) is not None]
        if gone:
            self._pending.append((KIND_TOMBSTONE, gone))
        return len(gone)

    def persist(self, generation: int) -> None:
        """Append the pending records (one write, one fsync); compact when dead records dominate; cut the
        file back to its header when no report is left (:meth:`_cut_to_header`).

        Call it right after the state was saved as ``generation``: the
        reports queued since the last persist are charged by that state.
        """
        if not self._pending:
            return
        if self.compaction_due:
            self._take(generation)
            self.compact()
            return
        taken, records = self._take(generation)
        try:
            self._append(None if self._emptied else self._encoded(records))
        except BaseException:
            self.give_back(taken)
            raise

    @property
    def _emptied(self) -> bool:
        """No report is left in a file that exists: the next persist cuts it back to its header."""
        return not self._items and self._file_id is not None and self.path.exists()

    @property
    def compaction_due(self) -> bool:
        """The next persist rewrites the file (no file yet, or dead records dominate a queue not empty)."""
        return self._file_id is None or not self.path.exists() or (self._should_compact() and bool(self._items))

    def _take(self, generation: int) -> tuple[list[tuple[bytes, list[str]]], list[tuple[bytes, bytes]]]:
        """The pending changes, taken out of the pending list, and their records (kind, plain text): the
        tombstones, then every report added (and not removed again) in one record."""
        records: list[tuple[bytes, bytes]] = []
        added: list[Item] = []
        items = self._items
        for kind, ids in self._pending:
            if kind == KIND_TOMBSTONE:
                self._dead += 1 + len(ids)
                records.append((kind, _dumps({"ids": ids})))
            elif (entry := items.get(ids[0])) is not None:  # not removed again before this persist
                items[ids[0]] = (generation, entry[1])
                added.append(entry[1])
        if added:
            records.append((KIND_REPORTS, _group(generation, added)))
        taken, self._pending = self._pending, []
        return taken, records

    def _encoded(self, records: list[tuple[bytes, bytes]]) -> bytes:
        return b"".join(self._record(kind, plain) for kind, plain in records)

    def take_append(self, generation: int) -> tuple[list[tuple[bytes, list[str]]], bytes | None] | None:
        """:meth:`persist` in two halves, for a write outside the client's lock: this half (under it)
        takes the pending changes and returns them with the bytes to append (:meth:`append_taken`;
        ``None`` for the bytes: no report is left, the file is cut back to its header).
        ``None``: nothing pending, or a compaction is due (then :meth:`persist`, under the lock)."""
        if not self._pending or self.compaction_due:
            return None
        taken, records = self._take(generation)
        return taken, None if self._emptied else self._encoded(records)

    def append_taken(self, data: bytes | None) -> None:
        """The other half: append what :meth:`take_append` returned (one write, one fsync), or cut the
        file back to its header (``None``)."""
        self._append(data)

    def give_back(self, taken: list[tuple[bytes, list[str]]]) -> None:
        """An append that failed: its changes are pending again, ahead of the later ones."""
        self._pending[:0] = taken

    def _should_compact(self) -> bool:
        return self._dead >= max(COMPACT_MIN, len(self._items))

    def compact(self) -> None:
        """Rewrite the file atomically with the live reports only (one record per generation and MiB)."""
        self._file_id = self._file_id or os.urandom(FILE_ID_BYTES)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body: list[bytes] = []
        group: list[Item] = []
        size, group_gen = 0, 0
        for gen, item in self._items.values():
            if group and (gen != group_gen or size >= GROUP_MAX_BYTES):
                body.append(self._record(KIND_REPORTS, _group(group_gen, group)))
                group, size = [], 0
            group.append(item)
            group_gen, size = gen, size + len(item)
        if group:
            body.append(self._record(KIND_REPORTS, _group(group_gen, group)))
        write_private_file(self.path, self._header() + b"".join(body))
        self._dead = 0

    def discard(self) -> None:
        """Forget every report and delete the file (a new state must not send an older state's reports)."""
        self._items.clear()
        self._pending = []
        self._dead = 0
        self._file_id = None
        self.path.unlink(missing_ok=True)

    # --- the file -------------------------------------------------------------------

    def _header(self) -> bytes:
        assert self._file_id is not None  # noqa: S101 - set before any write
        return QUEUE_MAGIC + bytes([QUEUE_VERSION]) + self._file_id

    def _aad(self, kind: bytes, version: int = QUEUE_VERSION) -> bytes:
        assert self._file_id is not None  # noqa: S101 - set before any record
        return QUEUE_AADS[version] + self._file_id + kind

    def _record(self, kind: bytes, plain: bytes) -> bytes:
        blob = encrypt_blob(self._key(), plain, self._aad(kind))
        return RECORD_HEAD.pack(RECORD_MARK, kind, len(blob)) + blob

    def _append(self, data: bytes | None) -> None:
        """Append and fsync; on failure the file is cut back, so no half record stays in the middle.
        ``None``: no report is left; cut the file back to its header instead (:meth:`_cut_to_header`)."""
        if data is None:
            self._cut_to_header()
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            size = os.fstat(fd).st_size
            try:
                os.write(fd, data)
                os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)

    def _cut_to_header(self) -> None:
        """Empty the file of a queue with no report left: cut it back to its header (one truncate and one
        fsync, where appending the last tombstones would grow it, and a rewrite would write a new file and
        fsync it and its folder). The header is this format's (a file read in another format is rewritten
        when it is read). A crash before the cut reaches the disk leaves the file as it was (delivered
        reports come back, are resent and answered ``replayed``, as when a tombstone is lost)."""
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.ftruncate(fd, HEADER_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._dead = 0

    def load(self, generation: int) -> list[QueueDamage]:
        """Read the file, keeping reports charged by state generation ``generation`` or earlier.

        Never raises for a damaged file: what cannot be read is dropped and
        described; the file is then rewritten without it (and in this format, if it was older).
        """
        self._items.clear()
        self._pending = []
        self._dead = 0
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        damage: list[QueueDamage] = []
        version = data[4] if len(data) >= HEADER_BYTES and data[:4] == QUEUE_MAGIC else None
        if version not in QUEUE_AADS:
            damage.append(QueueDamage(dropped=0, detail=f"queue file header unreadable; {len(data)} bytes discarded"))
            self._file_id = None
            self.compact()
            return damage
        self._file_id = data[5:HEADER_BYTES]
        unreadable, uncovered, end = self._read_records(data, generation, version)
        if unreadable:
            damage.append(QueueDamage(dropped=unreadable, detail=f"{unreadable} queued record(s) unreadable"))
        if uncovered:
            damage.append(QueueDamage(
                dropped=uncovered,
                detail=f"{uncovered} queued report(s) newer than the state's ledger (an older state came back)",
            ))
        if end < len(data) and data[end:] and not _is_torn(data[end:], version):
            damage.append(QueueDamage(dropped=0, detail=f"queue file unreadable after byte {end}; rest discarded"))
        if damage or end < len(data) or version != QUEUE_VERSION or self._should_compact():
            self.compact()
        return damage

    def _read_records(self, data: bytes, generation: int, version: int) -> tuple[int, int, int]:
        """Apply every record; returns (unreadable, not covered, end of the last whole record)."""
        offset, unreadable, uncovered = HEADER_BYTES, 0, 0
        kinds = KINDS[version]
        while len(data) - offset >= RECORD_HEAD.size:
            mark, kind, length = RECORD_HEAD.unpack_from(data, offset)
            end = offset + RECORD_HEAD.size + length
            if mark != RECORD_MARK or kind not in kinds or length > MAX_RECORD_BYTES:
                break
            if end > len(data):
                break  # torn: the last append did not finish
            try:
                plain = decrypt_blob(self._key(), data[offset + RECORD_HEAD.size:end], self._aad(kind, version))
                if kind == KIND_TOMBSTONE:
                    body = json.loads(plain)
                    self._dead += 1 + sum(self._items.pop(str(rid), None) is not None for rid in body["ids"])
                else:
                    bad, late = self._read_reports(plain, kind, generation)
                    unreadable, uncovered = unreadable + bad, uncovered + late
            except (DecryptError, ReportRejected, ValueError, KeyError, TypeError, struct.error):
                unreadable += kind != KIND_TOMBSTONE
            offset = end
        return unreadable, uncovered, offset

    def _read_reports(self, plain: bytes, kind: bytes, generation: int) -> tuple[int, int]:
        """Keep the reports of one record; returns (unreadable, not covered by ``generation``)."""
        if kind == KIND_REPORT:  # format 1
            body = json.loads(plain)
            gen, items = int(body["gen"]), [legacy_item(body["report"])]
        else:
            gen, items = _ungroup(plain)
        if gen > generation:
            return 0, len(items)
        bad = 0
        for item in items:
            try:
                check_item(item)  # a report that cannot be sent is dropped here
            except (ReportRejected, ValueError, KeyError, TypeError, struct.error, IndexError):
                bad += 1
                continue
            self._items[item_id(item)] = (gen, item)
        return bad, 0


def _group(generation: int, items: Sequence[Item]) -> bytes:
    """A ``G`` record's body: the generation, then each item with its length."""
    pack = _LENGTH.pack
    return _GEN.pack(generation) + b"".join(pack(len(item)) + item for item in items)


def _ungroup(plain: bytes) -> tuple[int, list[Item]]:
    """The generation and items of a ``G`` record's body.

    Raises:
        ValueError: a length that runs past the end.
    """
    (gen,) = _GEN.unpack_from(plain)
    items, offset = [], _GEN.size
    while offset < len(plain):
        (length,) = _LENGTH.unpack_from(plain, offset)
        offset += _LENGTH.size
        if offset + length > len(plain):
            raise ValueError("a queued report runs past its record")
        items.append(plain[offset:offset + length])
        offset += length
    return gen, items


def _is_torn(tail: bytes, version: int = QUEUE_VERSION) -> bool:
    """A tail that is the start of a record cut short (expected after a crash, not damage)."""
    if len(tail) < RECORD_HEAD.size:
        return tail[:1] in (b"", bytes([RECORD_MARK]))
    mark, kind, length = RECORD_HEAD.unpack_from(tail)
    return mark == RECORD_MARK and kind in KINDS[version] and RECORD_HEAD.size + length > len(tail)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")


__all__ = [
    "COMPACT_MIN", "Item", "PendingReport", "QueueDamage", "ReportQueue", "check_item", "envelope_of", "item_id",
    "legacy_item", "pending_item", "read_pending",
]
