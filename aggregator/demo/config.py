"""What the demo runs (:class:`DemoConfig`) and what it measured (:class:`DemoResult`).

Its own module so that the run and the report both import it and neither
imports the other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.errors import ParameterError
from protocol.validation import check_int, check_probability

METRIC = "places"


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """What the demo simulates (defaults: the README's main job)."""

    clients: int = 20_000
    sdk_clients: int = 200
    places: int = 2_000
    zipf_exponent: float = 1.1
    mean_places: float = 3.0
    level_from: float = 1.0
    level_to: float = 8.0
    ceiling: float = 5.0
    refusing_share: float = 0.05
    threshold: int = 50
    alpha: float = 0.01
    seed: int | None = 2026
    data_dir: Path | None = None  # default: out_dir/data
    out_dir: Path = Path("onesided-demo")
    keep: bool = False  # keep the data folder (database, private keys, client states) after the run

    def __post_init__(self) -> None:
        check_int("clients", self.clients, low=100, high=10_000_000)
        check_int("sdk_clients", self.sdk_clients, low=0, high=self.clients)
        check_int("places", self.places, low=10, high=4096)
        if not 0 < self.level_from < self.level_to < math.inf:
            raise ParameterError("level_to", "need 0 < level_from < level_to")
        check_probability("refusing_share", self.refusing_share, open_high=True)


@dataclass
class DemoResult:
    """What the demo measured (also rendered as the table and the HTML page)."""

    config: DemoConfig
    data_dir: Path
    server: str
    timings: dict[str, float] = field(default_factory=dict)
    reports: dict[str, int] = field(default_factory=dict)
    round: dict[str, Any] = field(default_factory=dict)
    estimates: dict[int, dict[str, Any]] = field(default_factory=dict)
    certificates: dict[str, Any] = field(default_factory=dict)
    truth: dict[str, int] = field(default_factory=dict)
    round_truth: dict[str, int] = field(default_factory=dict)
    privacy: dict[str, Any] = field(default_factory=dict)
    summary_path: Path | None = None
