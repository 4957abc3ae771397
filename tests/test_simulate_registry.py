"""Every scenario module registers one complete entry, and ``onesided simulate`` finds each of them.

A scenario added as a module but missing from the catalogue (or listed but
never registered, or registered without its summary or plot) fails here
before anyone runs it. Nothing random runs: the checks read the registry.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import pkgutil

import pytest

import aggregator.research.scenarios as package
from aggregator.cli.main import main
from aggregator.research.scenarios import SCALES, SCENARIOS
from aggregator.research.scenarios.registry import ScenarioParts, all_registered, register

HELPERS = {"common", "plotting", "registry"}  # modules of the package that are not scenarios


def _scenario_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name not in HELPERS)


def test_every_scenario_module_is_in_the_catalogue_and_registers_what_it_lists() -> None:
    modules = _scenario_modules()
    for module in modules:
        importlib.import_module(f"{package.__name__}.{module}")
    registered = all_registered()
    assert sorted(registered) == sorted(SCENARIOS)  # none registered outside the catalogue, none missing
    assert sorted({s.module for s in SCENARIOS.values()}) == modules


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_entry_is_complete(name: str) -> None:
    parts = SCENARIOS[name].load()
    assert parts.name == name
    assert set(parts.setups) == set(SCALES)
    for part in (parts.run, parts.summary, parts.plot):
        assert callable(part)
    assert list(inspect.signature(parts.plot).parameters) == ["f", "path", "title"]
    keywords = inspect.signature(parts.run).parameters
    assert ("method" in keywords) == parts.has_clients  # --clients/--method reach only scenarios with clients
    assert not parts.keyed_noise or parts.has_clients


def test_help_lists_every_scenario_with_its_title() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = out.getvalue()
    for name, scenario in SCENARIOS.items():
        assert f"  {name:22s} {scenario.title}" in text


def test_a_second_entry_under_a_taken_name_is_refused() -> None:
    parts = SCENARIOS["collusion"].load()
    assert register(parts) is parts  # the same entry again (a module imported twice) is fine
    other = ScenarioParts(name="collusion", setups=parts.setups, run=parts.run, summary=parts.summary,
                          plot=parts.plot)
    with pytest.raises(ValueError, match="registered twice"):
        register(other)
    assert SCENARIOS["collusion"].load() is parts
