"""What `pip install onesided` brings: the SDK alone, light to import, and it reports.

The wheel is built from the checkout and installed, without extras, into a fresh virtualenv in a
temporary folder; a client there reports through the SDK to an aggregator run by this test. The
dependencies come from the package index (or pip's cache) like on an app developer's machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from aggsupport import live_server, make_params

from protocol.crypto import b64e

ROOT = Path(__file__).resolve().parent.parent
SERVER_ONLY = ("aggregator.server", "aggregator.research", "aggregator.demo", "aggregator.analysis", "flask", "sqlalchemy", "scipy",
               "matplotlib", "tqdm", "psycopg")


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=240, **kwargs)  # type: ignore[call-overload]


def test_importing_the_sdk_loads_no_server_or_research_module() -> None:
    code = f"import sys, client_sdk; print([m for m in {SERVER_ONLY!r} if m in sys.modules])"
    assert run([sys.executable, "-c", code]).stdout.strip() == "[]"
    # nor does the CLI's parser (onesided --help) load a heavy dependency: commands import them when they run
    heavy = ("flask", "sqlalchemy", "scipy", "matplotlib", "tqdm", "psycopg", "client_sdk")
    code = (f"import sys; from aggregator.cli.main import build_parser; build_parser(); "
            f"print([m for m in {heavy!r} if m in sys.modules])")
    assert run([sys.executable, "-c", code]).stdout.strip() == "[]"


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel of this checkout installed, no extras."""
    folder = tmp_path_factory.mktemp("wheel")
    source = folder / "source"  # built from a copy: setuptools writes build/ and *.egg-info where it builds
    for part in ("protocol", "client_sdk", "aggregator"):
        shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(folder),
                 str(source)])
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = folder.glob("onesided-*.whl")
    venv = folder / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    installed = run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)])
    if installed.returncode != 0 and ("NewConnectionError" in installed.stderr or "No matching distribution" in
                                      installed.stderr):
        pytest.skip(f"the package index cannot be reached for numpy/mmh3/cryptography/requests: "
                    f"{installed.stderr.strip().splitlines()[-1]}")
    assert installed.returncode == 0, installed.stderr[-2000:]
    return venv


@pytest.mark.slow
def test_the_wheel_installs_the_sdk_without_server_dependencies(bare_venv: Path) -> None:
    python = str(bare_venv / "bin" / "python")
    listed = run([python, "-m", "pip", "list", "--format", "json"])
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"numpy", "mmh3", "cryptography", "requests", "onesided"} <= names
    assert not names & {"flask", "sqlalchemy", "scipy", "matplotlib", "tqdm", "gunicorn", "psycopg"}
    # the CLI starts, and a command whose extra is missing says which one, in one line, exit 2
    onesided = str(bare_venv / "bin" / "onesided")
    assert run([onesided, "--help"]).returncode == 0
    missing = run([onesided, "serve", "--data-dir", str(bare_venv / "data"), "--port", "0"])
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().count("\n") == 0 and "onesided[server]" in missing.stderr
    missing = run([onesided, "simulate", "relaxation", "--out", str(bare_venv / "simulate-out")])
    assert missing.returncode == 2 and "onesided[research]" in missing.stderr
    assert not (bare_venv / "simulate-out").exists()  # refused before the scenario ran: no folder, no data


@pytest.mark.slow
def test_the_wheel_declares_its_license_classifiers_and_urls(bare_venv: Path) -> None:
    code = ("import importlib.metadata as m, json; d = m.metadata('onesided'); "
            "print(json.dumps([d['License-Expression'], d.get_all('Classifier'), d.get_all('Project-URL'), "
            "d.get_all('License')]))")
    shown = run([str(bare_venv / "bin" / "python"), "-c", code], cwd=str(bare_venv))  # not the checkout's egg-info
    assert shown.returncode == 0, shown.stderr
    expression, classifiers, urls, legacy = json.loads(shown.stdout)
    assert expression == "Apache-2.0" and legacy is None  # an SPDX expression, not the deprecated table
    assert "Typing :: Typed" in classifiers and "Programming Language :: Python :: 3.11" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # PEP 639: the expression says it
    assert urls and all(", https://" in u for u in urls)


@pytest.mark.slow
def test_a_client_from_the_bare_install_reports_to_an_aggregator(bare_venv: Path, tmp_path: Path) -> None:
    params = make_params()
    with live_server(f"sqlite:///{tmp_path / 'agg.db'}", tmp_path / "agg") as server:
        assert server.register(params, server.admin_token()).status_code == 201
        script = textwrap.dedent(f"""
            from client_sdk import Client
            client = Client({server.url!r}, {str(tmp_path / "client.state")!r},
                            background=False, server_public_keys={b64e(server.keys.sign_public_raw)!r}, max_epsilon=10.0)
            client.sync()
            client.report("places", {{"home", "cafe"}})
            result = client.flush()
            client.close()
            print(result.delivered, result.remaining)
        """)
        out = run([str(bare_venv / "bin" / "python"), "-c", script], cwd=str(tmp_path))
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split() == ["1", "0"]
        assert int(server.storage.bit_counts("places")[1].sum()) == 1
