"""Wrong device clocks never cost a metric: the server's time is learned (``Date``, ``server_time``, the
config's signing time), the client's clock stays continuous when the device's jumps (minutes, days, a
year, both ways), schedules run on the monotonic clock, and reports the server's clock refuses for now
are kept and resent (docs/wire.md 7.4)."""

from __future__ import annotations

import email.utils
from pathlib import Path
from typing import Any

import pytest

from client_sdk import Client, ClientEvent, RetryPolicy, TransportError
from client_sdk.servertime import ServerClock, http_date
from client_sdk.testing import FakeAggregator, FakeResponse
from protocol.encodings import BloomEncoding
from protocol.params import MetricParams

PLACES = MetricParams(name="places", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=4),
                      mode="asymmetric", level=1.0)
T0 = 1_790_000_000.0 + 9 * 3600.0
MINUTE, DAY, YEAR = 60.0, 86400.0, 365 * 86400.0


class World:
    """True time (the server's clock), the device's wall clock (true time plus a skew) and its monotonic clock."""

    def __init__(self) -> None:
        self.true, self.skew, self.mono = T0, 0.0, 500.0

    def wall(self) -> float:
        return self.true + self.skew

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.true += seconds
        self.mono += seconds

    def jump(self, seconds: float) -> None:
        """The device clock alone moves (someone set it, or it was reset)."""
        self.skew += seconds


def make_client(fake: FakeAggregator, path: Path, world: World, **kwargs: Any) -> Client:
    kwargs.setdefault("max_epsilon", 1000.0)
    return Client("http://agg.test", path, background=False, server_public_keys=fake.sign_public, session=fake,
                  clock=world.wall, monotonic=world.monotonic, sleep=lambda s: None, rng=3,
                  insecure_rng_for_testing=True, **kwargs)


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def fake(world: World) -> FakeAggregator:
    fake = FakeAggregator([PLACES])
    fake.clock = lambda: world.true
    return fake


def windows(fake: FakeAggregator) -> list[int]:
    return sorted(envelope.window for envelope, _ in fake.stored.values())


@pytest.mark.parametrize("budget_period", [None, "day"])
@pytest.mark.parametrize("jump", [5 * MINUTE, -5 * MINUTE, 3 * DAY, -3 * DAY, YEAR, -YEAR])
def test_a_device_clock_that_jumps_never_blocks_a_metric(
    fake: FakeAggregator, world: World, tmp_path: Path, jump: float, budget_period: str | None
) -> None:
    events: list[ClientEvent] = []
    client = make_client(fake, tmp_path / "s", world, budget_period=budget_period, on_event=events.append)
    client.sync()
    assert client.report("places", {"v0"}).queued
    client.flush()
    world.jump(jump)
    for day in range(1, 6):
        world.advance(DAY)
        status = client.report("places", {f"v{day}"})
        assert status.status in ("queued", "waiting"), status
        client._background.tick()  # the sender's turn: asks the server's time when it must, sends
    client._background.tick()
    assert client.flush().remaining == 0
    day0 = int(T0 // DAY * DAY)
    assert windows(fake) == [day0 + d * int(DAY) for d in range(6)]  # one report a day, in the server's day
    assert not [e for e in events if e.kind in ("refused", "dropped", "clock_behind")]


def test_forty_days_ahead_then_corrected_keeps_every_report(fake: FakeAggregator, world: World, tmp_path: Path) -> None:
    world.jump(40 * DAY)  # the device starts 40 days ahead, before it ever spoke to the server
    events: list[ClientEvent] = []
    client = make_client(fake, tmp_path / "s", world, on_event=events.append)
    assert client.report("places", {"ahead"}).status == "waiting"  # offline first launch: waits for the config
    client.sync()  # the config, and with it the server's time (Date) and its signing time
    assert [e.kind for e in events].count("clock_off") == 1 and client.server_clock.offset == pytest.approx(-40 * DAY)
    assert client.flush().delivered == 1
    assert windows(fake) == [int(T0 // DAY * DAY)]  # the server's day, not the device's
    world.jump(-40 * DAY)  # someone puts the clock right: nothing moves for the client
    for _ in range(3):
        world.advance(DAY)
        assert client.report("places", {"later"}).queued
    assert client.flush().delivered == 3 and len(fake.stored) == 4


def test_reports_the_server_refuses_as_too_early_are_kept_and_resent(
    fake: FakeAggregator, world: World, tmp_path: Path
) -> None:
    fake.clock = None  # no Date: the client cannot learn it is ahead before the first upload answer
    client = make_client(fake, tmp_path / "s", world, clock_retry_cap=3600.0)
    client.sync()
    world.jump(2 * DAY)
    assert client.report("places", {"early"}).queued  # charged for a day the server has not reached
    fake.clock = lambda: world.true
    result = client.flush()
    assert (result.delivered, result.later, result.remaining) == (0, 1, 1)  # kept, not dropped
    world.advance(3599)
    assert client.flush().delivered == 0  # not resent before min(retry_after, clock_retry_cap)
    world.advance(2)
    assert client.flush().later == 1  # resent, still early: kept again
    world.advance(2 * DAY)
    assert client.flush().delivered == 1 and client.ledger().dropped_reports == 0


def test_a_too_early_answer_without_retry_after_stays_final(fake: FakeAggregator, world: World, tmp_path: Path) -> None:
    client = make_client(fake, tmp_path / "s", world)
    client.sync()
    world.jump(2 * DAY)
    world.advance(0)
    client.server_clock._anchor = None  # as an old server: nothing learned from it
    assert client.report("places", {"early"}).queued
    upload = fake._upload
    fake._upload = lambda data, content_type, wire2=False: upload(data, content_type, False)  # type: ignore[method-assign]
    result = client.flush()
    assert (result.rejected, result.later, result.remaining) == (1, 0, 0)


def test_the_schedule_runs_on_the_monotonic_clock(fake: FakeAggregator, world: World, tmp_path: Path) -> None:
    client = make_client(fake, tmp_path / "s", world, sync_interval=3600.0)
    client._background.first()
    configs = lambda: [p for _, p in fake.requests].count("/v1/config")  # noqa: E731
    assert configs() == 1
    world.jump(-3 * DAY)  # the device clock moves back 3 days: the hourly sync goes on
    world.advance(3601)
    client._background.tick()
    assert configs() == 2


def test_budget_periods_are_never_negative(fake: FakeAggregator, world: World, tmp_path: Path) -> None:
    client = make_client(fake, tmp_path / "s", world, budget_period="day", max_epsilon=5.0)
    client.sync()
    client.report("places", {"a"})
    client.close()
    world.jump(-10 * DAY)  # a restart with the clock 10 days back: nothing learned yet
    fake.clock = None
    again = make_client(fake, tmp_path / "s", world, budget_period="day", max_epsilon=5.0)
    periods = again.budget("places").periods
    assert periods is None or periods >= 1


def test_server_clock_reads_dates_and_keeps_time_continuous() -> None:
    wall, mono = [T0], [0.0]
    clock = ServerClock(lambda: wall[0], lambda: mono[0])
    assert http_date("Sun, 06 Nov 1994 08:49:37 GMT") == 784111777.0
    assert http_date("not a date") is None and http_date(None) is None
    clock.learn(T0 - 3 * DAY)  # the device is 3 days ahead
    assert clock.now() == pytest.approx(T0 - 3 * DAY)
    wall[0] -= 3 * DAY  # put right
    assert clock.now() == pytest.approx(T0 - 3 * DAY)
    mono[0] += 10
    wall[0] += 10
    assert clock.now() == pytest.approx(T0 - 3 * DAY + 10)
    clock.learn(T0 - 3 * DAY + 10.5)  # within the tolerance: unchanged
    assert clock.offset == 0.0
    clock.learn(T0 - 3 * DAY + 10 + 3600)  # behind by an hour: left alone (the server takes past windows)
    assert clock.offset == 0.0


def test_a_proxy_or_portal_with_a_wrong_date_teaches_nothing(fake: FakeAggregator, world: World, tmp_path: Path) -> None:
    client = make_client(fake, tmp_path / "s", world, retry=RetryPolicy(max_attempts=1))
    client.sync()
    client.report("places", {"home"})
    wrong = email.utils.formatdate(world.true + 30 * DAY, usegmt=True)

    def portal(method: str, url: str, **kwargs: Any) -> FakeResponse:
        if url.endswith("/v1/config"):  # a captive portal's page, with its own clock
            return FakeResponse(200, chunks=[b"<html>sign in</html>"], headers={"Date": wrong})
        return FakeResponse(503, {"error": "unavailable"}, headers={"Date": wrong})

    client.transport.session = type("Portal", (), {"request": staticmethod(portal), "close": lambda: None})
    assert client.flush().delivered == 0
    with pytest.raises(TransportError):
        client.sync()
    assert client.server_clock.offset == 0.0
    world.advance(DAY)
    client.transport.session = fake
    assert client.report("places", {"park"}).queued and client.flush().delivered == 2


def test_an_upload_answer_that_does_not_match_its_batch_teaches_no_time(
    fake: FakeAggregator, world: World, tmp_path: Path
) -> None:
    """Only an answer that names the batch's reports, in order, is the aggregator's (a proxy or portal may
    answer well-formed JSON): its ``server_time`` is learned only then."""
    client = make_client(fake, tmp_path / "s", world)
    client.sync()
    before = client.server_clock.offset
    real = fake.request

    def reordered(method: str, url: str, **kwargs: Any) -> FakeResponse:
        response = real(method, url, **kwargs)
        if url.endswith("/v1/reports") and response.status_code == 200:
            body = dict(response.body)
            body["results"] = body["results"][::-1]  # the same reports, not in the batch's order
            body["server_time"] = int(world.true - DAY)  # would set the clock a day back if learned
            response = FakeResponse(200, body, dict(response.headers))
        return response

    fake.request = reordered  # type: ignore[method-assign]
    client.report("places", {"a"})
    world.advance(DAY)
    client.report("places", {"b"})
    result = client.flush()
    assert result.remaining == 2  # the answer was not taken: both kept
    assert client.server_clock.offset == before
    client.close(deadline=0.0)
