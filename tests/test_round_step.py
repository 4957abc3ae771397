"""The round's one rule (protocol.chain.RoundStep) and the window chain that knows its cost, checked once a decision."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from roundsupport import NOW, announce

from aggregator.server.errors import Conflict
from aggregator.server.services.rounds import round_start
from aggregator.server.storage.records import MetricRecord as ServerMetric
from client_sdk import Client
from client_sdk.ledger import window_cost as ledger_window_cost
from client_sdk.testing import FakeAggregator
from protocol import chain
from protocol.chain import Irr, RoundRepeats, RoundStep, WindowChain, window_cost
from protocol.encodings import BloomEncoding, DirectEncoding
from protocol.errors import ParameterError, TighteningRefused
from protocol.params import MetricParams

ASYM = MetricParams(name="places", encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=1),
                    mode="asymmetric", level=1.0, irr_q=0.5)
SYM = MetricParams(name="flag", encoding=DirectEncoding(domain=("a", "b")), mode="symmetric", level=1.0,
                   irr_p=0.25, irr_q=0.75)


def test_irr_is_frozen_and_equal_to_its_pair() -> None:
    irr = Irr.of((None, 1))
    assert irr == (None, 1.0) and isinstance(irr.irr_q, float)
    assert Irr.held(SYM, None) == (0.25, 0.75)
    with pytest.raises(AttributeError):
        irr.irr_q = 0.2  # type: ignore[misc]


@pytest.mark.parametrize(("level_to", "irr_to", "error"), [
    (2.0, None, None),                    # raises the level
    (1.0, (0.2, 0.8), None),              # keeps it, relaxes the IRR
    (1.0, (0.25, 0.75), RoundRepeats),    # keeps both
    (1.0, None, RoundRepeats),
    (0.5, (0.2, 0.8), TighteningRefused),  # lowers it, whatever the IRR
    (2.0, (0.3, 0.7), ParameterError),    # an IRR that tightens
])
def test_the_round_rule(level_to: float, irr_to: tuple[float, float] | None, error: type[Exception] | None) -> None:
    step = RoundStep.of(SYM, 1.0, None, level_to, irr_to)
    if error is None:
        step.check()
        return
    with pytest.raises(error) as info:
        step.check()
    assert getattr(info.value, "field", None) == {RoundRepeats: "level_to", TighteningRefused: "level",
                                                  ParameterError: "irr"}[error]


def test_the_server_refuses_what_the_rule_refuses() -> None:
    metric = ServerMetric(id=1, params=SYM, digest="0" * 64, created_at=0, updated_at=0)
    assert round_start(metric, [], 1.0, (0.2, 0.8)) == (1.0, 0.2, 0.8)
    with pytest.raises(Conflict) as info:
        round_start(metric, [], 1.0, None)
    assert info.value.code == "level_not_increasing"
    with pytest.raises(ParameterError) as bad:
        round_start(metric, [], 2.0, (0.3, 0.7))
    assert bad.value.field == "irr"


def test_window_cost_lives_in_protocol_and_the_ledger_re_exports_it() -> None:
    assert ledger_window_cost is window_cost
    assert WindowChain.of([1.0, 2.0]).cost(SYM) == window_cost(SYM, [1.0, 2.0])


def test_after_relaxes_only_where_not_dearer() -> None:
    # symmetric, level 1 -> 5 with an IRR round: the relaxed chain costs more than a fresh IRR
    held = WindowChain.of([1.0], [None])
    far = RoundStep.of(SYM, 1.0, None, 5.0, (0.2, 0.8))
    near = RoundStep.of(SYM, 1.0, None, 1.0, (0.2, 0.8))
    relaxed_far = WindowChain.of([1.0, 5.0], [None, (0.2, 0.8)], [True]).cost(SYM)[0]
    fresh_far = WindowChain.of([1.0, 5.0], [None, (0.2, 0.8)], [False]).cost(SYM)[0]
    assert relaxed_far > fresh_far
    assert held.after(far, SYM, sent_kept=True).relaxed == (False,)
    assert held.after(near, SYM, sent_kept=True).relaxed == (True,)
    assert held.after(near, SYM, sent_kept=False).relaxed == (False,)  # the last report was not kept
    kept = RoundStep.of(SYM, 1.0, None, 2.0)
    assert held.after(kept, SYM, sent_kept=True) == WindowChain.of([1.0, 2.0], [None, None], [False])


def _client(tmp_path: Path, fake: FakeAggregator, **kwargs: Any) -> Client:
    client = Client("http://agg.test", tmp_path / "state", background=False, strict=True,
                    server_public_keys=fake.sign_public, max_epsilon=10.0, session=fake, clock=lambda: NOW,
                    sleep=lambda s: None, **kwargs)
    client.sync()
    client.report(ASYM.name, ["cafe"])
    return client


def _count(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the round rule's checks and the charges of re-sends (``WindowChain.after``)."""
    calls = {"check": 0, "after": 0}
    check, after = RoundStep.check, WindowChain.after

    def counted_check(self: RoundStep) -> None:
        calls["check"] += 1
        check(self)

    def counted_after(self: WindowChain, *args: Any, **kwargs: Any) -> WindowChain:
        calls["after"] += 1
        return after(self, *args, **kwargs)

    monkeypatch.setattr(chain.RoundStep, "check", counted_check)
    monkeypatch.setattr(chain.WindowChain, "after", counted_after)
    return calls


def test_a_followed_round_is_checked_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client used to check a round in Following and again in relax() (twice each)."""
    fake = FakeAggregator([ASYM])
    client = _client(tmp_path, fake)
    calls = _count(monkeypatch)
    fake.open_round(announce(ASYM, 2, 1.0, 1.0, irr_q=0.25))
    client.sync()
    assert client.ledger()["places"].levels == (1.0, 1.0)
    assert calls == {"check": 1, "after": 1}


def test_relax_checks_once_and_a_repeat_is_a_no_op(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeAggregator([ASYM])
    client = _client(tmp_path, fake)
    calls = _count(monkeypatch)
    assert client.relax("places", 2.0, 1).levels == (1.0, 2.0)
    assert calls == {"check": 1, "after": 1}
    assert client.relax("places", 2.0, 1).levels == (1.0, 2.0)
    with pytest.raises(TighteningRefused):
        client.relax("places", 1.5, 2)
    assert calls == {"check": 3, "after": 1}
