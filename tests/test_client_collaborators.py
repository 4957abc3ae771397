"""The client's collaborators are handed what they need, never the client: no reach into its private state."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SDK = Path(__file__).resolve().parent.parent / "client_sdk"
COLLABORATORS = ["background.py", "following.py", "outbox.py", "reporting.py", "sender.py", "spending.py"]


@pytest.mark.parametrize("name", COLLABORATORS)
def test_no_collaborator_holds_or_reads_the_client(name: str) -> None:
    tree = ast.parse((SDK / name).read_text())
    reaches = [
        f"line {node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
        and isinstance(node.value, ast.Attribute) and node.value.attr.startswith("_")
        and isinstance(node.value.value, ast.Name) and node.value.value.id == "self"
        and node.value.attr in {"_host", "_client"}
    ]
    hosts = [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name.endswith("Host")]
    assert not reaches and not hosts, reaches + hosts


def test_a_made_report_returns_its_bits_with_its_item() -> None:
    """No hidden second output: the bits a relaxed step draws from come back with the queue item."""
    from client_sdk.reporting import Queued, Reporter

    assert Queued._fields == ("item", "sent", "report_id")
    assert not hasattr(Reporter(rng=None), "sent")  # type: ignore[arg-type]
