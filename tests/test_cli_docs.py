"""The user docs stand alone and say what the code does: wire objects, defaults, permissions."""

from __future__ import annotations

import dataclasses
import inspect
import re
import stat
from pathlib import Path

import protocol.wire as wire
from aggregator.cli.commands.client import DEFAULT_MAX_EPSILON
from aggregator.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# the pages this change rewrote to stand alone (the others are swept separately)
STANDALONE = ("dashboard.md", "decoding.md", "wire.md", "client.md")
# the name of the project's internal design notes, spelled in two parts so this file does not cite them itself
NOTES = re.compile(r"\b" + "DES" + r"IGN\b")


def test_the_docs_cite_no_document_users_lack() -> None:
    for name in STANDALONE:
        text = (DOCS / name).read_text("utf-8")
        assert not NOTES.search(text), name
    assert not NOTES.search((ROOT / "aggregator" / "server" / "dashboard" / "dashboard.js").read_text("utf-8"))


def test_no_shipped_file_cites_the_internal_design_notes() -> None:
    """Users never have the project's internal design notes: code, comments, help and docs stand alone."""
    roots = ["aggregator", "client_sdk", "protocol", "docs", "examples", "benchmarks", "tests"]
    files = [ROOT / "README.md", ROOT / "pyproject.toml"]
    for root in roots:
        files += [p for p in (ROOT / root).rglob("*") if p.suffix in {".py", ".md", ".js", ".html", ".css", ".toml"}]
    offenders = [str(p.relative_to(ROOT)) for p in files if NOTES.search(p.read_text("utf-8", errors="replace"))]
    assert not offenders


def test_every_wire_object_has_a_section_with_each_of_its_fields() -> None:
    reference = (DOCS / "wire.md").read_text("utf-8").split("## 13. Object reference", 1)[1]
    classes = [obj for _, obj in inspect.getmembers(wire, inspect.isclass)
               if dataclasses.is_dataclass(obj) and obj.__module__ == wire.__name__ and not obj.__name__.startswith("_")]
    assert {c.__name__ for c in classes} >= {"ConfigPayload", "ReportEnvelope", "RoundAnnouncement"}
    for cls in classes:
        heading = re.search(rf"^### 13\.\d+ `{cls.__name__}`.*?(?=^### |\Z)", reference, re.M | re.S)
        assert heading is not None, f"{cls.__name__} has no section in docs/wire.md 13"
        for f in dataclasses.fields(cls):
            assert f"`{f.name}`" in heading.group(0), f"{cls.__name__}.{f.name} is not documented"


def test_the_client_command_default_ceiling_is_the_documented_one() -> None:
    text = (DOCS / "client.md").read_text("utf-8")
    assert f"(default {DEFAULT_MAX_EPSILON})" in text


def test_keys_init_makes_the_folder_the_docs_promise(tmp_path: Path) -> None:
    assert "file of mode 0600 in a directory of mode 0700" in (DOCS / "operations.md").read_text("utf-8")
    assert main(["keys", "init", "--data-dir", str(tmp_path)]) == 0
    folder = tmp_path / "keys"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {0o600}
