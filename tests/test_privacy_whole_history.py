"""A whole history, computed exactly: the printed total against the loss of everything the client sent.

One real client (hourly windows, a ceiling of ``max_epsilon`` a day) over three days:

* day 0, window 0: a report at level 1, then a level round 1 -> 2 that keeps the IRR (a fresh re-send);
* day 0, window 1: a report at level 2, then an IRR round (level kept) that the day's ceiling refuses;
* day 0, window 2: a report the day's ceiling refuses (nothing sent);
* the state file is damaged; the client starts over (``on_corrupt="reset"``, a new secret) on day 1;
* day 1, window 3: a report at level 1, then a round 1 -> 3 that relaxes the IRR (re-send relaxed or
  fresh by the client's rule);
* day 2, window 4: a report at level 3 with the round's IRR.

What reached the aggregator is read back from it and must be exactly those reports. The loss is computed
without the ledger: windows draw independent noise (per-window keys; the new state's secret is
independent of the old one), the neighbouring history differs from it in ``clinic`` in every window, and
only ``clinic``'s bit differs, so the loss is the sum over sent windows of the exact loss of that bit's
reports in the window, from the exact joint law of a report chain
(:func:`protocol.irr_relaxation.report_chain_law`: rationals, not the interval enclosure the ledger
charges), in the protected direction (asymmetric: the neighbour lacks ``clinic``). In the symmetric mode
the worst neighbour holds ``clinic`` in the windows where one history's reports are more revealing in
that direction and lacks it in the others, so it loses the sum of the per-window maxima of the two
directions; with ``clinic`` removed in every window it would lose only the larger of the two sums.
The printed total (after the reset, carried by the high-water mark) must be at least the worst
neighbour's loss, and within the 1e-6 rounding per window of it.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest
from clocks import Clock

from client_sdk import Client
from client_sdk.ledger import Irr, window_cost
from client_sdk.testing import FakeAggregator
from protocol.encodings import DirectEncoding
from protocol.errors import BudgetExceeded
from protocol.irr_relaxation import report_chain_law
from protocol.params import MetricParams
from protocol.wire import RoundAnnouncement

HOUR, DAY = 3600, 86_400
T = 1_700_000_000 // DAY * DAY
PLACES = DirectEncoding(domain=("home", "clinic", "work"))
MODES: dict[str, tuple[MetricParams, Irr, float]] = {  # (metric, the IRR the rounds relax to, a daily ceiling that refuses window 1's round and window 2)
    "asymmetric": (MetricParams(name="places", encoding=PLACES, mode="asymmetric", level=1.0, irr_q=0.5,
                                time_precision=HOUR), (None, 0.2), 1.0),
    "symmetric": (MetricParams(name="places", encoding=PLACES, mode="symmetric", level=1.0, irr_p=0.5, irr_q=0.75,
                               time_precision=HOUR), (0.25, 0.75), 1.2),
}


class History:
    """Drives one client through the module's history; ``fake`` keeps what it sent."""

    def __init__(self, params: MetricParams, ceiling: float, path: Path) -> None:
        self.params, self.ceiling, self.path = params, ceiling, path
        self.fake = FakeAggregator([params])
        self.clock = Clock(T + 60.0)

    def client(self, **extra: object) -> Client:
        client = Client("http://agg.test", self.path, background=False, server_public_keys=self.fake.sign_public,
                        session=self.fake, clock=self.clock, max_epsilon=self.ceiling, budget_period="day",
                        strict=True, **extra)  # type: ignore[arg-type]
        client.sync()
        return client

    def at(self, seconds: int) -> None:
        self.clock.now = float(T + seconds)

    def round(self, client: Client, round_id: int, level_from: float, level_to: float, irr: Irr | None) -> None:
        now = int(self.clock.now)
        p, q = (None, None) if irr is None else irr
        self.fake.open_round(RoundAnnouncement(
            round_id=round_id, metric=self.params.name, params_digest=self.params.digest(), level_from=level_from,
            level_to=level_to, cohorts=None, opened_at=now - 1, expires_at=now + 600, irr_p=p, irr_q=q))
        client.sync()

    def run(self, irr: Irr) -> float:
        value = ["clinic", "home"]
        client = self.client()
        client.report(self.params.name, value)  # window 0
        self.at(120)
        self.round(client, 1, 1.0, 2.0, None)  # level round, IRR kept: fresh re-send
        self.at(HOUR + 60)
        client.report(self.params.name, value)  # window 1
        self.at(HOUR + 120)
        self.round(client, 2, 2.0, 2.0, irr)  # IRR-only round: refused by the day's ceiling
        self.at(2 * HOUR + 60)
        with pytest.raises(BudgetExceeded):
            client.report(self.params.name, value)  # window 2: refused
        client.flush()
        assert [e.kind for e in client.ledger().events] == ["relax", "round_refused", "refused"]
        client.close()
        data = bytearray(self.path.read_bytes())
        data[-1] ^= 1  # the state no longer opens
        self.path.write_bytes(bytes(data))
        self.at(DAY + 60)
        client = self.client(on_corrupt="reset", on_error=lambda error: None)
        client.report(self.params.name, value)  # window 3, a new secret
        self.at(DAY + 120)
        self.round(client, 3, 2.0, 3.0, irr)  # a level round relaxing the IRR
        self.at(2 * DAY + 60)
        client.report(self.params.name, value)  # window 4 at the round's level and IRR
        client.flush()
        client.close()
        return self.client().ledger()[self.params.name].spent

    def sent(self) -> list[tuple[int, int, float]]:
        """``(window hour, round, level)`` of every report the aggregator stored."""
        return sorted(((env.window - T) // HOUR, env.round, payload.level) for env, payload in self.fake.stored.values())


def _window_loss(params: MetricParams, levels: list[float], irrs: list[Irr]) -> tuple[float, float]:
    """``(max_z ln P(z|1)/P(z|0), the reverse)`` for one bit's reports in one window, drawn as the client does."""
    flags: list[bool] = []
    for r in range(1, len(levels)):  # the client's rule: relaxed when the round sets an IRR and it costs no more
        sets_irr = irrs[r] != irrs[r - 1]
        costs = [window_cost(params, levels[: r + 1], irrs[: r + 1], [*flags, f])[0] for f in (True, False)]
        flags.append(sets_irr and costs[0] <= costs[1])
    randomizers = [params.with_irr(irr).randomizer(level) for level, irr in zip(levels, irrs, strict=True)]
    zero, one = report_chain_law(randomizers, relaxed=flags)

    def worst(num: dict[tuple[int, ...], Fraction], den: dict[tuple[int, ...], Fraction]) -> float:
        return max(math.inf if den.get(z, 0) == 0 else math.log(p / den[z]) for z, p in num.items() if p > 0)

    return worst(one, zero), worst(zero, one)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_printed_total_is_the_exact_loss_of_everything_sent(mode: str, tmp_path: Path) -> None:
    params, irr, ceiling = MODES[mode]
    history = History(params, ceiling, tmp_path / "state")
    printed = history.run(irr)
    # window 0: report + round 1; window 1: its report (tagged with the round in force); window 2 and
    # round 2 refused; window 3 (new state): report + round 3; window 4: its report
    assert history.sent() == [(0, 0, 1.0), (0, 1, 2.0), (1, 1, 2.0), (24, 0, 1.0), (24, 3, 3.0), (48, 3, 3.0)]
    own: Irr = (params.irr_p, params.irr_q)
    windows: list[tuple[list[float], list[Irr]]] = [([1.0, 2.0], [own, own]), ([2.0], [own]), ([1.0, 3.0], [own, irr]), ([3.0], [irr])]
    losses = [_window_loss(params, levels, irrs) for levels, irrs in windows]
    truth = sum(u if params.mode == "asymmetric" else max(u, d) for u, d in losses)
    if params.mode == "symmetric":  # clinic removed everywhere: no more than the worst neighbour
        assert max(sum(u for u, _ in losses), sum(d for _, d in losses)) <= truth
    assert math.isfinite(truth) and truth <= printed < truth + len(windows) * 1e-6 + 1e-9, (printed, truth)
