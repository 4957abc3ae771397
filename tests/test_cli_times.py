"""The analysis commands take a window as Unix seconds or as ISO-8601 UTC, the same parser as ``release``.

Against a live aggregator, ``estimates`` and ``certify`` answer the same for
a window named either way; ``discover`` and ``association`` (whose metrics
the live world lacks) are shown to send the same Unix seconds for each form.
``estimates --confidence`` (a flag the command lacked) reaches the server.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aggsupport import make_reports, post_reports
from test_aggregator_releases import NOISY, make_world

from aggregator.api_client import ApiClient
from aggregator.cli.main import main
from aggregator.cli.render import iso_time

NOV_20 = 1795132800  # 2026-11-20T00:00:00Z
FORMS = {  # a time as a person may write it -> Unix seconds
    "1795132800": NOV_20,
    "2026-11-20": NOV_20,
    "2026-11-20T13:00": NOV_20 + 13 * 3600,
    "2026-11-20T13:00:00Z": NOV_20 + 13 * 3600,
    "2026-11-20T14:00:00+01:00": NOV_20 + 13 * 3600,  # another zone, converted to the same moment
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The live world, with 100 reports of the asymmetric metric in its window and two windows before."""
    with make_world("sqlite", tmp_path_factory.mktemp("world")) as w:
        for seed, window in enumerate((w.window - 2 * NOISY.time_precision, w.window)):
            reports = make_reports(NOISY, w.srv.keys.seal_public_raw, NOISY.min_batch_size, seed=seed, window=window)
            assert post_reports(w.srv.url, reports.envelopes).json()["accepted"] == NOISY.min_batch_size
        yield w


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_estimates_and_certify_take_an_iso_window(world: Any, capsys: pytest.CaptureFixture[str]) -> None:
    earlier = world.window - 2 * NOISY.time_precision  # not the latest window: the flag is what chooses it
    common = ["--server", world.srv.url, "--token", world.tokens["alice"], "--round", "0",
              "--candidates", "place-00,place-01"]
    iso = iso_time(earlier)
    for command in (["estimates", "visits-noisy"], ["certify", "visits-noisy", "--threshold", "60", "--alpha", "0.05"]):
        by_seconds = _json(capsys, *command, *common, "--window", str(earlier), "--json")
        by_iso = _json(capsys, *command, *common, "--window", iso, "--json")
        by_iso_minutes = _json(capsys, *command, *common, "--window", iso[:16], "--json")  # YYYY-MM-DDTHH:MM
        assert by_seconds["window"] == earlier and by_seconds["rows"] and by_iso == by_seconds == by_iso_minutes
        assert main([*command, *common, "--window", iso]) == 0
        assert capsys.readouterr().out.startswith(f"visits-noisy, window {iso}, round 0, 100 reports, level 2 ")


def test_estimates_confidence_sets_the_intervals(world: Any, capsys: pytest.CaptureFixture[str]) -> None:
    common = ["estimates", "visits-noisy", "--server", world.srv.url, "--token", world.tokens["alice"], "--json"]
    default, narrower = _json(capsys, *common), _json(capsys, *common, "--confidence", "0.5")
    assert (default["confidence"], narrower["confidence"]) == (0.95, 0.5)
    for wide, narrow in zip(default["rows"], narrower["rows"], strict=True):
        assert wide["estimate"] == narrow["estimate"]
        assert wide["lower"] < narrow["lower"] <= narrow["upper"] < wide["upper"]
    assert main([*common[:-1], "--confidence", "0.5"]) == 0
    assert "interval: 0.5 confidence" in capsys.readouterr().out


@pytest.mark.parametrize("command", [
    ["discover", "words"],
    ["association", "pairs", "--values-a", "a", "--values-b", "x"],
    ["estimates", "places"],
    ["certify", "places", "--threshold", "5", "--alpha", "0"],
])
def test_each_analysis_command_sends_unix_seconds_for_every_form(
    command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    sent: list[Any] = []

    def answer(_: ApiClient, method: str, path: str, *, json: Any = None, params: Any = None) -> Any:
        sent.append((json or params)["window"])
        return {"rows": [], "metric": command[1]}

    monkeypatch.setattr(ApiClient, "request", answer)
    for text, seconds in FORMS.items():
        assert main([*command, "--window", text, "--server", "http://127.0.0.1:9", "--json"]) == 0
        assert sent.pop() == seconds, text
    capsys.readouterr()
