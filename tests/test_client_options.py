"""ClientOptions: the client's keywords as one validated, frozen settings object."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from client_sdk import Client, ClientOptions
from client_sdk.testing import FakeAggregator
from protocol.encodings import BloomEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams

PARAMS = MetricParams(name="m", encoding=BloomEncoding(num_bits=16, num_hashes=2, num_cohorts=4),
                      mode="asymmetric", level=1.0, value_kind="set")


def test_options_and_keywords_make_the_same_client(tmp_path: Path) -> None:
    fake = FakeAggregator([PARAMS])
    options = ClientOptions(server_public_keys=fake.sign_public, max_epsilon=2.0, background=False, session=fake,
                            max_queue=7, budget_period="day")
    by_options = Client("http://agg.test", tmp_path / "a", options=options)
    by_keywords = Client("http://agg.test", tmp_path / "b", server_public_keys=fake.sign_public, max_epsilon=2.0,
                         background=False, session=fake, max_queue=7, budget_period="day")
    for client in (by_options, by_keywords):
        client.sync()
        client.report("m", {"x"})
        assert client.max_queue == 7 and client.ledger()["m"].ceiling == 2.0
        assert client.options.ceiling.period == 86400
        client.close()
    assert by_options.options is options


def test_options_are_validated_once_naming_the_keyword() -> None:
    key = FakeAggregator([PARAMS]).sign_public
    for bad, field in (({"max_queue": 0}, "max_queue"), ({"on_corrupt": "ignore"}, "on_corrupt"),
                       ({"send_interval": 0}, "send_interval"), ({"budget_refusals": "drop"}, "budget_refusals"),
                       ({"budget_warning": 2.0}, "budget_warning"), ({"sync_interval": -1}, "sync_interval"),
                       ({"rng": 5}, "rng"), ({"max_epsilon": 0}, "max_epsilon")):
        kwargs = {"server_public_keys": key, "max_epsilon": 1.0, **bad}
        with pytest.raises(ParameterError) as info:
            ClientOptions(**kwargs)  # type: ignore[arg-type]
        assert info.value.field == field, bad
    options = ClientOptions(server_public_keys=key, max_epsilon=1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_queue = 3  # type: ignore[misc]


def test_options_and_keywords_together_are_refused(tmp_path: Path) -> None:
    fake = FakeAggregator([PARAMS])
    options = ClientOptions(server_public_keys=fake.sign_public, max_epsilon=1.0, background=False, session=fake)
    with pytest.raises(ParameterError) as info:
        Client("http://agg.test", tmp_path / "s", options=options, max_queue=3)
    assert info.value.field == "options"
    with pytest.raises(TypeError, match="max_qeue"):
        Client("http://agg.test", tmp_path / "s", server_public_keys=fake.sign_public, max_epsilon=1.0,
               max_qeue=3)
    assert not (tmp_path / "s").exists()
