"""Finding 4: central guarantees protect a person (a report of up to ``max_items`` items), not a visit.

A person who visits 3 places moves 3 counts: with sensitivity 1 the loss is
3 eps while eps is claimed. ``MetricParams.max_items`` bounds what a trusted
report may contribute (ingestion keeps at most that many ones, chosen at
random) and the central releases take their L1 sensitivity from it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from aggsupport import WINDOW, LiveServer, bearer, current_window, live_server, post_reports

from aggregator.cli.commands.metrics import params_from_args
from aggregator.cli.commands.metrics import register as register_metric_commands
from aggregator.server.ingest import clip_items
from aggregator.server.services.releases import release_sensitivity
from protocol.central import AGeoMechanism, ALapMechanism
from protocol.encodings import BloomEncoding, DirectEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.releases import make_release
from protocol.rng import SeededRandom
from protocol.wire import build_report

PLACES = tuple(f"p{i}" for i in range(8))


def _visits(max_items: int = 1, **extra: Any) -> MetricParams:
    return MetricParams(name="visits", encoding=DirectEncoding(domain=PLACES), mode="trusted", level=math.inf,
                        time_precision=WINDOW, max_items=max_items, **extra)


# ---------------------------------------------------------------------------
# the parameter
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, 9, 1.5, True, "2", None])
def test_bad_max_items_names_the_field(bad: Any) -> None:
    with pytest.raises(ParameterError) as info:
        _visits(bad)
    assert info.value.field == "max_items"
    with pytest.raises(ParameterError) as info:
        MetricParams.from_dict({**_visits().to_dict(), "max_items": bad})
    assert info.value.field == "max_items"


def test_max_items_round_trips_and_is_bound_into_the_digest() -> None:
    one, three = _visits(), _visits(3)
    assert "max_items" not in one.to_dict()  # the default keeps every existing digest
    assert three.to_dict()["max_items"] == 3 and MetricParams.from_dict(three.to_dict()) == three
    assert one.digest() != three.digest()
    assert MetricParams.from_dict({**one.to_dict(), "max_items": 1}).digest() == one.digest()


def test_cli_max_items_option() -> None:
    parser = argparse.ArgumentParser()
    register_metric_commands(parser.add_subparsers())
    args = parser.parse_args(["metric", "create", "--name", "visits", "--encoding", "direct", "--domain",
                              ",".join(PLACES), "--mode", "trusted", "--max-items", "3"])
    assert params_from_args(args)["max_items"] == 3
    with pytest.raises(ParameterError) as info:
        params_from_args(parser.parse_args(["metric", "create", "--name", "v", "--encoding", "direct",
                                            "--domain", "a,b", "--mode", "trusted", "--max-items", "3"]))
    assert info.value.field == "max_items"


# ---------------------------------------------------------------------------
# sensitivity: a person at 3 places
# ---------------------------------------------------------------------------


def _person_loss(mech: ALapMechanism, visited: int) -> float:
    """Exact loss of removing one person at ``visited`` places: the counts are independent, the losses add."""
    z = 10.0 + mech.step * np.arange(0, 100_000)
    per_count = float(np.max(mech.log_pmf(z, 10.0) - mech.log_pmf(z, 9.0)))
    return visited * per_count


def test_a_person_at_3_places_with_max_items_3_gives_sensitivity_3() -> None:
    params = _visits(3)
    for mechanism in ("alap", "ageo", "laplace", "geometric"):
        assert release_sensitivity(params, mechanism) == 3
    assert release_sensitivity(params, "salap") == 1  # per query: one report moves each count by <= 1
    bloom = MetricParams(name="b", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                         mode="trusted", level=math.inf, max_items=3)
    assert release_sensitivity(bloom, "alap") == 6  # up to max_items * num_hashes bit counts per cohort
    eps = 1.0
    claimed = ALapMechanism(epsilon=eps, sensitivity=3.0).guarantee().epsilon
    loss = _person_loss(ALapMechanism(epsilon=eps, sensitivity=3.0), 3)
    assert loss <= claimed * (1 + 1e-9) and loss > 0.99 * claimed  # holds, and tight
    old = ALapMechanism(epsilon=eps)  # the old claim: sensitivity 1
    assert _person_loss(old, 3) > 2.9 * old.guarantee().epsilon  # loss 3 eps while eps was claimed
    ageo = AGeoMechanism(epsilon=eps, n_max=20, sensitivity=3)
    assert ageo.privacy_loss() <= ageo.guarantee().epsilon * (1 + 1e-9)
    assert AGeoMechanism(epsilon=eps, n_max=20).privacy_loss() * 3 > 2.9 * eps
    rel = make_release("alap", [3, 5], eps, sensitivity=3.0, rng=1)
    assert rel.guarantee().epsilon == eps and "L1 change <= 3" in rel.guarantee().neighbour


# ---------------------------------------------------------------------------
# clipping on ingestion
# ---------------------------------------------------------------------------


def test_clip_items_keeps_a_uniform_subset() -> None:
    bits = np.packbits(np.array([1, 1, 0, 1, 1, 0, 1, 0], dtype=np.uint8), bitorder="little").tobytes()
    seen = np.zeros(8, dtype=np.int64)
    rng = SeededRandom(3)
    for _ in range(5000):
        out, dropped = clip_items(bits, 8, 2, rng)
        kept = np.unpackbits(np.frombuffer(out, dtype=np.uint8), bitorder="little")
        assert dropped == 3 and kept.sum() == 2 and not np.any(kept[[2, 5, 7]])
        seen += kept
    # each of the 5 ones kept w.p. 2/5: 2000 of 5000 (sd 35); 250 is > 7 sd (false-failure rate < 1e-11)
    assert np.all(np.abs(seen[[0, 1, 3, 4, 6]] - 2000) < 250)
    assert clip_items(bits, 8, 5, rng) == (bits, 0)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    with live_server(f"sqlite:///{tmp_path / 'agg.db'}", tmp_path / "agg") as srv:
        yield srv


def _report(params: MetricParams, srv: LiveServer, ones: list[int], seed: int) -> Any:
    bits = np.zeros(params.num_bits, dtype=bool)
    bits[ones] = True
    return build_report(params_digest=params.digest(), metric=params.name, round=0, window=current_window(params),
                        cohort=0, level=params.level, bits=bits, seal_public=srv.keys.seal_public_raw,
                        ephemeral_private=bytes([seed]) * 32)


def _clipped_total() -> float:
    """onesided_reports_clipped_total of this process's registry (the in-process server's /metrics)."""
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("onesided_reports_clipped_total") or 0.0


def test_metric_create_states_the_clipping_and_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    from aggregator.cli.main import main

    argv = ["metric", "create", "--name", "v", "--mode", "trusted", "--encoding", "direct", "--domain", "a,b,c",
            "--dry-run"]
    assert main(argv) == 0
    assert "each report keeps at most 1 item (--max-items, default 1)" in capsys.readouterr().out
    assert main([*argv, "--max-items", "3"]) == 0
    assert "each report keeps at most 3 items" in capsys.readouterr().out


def test_a_report_with_5_ones_adds_exactly_2_when_max_items_is_2(server: LiveServer) -> None:
    params = _visits(2)
    assert server.register(params, server.admin_token()).status_code == 201
    big, small = _report(params, server, [0, 2, 3, 5, 7], 1), _report(params, server, [1, 6], 2)
    before = _clipped_total()
    response = post_reports(server.url, [big, small])
    body = response.json()
    assert body["accepted"] == 2, response.text
    assert "clipped" in body["results"][0]["detail"] and body["results"][1]["detail"] is None
    assert _clipped_total() == before + 1  # /metrics counts it: nobody loses items silently
    ones, totals = server.storage.bit_counts("visits", window=current_window(params), round=0)
    assert int(ones.sum()) == 4 and int(totals.sum()) == 2  # 2 of the 5, and both of the 2
    assert ones[0, 1] == 1 and ones[0, 6] == 1 and ones[0, [0, 2, 3, 5, 7]].sum() == 2
    assert post_reports(server.url, [big]).json()["accepted"] == 1  # a retry: counted once
    assert int(server.storage.bit_counts("visits")[0].sum()) == 4


@pytest.mark.parametrize("bad", [0, -2, 9, 2.5, "3", True])
def test_bad_max_items_answer_400_naming_the_field(server: LiveServer, bad: Any) -> None:
    body = {**_visits().to_dict(), "max_items": bad}
    response = requests.post(f"{server.url}/v1/metrics", json=body, headers=bearer(server.admin_token()), timeout=30)
    assert response.status_code == 400 and response.json()["field"] == "max_items", response.text


def test_release_sensitivity_and_neighbour_come_from_the_metric(server: LiveServer) -> None:
    params = _visits(3)
    admin = server.admin_token()
    assert server.register(params, admin).status_code == 201
    reports = [_report(params, server, [0, 1, 2], i) for i in range(1, 6)]
    assert post_reports(server.url, reports).json()["accepted"] == 5
    request = {"metric": "visits", "window": current_window(params), "mechanism": "alap", "threshold": 3,
               "epsilon": 1.0}
    view = requests.post(f"{server.url}/v1/releases", json=request, headers=bearer(server.analyst_token()),
                         timeout=30).json()
    assert view["sensitivity"] == 3 and view["max_items"] == 3 and view["guarantee"]["epsilon"] == 1.0
    assert "one person's report in the window added or removed" in view["guarantee"]["neighbour"]
    assert "at most 3 items" in view["guarantee"]["neighbour"]
    low = requests.post(f"{server.url}/v1/releases", json={**request, "sensitivity": 2},
                        headers=bearer(server.analyst_token("bob")), timeout=30)
    assert low.status_code == 400 and low.json()["field"] == "sensitivity"


def test_the_python_client_is_told_how_many_reports_were_clipped(server: LiveServer, tmp_path: Path) -> None:
    """Wire version 3: the upload answer counts the clipped reports, and the SDK says so (an event, a log line)."""
    from client_sdk import Client, ClientEvent

    params = _visits(2)
    assert server.register(params, server.admin_token()).status_code == 201
    events: list[ClientEvent] = []
    client = Client(server.url, tmp_path / "app.state", server_public_keys=server.keys.sign_public_raw,
                    max_epsilon=math.inf, background=False, on_event=events.append)  # trusted: no local noise
    try:
        assert client.sync()
        assert client.report("visits", {"p0", "p2", "p3", "p5"}).queued  # 4 items, the metric keeps 2
        assert client.flush().delivered == 1
    finally:
        client.close()
    clipped = [e for e in events if e.kind == "reports_clipped"]
    assert len(clipped) == 1 and clipped[0].error is not None and clipped[0].error.count == 1  # type: ignore[attr-defined]
    assert "max_items" in clipped[0].detail
