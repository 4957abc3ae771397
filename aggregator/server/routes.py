"""The HTTP API's modules, listed by import (no discovery).

Each module defines ``blueprint`` (a flask ``Blueprint``) and
``OPENAPI_PATHS`` (OpenAPI path items keyed by path, e.g.
``"/v1/metrics/{name}"``), and may define ``OPENAPI_SCHEMAS`` (component
schemas). ``create_app`` registers the blueprints in this order, and
:func:`aggregator.server.openapi.install_openapi` builds the served document
from the same list (``api/spec.py`` only serves it, so no module here
imports the builder);
``tests/test_aggregator_openapi.py`` checks that the document and the
routes agree. A new feature adds its module here.
"""

from __future__ import annotations

from types import ModuleType

from aggregator.server.api import (
    association,
    config,
    dashboard,
    estimates,
    health,
    metrics,
    monitoring,
    releases,
    reports,
    rounds,
    spec,
)

API_MODULES: tuple[ModuleType, ...] = (
    association, config, dashboard, estimates, health, metrics, monitoring, releases, reports, rounds, spec,
)
