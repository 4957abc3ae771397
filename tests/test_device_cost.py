"""The device's work per report: sealing with the pool's key, and a queue emptied without a rewrite.

The sender seals each queued report with the key the pool made for it
(:class:`~client_sdk.pools.SealingKey`: the key object, its public half and
the report's id, made once): the envelope is the one the queued bytes alone
give, byte for byte. A queue whose every report was answered is cut back to
its header in place (one truncate and one fsync) instead of being rewritten
as a new file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from client_sdk import Client
from client_sdk import queue as queue_module
from client_sdk.pools import SealingKey, _ephemeral
from client_sdk.queue import HEADER_BYTES, ReportQueue, envelope_of, item_id, pending_item
from client_sdk.testing import FakeAggregator
from protocol.crypto import AggregatorKeys, open_sealed
from protocol.encodings import BloomEncoding
from protocol.errors import ReportRejected
from protocol.params import MetricParams
from protocol.wire import MAX_WINDOW, STATUS_ACCEPTED, STATUSES, ReportResult
from protocol.wire.common import _object

PLACES = MetricParams(name="places", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4), mode="asymmetric", level=1.0, irr_q=0.2)  # fmt: skip
DIGEST = "0f" * 32


def _item(
    key: SealingKey, seal_public: bytes, *, window: int = 123_456, metric: str = "places"
) -> bytes:
    return pending_item(
        report_id=key.report_id_text,
        metric=metric,
        round=7,
        window=window,
        params_digest=DIGEST,
        payload=b"\x01" * 24,
        ephemeral_private=key.private,
        seal_public=seal_public,
    )


def test_sealing_with_the_pools_key_gives_the_queued_bytes_envelope_without_deriving_the_key_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys = AggregatorKeys.generate()
    key = _ephemeral()[0]
    item = _item(key, keys.seal_public_raw)
    expected = envelope_of(item)  # from the queued bytes alone, as after a restart

    def refused(**kwargs: object) -> None:
        raise AssertionError("the public half and the id are derived again")

    monkeypatch.setattr(queue_module, "seal_report", refused)
    envelope = envelope_of(item, key)
    assert envelope == expected and envelope.sealed == expected.sealed
    assert envelope.report_id_text == expected.report_id_text == key.report_id_text
    assert envelope.aad() == expected.aad()
    assert envelope.to_json() == expected.to_json()
    assert open_sealed(keys.seal_private, envelope.sealed or b"", envelope.aad()) == b"\x01" * 24


def test_a_pools_key_that_is_not_the_items_is_not_used() -> None:
    keys = AggregatorKeys.generate()
    key, other = _ephemeral()[0], _ephemeral()[0]
    item = _item(key, keys.seal_public_raw)
    assert envelope_of(item, other) == envelope_of(item)
    # a queued id that is not its key's (a damaged item): the pool's key does not match it, and the
    # queued bytes' own check refuses it, as after a restart
    forged = _item(
        SealingKey(key.key, key.private, key.public, other.report_id, other.report_id_text),
        keys.seal_public_raw,
    )
    for held in (key, other, None):
        with pytest.raises(ReportRejected, match="report_id"):
            envelope_of(forged, held)


def test_metadata_the_envelope_refuses_is_refused_with_the_pools_key_too() -> None:
    keys = AggregatorKeys.generate()
    key = _ephemeral()[0]
    late = _item(key, keys.seal_public_raw, window=MAX_WINDOW + 1)
    for held in (key, None):
        with pytest.raises(ReportRejected, match="window"):
            envelope_of(late, held)
    bad_name = _item(key, keys.seal_public_raw, metric="no spaces")
    for held in (key, None):
        with pytest.raises(ReportRejected, match="metric"):
            envelope_of(bad_name, held)


def test_a_queue_left_empty_is_cut_to_its_header_in_place(tmp_path: Path) -> None:
    key = os.urandom(16)
    path = tmp_path / "s.queue"
    queue = ReportQueue(path, lambda: key)
    seal_public = AggregatorKeys.generate().seal_public_raw
    items = [_item(_ephemeral()[0], seal_public) for _ in range(80)]
    for item in items:
        queue.append(item)
    queue.persist(1)
    inode = path.stat().st_ino
    queue.remove(
        [item_id(item) for item in items]
    )  # all delivered: dead records outnumber the live ones
    queue.persist(1)
    assert (
        path.stat().st_size == HEADER_BYTES and path.stat().st_ino == inode
    )  # cut, not a new file
    again = ReportQueue(path, lambda: key)
    assert again.load(1) == [] and len(again) == 0
    later = _item(_ephemeral()[0], seal_public)
    again.append(later)
    again.persist(2)
    third = ReportQueue(path, lambda: key)
    assert third.load(2) == [] and list(third) == [later]  # appended after the header, read back


def _client(fake: FakeAggregator, path: Path, now: list[float], **kwargs: Any) -> Client:
    return Client(
        "http://agg.test",
        path,
        server_public_keys=fake.sign_public,
        session=fake,
        clock=lambda: now[0],
        background=False,
        max_epsilon=1e9,
        **kwargs,
    )


def test_a_client_whose_reports_were_all_delivered_keeps_its_queue_file(tmp_path: Path) -> None:
    fake = FakeAggregator([PLACES])
    now = [1_790_000_000.0]
    client = _client(fake, tmp_path / "s", now, autosave=False)
    client.sync()
    for _ in range(70):
        client.report("places", {"home"})
        now[0] += 86400.0
    client.save()
    queue_path = Path(f"{tmp_path / 's'}.queue")
    inode = queue_path.stat().st_ino
    assert client.flush().delivered == 70
    assert queue_path.stat().st_size == HEADER_BYTES and queue_path.stat().st_ino == inode
    client.report("places", {"home"})
    client.close(flush=False)
    again = _client(fake, tmp_path / "s", now)
    assert again.ledger().queued_reports == 1 and again.flush().delivered == 1
    again.close()


def test_the_seal_key_schedule_is_hkdf_sha256_byte_for_byte() -> None:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    from protocol.crypto import SEAL_INFO, seal_key_nonce

    for size in (
        0,
        1,
        31,
        32,
        33,
        64,
        65,
        200,
    ):  # the schedule takes 32 bytes; any length is HKDF's
        for _ in range(20):
            shared, pk_e, pk_r = os.urandom(size), os.urandom(32), os.urandom(32)
            okm = HKDF(
                algorithm=hashes.SHA256(), length=28, salt=None, info=SEAL_INFO + pk_e + pk_r
            ).derive(shared)
            assert seal_key_nonce(shared, pk_e, pk_r) == (okm[:16], okm[16:])


def _result_by_the_rules(obj: Any) -> ReportResult:
    """A result read field by field, with the dataclass's own checks (what ``from_dict`` always did)."""
    data = _object(obj, "", ("report_id", "status"), ("field", "detail", "retry_after"))
    return ReportResult(
        report_id=data["report_id"], status=data["status"], field=data.get("field"),
        detail=data.get("detail"), retry_after=data.get("retry_after"),
    )  # fmt: skip


def test_an_upload_answers_results_read_as_the_field_rules_say() -> None:
    usual = {"report_id": "abc", "status": STATUS_ACCEPTED, "field": None, "detail": None}
    cases: list[Any] = [dict(usual, status=status) for status in STATUSES]
    cases += [
        dict(usual, report_id=5), dict(usual, report_id=True), dict(usual, report_id=None),
        dict(usual, status="nope"), dict(usual, status=None), dict(usual, status=["accepted"]),
        dict(usual, field="x"), dict(usual, detail="d"), dict(usual, field=3), dict(usual, detail=[]),
        dict(usual, extra=1), {"report_id": "abc", "status": STATUS_ACCEPTED},
        {"report_id": "abc", "status": STATUS_ACCEPTED, "field": None},
        {"status": STATUS_ACCEPTED, "field": None, "detail": None, "other": None},
        dict(usual, status="too_early", retry_after=30), dict(usual, retry_after=30),
        dict(usual, status="expired", retry_after=0), [], "abc", None,
    ]  # fmt: skip
    for case in cases:
        try:
            expected: Any = _result_by_the_rules(case)
        except ReportRejected as exc:
            expected = (exc.field, exc.reason)
        try:
            got: Any = ReportResult.from_dict(case)
        except ReportRejected as exc:
            got = (exc.field, exc.reason)
        assert got == expected, case
        if isinstance(got, ReportResult):
            assert got.final == expected.final and got.to_dict() == expected.to_dict()


def test_an_atomic_write_leaves_a_0600_file_and_temporary_names_the_cleanup_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from client_sdk.state import remove_temporary_files
    from protocol.crypto import _temp_suffix, write_private_file

    target = tmp_path / "app.state"
    old = os.umask(0o022)
    try:
        write_private_file(target, b"x" * 70_000)
    finally:
        os.umask(old)
    assert target.read_bytes() == b"x" * 70_000 and target.stat().st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["app.state"]
    left = [
        tmp_path / f".app.state.{_temp_suffix()}.tmp" for _ in range(20)
    ]  # as a crash mid-write leaves them
    for path in left:
        path.write_bytes(b"")
    assert sorted(remove_temporary_files(target)) == sorted(left)

    def crash(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        write_private_file(target, b"new")
    assert os.listdir(tmp_path) == ["app.state"] and target.read_bytes() == b"x" * 70_000
