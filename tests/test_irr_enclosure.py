"""The proven charge of a relaxed-IRR report chain: an enclosure in double intervals, checked against mpmath.

The certified value here is built independently of the product code: the memoized bits' law from
``certified_pattern_probabilities`` (symmetric, mpmath intervals) or ``e^{-L/2}`` in mpmath
intervals (asymmetric), each report sequence's law given the memoized pattern as an exact rational,
summed and logged in mpmath interval arithmetic at 256 bits. Everything is deterministic (fixed seeds
for the random chains, no sampling), so no test here fails by chance.
"""

from __future__ import annotations

import itertools
import math
import random
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from client_sdk.ledger import window_cost, with_irr
from protocol import chain as window_chain
from protocol.accounting import round_up, sequence_bit_epsilon, to_micro
from protocol.errors import ParameterError
from protocol.irr_relaxation import (
    _enclosed_chain,
    enclosed_report_chain_charge,
    enclosed_report_chain_epsilon,
    irr_level,
    irr_step_conditionals,
    report_chain_epsilon,
)
from protocol.laplace_chain_rigorous import (
    EXACT_WIDTH,
    _context,
    _float_bounds,
    certified_pattern_probabilities,
    enclosed_log,
)
from protocol.randomizers import Randomizer

sys.path.insert(0, str(Path(__file__).parent))
from test_irr_rounds import BIT_ASYM, BIT_SYM, CHAINS  # noqa: E402

PREC = 256


# --------------------------------------------------------------------------
# The certified value (mpmath intervals, written apart from the product code)
# --------------------------------------------------------------------------


def _memo_law(ctx: Any, mode: str, levels: tuple[float, ...]) -> dict[tuple[int, ...], tuple[Any, Any]]:
    """``pattern -> (P(pattern | 0), P(pattern | 1))`` as mpmath intervals, patterns of positive probability."""
    if mode == "symmetric":
        probs = certified_pattern_probabilities(levels, prec=PREC)
        return {m: (p, probs[tuple(1 - v for v in m)]) for m, p in probs.items()}
    n = len(levels)
    ones = [ctx.exp(-ctx.mpf(lv) / 2) for lv in levels] + [ctx.mpf(0)]
    out = {tuple(int(i < j) for i in range(n)): ((ones[j - 1] if j else ctx.mpf(1)) - ones[j], ctx.mpf(0))
           for j in range(n + 1)}
    out[(1,) * n] = (out[(1,) * n][0], ctx.mpf(1))
    return out


def _reports_given_memo(irr: list[Any], flags: list[bool], memo: list[int], reports: tuple[int, ...]) -> Fraction:
    """``P(reports | memoized bit of each round)``, exactly: fresh IRR, or the relaxed step from the last report."""
    one = irr[0][memo[0]]
    p = one if reports[0] else 1 - one
    for r in range(1, len(reports)):
        if flags[r - 1] and memo[r] == memo[r - 1]:
            one = irr_step_conditionals(irr[r - 1], irr[r])[reports[r - 1] + 2 * memo[r]]
        else:
            one = irr[r][memo[r]]
        p *= one if reports[r] else 1 - one
    return p


def certified_epsilon(randomizers: list[Randomizer], value_kind: str, num_hashes: int,
                      flags: list[bool]) -> tuple[float, float]:
    ctx = _context(PREC)
    mode = randomizers[0].mode
    levels = [float(r.level) for r in randomizers]
    distinct = tuple(sorted(set(levels)))
    index = [distinct.index(lv) for lv in levels]
    memo_law = _memo_law(ctx, mode, distinct)
    irr = [irr_level(r) for r in randomizers]
    laws: list[dict[tuple[int, ...], Any]] = [{}, {}]
    for y in itertools.product((0, 1), repeat=len(randomizers)):
        for b in (0, 1):
            total, possible = ctx.mpf(0), False
            for pattern, weights in memo_law.items():
                given = _reports_given_memo(irr, flags, [pattern[i] for i in index], y)
                if given and (mode == "symmetric" or weights[b] != 0):
                    possible = True
                    total += weights[b] * (ctx.mpf(given.numerator) / ctx.mpf(given.denominator))
            if possible:
                laws[b][y] = total

    def worst(num: dict[tuple[int, ...], Any], den: dict[tuple[int, ...], Any]) -> tuple[float, float]:
        if any(y not in den for y in num):
            return math.inf, math.inf
        ends = [_float_bounds(ctx.log(num[y]) - ctx.log(den[y])) for y in num]
        return max(e[0] for e in ends), max(e[1] for e in ends)

    up, down = worst(laws[1], laws[0]), worst(laws[0], laws[1])
    if mode == "asymmetric":  # the protected direction only
        return num_hashes * up[0], num_hashes * up[1]
    if value_kind == "categorical":
        return num_hashes * (up[0] + down[0]), num_hashes * (up[1] + down[1])
    return num_hashes * max(up[0], down[0]), num_hashes * max(up[1], down[1])


def _slack(x: float) -> float:
    """The rounding of the float products and sums above: a few ulps."""
    return 8 * math.ulp(x)


# --------------------------------------------------------------------------
# Chains
# --------------------------------------------------------------------------


def _chain_of(params: Any, levels: list[float], irrs: list[Any]) -> list[Randomizer]:
    return [with_irr(params, irr).randomizer(level) for level, irr in zip(levels, irrs, strict=True)]


def random_chain(rng: random.Random, mode: str) -> tuple[list[Randomizer], list[bool]]:
    """2 to 4 distinct levels over 2 to 5 rounds, each round's IRR a relaxation of the last, mixed flags."""
    distinct = sorted(rng.sample([0.5, 1.0, 1.5, 2.2, 3.0, 4.1, 5.0, 6.5], rng.randint(2, 4)))
    rounds = rng.randint(len(distinct), 5)
    levels = sorted(distinct + [rng.choice(distinct) for _ in range(rounds - len(distinct))])
    p, q = rng.uniform(0.3, 0.45), rng.uniform(0.55, 0.7)
    chain = []
    for level in levels:
        if mode == "symmetric":
            chain.append(Randomizer(mode=mode, level=level, irr_p=p, irr_q=q))
        else:
            chain.append(Randomizer(mode=mode, level=level, irr_q=p))
        p, q = p * rng.uniform(0.5, 1.0), 1 - (1 - q) * rng.uniform(0.5, 1.0)  # a relaxation (or the same)
    return chain, [rng.random() < 0.6 for _ in range(len(levels) - 1)]


RANDOM_CHAINS = [random_chain(random.Random(seed), mode)
                 for mode in ("symmetric", "asymmetric") for seed in range(10)]
CASES = [
    pytest.param(_chain_of(params, levels, irrs), relaxed, kind, hashes, id=f"rounds-{i}-{kind}-{hashes}")
    for i, (params, levels, irrs, relaxed) in enumerate(CHAINS) for kind, hashes in (("set", 1), ("categorical", 2))
] + [
    pytest.param(chain, flags, "set", 1, id=f"random-{chain[0].mode}-{i % 10}")
    for i, (chain, flags) in enumerate(RANDOM_CHAINS)
]


@pytest.mark.parametrize(("chain", "relaxed", "value_kind", "num_hashes"), CASES)
def test_the_enclosure_holds_the_certified_epsilon_and_the_charge_is_above_it(
    chain: list[Randomizer], relaxed: list[bool], value_kind: str, num_hashes: int
) -> None:
    lo, hi = enclosed_report_chain_epsilon(chain, value_kind=value_kind, num_hashes=num_hashes, relaxed=relaxed)
    cert_lo, cert_hi = certified_epsilon(chain, value_kind, num_hashes, relaxed)
    assert cert_hi - cert_lo <= _slack(cert_hi)  # mpmath at 256 bits: the double ends of a point
    assert lo <= cert_hi + _slack(cert_hi) and cert_lo - _slack(cert_lo) <= hi  # both hold the true epsilon
    assert hi - lo < 1e-12  # narrow: measured widths are 3e-15 to 2.2e-13
    charge, exact = enclosed_report_chain_charge(chain, value_kind=value_kind, num_hashes=num_hashes,
                                                 relaxed=relaxed)
    assert charge >= cert_hi and exact
    assert charge <= cert_lo + 1e-6 + EXACT_WIDTH


@pytest.mark.parametrize(("chain", "relaxed", "value_kind", "num_hashes"),
                         [c for c in CASES if len({r.level for r in c.values[0]}) <= 3])
def test_the_float_law_agrees_with_the_enclosure(
    chain: list[Randomizer], relaxed: list[bool], value_kind: str, num_hashes: int
) -> None:
    """A sanity check of the float ``report_chain_epsilon`` (quadrature for symmetric levels), not the charge."""
    lo, hi = enclosed_report_chain_epsilon(chain, value_kind=value_kind, num_hashes=num_hashes, relaxed=relaxed)
    approx = report_chain_epsilon(chain, value_kind=value_kind, num_hashes=num_hashes, relaxed=relaxed)
    assert lo - 1e-6 <= approx <= hi + 2e-6  # rounded up to 6 decimals, plus the quadrature's error


def test_a_relaxed_chain_at_one_level_is_one_report_at_the_last_irr_exactly() -> None:
    chain = [Randomizer(mode="symmetric", level=2.0, irr_p=0.5, irr_q=0.75),
             Randomizer(mode="symmetric", level=2.0, irr_p=0.25, irr_q=0.75)]
    lo, hi = enclosed_report_chain_epsilon(chain)
    one_lo, one_hi = enclosed_report_chain_epsilon(chain[1:])
    assert max(lo, one_lo) <= min(hi, one_hi)  # the same epsilon
    fresh = enclosed_report_chain_epsilon(chain, relaxed=False)
    assert fresh[0] > hi + 0.1


def test_bad_arguments_name_their_field() -> None:
    chain = [Randomizer(mode="symmetric", level=2.0, irr_p=0.5, irr_q=0.75)] * 2
    for kwargs, field in (({"value_kind": "bag"}, "value_kind"), ({"num_hashes": 0}, "num_hashes"),
                          ({"num_hashes": True}, "num_hashes"), ({"relaxed": [True, True]}, "relaxed")):
        with pytest.raises(ParameterError) as err:
            enclosed_report_chain_epsilon(chain, **kwargs)
        assert err.value.field == field
    with pytest.raises(ParameterError) as err:
        enclosed_report_chain_epsilon([])
    assert err.value.field == "randomizers"
    with pytest.raises(ParameterError) as err:
        enclosed_report_chain_epsilon(list(reversed(random_chain(random.Random(1), "symmetric")[0])))
    assert err.value.field == "levels"


def test_levels_a_double_apart_give_a_wide_valid_enclosure_charged_not_exact() -> None:
    """Rates one double apart: the closed forms cancel in doubles, the enclosure is wide but still holds."""
    level = BIT_SYM.level
    close = [level, math.nextafter(level, math.inf)]
    chain = _chain_of(BIT_SYM, close, [None, (0.25, 0.75)])
    lo, hi = enclosed_report_chain_epsilon(chain)
    cert_lo, cert_hi = certified_epsilon(chain, "set", 1, [True])
    assert lo <= cert_lo <= cert_hi <= hi and hi - lo > 0.1  # measured (0, 1.947) around ln 2
    spent, exact = window_cost(BIT_SYM, close, [None, (0.25, 0.75)], [True])
    longitudinal = sequence_bit_epsilon("symmetric", tuple(close))[0]
    assert to_micro(spent) == min(to_micro(enclosed_report_chain_charge(chain)[0]), to_micro(longitudinal))
    assert not exact


def test_enclosed_log_holds_the_log() -> None:
    for x in (1.0, 1.5, math.e, 10.0, 1e300):
        lo, hi = enclosed_log(x, x)
        assert lo <= math.log(x) <= hi and hi - lo <= 4 * math.ulp(max(math.log(x), 1.0))
    assert enclosed_log(2.0, math.inf) == (pytest.approx(math.log(2.0)), math.inf)
    with pytest.raises(ParameterError):
        enclosed_log(0.5, 2.0)


# --------------------------------------------------------------------------
# The ledger
# --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.inf, math.nan, -1.0])
def test_the_ledger_never_charges_a_negative_or_nan_amount(monkeypatch: pytest.MonkeyPatch, bad: float) -> None:
    """An unbounded (or broken) report-chain charge falls back to the longitudinal bound, not exact.

    Planted-bug check (run once, then reverted): accepting any charge in ``_relaxed_reports`` (its
    ``0 <= eps < inf`` test removed) fails this test for all three values.
    """
    import protocol.irr_relaxation as irr_relaxation

    window_chain._window_cost.cache_clear()
    monkeypatch.setattr(irr_relaxation, "enclosed_report_chain_charge", lambda *a, **k: (bad, True))
    try:
        for params, levels, irrs, relaxed in CHAINS:
            spent, exact = window_cost(params, levels, irrs, relaxed)
            longitudinal = sequence_bit_epsilon(params.mode, tuple(dict.fromkeys(levels)))[0]
            assert spent == longitudinal and not exact
    finally:
        window_chain._window_cost.cache_clear()


def test_the_ledger_charges_the_enclosure_on_random_chains() -> None:
    for chain, flags in RANDOM_CHAINS:
        params = BIT_SYM if chain[0].mode == "symmetric" else BIT_ASYM
        levels = [r.level for r in chain]
        irrs = [(r.irr_p, r.irr_q) for r in chain]
        if not any(flags):
            continue  # the fresh-IRR composition, tested elsewhere
        spent, exact = window_cost(params, levels, irrs, flags)
        charge = enclosed_report_chain_charge(chain, relaxed=flags)[0]
        longitudinal = sequence_bit_epsilon(params.mode, tuple(dict.fromkeys(levels)))[0]
        assert spent >= 0 and exact
        assert to_micro(spent) == min(to_micro(charge), to_micro(longitudinal))


def test_the_charge_is_computed_once_per_window_chain() -> None:
    """2 to 8 reports over as many symmetric levels (the slowest case): narrow, and a repeat is a cache hit.

    The report path asks for the same chain on every report of a window; its first-call cost is measured in
    benchmarks/irr_chain.py (speed lives in benchmarks, not in tests).
    """
    for n in range(2, 9):
        chain = [Randomizer(mode="symmetric", level=1.0 + 0.5 * i, irr_p=0.3 - 0.02 * i, irr_q=0.7 + 0.02 * i)
                 for i in range(n)]
        _enclosed_chain.cache_clear()
        lo, hi = enclosed_report_chain_epsilon(chain)
        assert hi - lo < 1e-10
        misses = _enclosed_chain.cache_info().misses
        assert enclosed_report_chain_charge(chain)[0] == round_up(hi)
        assert _enclosed_chain.cache_info().misses == misses  # served from the cache


def test_the_interval_steps_round_outward_and_keep_exact_zeros() -> None:
    """Each product and sum of the report law holds the exact rational result; a true 0 stays [0, 0]."""
    import numpy as np

    from protocol.irr_relaxation import _mul, _sum_rows
    from protocol.laplace_chain_rigorous import enclosed_fraction

    rng = random.Random(5)
    values = [Fraction(rng.random()) / 3 for _ in range(40)] + [Fraction(0)] * 4
    ends = [enclosed_fraction(v) for v in values]
    assert all(lo <= v <= hi for v, (lo, hi) in zip(values, ends, strict=True))
    assert enclosed_fraction(Fraction(1, 3))[0] < enclosed_fraction(Fraction(1, 3))[1]
    lo, hi = np.array([e[0] for e in ends]), np.array([e[1] for e in ends])
    plo, phi = _mul((lo, hi), (lo[::-1].copy(), hi[::-1].copy()))
    for i, (a, b) in enumerate(zip(values, values[::-1], strict=True)):
        assert Fraction(plo[i]) <= a * b <= Fraction(phi[i])
        assert (phi[i] == 0.0) == (a * b == 0)
    slo, shi = _sum_rows((plo.reshape(11, 4), phi.reshape(11, 4)))
    products = [a * b for a, b in zip(values, values[::-1], strict=True)]
    for j in range(4):
        exact = sum(products[j::4], Fraction(0))
        assert Fraction(slo[j]) <= exact <= Fraction(shi[j]) and slo[j] < shi[j]
    zeros = _sum_rows((np.zeros((3, 2)), np.zeros((3, 2))))
    assert zeros[1].tolist() == [0.0, 0.0]


def test_a_chain_the_report_law_refuses_is_charged_the_longitudinal_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client never raises from its accounting: a refused chain falls back to the proven longitudinal bound."""
    import protocol.irr_relaxation as irr_relaxation

    def refuse(*args: Any, **kwargs: Any) -> tuple[float, bool]:
        raise ParameterError("irr", "not a relaxation")

    window_chain._window_cost.cache_clear()
    monkeypatch.setattr(irr_relaxation, "enclosed_report_chain_charge", refuse)
    try:
        params, levels, irrs, relaxed = CHAINS[2]
        spent, exact = window_cost(params, levels, irrs, relaxed)
        assert spent == sequence_bit_epsilon(params.mode, tuple(dict.fromkeys(levels)))[0] and not exact
    finally:
        window_chain._window_cost.cache_clear()
