"""The aggregator can ask clients, in the signed config, how often to fetch it (opt-in: old clients refuse the field)."""

from __future__ import annotations

from pathlib import Path

import pytest
from aggsupport import app_in

from aggregator.server.settings import Settings
from protocol.crypto import AggregatorKeys
from protocol.errors import ParameterError
from protocol.wire import ConfigPayload, verify_config


def _config(folder: Path, **settings: object) -> tuple[dict[str, object], ConfigPayload]:
    with app_in(folder, **settings) as app:
        document = app.test_client().get("/v1/config").get_json()
        sign_public = AggregatorKeys.load(folder / "keys").sign_public_raw
        return document["payload"], verify_config(document, sign_public=sign_public)  # signed with the field inside


def test_the_config_says_nothing_by_default(tmp_path: Path) -> None:
    payload, verified = _config(tmp_path)
    assert "sync_interval" not in payload and verified.sync_interval is None


def test_a_configured_interval_is_signed_into_the_config(tmp_path: Path) -> None:
    payload, verified = _config(tmp_path, sync_interval=900)
    assert payload["sync_interval"] == 900 and verified.sync_interval == 900


@pytest.mark.parametrize("value", [59, 7 * 86_400 + 1, 0])
def test_an_interval_out_of_range_is_refused_naming_the_field(value: int) -> None:
    with pytest.raises(ParameterError, match="sync_interval"):
        Settings(sync_interval=value)


def test_the_environment_sets_it(tmp_path: Path) -> None:
    assert Settings.from_env({"ONESIDED_SYNC_INTERVAL": "600", "ONESIDED_DATA_DIR": str(tmp_path)}).sync_interval == 600
    with pytest.raises(ParameterError, match="sync_interval"):
        Settings.from_env({"ONESIDED_SYNC_INTERVAL": "soon"})
