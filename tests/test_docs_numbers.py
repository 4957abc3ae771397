"""Every figure of the privacy pages, read from the page and recomputed from the code that charges it.

Pages: docs/privacy.md, docs/central.md, docs/irr-relaxation.md, docs/client.md section 3 (the
ledger) and the README's "Privacy numbers" section. Each :class:`Figure` finds a printed number by
its context (a regex whose group ``v`` is the number), recomputes it, and checks it the way the page
prints it: ``up`` (a charge, rounded up: ``value <= printed < value + one unit of its last digit``) or
``near`` (a probability or a measured quantity: within half a unit). Every match of the context must
agree. Then every decimal number of the page must be one of those figures or a declared input (a
parameter, a level, a historical figure the page labels as such, a sampled measurement named with
its benchmark), so a new or changed number fails here until it is either computed or declared.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_privacy_history import rappor_per_value_loss

from aggregator.research.bounds import dp_beta_upper_bound
from client_sdk.ledger import window_cost
from protocol import Randomizer
from protocol.accounting import sequence_bit_epsilon
from protocol.central import AGeoMechanism, ALapMechanism, SALapMechanism, certificate_cut
from protocol.encodings import BloomEncoding, DirectEncoding
from protocol.irr_relaxation import enclosed_report_chain_charge, report_agreement
from protocol.laplace_chain_rigorous import enclosed_sequence_epsilon
from protocol.params import MetricParams
from protocol.randomizers import laplace_rate_from_f
from protocol.rounding import round_up

ROOT = Path(__file__).resolve().parent.parent
RAPPOR_LEVEL = laplace_rate_from_f(0.5)  # 2 ln 2


@dataclass(frozen=True)
class Figure:
    page: str
    context: str  # a regex with one group named v: the printed number
    value: Callable[[], float]
    rounding: str = "near"  # or "up"


def _page(name: str) -> str:
    text = (ROOT / name).read_text("utf-8")
    if name == "README.md":
        return text[text.index("## Privacy numbers"):text.index("## Choices where")]
    if name == "docs/client.md":
        return text[text.index("## 3. The ledger"):text.index("## 4. Relaxation rounds")]
    return text


def _sym(level: float, p: float, q: float) -> Randomizer:
    return Randomizer(mode="symmetric", level=level, irr_p=p, irr_q=q)


def _asym(level: float, q: float) -> Randomizer:
    return Randomizer(mode="asymmetric", level=level, irr_q=q)


def _chain(*randomizers: Randomizer, relaxed: bool = True) -> float:
    return enclosed_report_chain_charge(list(randomizers), relaxed=relaxed)[0]


def _symmetric_chain(*levels: float) -> float:
    return sequence_bit_epsilon("symmetric", levels)[0]


def _certified(*levels: float) -> float:
    lo, hi = enclosed_sequence_epsilon(levels)
    assert hi - lo < 1e-10  # noqa: S101 - the 9 decimals printed need a narrow enclosure
    return (lo + hi) / 2


def _rappor(level: float) -> MetricParams:
    return MetricParams(name="places", encoding=BloomEncoding(num_bits=128, num_hashes=2, num_cohorts=1),
                        mode="symmetric", level=level, irr_p=0.5, irr_q=0.75)


def _salap_bottom(threshold: float) -> float:
    mech = SALapMechanism(epsilon=1.0)
    return float(mech.prefix_probability([1], [threshold])[0])


def _readme_year() -> float:
    places = MetricParams(name="places", encoding=DirectEncoding(domain=("cafe", "park", "museum")),
                          mode="asymmetric", level=1.0)
    return 365 * window_cost(places, [1.0])[0]


P, C, IRR, R, L = "docs/privacy.md", "docs/central.md", "docs/irr-relaxation.md", "README.md", "docs/client.md"
CERTIFIED_TABLE = {  # docs/privacy.md's table: the chain, its certified value and its charge
    "1, 1.5, 2, 2.5": (1.0, 1.5, 2.0, 2.5),
    "0.1, 0.5, 1, 2, 4, 8": (0.1, 0.5, 1.0, 2.0, 4.0, 8.0),
    "0.5, 1, 2, 4, 8, 16": (0.5, 1.0, 2.0, 4.0, 8.0, 16.0),
    r"1, 1.5, ..., 4 \(7 levels\)": tuple(1.0 + 0.5 * i for i in range(7)),
    r"2 ln 2, 1.5, 1.65, 1.8, 2, 2.2, 2.5, 4 ln 2 \(8 levels\)":
        (2 * math.log(2), 1.5, 1.65, 1.8, 2.0, 2.2, 2.5, 4 * math.log(2)),
    r"0.1, 0.3, 0.7, 1.2, 2, 3, 4.5, 6, 8 \(9 levels\)": (0.1, 0.3, 0.7, 1.2, 2.0, 3.0, 4.5, 6.0, 8.0),
    r"1, 1.5, ..., 5.5 \(10 levels\)": tuple(1.0 + 0.5 * i for i in range(10)),
    "0.05, 32, 32.032": (0.05, 32.0, 32.032),
}
FIGURES = [
    Figure(P, r"round_up\(1\.0000000009\) == (?P<v>1\.000001)", lambda: round_up(1.0000000009), "up"),
    Figure(P, r"sensitive\) = 1 - e\^-1 = (?P<v>0\.632)", lambda: 1 - math.exp(-1)),
    Figure(P, r"level `2 ln 2`\) `(?P<v>8\.387)`", rappor_per_value_loss),
    Figure(P, r"RAPPOR's defaults (?P<v>8\.387)", rappor_per_value_loss),
    Figure(P, r"charged `?(?P<v>4\.39)`?", lambda: 2 * 2 * math.log(3)),  # 2 distinct sets x 2k ln 3, k = 2
    Figure(P, r"loses `(?P<v>0\.673)`", lambda: _rappor(RAPPOR_LEVEL).guarantee().epsilon_per_report),
    Figure(P, r"charges `(?P<v>1\.35)`", lambda: 2 * _rappor(RAPPOR_LEVEL).guarantee().epsilon_per_report),
    Figure(P, r"printed (?P<v>9\.69) and", lambda: rappor_per_value_loss(f=math.exp(-0.5))),
    Figure(P, r"9\.69 and (?P<v>0\.53)", lambda: _rappor(1.0).guarantee().epsilon_per_report),
    Figure(P, r"f = (?P<v>0\.607)", lambda: math.exp(-0.5)),
    Figure(P, r"1 -> 2: (?P<v>1\.5512)", lambda: _symmetric_chain(1.0, 2.0), "up"),
    Figure(P, r"1 -> 1\.5 -> 2 -> 2\.5: (?P<v>1\.898772)", lambda: _symmetric_chain(1.0, 1.5, 2.0, 2.5), "up"),
    Figure(P, r"\(0\.05 -> 32 -> 32\.032 was charged 16\.737819, 5\.3e-3 above the exact (?P<v>16\.732476)\)",
           lambda: _symmetric_chain(0.05, 32.0, 32.032), "up"),
    Figure(P, r"`spent = (?P<v>182\.5)`", _readme_year, "up"),
    *[Figure(P, rf"\| {name} \| (?P<v>[0-9.]+) \|", functools.partial(_certified, *levels))
      for name, levels in CERTIFIED_TABLE.items()],
    *[Figure(P, rf"\| {name} \| [0-9.]+ \| [^|]+ \| (?P<v>[0-9.]+) \(exact\) \|",
             functools.partial(_symmetric_chain, *levels), "up") for name, levels in CERTIFIED_TABLE.items()],
    Figure(P, r"\| 2 ln 2, [^|]+ \| [0-9.]+ \| (?P<v>2\.772589) \(bound\)", lambda: 4 * math.log(2), "up"),
    Figure(P, r"\| 1, 1\.5, 2, 2\.5 \| [0-9.]+ \| (?P<v>1\.898772) \(exact\)",
           lambda: _symmetric_chain(1.0, 1.5, 2.0, 2.5), "up"),
    # docs/central.md
    Figure(C, r"`1 - e\^-2 = (?P<v>0\.865)`", lambda: ALapMechanism(epsilon=1.0).certificate_probability(0, 1)),
    Figure(C, r"instead of `1 - e\^-1 = (?P<v>0\.632)`", lambda: ALapMechanism(epsilon=1.0).safe_probability(0, 1)),
    Figure(C, r"a bottom comes\nwith probability (?P<v>0\.632) instead",
           lambda: _salap_bottom(certificate_cut(1.0, SALapMechanism(epsilon=1.0).step))),
    Figure(C, r"0\.632 instead of (?P<v>0\.00098)\.", lambda: _salap_bottom(1.0)),
    Figure(C, r"count of 0 with probability (?P<v>0\.023)",
           lambda: dp_beta_upper_bound(alpha=0.0, epsilon=1.0, delta=1e-4, k=6)),
    Figure(C, r"ALap with (?P<v>0\.993) \(", lambda: ALapMechanism(epsilon=1.0).safe_probability(0, 5)),
    Figure(C, r"\n  (?P<v>0\.9975) \(its certificate",
           lambda: ALapMechanism(epsilon=1.0).certificate_probability(0, 5)),
    Figure(C, r"AGeo with (?P<v>0\.9975)",
           lambda: AGeoMechanism(epsilon=1.0, n_max=50).certificate_probability(0, 5)),
    Figure(C, r"ln 5000 = (?P<v>8\.517)", lambda: math.log(5000)),
    Figure(C, r"0\.5 / \(1 \+ e \+ e\^2\) = (?P<v>0\.045)", lambda: 0.5 / (1 + math.e + math.e**2)),
    *[Figure(C, context, lambda: 100 * math.erf(3 / math.sqrt(2)))
      for context in (r"approximation gives (?P<v>99\.73)%", r"\| < 3\) = (?P<v>99\.73)%")],
    # docs/irr-relaxation.md
    Figure(IRR, r"one report of a bit costs (?P<v>0\.34)", lambda: _chain(_sym(RAPPOR_LEVEL, 0.5, 0.75))),
    Figure(IRR, r"ln 3 = (?P<v>1\.10)", lambda: math.log(3)),
    Figure(IRR, r"one report only to (?P<v>0\.51)", lambda: _chain(_sym(2 * RAPPOR_LEVEL, 0.5, 0.75))),
    Figure(IRR, r"0\.51 and\n(?P<v>0\.65)", lambda: _chain(_sym(4 * RAPPOR_LEVEL, 0.5, 0.75))),
    Figure(IRR, r"chain does: (?P<v>1\.5512) against", lambda: _symmetric_chain(1.0, 2.0), "up"),
    Figure(IRR, r"against (?P<v>1\.4899) for levels", lambda: 2 * math.log((1 - math.exp(-1) / 2) / (math.exp(-1) / 2))
           / 2),
    *[Figure(IRR, rf"\| {row} \| (?P<v>[0-9.]+) \|", value, "up") for row, value in {
        r"\(0\.5, 0\.75\) -> \(0\.25, 0\.75\), level kept": lambda: _chain(_sym(RAPPOR_LEVEL, 0.5, 0.75),
                                                                            _sym(RAPPOR_LEVEL, 0.25, 0.75)),
        r"\(0\.5, 0\.75\) -> \(0\.25, 0\.75\) -> \(0\.1, 0\.9\), level kept": lambda: _chain(
            _sym(RAPPOR_LEVEL, 0.5, 0.75), _sym(RAPPOR_LEVEL, 0.25, 0.75), _sym(RAPPOR_LEVEL, 0.1, 0.9)),
        r"\(0\.5, 0\.75\) -> \(0\.25, 0\.75\), level doubled": lambda: _chain(_sym(RAPPOR_LEVEL, 0.5, 0.75),
                                                                               _sym(2 * RAPPOR_LEVEL, 0.25, 0.75)),
    }.items()],
    *[Figure(IRR, rf"\| {row} \| [0-9.]+ \| (?P<v>[0-9.]+) \|", value, "up") for row, value in {
        r"\(0\.5, 0\.75\) -> \(0\.25, 0\.75\), level kept": lambda: _chain(
            _sym(RAPPOR_LEVEL, 0.5, 0.75), _sym(RAPPOR_LEVEL, 0.25, 0.75), relaxed=False),
        r"\(0\.5, 0\.75\) -> \(0\.25, 0\.75\) -> \(0\.1, 0\.9\), level kept": lambda: _chain(
            _sym(RAPPOR_LEVEL, 0.5, 0.75), _sym(RAPPOR_LEVEL, 0.25, 0.75), _sym(RAPPOR_LEVEL, 0.1, 0.9),
            relaxed=False),
        r"\(0\.5, 0\.75\) -> \(0\.25, 0\.75\), level doubled": lambda: _chain(
            _sym(RAPPOR_LEVEL, 0.5, 0.75), _sym(2 * RAPPOR_LEVEL, 0.25, 0.75), relaxed=False),
    }.items()],
    *[Figure(IRR, rf"\| {row} \| [0-9.]+ \| [0-9.]+ \| (?P<v>[0-9.]+) \|", value, "up") for row, value in {
        r"\(0\.5, 0\.75\) -> \(0\.25, 0\.75\), level kept": lambda: _chain(_sym(RAPPOR_LEVEL, 0.25, 0.75)),
        r"\(0\.5, 0\.75\) -> \(0\.25, 0\.75\) -> \(0\.1, 0\.9\), level kept": lambda: _chain(
            _sym(RAPPOR_LEVEL, 0.1, 0.9)),
        r"\(0\.5, 0\.75\) -> \(0\.25, 0\.75\), level doubled": lambda: _chain(_sym(2 * RAPPOR_LEVEL, 0.25, 0.75)),
    }.items()],
    Figure(IRR, r"0\.5 -> 0\.2: (?P<v>0\.704606) \(relaxed", lambda: _chain(_asym(2.0, 0.5), _asym(2.0, 0.2)), "up"),
    Figure(IRR, r"one report\) against (?P<v>0\.841435) \(fresh",
           lambda: _chain(_asym(2.0, 0.5), _asym(2.0, 0.2), relaxed=False), "up"),
    Figure(IRR, r"0\.5 -> 0\.05: (?P<v>1\.722783) \(relaxed", lambda: _chain(_asym(2.0, 0.5), _asym(4.0, 0.05)), "up"),
    Figure(IRR, r"against (?P<v>1\.815445) \(fresh\)",
           lambda: _chain(_asym(2.0, 0.5), _asym(4.0, 0.05), relaxed=False), "up"),
    Figure(IRR, r"bit 1 half the time: (?P<v>0\.75) relaxed",
           lambda: report_agreement(_sym(RAPPOR_LEVEL, 0.5, 0.75), _sym(RAPPOR_LEVEL, 0.25, 0.75))[0]),
    Figure(IRR, r"relaxed against\n(?P<v>0\.5625) fresh",
           lambda: report_agreement(_sym(RAPPOR_LEVEL, 0.5, 0.75), _sym(RAPPOR_LEVEL, 0.25, 0.75))[1]),
    Figure(IRR, r"`\(0\.5, 0\.75\) -> \(0\.25, 0\.75\)`: (?P<v>1\.283063) relaxed",
           lambda: _chain(_sym(1.0, 0.5, 0.75), _sym(5.0, 0.25, 0.75)), "up"),
    Figure(IRR, r"1\.283063 relaxed, (?P<v>1\.243596) fresh",
           lambda: _chain(_sym(1.0, 0.5, 0.75), _sym(5.0, 0.25, 0.75), relaxed=False), "up"),
    # README "Privacy numbers"
    Figure(R, r"1 -> 2 costs (?P<v>1\.5512) per bit", lambda: _symmetric_chain(1.0, 2.0), "up"),
    Figure(R, r"single bit's\n  (?P<v>1\.489881)", lambda: math.log((1 - math.exp(-1) / 2) / (math.exp(-1) / 2)), "up"),
]

INPUTS = {  # numbers that are not computed results: parameters, levels, section numbers, labelled history
    P: {"0.02", "0.05", "0.1", "0.3", "0.5", "0.7", "1.0", "1.0000000009", "1.2", "1.5", "1.65", "1.8", "2.0",
        "2.2", "2.5", "4.5", "5.5", "32.032",
        "16.737819"},  # the float quadrature's historical overestimate, labelled as such on the page
    C: {"0.1", "0.12", "0.2", "0.3", "0.5", "0.75", "0.9", "0.999", "1.0", "1.5", "2.0", "2.5", "4.2", "5.0", "8.4",
        "10.0", "1.1",  # a test's tolerance
        "17.5",  # the audit's measured share of impossible outputs before the grid, labelled as history
        # measured by sampling, named with their benchmark on the page (benchmarks/central.py), not formulas
        "0.997", "2.85", "1.42", "0.70", "0.33", "0.18", "3.37", "2.42", "2.12", "2.02", "2.00", "2.79", "0.72",
        "0.34", "2.92", "2.90", "2.82", "2.46", "1.78"},
    IRR: {"0.05", "0.1", "0.2", "0.25", "0.5", "0.75", "0.9", "2.0", "8.3"},
    R: {"0.5", "2.0"},
    L: set(),
}
NUMBER = re.compile(r"(?<![\w.])\d+\.\d+(?![\d.]*\d|e-?\d)")  # decimals, not 5.3e-3


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f"{f.page}:{f.context[:40]}")
def test_every_printed_figure_is_what_the_code_computes(figure: Figure) -> None:
    matches = list(re.finditer(figure.context, _page(figure.page)))
    assert matches, f"{figure.page}: no text matches {figure.context!r}"
    value = figure.value()
    for match in matches:
        if "v" not in match.groupdict():
            continue
        text = match.group("v")
        printed = float(text)
        unit = 10.0 ** -len(text.split(".")[1])
        if figure.rounding == "up":
            assert value <= printed < value + unit + 1e-12, (figure.page, text, value)
        else:
            assert abs(printed - value) <= unit / 2 + 1e-12, (figure.page, text, value)


@pytest.mark.parametrize("page", sorted(INPUTS))
def test_every_number_of_the_page_is_computed_or_declared(page: str) -> None:
    text = _page(page)
    covered = {m.start("v") for f in FIGURES if f.page == page
               for m in re.finditer(f.context, text) if "v" in m.groupdict()}
    stray = [(m.group(), text.count("\n", 0, m.start()) + 1) for m in NUMBER.finditer(text)
             if m.start() not in covered and m.group() not in INPUTS[page]]
    assert not stray, f"{page}: numbers neither computed by a Figure nor declared inputs: {stray}"
