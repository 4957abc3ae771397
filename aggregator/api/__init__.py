"""HTTP API blueprints, discovered by module.

Every module of this package that defines ``blueprint`` (a flask
``Blueprint``) is registered by ``create_app``, in module-name order, and
must also define ``OPENAPI_PATHS`` (OpenAPI path items keyed by path, e.g.
``"/v1/metrics/{name}"``) and may define ``OPENAPI_SCHEMAS`` (component
schemas). A later feature (rounds, estimates, releases) adds its routes by
adding a module here; ``tests/test_aggregator_openapi.py`` checks that the
document and the routes agree.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from flask import Blueprint


def api_modules() -> list[ModuleType]:
    """The modules of this package that provide a blueprint, by name."""
    modules = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if isinstance(getattr(module, "blueprint", None), Blueprint):
            modules.append(module)
    return modules
