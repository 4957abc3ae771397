"""The device targets' law check: each window's reports against their exact joint law (aggregator/research/audit_law.py).

The end-to-end checks (every shipped device target passes, every planted regression is caught) are in
tests/test_audit_device.py; here the check's own rules, on rows built by hand or drawn from the exact law.
"""

from __future__ import annotations

import numpy as np

from aggregator.research.audit_device import _SCENARIOS, DeviceScenario, Window
from aggregator.research.audit_law import law_p_value, window_chains
from protocol.encodings import DirectEncoding
from protocol.irr_relaxation import report_chain_law
from protocol.params import MetricParams

PLACES = DirectEncoding(domain=("home", "clinic", "work"))
ASYM_IRR = MetricParams(name="audit", encoding=PLACES, mode="asymmetric", level=2.0, irr_q=0.5)
HC, H = frozenset({"home", "clinic"}), frozenset({"home"})


def _exact_rows(scenario: DeviceScenario, history: tuple[Window, ...], n: int, seed: int,
                fresh: bool = False) -> np.ndarray:
    """``n`` clients' rows drawn from the exact law itself (every slot sent): what a correct device sends
    (``fresh``: what a device that never relaxes the IRR step would send)."""
    params, m = scenario.params, scenario.params.num_bits
    rng = np.random.default_rng(seed)
    parts = []
    for window, (randomizers, flags) in zip(history, window_chains(params, history), strict=True):
        law = report_chain_law(randomizers, relaxed=False if fresh else flags)
        true = params.encode(sorted(window.value) if isinstance(window.value, frozenset) else window.value, 0)
        block = np.zeros((n, len(randomizers), m + 1), dtype=bool)
        block[:, :, 0] = True
        for j in range(m):
            patterns = list(law[int(true[j])])
            weights = np.array([float(law[int(true[j])][p]) for p in patterns])
            drawn = rng.choice(len(patterns), size=n, p=weights / weights.sum())
            block[:, :, 1 + j] = np.array(patterns, dtype=bool)[drawn]
        parts.append(block.reshape(n, -1))
    return np.concatenate(parts, axis=1)


def test_rows_drawn_from_the_exact_law_pass() -> None:
    # false-failure rate: below 1e-6 per scenario (the chi-square p-value is about uniform under the law)
    for name in ("device-asymmetric-irr-round-relaxed", "device-symmetric-irr-round-relaxed",
                 "device-symmetric-irr-round-fresh", "device-asymmetric-irr-only-round"):
        scenario = _SCENARIOS[name]()
        a = _exact_rows(scenario, scenario.history_a, 3000, 1)
        b = _exact_rows(scenario, scenario.history_b, 3000, 2)
        assert law_p_value(scenario, a, b) > 1e-6, name


def test_the_wrong_law_is_rejected_at_the_same_size() -> None:
    # the law the check compares with matters: symmetric re-sends drawn fresh where the client relaxes them
    # (RAPPOR's IRR, level doubled) fail at 3,000 clients per input (the check's power)
    scenario = _SCENARIOS["device-symmetric-irr-round-relaxed"]()
    a = _exact_rows(scenario, scenario.history_a, 3000, 3, fresh=True)
    b = _exact_rows(scenario, scenario.history_b, 3000, 4, fresh=True)
    assert law_p_value(scenario, a, b) < 1e-6


def test_the_client_rule_picks_relaxed_or_fresh_as_the_docs_figures_say() -> None:
    # doubled level: relaxed 0.908856 <= fresh 1.073611; level 1 -> 5: relaxed 1.283063 > fresh 1.243596;
    # asymmetric: relaxed is exactly one report at the end, never more; a round that keeps the IRR: fresh
    flags = {name: [f for _, f in window_chains(_SCENARIOS[name]().params, _SCENARIOS[name]().history_a)]
             for name in ("device-symmetric-irr-round-relaxed", "device-symmetric-irr-round-fresh",
                          "device-asymmetric-irr-round-relaxed", "device-asymmetric-irr-level-round-fresh")}
    assert flags == {"device-symmetric-irr-round-relaxed": [[True]], "device-symmetric-irr-round-fresh": [[False]],
                     "device-asymmetric-irr-round-relaxed": [[True], []],
                     "device-asymmetric-irr-level-round-fresh": [[False]]}


def test_a_true_one_sent_as_zero_in_the_asymmetric_mode_is_impossible() -> None:
    scenario = DeviceScenario(ASYM_IRR, (Window(HC),), (Window(H),))
    rows = np.ones((50, 4), dtype=bool)
    rows[7, 1] = False  # home's bit (true 1) reported 0 by one client
    assert law_p_value(scenario, rows, np.ones((50, 4), dtype=bool)) == 0.0


def test_a_report_sent_by_some_clients_only_fails() -> None:
    scenario = DeviceScenario(ASYM_IRR, (Window(HC),), (Window(H),))
    rows = _exact_rows(scenario, scenario.history_a, 50, 5)
    good = _exact_rows(scenario, scenario.history_b, 50, 6)
    rows[3] = False  # one client sent nothing
    assert law_p_value(scenario, rows, good) == 0.0
