"""docs/architecture.md names real places: every path it gives exists, every symbol it names is defined
where it says (``path.py:Name.attr``), and every wing it draws is a package."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
# Paths that the other half of the same restructuring adds (local mechanisms as types); checked once it is in.
PART_A = {"protocol/local/", "protocol/laplace_chain.py", "protocol/canonical.py", "protocol/rounding.py"}


def _paths(text: str) -> set[str]:
    return set(re.findall(r"`((?:protocol|client_sdk|aggregator)/[A-Za-z0-9_./]*)`", text))


def test_every_path_on_the_page_exists() -> None:
    paths = _paths(PAGE.read_text("utf-8"))
    assert len(paths) > 30  # the table is read, not an empty match
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    if not (ROOT / "protocol" / "local").is_dir():
        missing = [p for p in missing if p not in PART_A]
    assert not missing


def test_every_symbol_on_the_page_is_defined_where_it_says() -> None:
    named = re.findall(r"`((?:protocol|client_sdk|aggregator)/[A-Za-z0-9_/]+)\.py:([A-Za-z_][A-Za-z0-9_.]*)`",
                       PAGE.read_text("utf-8"))
    assert len(named) >= 10  # the concept table names its symbols
    for path, symbol in named:
        found: object = importlib.import_module(path.replace("/", "."))
        for part in symbol.split("."):
            assert hasattr(found, part), f"{path}.py has no {symbol}"
            found = getattr(found, part)


def test_the_layers_drawn_are_the_packages_and_the_readme_links_the_page() -> None:
    text = PAGE.read_text("utf-8")
    for wing in ("cli", "demo", "research", "server", "analysis"):
        assert (ROOT / "aggregator" / wing / "__init__.py").is_file()
        assert f"aggregator.{wing}" in text
    assert "docs/architecture.md" in (ROOT / "README.md").read_text("utf-8")
