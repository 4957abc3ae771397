"""The demo's progress: a bar per step on a terminal, one line per step in a log, or nothing.

Each step counts one kind of work (the SDK clients, or the simulated clients'
reports), so a bar's rate and its time left hold from its first second: a
step that mixed slow SDK clients with fast simulated ones would open with an
estimate off by a factor of a hundred. Off a terminal (a log, a pipe, CI) a
bar's carriage-return updates would pile up in the file, so each step writes
one line when it ends instead.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO


class Progress:
    """Shows the demo's steps on ``stream`` (default stderr); ``enabled=False`` shows nothing."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.on_terminal = self.stream.isatty()

    @contextmanager
    def step(self, desc: str, total: int, unit: str) -> Iterator[Callable[[int], None]]:
        """Count ``total`` units of one step; yields the function that adds done units."""
        if not self.enabled:
            yield lambda n: None
            return
        if self.on_terminal:
            from tqdm import tqdm

            with tqdm(total=total, desc=desc, unit=unit, leave=True, dynamic_ncols=True,
                      file=self.stream) as bar:
                yield bar.update
            return
        done = 0

        def add(n: int) -> None:
            nonlocal done
            done += n

        start = time.perf_counter()
        yield add
        took = time.perf_counter() - start
        self.stream.write(f"{desc}: {done:,} of {total:,} {unit}s in {took:.1f} s\n")
        self.stream.flush()
