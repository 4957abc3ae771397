"""A queued report keeps one form from ``report()`` to sealing; queue files of format 1 still load.

The fixture ``tests/vectors/client_queue/v1.queue`` was written by the
format-1 ``ReportQueue`` (before this change): four pending reports and one
sealed report charged by state generation 3, then a tombstone for the
second report (generation 4). ``v1_envelopes.json`` holds the envelopes
that code sealed from it; the same file must load, send the same bytes and
be rewritten in the current format.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from clocks import Clock

from client_sdk import Client
from client_sdk import queue as queue_module
from client_sdk.queue import (
    QUEUE_VERSION,
    RECORD_HEAD,
    ReportQueue,
    envelope_of,
    item_id,
    pending_item,
    read_pending,
)
from client_sdk.testing import FakeAggregator
from protocol.crypto import decrypt_blob
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams
from protocol.wire import ReportEnvelope

VECTORS = Path(__file__).parent / "vectors" / "client_queue"
PLACES = MetricParams(name="places", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                      mode="asymmetric", level=1.0, irr_q=0.2)
DAY = 86400.0


START = 1_790_000_000.0  # the tests' clock starts here


def make_client(fake: FakeAggregator, path: Path, clock: Clock, **kwargs: Any) -> Client:
    return Client("http://agg.test", path, server_public_keys=fake.sign_public, session=fake, clock=clock,
                  background=False, max_epsilon=1e9, rng=3, insecure_rng_for_testing=True, **kwargs)


def records(path: Path) -> list[tuple[bytes, bytes]]:
    """The (kind, encrypted body) of every record of a queue file."""
    data, offset, out = path.read_bytes(), 5 + 16, []
    while offset < len(data):
        _, kind, length = RECORD_HEAD.unpack_from(data, offset)
        out.append((kind, data[offset + RECORD_HEAD.size:offset + RECORD_HEAD.size + length]))
        offset += RECORD_HEAD.size + length
    return out


def test_a_format_1_queue_file_loads_sends_the_same_envelopes_and_is_rewritten(tmp_path: Path) -> None:
    expected = json.loads((VECTORS / "v1_envelopes.json").read_text())
    key = bytes.fromhex(expected["key"])
    path = tmp_path / "app.state.queue"
    shutil.copy(VECTORS / "v1.queue", path)
    assert path.read_bytes()[4] == 1
    queue = ReportQueue(path, lambda: key)
    assert queue.load(expected["generation"]) == []
    assert [envelope_of(item).to_json() for item in queue] == expected["envelopes"]  # the tombstone applied
    assert queue.ids() == [e["report_id"] for e in expected["envelopes"]]
    assert path.read_bytes()[4] == QUEUE_VERSION == 2  # rewritten in the current format on open
    again = ReportQueue(path, lambda: key)
    assert again.load(expected["generation"]) == [] and list(again) == list(queue)


def test_a_format_1_file_newer_than_the_state_is_dropped_as_before(tmp_path: Path) -> None:
    expected = json.loads((VECTORS / "v1_envelopes.json").read_text())
    path = tmp_path / "app.state.queue"
    shutil.copy(VECTORS / "v1.queue", path)
    queue = ReportQueue(path, lambda: bytes.fromhex(expected["key"]))
    (damage,) = queue.load(2)  # the reports were charged by generation 3
    assert damage.dropped == 5 and len(queue) == 0


def test_a_queued_report_keeps_one_form_from_report_to_sealing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, clock = FakeAggregator([PLACES]), Clock(START)
    client = make_client(fake, tmp_path / "s", clock, autosave=False)
    client.sync()
    rid = client.report("places", {"home"})
    (item,) = list(client._queue)
    assert isinstance(item, bytes) and item_id(item) == rid
    client.save()
    ((kind, blob),) = [r for r in records(Path(f"{tmp_path / 's'}.queue")) if r[0] == b"G"]
    plain = decrypt_blob(client._store.key(), blob, b"onesided/client-queue/v2" + Path(
        f"{tmp_path / 's'}.queue").read_bytes()[5:21] + kind)
    assert plain.endswith(item)  # the file holds the very bytes report() queued
    sealed = envelope_of(item, client._held.get(rid))

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a text or JSON round trip between report() and sealing")

    monkeypatch.setattr(queue_module, "b64d", refused)  # no base64 between report() and sealing ...
    monkeypatch.setattr(ReportEnvelope, "from_json", refused)  # ... nor a JSON envelope to validate metadata
    assert envelope_of(item, client._held.get(rid)) == sealed
    assert envelope_of(item) == sealed  # from the queued bytes alone, as after a restart: the same envelope
    fields = read_pending(item)
    assert (fields.report_id_text, fields.metric, fields.window) == (rid, "places", sealed.window)


def test_a_group_commit_is_one_record(tmp_path: Path) -> None:
    fake, clock = FakeAggregator([PLACES]), Clock(START)
    client = make_client(fake, tmp_path / "s", clock, autosave=False)
    client.sync()
    client.report("places", {"a"})
    client.save()
    path = Path(f"{tmp_path / 's'}.queue")
    before = records(path)
    for _ in range(50):
        clock.now += DAY
        client.report("places", {"b"})
    client.save()  # one write of the 50: one record, one encryption
    assert len(records(path)) == len(before) + 1
    client.close(flush=False)
    reopened = make_client(fake, tmp_path / "s", clock)
    assert reopened.ledger().queued_reports == 51 and reopened.flush().delivered == 51


def test_a_pending_item_reads_back_its_fields() -> None:
    item = pending_item(report_id="gnAdL2wX_z4A5JPU3iV3Ig", metric="m\u00e9", round=7, window=2**40,
                        params_digest="ab" * 32, payload=b"\x00\x01", ephemeral_private=bytes(32),
                        seal_public=bytes(range(32)))
    fields = read_pending(item)
    assert (fields.report_id_text, fields.metric, fields.round, fields.window, fields.params_digest) == (
        "gnAdL2wX_z4A5JPU3iV3Ig", "m\u00e9", 7, 2**40, "ab" * 32)
    assert (fields.payload, fields.ephemeral_private, fields.seal_public) == (b"\x00\x01", bytes(32), bytes(range(32)))
