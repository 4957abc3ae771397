"""Following a signing-key rotation: a next key announced in a trusted, kept config becomes trusted.

The rules (docs/client.md, keys): announce -> trust -> switch; an announcement in a document that
does not verify with a trusted key is never learned; learned keys live in the encrypted state and
survive restarts; learned keys the newest config no longer names are dropped; a client that missed
the whole announcement window gets an error that says what to do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from client_sdk import Client
from client_sdk.state import ClientState, StateStore
from client_sdk.testing import FakeAggregator
from protocol.crypto import AggregatorKeys, b64e, key_id, public_key_info
from protocol.encodings import BloomEncoding
from protocol.errors import SignatureError
from protocol.params import MetricParams
from protocol.wire import build_config_payload

ASYM = MetricParams(name="places", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                    mode="asymmetric", level=1.0)


class Rotating(FakeAggregator):
    """A fake aggregator that signs with ``signer`` and may announce ``announce`` (a raw public key)."""

    announce: bytes | None = None

    def config_document(self) -> dict[str, Any]:
        self.issued_at += 1  # every config is newer than the last
        aggregator = public_key_info(self.keys.seal_public_raw, self.signer.sign_public_raw, self.announce)
        payload = build_config_payload(issued_at=self.issued_at, aggregator=aggregator,
                                       metrics=list(self.entries.values()), rounds=self.rounds)
        return self.signer.sign(payload)


def launch(fake: FakeAggregator, path: Path, *keys: bytes) -> Client:
    return Client("http://agg.test", path, background=False, strict=True, server_public_keys=[b64e(k) for k in keys],
                  max_epsilon=10.0, session=fake)


def announced(tmp_path: Path) -> tuple[Rotating, AggregatorKeys, AggregatorKeys, Client]:
    """A client pinning the current key that synced a config announcing a new one."""
    fake = Rotating([ASYM])
    old, new = fake.keys, AggregatorKeys.generate()
    client = launch(fake, tmp_path / "s", old.sign_public_raw)
    fake.announce = new.sign_public_raw
    client.sync()
    return fake, old, new, client


def learned(client: Client) -> set[str]:
    return set(client._state.learned_sign_keys)


def test_announce_then_trust_then_switch(tmp_path: Path) -> None:
    fake = Rotating([ASYM])
    old, new = fake.keys, AggregatorKeys.generate()
    client = launch(fake, tmp_path / "s", old.sign_public_raw)
    client.sync()
    assert learned(client) == set()
    fake.announce = new.sign_public_raw  # `keys rotate --sign`, first run
    client.sync()
    assert learned(client) == {key_id(new.sign_public_raw)}
    assert [e.kind for e in client.ledger().events].count("sign_key_learned") == 1
    fake.signer, fake.announce = new, None  # second run: the announced key signs
    assert client.sync().aggregator.sign_public == new.sign_public_raw
    client.report("places", "x")
    assert learned(client) == {key_id(new.sign_public_raw)}  # the signer stays learned
    # a second rotation is followed from the learned key alone
    newer = AggregatorKeys.generate()
    fake.announce = newer.sign_public_raw
    client.sync()
    fake.signer, fake.announce = newer, None
    assert client.sync().aggregator.sign_public == newer.sign_public_raw
    assert learned(client) == {key_id(newer.sign_public_raw)}  # the retired learned key is dropped


def test_an_announcement_in_an_unverified_document_is_never_learned(tmp_path: Path) -> None:
    fake = Rotating([ASYM])
    pinned, attacker, injected = fake.keys, AggregatorKeys.generate(), AggregatorKeys.generate()
    client = launch(fake, tmp_path / "s", pinned.sign_public_raw)
    good = client.sync()
    # an impostor signs with its own key and announces another of its keys
    fake.signer, fake.announce = attacker, injected.sign_public_raw
    with pytest.raises(SignatureError):
        client.sync()
    # a genuine document with an announcement spliced in: the signature no longer matches
    fake.signer, fake.announce = pinned, None
    document = fake.config_document()
    document["payload"]["aggregator"].update(public_key_info(pinned.seal_public_raw, pinned.sign_public_raw,
                                                             injected.sign_public_raw))
    with pytest.raises(SignatureError):
        client._following.verify(document)
    assert learned(client) == set() and client.config == good
    fake.signer = injected
    with pytest.raises(SignatureError):
        client.sync()


def test_a_stale_config_announces_nothing(tmp_path: Path) -> None:
    # an older (replayed) document is validly signed but not kept: its announcement is not learned
    fake = Rotating([ASYM])
    client = launch(fake, tmp_path / "s", fake.keys.sign_public_raw)
    fake.issued_at = 100
    client.sync()
    fake.issued_at, fake.announce = 10, AggregatorKeys.generate().sign_public_raw
    assert client.sync().issued_at == 101
    assert learned(client) == set()


def test_a_withdrawn_announcement_drops_the_learned_key(tmp_path: Path) -> None:
    fake, old, new, client = announced(tmp_path)
    fake.announce = None  # e.g. the key directory restored from before the announcement
    client.sync()
    assert learned(client) == set()
    assert client.ledger().events[-1].kind == "sign_key_dropped"
    fake.signer = new
    with pytest.raises(SignatureError):
        client.sync()


def test_a_restart_keeps_the_learned_key_encrypted(tmp_path: Path) -> None:
    fake, old, new, client = announced(tmp_path)
    client.close()
    raw = (tmp_path / "s").read_bytes()
    assert b64e(new.sign_public_raw).encode() not in raw and key_id(new.sign_public_raw).encode() not in raw
    fake.signer, fake.announce = new, None
    again = launch(fake, tmp_path / "s", old.sign_public_raw)  # the app still pins only the old key
    assert again.config is not None  # the kept config verifies after the restart
    assert again.sync().aggregator.sign_public == new.sign_public_raw
    again.close()
    # a config kept after the switch verifies on the next start with the learned key
    third = launch(fake, tmp_path / "s", old.sign_public_raw)
    assert third.config is not None and third.config.aggregator.sign_public == new.sign_public_raw
    third.close()


def test_offline_through_the_rotation_window_says_what_to_do(tmp_path: Path) -> None:
    fake = Rotating([ASYM])
    old, new = fake.keys, AggregatorKeys.generate()
    client = launch(fake, tmp_path / "s", old.sign_public_raw)
    kept = client.sync()
    fake.signer = new  # announced and switched while the client did not sync
    with pytest.raises(SignatureError) as info:
        client.sync()
    text = str(info.value)
    assert info.value.field == "key_id" and key_id(new.sign_public_raw) in text and key_id(old.sign_public_raw) in text
    assert "missed the announcement" in text and "onesided keys show" in text
    assert client.config == kept
    client.close()
    # the documented fix: an app update pinning the new key
    assert launch(fake, tmp_path / "s", new.sign_public_raw).sync().aggregator.sign_public == new.sign_public_raw


def test_state_round_trips_learned_keys_and_checks_them(tmp_path: Path) -> None:
    raw = AggregatorKeys.generate().sign_public_raw
    state = ClientState.fresh()
    state.learned_sign_keys = {key_id(raw): raw}
    assert ClientState.from_json(state.to_json()).learned_sign_keys == {key_id(raw): raw}
    data = json.loads(state.to_json())
    del data["learned_sign_keys"]  # a state written before the field: nothing learned
    assert ClientState.from_json(json.dumps(data).encode()).learned_sign_keys == {}
    data["learned_sign_keys"] = {"00" * 8: b64e(raw)}  # a key under another key's id
    with pytest.raises(ValueError, match="learned_sign_keys"):
        ClientState.from_json(json.dumps(data).encode())
    store = StateStore(tmp_path / "st")
    store.save(state)
    assert store.load().learned_sign_keys == {key_id(raw): raw}  # type: ignore[union-attr]
