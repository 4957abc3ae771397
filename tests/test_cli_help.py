"""Help text that states a fact of the code says the code's value."""

from __future__ import annotations

import subprocess
import sys

import pytest

from protocol.randomizers import MAX_LEVEL


def _help(*command: str) -> str:
    done = subprocess.run([sys.executable, "-m", "aggregator.cli.main", *command, "--help"],
                          capture_output=True, text=True, timeout=60, check=True)
    return " ".join(done.stdout.split())


def test_round_open_states_the_clients_level_cap() -> None:
    assert f"at most {MAX_LEVEL:g} (the cap every client enforces)" in _help("round", "open")


@pytest.mark.parametrize("action", ["show"])
def test_key_commands_that_record_nothing_offer_no_database_option(action: str) -> None:
    text = _help("keys", action)
    assert "--key-dir" in text and "--db" not in text


@pytest.mark.parametrize("action", ["init", "rotate", "backup", "restore"])
def test_audited_key_commands_offer_the_database_option(action: str) -> None:
    text = _help("keys", action)  # they record themselves in the audit log, which is in the database
    assert "--key-dir" in text and "--db URL" in text
