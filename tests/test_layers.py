"""The fast layer (``pytest -m fast``) names only modules and tests that exist, so a rename cannot shrink it."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import LONG_UNIT_TESTS, UNIT_MODULES

TESTS = Path(__file__).parent


def test_every_unit_module_exists() -> None:
    assert sorted(name for name in UNIT_MODULES if not (TESTS / name).is_file()) == []


def test_every_long_unit_test_exists_in_a_unit_module() -> None:
    defined = {match for name in UNIT_MODULES
               for match in re.findall(r"^def (test_\w+)", (TESTS / name).read_text("utf-8"), re.M)}
    assert sorted(LONG_UNIT_TESTS - defined) == []
