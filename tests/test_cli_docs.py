"""The user docs stand alone and say what the code does: wire objects, defaults, permissions."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import stat
from pathlib import Path
from typing import Any

import protocol.wire as wire
from aggregator.cli.commands.client import DEFAULT_MAX_EPSILON
from aggregator.cli.main import build_parser, main
from aggregator.server.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# the pages this change rewrote to stand alone (the others are swept separately)
STANDALONE = ("dashboard.md", "decoding.md", "wire.md", "client.md", "cli.md")
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
               if dataclasses.is_dataclass(obj) and obj.__module__.startswith(wire.__name__ + ".") and not obj.__name__.startswith("_")]
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


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The commands (or actions) directly under ``parser``, by name."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:  # argparse keeps its actions here; no public listing
        if isinstance(action, argparse._SubParsersAction):
            found.update(action._name_parser_map)
    return found


def _default(path: str, flag: str) -> Any:
    parser = build_parser()
    for word in path.split():
        parser = _subcommands(parser)[word]
    return next(a.default for a in parser._actions if flag in a.option_strings)


def test_the_cli_page_has_a_section_for_every_command_and_action() -> None:
    text = (DOCS / "cli.md").read_text("utf-8")
    headings = re.findall(r"^### (.*)$", text, re.M)
    for name, command in _subcommands(build_parser()).items():
        heading = next((h for h in headings if re.search(rf"`onesided {re.escape(name)}\b", h)), None)
        assert heading is not None, f"docs/cli.md has no section for `onesided {name}`"
        for action in _subcommands(command):
            assert re.search(rf"\b{re.escape(action)}\b", heading), f"`onesided {name} {action}` is not in {heading!r}"


def test_the_cli_page_states_the_defaults_of_the_code() -> None:
    text = (DOCS / "cli.md").read_text("utf-8")
    for flag in ("--host", "--port", "--workers", "--threads", "--timeout", "--graceful-timeout", "--log-format"):
        assert f"`{flag} {_default('serve', flag)}`" in text, flag
    assert f"`--keep-old-days` (default {_default('keys rotate', '--keep-old-days'):g})" in text
    assert f"`--limit` (default {_default('audit-log', '--limit')}" in text
    assert f"default {_default('client ledger', '--max-epsilon')})" in text
    assert f"default {DEFAULT_MAX_EPSILON})" in text
    retention = Settings().retention_seconds
    assert f"{retention} = {retention // 86400} days" in text
    assert "private files\nof mode 0600 in a key directory of mode 0700" in text
