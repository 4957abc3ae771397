"""``/metrics`` stays small whatever clients send.

Before, any HTTP method name and every unmatched path became a label value:
2,000 requests with made-up methods made ``/metrics`` 3 MB. Now an unknown
method or path is ``other`` and every label takes a bounded set of values.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from aggsupport import app_in
from flask import Flask

from aggregator.server.monitoring import METHODS, OTHER
from protocol.rng import SeededRandom

REQUESTS = 10_000
LABEL = re.compile(r'(endpoint|method|status)="([^"]*)"')


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    with app_in(tmp_path) as app:
        yield app


def _label_values(text: str) -> dict[str, set[str]]:
    values: dict[str, set[str]] = {"endpoint": set(), "method": set(), "status": set()}
    for line in text.splitlines():
        if line.startswith("onesided_request_seconds"):
            for name, value in LABEL.findall(line):
                values[name].add(value)
    return values


def test_made_up_methods_and_paths_do_not_grow_metrics(app: Flask) -> None:
    client = app.test_client()
    client.get("/v1/health")
    before = len(client.get("/metrics").data)
    rng = SeededRandom(7)
    letters = rng.integers(26, (REQUESTS, 8))
    for i in range(REQUESTS):
        word = "".join(chr(ord("A") + int(c)) for c in letters[i])
        if i % 2:
            client.open(f"/v1/{word.lower()}", method=word)  # a made-up method on a made-up path
        else:
            client.open("/v1/health", method=word)  # a made-up method on a real route: 405
    text = client.get("/metrics").data.decode()
    values = _label_values(text)
    assert values["method"] <= METHODS | {OTHER}, values["method"]
    rules = {rule.rule for rule in app.url_map.iter_rules()}
    assert values["endpoint"] <= rules | {OTHER}, values["endpoint"] - rules
    # the 10,000 requests added one label set each for 404 and 405 (a histogram of 12 buckets, ~1 KB each)
    assert len(text) - before < 8_000, (before, len(text))
    assert len(text) < 200_000
