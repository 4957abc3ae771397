"""The import paths users had before the round's home and the package splits keep working, as the same objects."""

from __future__ import annotations

import importlib

import pytest

import protocol.central
import protocol.chain
import protocol.wire


@pytest.mark.parametrize(("old", "new", "names"), [
    ("protocol.mechanisms", "protocol.central", protocol.central.__all__),
    ("client_sdk.ledger", "protocol.chain", ["Irr", "window_cost"]),
    ("protocol.wire", "protocol.wire.envelope", ["ReportEnvelope", "seal_report", "open_report"]),
    ("protocol.wire", "protocol.wire.config", ["ConfigPayload", "RoundAnnouncement", "verify_config"]),
    ("protocol.wire", "protocol.wire.batch", ["parse_batch_json", "parse_batch_binary"]),
    ("aggregator.cli.api_client", "aggregator.api_client", ["ApiClient", "ApiRequestError", "DEFAULT_SERVER"]),
    ("client_sdk.status", "protocol.rounding", ["epsilon_text"]),
])
def test_an_old_path_gives_the_same_object(old: str, new: str, names: list[str]) -> None:
    before, after = importlib.import_module(old), importlib.import_module(new)
    for name in names:
        assert getattr(before, name) is getattr(after, name), name


def test_the_registry_keeps_its_order() -> None:
    assert protocol.central.mechanism_names() == ("alap", "ageo", "salap", "laplace", "geometric")
    assert protocol.chain.WindowChain.of([1.0]).levels == (1.0,)
    assert protocol.wire.WIRE_VERSION == 1
