"""Where each scenario declares itself: one :class:`ScenarioParts` entry per scenario.

A scenario module ends with ``register(ScenarioParts(...))``: its setups by
scale, the function that runs it, how it is resized to another number of
clients (if it simulates clients), the lines ``onesided simulate`` prints and
the plot it draws. The package's catalogue
(:data:`aggregator.research.scenarios.SCENARIOS`) names each scenario's title
and module without importing it, so ``onesided --help`` stays light; the
entry is read from here once the module is imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Figures = dict[str, Any]
PACKAGE = "aggregator.research.scenarios"


@dataclass(frozen=True, kw_only=True)
class ScenarioParts:
    """Everything ``onesided simulate`` needs of one scenario.

    Attributes:
        name: the scenario's name (``onesided simulate NAME``).
        setups: the setup of each scale (``"small"``, ``"paper"``).
        run: ``(setup, rng, progress, *, method=..., engine=...) -> figures``
            (the keywords only when the scenario has clients).
        summary: figures -> the lines printed without ``--json``.
        plot: ``(figures, path, title)``: writes the PNG.
        resize: ``(setup, clients, method) -> setup`` when the scenario
            simulates clients (``--clients``, ``--method``, ``--engine``).
        keyed_noise: the scenario takes ``--noise keyed`` (clients' own secrets).
    """

    name: str
    setups: Mapping[str, Any]
    run: Callable[..., Figures]
    summary: Callable[[Figures], list[str]]
    plot: Callable[[Figures, Path, str], None]
    resize: Callable[[Any, int, str], Any] | None = None
    keyed_noise: bool = False

    @property
    def has_clients(self) -> bool:
        return self.resize is not None


_REGISTERED: dict[str, ScenarioParts] = {}


def register(parts: ScenarioParts) -> ScenarioParts:
    """Record ``parts`` under its name (a second, different entry for a name is a bug)."""
    if _REGISTERED.get(parts.name, parts) is not parts:
        raise ValueError(f"scenario {parts.name!r} is registered twice")
    _REGISTERED[parts.name] = parts
    return parts


def registered_parts(name: str, module: str) -> ScenarioParts:
    """The entry of scenario ``name``, importing its ``module`` (under this package) first.

    Raises:
        LookupError: the module registers no scenario of that name.
    """
    importlib.import_module(f"{PACKAGE}.{module}")
    if name not in _REGISTERED:
        raise LookupError(f"{PACKAGE}.{module} registers no scenario {name!r}")
    return _REGISTERED[name]


def all_registered() -> dict[str, ScenarioParts]:
    """The entries registered so far (by the scenario modules imported)."""
    return dict(_REGISTERED)


__all__ = ["ScenarioParts", "all_registered", "register", "registered_parts"]
