"""A year in the field, on an injected clock: the README's budget policy, an offline first launch, two
aggregator restarts, two rounds the app never syncs for, the app killed mid-flush, close() at the end."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import requests
from clocks import Clock

from client_sdk import Client, RetryPolicy
from client_sdk.ledger import window_cost
from client_sdk.testing import FakeAggregator, simulate_crash
from protocol.encodings import DirectEncoding
from protocol.params import MetricParams
from protocol.wire import RoundAnnouncement

DAY = 86_400
T0 = 1_700_000_000 // DAY * DAY
# README: places is direct, asymmetric, level 1.0 (0.5 a day); os a categorical value (0.8997 a day)
PLACES = MetricParams(name="places", encoding=DirectEncoding(domain=("cafe", "park", "museum")),
                      mode="asymmetric", level=1.0)
OS = MetricParams(name="os", encoding=DirectEncoding(domain=("linux", "mac", "win")), mode="symmetric", level=0.5,
                  value_kind="categorical")


class Offline:
    """No network: every request fails to connect."""

    def request(self, *args: Any, **kwargs: Any) -> Any:
        raise requests.ConnectionError("offline")

    def close(self) -> None:
        pass


def restarted(old: FakeAggregator) -> FakeAggregator:
    """The aggregator after a restart: the same keys, metrics, open rounds and stored reports (its database)."""
    new = FakeAggregator([e.params for e in old.entries.values()], keys=old.keys)
    new.rounds, new.stored = old.rounds, old.stored
    return new


def open_round(fake: FakeAggregator, round_id: int, level_from: float, level_to: float, now: float) -> None:
    fake.open_round(RoundAnnouncement(
        round_id=round_id, metric="places", params_digest=fake.entries["places"].digest, level_from=level_from,
        level_to=level_to, cohorts=None, opened_at=int(now), expires_at=int(now) + 30 * DAY,
    ))


def test_a_year_in_the_field(tmp_path: Path) -> None:
    clock, path = Clock(T0 + 9 * 3600.0), tmp_path / "app" / "onesided.state"
    fake = FakeAggregator([PLACES, OS])
    errors: list[Exception] = []

    def launch(session: Any) -> Client:
        # the README's policy; the sender's turns are driven by hand (the thread runs the same function)
        return Client("http://telemetry.test", path, background=False, strict=True, server_public_keys=fake.sign_public,
                      session=session, clock=clock, monotonic=clock, max_epsilon=1.0, budget_period="day",
                      retry=RetryPolicy(max_attempts=1), on_error=errors.append)

    client = launch(Offline())
    client._background.first()
    stats: dict[str, int] = defaultdict(int)
    for day in range(365):
        clock.now = T0 + day * DAY + 9 * 3600.0
        if day == 3:  # the network comes back
            client.transport.session = fake
        if day in (100, 200):  # the aggregator restarts
            fake = restarted(fake)
            client.transport.session = fake
        if day == 150:
            open_round(fake, 1, 1.0, 1.5, clock.now)
        if day == 250:
            open_round(fake, 2, 1.5, 2.0, clock.now)
        rid = client.report("places", {"cafe", "park"} if day % 3 else {"museum"})
        client.report("os", ("linux", "mac", "win")[day % 7 % 3])
        stats["waited" if rid.status == "waiting" else "queued"] += 1
        if day == 300:  # killed mid-flush: the batch is stored, the answer lost, the process gone
            fake.fail_next(1, status=None, store_first=True)
            client.flush()
            simulate_crash(client)
            client = launch(fake)
        clock.now += 12 * 3600.0  # evening: the sender's turn (sync when due, send)
        client._background.tick()
    result = client.close()

    # days 0-2 offline, and day 3 until the evening turn synced: those values waited for a config
    assert (stats["waited"], stats["queued"]) == (4, 361)
    assert result.remaining == 0 and result.error is None
    refused = [e for e in client.ledger().events if e.kind in ("refused", "round_refused", "dropped")]
    assert refused == []
    assert all(type(e).__name__ == "TransportError" for e in errors[:3])  # only the offline days' syncs
    assert not any(type(e).__name__ != "TransportError" for e in errors)
    # every report delivered exactly once: one per window, plus each round's re-send of its day's value
    by_metric: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (metric, _), (envelope, payload) in fake.stored.items():
        by_metric[metric][envelope.window].append(payload.level)
    assert sorted(by_metric["os"]) == sorted(by_metric["places"]) == [T0 + d * DAY for d in range(365)]
    assert sum(map(len, by_metric["places"].values())) == 367 and sum(map(len, by_metric["os"].values())) == 365
    assert by_metric["places"][T0 + 150 * DAY] == [1.0, 1.5] and by_metric["places"][T0 + 250 * DAY] == [1.5, 2.0]
    # the ledger is what the aggregator can infer from what it holds
    for params in (PLACES, OS):
        inferred = sum(window_cost(params, sorted(levels))[0] for levels in by_metric[params.name].values())
        entry = client.ledger()[params.name]
        assert abs(entry.spent - inferred) < 1e-5 * len(by_metric[params.name])
        assert entry.windows == 365 and entry.spent_this_period is not None and entry.spent_this_period <= 1.0
    assert client.ledger()["places"].levels == (1.0, 1.5, 2.0)
    # the kill happened mid-flush: the stored-but-unanswered batch came back as replayed, not twice
    assert fake.replayed == 2  # the two reports of day 300
