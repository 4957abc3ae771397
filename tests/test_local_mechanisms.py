"""The local mechanisms as types (protocol.local): registry, closed forms, relaxation steps, neighbours.

Each class is checked against the formulas the randomizer and the accounting used before they
were moved into the classes (written out here independently), over a range of levels; the
relaxation steps against the functions of protocol.relaxation on the same seeded stream. The
last test scans the product code: no mode is compared with a string literal outside the registry.
"""

from __future__ import annotations

import ast
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from protocol.accounting import NEIGHBOUR_RELATIONS, bit_epsilon, guarantee, sequence_bit_epsilon
from protocol.central import mechanism_class, mechanism_names
from protocol.errors import ParameterError, PolicyError
from protocol.laplace_chain import laplace_sequence_epsilon
from protocol.local import (
    MODES,
    AsymmetricMechanism,
    LocalMechanism,
    SymmetricMechanism,
    TrustedMechanism,
    local_mechanism,
    local_mechanisms,
)
from protocol.randomizers import Randomizer
from protocol.relaxation import (
    relax_exponential,
    relax_exponential_bits,
    relax_laplace,
    relax_laplace_bits,
)
from protocol.rng import SeededRandom

ROOT = Path(__file__).resolve().parents[1]
LEVELS = [1e-6, 0.1, 0.5, 1.0, 2 * math.log(2), 2.0, 3.7, 8.0, 32.0]
IRRS = [(None, None), (0.25, 0.75), (0.0, 0.5)]


# --------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------


def test_registry_holds_the_three_modes_in_order() -> None:
    assert MODES == ("symmetric", "asymmetric", "trusted")
    assert [m.mode for m in local_mechanisms()] == list(MODES)
    assert isinstance(local_mechanism("symmetric"), SymmetricMechanism)
    assert isinstance(local_mechanism("asymmetric"), AsymmetricMechanism)
    assert isinstance(local_mechanism("trusted"), TrustedMechanism)
    assert local_mechanism("symmetric") is local_mechanism("symmetric")  # one object per mode


@pytest.mark.parametrize("bad", ["laplace", "", "Symmetric", None, 3, ["symmetric"]])
def test_unknown_mode_names_the_field(bad: object) -> None:
    with pytest.raises(ParameterError) as err:
        local_mechanism(bad)
    assert err.value.field == "mode"
    assert "symmetric" in str(err.value)


def test_randomizer_and_params_reject_an_unknown_mode_by_field() -> None:
    with pytest.raises(ParameterError) as err:
        Randomizer(mode="gaussian", level=1.0)  # type: ignore[arg-type]
    assert err.value.field == "mode"


def test_the_flags() -> None:
    sym, asym, trusted = local_mechanisms()
    assert (sym.randomized, sym.two_sided, sym.one_sided, sym.relaxable, sym.irr_relaxable) == (
        True, True, False, True, True)
    assert (asym.randomized, asym.two_sided, asym.one_sided, asym.relaxable, asym.irr_relaxable) == (
        True, False, True, True, True)
    assert (trusted.randomized, trusted.two_sided, trusted.one_sided, trusted.relaxable,
            trusted.irr_relaxable) == (False, False, False, False, False)


# --------------------------------------------------------------------------
# closed forms, against the formulas written out
# --------------------------------------------------------------------------


def _permanent(mode: str, level: float) -> tuple[float, float]:
    f = math.exp(-level / 2.0)
    return (f / 2.0, 1.0 - f / 2.0) if mode == "symmetric" else (f, 1.0)


def _with_irr(mode: str, p0: float, p1: float, irr_p: float | None, irr_q: float) -> tuple[float, float]:
    if mode == "asymmetric":
        return (p0 + (1 - p0) * irr_q, 1.0)
    assert irr_p is not None
    return (p0 * irr_q + (1 - p0) * irr_p, p1 * irr_q + (1 - p1) * irr_p)


def _bit_epsilon(mode: str, level: float) -> float:
    if mode == "asymmetric":
        return level / 2.0
    half_f = math.exp(-level / 2.0) / 2.0
    return math.log((1.0 - half_f) / half_f)


def _report_epsilon(mode: str, p: float, q: float, kind: str, k: int) -> float:
    if mode == "asymmetric":
        return k * math.log(1.0 / p)
    if kind == "categorical":
        return k * math.log(q * (1.0 - p) / (p * (1.0 - q)))
    return k * max(math.log(q / p), math.log((1.0 - p) / (1.0 - q)))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("mode", ["symmetric", "asymmetric"])
def test_probabilities_and_epsilons_equal_the_closed_forms(mode: str, level: float) -> None:
    mech = local_mechanism(mode)
    assert mech.permanent_probabilities(level) == _permanent(mode, level)
    assert mech.bit_epsilon(level) == _bit_epsilon(mode, level) == bit_epsilon(mode, level)
    for irr_p, irr_q in IRRS:
        if mode == "asymmetric":
            irr_p = None
        r = Randomizer(mode=mode, level=level, irr_p=irr_p, irr_q=irr_q)  # type: ignore[arg-type]
        p0, p1 = _permanent(mode, level)
        want = (p0, p1) if irr_q is None else _with_irr(mode, p0, p1, irr_p, irr_q)
        assert r.probabilities() == want
        if irr_q is None:
            assert r.exact_probabilities() == (Fraction(p0), Fraction(p1))
        for kind in ("set", "categorical"):
            assert mech.report_epsilon(*want, kind, 3) == _report_epsilon(mode, *want, kind, 3)


@pytest.mark.parametrize("mode", ["symmetric", "asymmetric"])
def test_exact_probabilities_compose_the_stated_doubles(mode: str) -> None:
    irr_p = None if mode == "asymmetric" else 0.25
    r = Randomizer(mode=mode, level=1.3, irr_p=irr_p, irr_q=0.75)  # type: ignore[arg-type]
    p0, p1 = (Fraction(x) for x in _permanent(mode, 1.3))
    q = Fraction(0.75)
    if mode == "asymmetric":
        assert r.exact_probabilities() == (p0 + (1 - p0) * q, Fraction(1))
    else:
        p = Fraction(0.25)
        assert r.exact_probabilities() == (p0 * q + (1 - p0) * p, p1 * q + (1 - p1) * p)


def test_trusted_has_infinite_epsilons_and_no_noise() -> None:
    mech = local_mechanism("trusted")
    assert mech.permanent_probabilities(math.inf) == (0.0, 1.0)
    assert mech.bit_epsilon(math.inf) == math.inf
    assert mech.irr_channel(None, None) is None
    g = guarantee(Randomizer(mode="trusted", level=math.inf), num_hashes=2)
    assert (g.epsilon_bit, g.epsilon_per_report, g.epsilon_longitudinal) == (math.inf,) * 3
    for call in (lambda: mech.sequence_bit_epsilon((1.0,)), lambda: mech.relax_noise(np.zeros(2), 1, 2, None),
                 lambda: mech.relax_permanent(np.zeros(2), np.zeros(2), 1, 2, None)):
        with pytest.raises(ParameterError) as err:
            call()
        assert err.value.field == "mode"


@pytest.mark.parametrize("levels", [(1.0,), (1.0, 2.0), (0.5, 1.0, 3.0), (2.0, 8.0)])
def test_chain_epsilons(levels: tuple[float, ...]) -> None:
    asym, sym = local_mechanism("asymmetric"), local_mechanism("symmetric")
    assert asym.sequence_bit_epsilon(levels) == (math.ceil(levels[-1] / 2.0 * 1e6) / 1e6, True)
    eps, exact = sym.sequence_bit_epsilon(levels)
    assert exact
    raw = _bit_epsilon("symmetric", levels[0]) if len(levels) == 1 else laplace_sequence_epsilon(levels)
    assert raw <= eps <= raw + 1e-6 + 1e-8
    assert sequence_bit_epsilon("symmetric", list(levels)) == (eps, exact)
    assert sym.check_sequence_privacy(levels, eps) and not sym.check_sequence_privacy(levels, raw * 0.99)
    assert asym.check_sequence_privacy(levels, levels[-1] / 2) and not asym.check_sequence_privacy(levels, levels[-1] / 2.02)


def test_a_long_symmetric_chain_is_the_continuous_bound() -> None:
    levels = tuple(1.0 + i for i in range(11))  # past the 10 levels the proven enclosure is charged for
    assert local_mechanism("symmetric").sequence_bit_epsilon(levels) == (11.0, False)
    eps, exact = local_mechanism("symmetric").sequence_bit_epsilon(levels[:8])
    assert exact and eps < 8.0


# --------------------------------------------------------------------------
# noise and relaxation steps, against protocol.relaxation on the same stream
# --------------------------------------------------------------------------


@pytest.mark.parametrize("level_from, level_to", [(0.5, 1.0), (1.0, 4.0), (2.0, 2.5)])
def test_relaxation_steps_are_the_relaxation_functions(level_from: float, level_to: float) -> None:
    shape = (64, 16)
    bits = SeededRandom(1).uniform(shape) < 0.5
    sym, asym = local_mechanism("symmetric"), local_mechanism("asymmetric")
    lap = sym.draw_noise(level_from, shape, SeededRandom(2))
    assert np.array_equal(lap, SeededRandom(2).laplace(level_from, shape))
    expo = asym.draw_noise(level_from, shape, SeededRandom(3))
    assert np.array_equal(expo, SeededRandom(3).exponential(level_from, shape))
    assert np.array_equal(sym.relax_noise(lap, level_from, level_to, SeededRandom(4)),
                          relax_laplace(lap, level_from, level_to, SeededRandom(4)))
    assert np.array_equal(asym.relax_noise(expo, level_from, level_to, SeededRandom(5)),
                          relax_exponential(expo, level_from, level_to, SeededRandom(5)))
    perm = bits | (SeededRandom(6).uniform(shape) < 0.3)
    assert np.array_equal(asym.relax_permanent(bits, perm, level_from, level_to, SeededRandom(7)),
                          relax_exponential_bits(bits, perm, level_from, level_to, SeededRandom(7)))
    assert np.array_equal(sym.relax_permanent(bits, perm, level_from, level_to, SeededRandom(8)),
                          relax_laplace_bits(bits, perm, (level_from,), level_to, SeededRandom(8)))


@pytest.mark.parametrize("mode", MODES)
def test_permanent_from_uniforms_thresholds_the_drawn_noise(mode: str) -> None:
    level = math.inf if mode == "trusted" else 1.7
    r = Randomizer(mode=mode, level=level)  # type: ignore[arg-type]
    bits = SeededRandom(9).uniform((40, 50)) < 0.5
    u = SeededRandom(10).uniform(bits.shape)
    noise = r.draw_noise(bits.shape, SeededRandom(10))  # the same uniforms
    assert np.array_equal(r.permanent_from_uniforms(bits, u), r.permanent(bits, noise))


@pytest.mark.parametrize("irr_p, irr_q", [(None, 0.3), (0.2, 0.7)])
def test_apply_irr_acts_alike_on_masks_and_arrays(irr_p: float | None, irr_q: float) -> None:
    mode = "asymmetric" if irr_p is None else "symmetric"
    mech = local_mechanism(mode)
    perm = SeededRandom(11).uniform(64) < 0.5
    u = SeededRandom(12).uniform(64)
    below_p = None if irr_p is None else u < irr_p
    arrays = mech.apply_irr(perm, below_p, u < irr_q)

    def mask(a: np.ndarray) -> int:
        return sum(1 << i for i in np.flatnonzero(a))

    ints = mech.apply_irr(mask(perm), None if below_p is None else mask(below_p), mask(u < irr_q))
    assert ints == mask(arrays)
    want = perm | (u < irr_q) if irr_p is None else (u < irr_p) | (perm & (u < irr_q))
    assert np.array_equal(arrays, want)


# --------------------------------------------------------------------------
# parameters and neighbours
# --------------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "level", "irr_p", "irr_q", "field"), [
    ("symmetric", 0.0, None, None, "level"),
    ("symmetric", 1.0, 0.2, None, "irr_q"),
    ("symmetric", 1.0, 0.6, 0.5, "irr_q"),
    ("asymmetric", 33.0, None, None, "level"),
    ("asymmetric", 1.0, 0.1, 0.5, "irr_p"),
    ("asymmetric", 1.0, None, 1.0, "irr_q"),
    ("trusted", 1.0, None, None, "level"),
    ("trusted", math.inf, None, 0.5, "irr_q"),
])
def test_each_mechanism_checks_its_parameters(mode: str, level: float, irr_p: float | None, irr_q: float | None,
                                              field: str) -> None:
    with pytest.raises(ParameterError) as err:
        local_mechanism(mode).check(level, irr_p, irr_q)
    assert err.value.field == field


def test_only_the_one_sided_mode_needs_a_none_value() -> None:
    with pytest.raises(PolicyError):
        local_mechanism("asymmetric").check_metric("categorical", None)
    local_mechanism("asymmetric").check_metric("categorical", "none")
    for mech in local_mechanisms():
        mech.check_metric("set", None)
    local_mechanism("symmetric").check_metric("categorical", None)


def test_neighbour_relations_are_the_mechanisms_sentences() -> None:
    assert NEIGHBOUR_RELATIONS == tuple(r for m in local_mechanisms() for r in m.neighbours)
    page = " ".join((ROOT / "docs" / "privacy.md").read_text(encoding="utf-8").split())
    for mech in local_mechanisms():
        assert [r.value_kind for r in mech.neighbours] == ["set", "categorical"]
        for relation in mech.neighbours:
            assert relation.mode == mech.mode
            assert relation.one_way == mech.one_sided
            assert mech.neighbour(relation.value_kind) is relation
            assert relation.sentence and ". " not in relation.sentence and not relation.sentence.endswith(".")
            if mech.randomized:  # the trusted metrics' row is the central relation
                assert relation.sentence in page, relation
        with pytest.raises(ParameterError) as err:
            mech.neighbour("ordinal")
        assert err.value.field == "mode"


def test_central_mechanism_properties() -> None:
    kinds = {name: mechanism_class(name) for name in mechanism_names()}
    assert {n for n, c in kinds.items() if c.integer} == {"ageo", "geometric"}
    assert {n for n, c in kinds.items() if c.sequential} == {"salap"}
    assert {n for n, c in kinds.items() if c.bounded} == {"ageo"}
    assert {n for n, c in kinds.items() if c.relaxable} == {"alap", "ageo", "laplace"}


def test_every_mechanism_satisfies_the_protocol() -> None:
    def accepts(mechanism: LocalMechanism) -> str:
        return mechanism.mode

    assert [accepts(m) for m in (SymmetricMechanism(), AsymmetricMechanism(), TrustedMechanism())] == list(MODES)


# --------------------------------------------------------------------------
# no product code compares a mode with a literal
# --------------------------------------------------------------------------

PRODUCT = ("protocol", "client_sdk", "aggregator")
ALLOWED = ("protocol/local/", "protocol/wire/")


def _named(node: ast.expr, word: str) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name == word or name.endswith("_" + word)


def _literals(node: ast.expr) -> list[str]:
    """The strings of a string constant or of a tuple/list/set of them (else nothing)."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else []
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        found = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return found if len(found) == len(node.elts) else []
    return []


def _comparisons(source: str, word: str, names: tuple[str, ...] | None) -> list[int]:
    """Lines comparing a name or attribute called ``word`` with string literals (among ``names`` if given)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for (left, right), op in zip(zip(operands, operands[1:], strict=False), node.ops, strict=True):
            if not isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn):
                continue
            for subject, other in ((left, right), (right, left)):
                found = _literals(other)
                if _named(subject, word) and found and (names is None or set(found) & set(names)):
                    out.append(node.lineno)
    return out


def mode_comparisons(source: str) -> list[int]:
    """Lines where a ``mode`` (a name or an attribute) is compared with a string literal (``==``, ``!=``, ``in``)."""
    return _comparisons(source, "mode", None)


def mechanism_comparisons(source: str) -> list[int]:
    """Lines where a ``mechanism`` is compared with the name of a registered central mechanism."""
    return _comparisons(source, "mechanism", mechanism_names())


def test_the_scan_finds_what_it_looks_for() -> None:
    found = mode_comparisons(
        'if params.mode == "trusted": pass\n'
        'x = "a" if "asymmetric" != mode else "b"\n'
        'y = r.mode in ("symmetric", "asymmetric")\n'
        'z = self.mode not in ["trusted"]\n'
        'for mode in ("symmetric", "asymmetric"): pass\n'
        '"""mode == "trusted" in a docstring"""\n'
        'w = r["mode"] == mode\n'
    )
    assert sorted(found) == [1, 2, 3, 4]
    assert mechanism_comparisons('if request.mechanism == "salap": pass\nif mechanism in ("ageo", "x"): pass\n'
                                 'if kind == "alap": pass\n') == [1, 2]


def test_no_product_code_compares_a_mode_with_a_literal() -> None:
    sites = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(ALLOWED):
                continue
            source = path.read_text(encoding="utf-8")
            sites += [f"{rel}:{line} (mode)" for line in mode_comparisons(source)]
            sites += [f"{rel}:{line} (central mechanism)" for line in mechanism_comparisons(source)]
    assert not sites, ("ask the mechanism (protocol.local.local_mechanism(mode), protocol.central.mechanism_class"
                       "(name)), not its name: " + ", ".join(sites))


@pytest.mark.parametrize("mode", ["symmetric", "asymmetric"])
def test_the_relaxed_bit_table_is_the_law_relax_permanent_samples(mode: str) -> None:
    # 200,000 bits per (true bit) through the product's relax_permanent (seeded); each of the four
    # P(relaxed = 1 | permanent p, true b) within 6 sd of the table: false-failure rate below 1e-7 in all
    mechanism = local_mechanism(mode)
    table = mechanism.relaxed_bit_table(1.0, 2.5)
    assert all(isinstance(p, Fraction) and 0 <= p <= 1 for p in table)
    rng = SeededRandom(31)
    n = 200_000
    for b in (0, 1):
        bits = np.full(n, bool(b))
        permanent = Randomizer(mode=mode, level=1.0).sample_permanent(bits, rng)
        relaxed = mechanism.relax_permanent(bits, permanent, 1.0, 2.5, rng)
        for p in (0, 1):
            where = permanent == bool(p)
            if where.sum() < 1_000:
                continue  # asymmetric: a true 1 is never a permanent 0
            freq, want = relaxed[where].mean(), float(table[p + 2 * b])
            assert abs(freq - want) <= 6 * math.sqrt(max(want * (1 - want), 1e-12) / where.sum()), (b, p)
    with pytest.raises(ParameterError):
        local_mechanism("trusted").relaxed_bit_table(1.0, 2.0)
