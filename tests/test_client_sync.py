"""sync(): only a config signed by a pinned Ed25519 key is accepted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from client_sdk import Client
from client_sdk.client import pinned_keys
from client_sdk.testing import FakeAggregator, FakeResponse
from protocol.crypto import AggregatorKeys, b64e, key_id
from protocol.encodings import BloomEncoding
from protocol.errors import ParameterError, PolicyError, SignatureError
from protocol.params import MetricParams
from protocol.wire import RoundAnnouncement

ASYM = MetricParams(name="places", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                    mode="asymmetric", level=1.0)


def make_client(session: Any, path: Path, keys: object) -> Client:
    return Client("http://agg.test", path, background=False, strict=True, server_public_keys=keys, max_epsilon=10.0,
                  session=session)


def test_good_config_is_accepted_and_kept(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM])
    client = make_client(fake, tmp_path / "s", fake.keys.sign_public_raw)
    assert client.report("places", "x").status == "waiting"  # no config yet: the value waits for one
    config = client.sync()
    assert len(fake.stored) == 0 and client.ledger().queued_reports == 1  # reported once the config came
    assert [m.params.name for m in config.metrics] == ["places"]
    assert config.aggregator.seal_public == fake.keys.seal_public_raw
    with pytest.raises(ParameterError, match="not a metric"):
        client.report("nope", "x")


def test_config_signed_by_the_wrong_key_is_refused(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM])
    fake.signer = AggregatorKeys.generate()  # same payload, someone else's signature
    client = make_client(fake, tmp_path / "s", fake.sign_public)
    with pytest.raises(SignatureError) as info:
        client.sync()
    assert info.value.field == "key_id"
    assert client.config is None
    # the error names the key id seen, the pinned ones, and where the right key is printed
    seen, pinned = key_id(fake.signer.sign_public_raw), key_id(fake.keys.sign_public_raw)
    assert seen in str(info.value) and pinned in str(info.value)
    assert "onesided keys show" in str(info.value)


def test_impostor_aggregator_is_refused(tmp_path: Path) -> None:
    real, impostor = FakeAggregator([ASYM]), FakeAggregator([ASYM])
    client = make_client(impostor, tmp_path / "s", real.sign_public)
    with pytest.raises(SignatureError):
        client.sync()


class Tampering:
    """Serves the fake's config after ``edit``."""

    def __init__(self, fake: FakeAggregator, edit: Any) -> None:
        self.fake, self.edit = fake, edit

    def request(self, method: str, url: str, **kwargs: Any) -> FakeResponse:
        response = self.fake.request(method, url, **kwargs)
        return FakeResponse(200, self.edit(response.body)) if url.endswith("/v1/config") else response

    def close(self) -> None:
        pass


def _set_level(doc: dict[str, Any]) -> dict[str, Any]:
    doc["payload"]["metrics"][0]["params"]["level"] = 50.0
    return doc


def _forge_key_id(doc: dict[str, Any]) -> dict[str, Any]:
    doc["signature"] = b64e(bytes(64))
    return doc


@pytest.mark.parametrize(
    "edit",
    [
        _set_level,  # a weaker level slipped into a signed config
        _forge_key_id,
        lambda doc: doc["payload"],  # unsigned: the bare payload
        lambda doc: {k: v for k, v in doc.items() if k != "signature"},
        lambda doc: ["not", "a", "document"],
    ],
)
def test_unsigned_or_tampered_configs_are_refused(tmp_path: Path, edit: Any) -> None:
    fake = FakeAggregator([ASYM])
    client = make_client(Tampering(fake, edit), tmp_path / "s", fake.sign_public)
    with pytest.raises(SignatureError):
        client.sync()
    assert client.config is None


def test_a_later_bad_config_does_not_replace_the_good_one(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM])
    client = make_client(fake, tmp_path / "s", fake.sign_public)
    good = client.sync()
    fake.signer = AggregatorKeys.generate()
    with pytest.raises(SignatureError):
        client.sync()
    assert client.config == good
    client.report("places", "x")


def test_key_rotation_with_several_pinned_keys(tmp_path: Path) -> None:
    old, new = FakeAggregator([ASYM]), FakeAggregator([ASYM])
    client = make_client(old, tmp_path / "s", [old.sign_public, new.keys.sign_public_raw])
    client.sync()
    client.transport.session = new
    assert client.sync().aggregator.sign_public == new.keys.sign_public_raw


def test_stored_config_is_checked_against_the_pins_on_restart(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM])
    make_client(fake, tmp_path / "s", fake.sign_public).sync()
    other = AggregatorKeys.generate()
    client = make_client(fake, tmp_path / "s", b64e(other.sign_public_raw))
    assert client.config is None  # pinned key changed: the old config is not trusted


def test_rounds_come_verified(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM])
    announcement = RoundAnnouncement(
        round_id=3, metric="places", params_digest=ASYM.digest(), level_from=1.0, level_to=2.0, cohorts=None,
        opened_at=0, expires_at=10**10,
    )
    fake.open_round(announcement)
    client = make_client(fake, tmp_path / "s", fake.sign_public)
    assert client.sync().rounds == (announcement,)
    fake.rounds[0]["payload"]["level_to"] = 40.0  # a tampered announcement inside a signed config
    with pytest.raises(SignatureError) as info:
        client.sync()
    assert info.value.field.startswith("rounds[0]")


def test_changed_metric_parameters_are_refused(tmp_path: Path) -> None:
    fake = FakeAggregator([ASYM])
    client = make_client(fake, tmp_path / "s", fake.sign_public)
    client.sync()
    client.report("places", "x")
    changed = MetricParams(name="places", encoding=ASYM.encoding, mode="symmetric", level=1.0)
    fake.entries = {"places": type(fake.entries["places"]).of(changed)}
    client.sync()
    with pytest.raises(PolicyError):
        client.report("places", "x")
    assert client.ledger().events[-1].kind == "params_changed"


def test_pinned_key_validation() -> None:
    with pytest.raises(ParameterError):
        pinned_keys([])
    with pytest.raises(ParameterError):
        pinned_keys(b"short")
    with pytest.raises(ParameterError):
        pinned_keys("not base64!")


def test_an_older_signed_config_does_not_replace_a_newer_one(tmp_path: Path) -> None:
    # freshness: issued_at is the config's serial; a replayed older document (validly signed) is not taken
    fake = FakeAggregator([ASYM])
    fake.issued_at = 2000
    client = make_client(fake, tmp_path / "s", fake.keys.sign_public_raw)
    assert client.sync().issued_at == 2000
    fake.entries.clear()  # the older document lists no metric: taking it would stop reporting
    fake.issued_at = 1000
    kept = client.sync()
    assert kept.issued_at == 2000 and kept.metric("places") is not None
    assert [e.kind for e in client.ledger().events].count("stale_config") == 1
    client.sync()  # recorded once
    assert [e.kind for e in client.ledger().events].count("stale_config") == 1
    # the kept config survives a restart, and a newer one is taken
    client.close()
    again = make_client(fake, tmp_path / "s", fake.keys.sign_public_raw)
    assert again.config is not None and again.config.issued_at == 2000
    fake.issued_at = 3000
    assert again.sync().issued_at == 3000
