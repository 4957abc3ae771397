"""The engines keep a block's freed memory for the next block (no page-fault tax), figures unchanged."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from aggregator.research.engine import LocalEngine, block_seeds, retain_freed_memory

# A child process (fresh allocator state): blocks that each allocate and touch three 8 MiB arrays, then free
# them. glibc's default hands them back between blocks (thousands of minor faults a block); the engine's
# setting keeps them. Prints the minor faults of the last 5 of 8 blocks.
BLOCKS = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from aggregator.research.engine import LocalEngine, block_seeds

    def block(setup, index, seed):
        parts = [np.ones(1 << 20, dtype=np.float64) * (index + k) for k in range(3)]
        return {"ones": np.array([int(sum(p[-1] for p in parts))], dtype=np.int64)}

    faults = []
    def fn(setup, index, seed):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        out = block(setup, index, seed)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        return out

    seeds = block_seeds(np.random.SeedSequence(1), 8)
    if sys.argv[1] == "engine":
        total = LocalEngine().run(fn, None, seeds, lambda _: None)
    else:
        total = None
        for i, s in enumerate(seeds):
            fn(None, i, s)
    print(sum(faults[3:]))
""")


def _faults(how: str) -> int:
    done = subprocess.run([sys.executable, "-c", BLOCKS, how], capture_output=True, text=True, check=True)
    return int(done.stdout.strip())


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's mallopt")
def test_local_engine_does_not_fault_its_blocks_in_again() -> None:
    # 3 x 8 MiB touched per block (6,144 pages). Without the setting glibc trims or unmaps part of it
    # between blocks and the plain loop faults ~1,000 pages a block in again here; with it, the first
    # blocks' memory is reused (0 here). Counts of page faults, not times: no machine-load flakiness.
    plain, engine = _faults("plain"), _faults("engine")
    assert plain > 5 * 200
    assert engine * 10 < plain


def test_retain_freed_memory_applies_once_and_changes_no_figure() -> None:
    first = retain_freed_memory()
    assert retain_freed_memory() is first
    if platform.libc_ver()[0] == "glibc" and sys.maxsize > 2**32:
        assert first  # 64-bit glibc accepts both values (elsewhere nothing may be set, and nothing need be)
    seeds = block_seeds(np.random.SeedSequence(7), 4)

    def block(setup: object, index: int, seed: np.random.SeedSequence) -> dict[str, np.ndarray]:
        draws = np.random.default_rng(seed).integers(0, 2, size=(1000, 64))
        return {"ones": draws.sum(0)}

    expected = sum(block(None, i, s)["ones"] for i, s in enumerate(seeds))
    assert np.array_equal(LocalEngine().run(block, None, seeds, lambda _: None)["ones"], expected)
