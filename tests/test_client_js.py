"""The TypeScript client (client-js/): its Node unit tests, run from pytest.

The Node packages come from client-js/package-lock.json (``.ci/setup`` runs ``npm ci``). Skips,
saying why, only when Node.js is not installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CLIENT_JS = Path(__file__).resolve().parent.parent / "client-js"


def node_or_skip() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: the TypeScript client's tests need node and npm")
    assert (CLIENT_JS / "node_modules").is_dir(), "client-js/node_modules is missing: run .ci/setup (npm ci)"
    return node


def run_npm(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    node_or_skip()
    npm = shutil.which("npm")
    assert npm is not None, "npm is missing beside node"
    return subprocess.run([npm, *args], cwd=CLIENT_JS, capture_output=True, text=True, timeout=timeout, check=False)


def test_node_unit_tests_pass() -> None:
    done = run_npm("test")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "# fail 0" in done.stdout
