"""ruff, mypy and the import-layer contracts are clean on the whole project (pyproject.toml configures them)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> str:
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:  # the test extra installs both; a missing one is a broken setup
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return found


def test_ruff_is_clean() -> None:
    result = subprocess.run([_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_mypy_is_clean(tmp_path: Path) -> None:
    result = subprocess.run([_tool("mypy"), "--cache-dir", str(tmp_path / "cache")], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_layers_hold() -> None:
    # pyproject.toml [tool.importlinter]: cli -> demo -> research | server (independent) -> analysis -> protocol;
    # client_sdk and protocol import no aggregator module; server and analysis never import client_sdk;
    # analysis runs without flask/SQLAlchemy
    result = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
