"""Shared fixtures."""

from __future__ import annotations

import pytest

from protocol.rng import SeededRandom


@pytest.fixture
def rng() -> SeededRandom:
    return SeededRandom(20261122)
