"""Where per-client blocks run: in this process, or on a Dask cluster (docs/simulation.md).

A per-client simulation is cut into *blocks* of a fixed number of clients;
block ``i`` draws everything from child ``i`` of ``SeedSequence.spawn``
of the run's root seed, and returns integer counts. The result is the sum
of the blocks' counts, so it does not depend on how blocks are grouped
into tasks, on the order in which they finish, or on the engine: the local
engine and a Dask cluster give identical results for the same seed. A task
runs its blocks one after the other, so its memory is bounded by one block.

Both engines keep a block's freed memory in the process for the next block
(:func:`retain_freed_memory`): the blocks allocate the same large temporaries
again and again, and glibc's default returns them to the kernel between
blocks, so every block paid the page faults of touching them afresh.

>>> seeds = block_seeds(np.random.SeedSequence(1), 3)
>>> [s.spawn_key for s in seeds]
[(0,), (1,), (2,)]
"""

from __future__ import annotations

import ctypes
import itertools
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from protocol.errors import ParameterError
from protocol.rng import RandomSource
from protocol.validation import check_int

IntArray = npt.NDArray[np.int64]
BlockCounts = dict[str, IntArray]
# fn(setup, block index, block seed) -> counts
BlockFunction = Callable[[Any, int, np.random.SeedSequence], BlockCounts]

__all__ = ["BlockCounts", "DaskEngine", "Engine", "LocalEngine", "block_seeds", "retain_freed_memory", "root_seed",
           "run_task"]

# glibc's mallopt parameters (malloc.h) and the values the engines set: blocks' temporaries up to the
# largest threshold glibc accepts on 64-bit (32 MiB) come from the heap, and the top of the heap is
# returned to the kernel only past 1 GiB of free memory there (never, for a block of bounded size).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 1 << 30
_retained: bool | None = None


def retain_freed_memory() -> bool:
    """Keep freed memory in this process for reuse (glibc's ``malloc``); once per process. True if applied.

    NumPy allocates large arrays with ``malloc``; glibc serves those above a
    threshold with ``mmap`` and hands them back on ``free``, and trims the
    top of its heap, so a loop of equal-sized blocks page-faults its
    temporaries in again on every block (a per-client simulation spent ~20%
    of its time there). This sets ``M_MMAP_THRESHOLD`` to 32 MiB and
    ``M_TRIM_THRESHOLD`` to 1 GiB, as ``MALLOC_MMAP_THRESHOLD_`` and
    ``MALLOC_TRIM_THRESHOLD_`` would: the process keeps up to its peak heap
    (one block's working set) instead of returning it. Only the allocator's
    policy changes: every array's contents, hence every figure, are the
    same. Other C libraries (no ``mallopt``) are left as they are.
    """
    global _retained
    if _retained is None:
        _retained = False
        if sys.platform.startswith("linux"):
            mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
            if mallopt is not None:
                mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
                mallopt.restype = ctypes.c_int
                _retained = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
                    mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _retained


def root_seed(rng: RandomSource) -> np.random.SeedSequence:
    """A run's root seed, from four 32-bit words of its source (what every per-client scenario spawns blocks from)."""
    return np.random.SeedSequence([int(w) for w in rng.integers(2**32, 4)])


def block_seeds(root: np.random.SeedSequence, blocks: int) -> list[np.random.SeedSequence]:
    """Child ``i`` of ``root.spawn(blocks)`` for every block (``spawn_key == (i,)`` on a fresh root)."""
    fresh = np.random.SeedSequence(root.entropy, spawn_key=root.spawn_key, pool_size=root.pool_size)
    return fresh.spawn(blocks)


def add_counts(total: BlockCounts | None, part: BlockCounts) -> BlockCounts:
    """Sum of two blocks' counts (key by key)."""
    if total is None:
        return {k: np.array(v, dtype=np.int64) for k, v in part.items()}
    if total.keys() != part.keys():
        raise ParameterError("counts", f"blocks return different keys: {sorted(total)} and {sorted(part)}")
    return {k: total[k] + part[k] for k in total}


def run_task(fn: BlockFunction, setup: Any, blocks: Sequence[tuple[int, np.random.SeedSequence]]) -> BlockCounts:
    """One task: its blocks one after the other, summed (memory: one block at a time, kept for the next)."""
    retain_freed_memory()
    total: BlockCounts | None = None
    for index, seed in blocks:
        total = add_counts(total, fn(setup, index, seed))
    if total is None:
        raise ParameterError("blocks", "a task needs at least one block")
    return total


def _tasks(seeds: list[np.random.SeedSequence], per_task: int) -> list[list[tuple[int, np.random.SeedSequence]]]:
    indexed = list(enumerate(seeds))
    return [indexed[i : i + per_task] for i in range(0, len(indexed), per_task)]


class Engine(Protocol):
    """Runs ``fn`` on every block and returns the summed counts."""

    @property
    def name(self) -> str: ...

    def run(self, fn: BlockFunction, setup: Any, seeds: list[np.random.SeedSequence],
            progress: Callable[[str], None]) -> BlockCounts: ...


@dataclass(frozen=True)
class LocalEngine:
    """Every block in this process, in order (freed memory kept for the next block: :func:`retain_freed_memory`)."""

    name: str = "local"

    def run(self, fn: BlockFunction, setup: Any, seeds: list[np.random.SeedSequence],
            progress: Callable[[str], None]) -> BlockCounts:
        retain_freed_memory()
        total: BlockCounts | None = None
        for index, seed in enumerate(seeds):
            total = add_counts(total, fn(setup, index, seed))
            if (index + 1) % max(1, len(seeds) // 10) == 0:
                progress(f"local engine: {index + 1}/{len(seeds)} blocks")
        if total is None:
            raise ParameterError("blocks", "need at least one block")
        return total


@dataclass(frozen=True)
class DaskEngine:
    """Tasks of blocks on a Dask cluster (``dask.distributed``), summed on the workers.

    Attributes:
        scheduler: address of a running scheduler (``tcp://host:8786``); ``None``
            starts a ``LocalCluster`` for the run.
        workers: workers of that LocalCluster (one thread each).
        processes: LocalCluster workers as processes (``False``: threads in
            this process, what the tests use).
        blocks_per_task: blocks one task runs in a row (``None``: about 4
            tasks per worker thread, so each task is long and the scheduler
            sees few round trips; memory stays one block per task).
        in_flight: tasks submitted and not yet finished, at most (``None``: 2
            per worker thread, at least 4). Tasks are submitted as earlier
            ones finish, so the driver and the scheduler hold a bounded
            number of them whatever the number of clients.

    The setup is sent to every worker once (``scatter``), and finished
    tasks' counts are added pairwise *on the workers* as they arrive: the
    driver receives one result, the total, instead of one per task.
    """

    scheduler: str | None = None
    workers: int = 2
    processes: bool = True
    blocks_per_task: int | None = None
    in_flight: int | None = None
    name: str = "dask"

    def __post_init__(self) -> None:
        check_int("workers", self.workers, low=1)
        for field in ("blocks_per_task", "in_flight"):
            value = getattr(self, field)
            if value is not None:
                check_int(field, value, low=1)

    def run(self, fn: BlockFunction, setup: Any, seeds: list[np.random.SeedSequence],
            progress: Callable[[str], None]) -> BlockCounts:
        import dask
        from distributed import Client, LocalCluster

        if not seeds:
            raise ParameterError("blocks", "need at least one block")
        # the workers' spill folder: a fresh one removed after the run (dask's default, ./dask-scratch-space
        # or $TMPDIR/dask-scratch-space, stays behind)
        scratch = tempfile.mkdtemp(prefix="onesided-dask-") if self.scheduler is None else None
        if self.scheduler is None:
            with dask.config.set({"temporary-directory": scratch}):  # the scheduler's lock files too
                cluster: Any = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=self.processes,
                                            dashboard_address=":0",  # any free port: no clash, no warning
                                            local_directory=scratch)
        else:
            cluster = self.scheduler
        try:
            with Client(cluster) as client:
                threads = sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values())
                per_task = self.blocks_per_task or max(1, -(-len(seeds) // (4 * max(1, threads))))
                tasks = _tasks(seeds, per_task)
                window = self.in_flight or max(4, 2 * threads)
                progress(f"dask: {len(tasks)} tasks of <= {per_task} blocks on {client.scheduler.address}, "
                         f"<= {window} in flight, summed on the workers")
                total = _reduce_on_workers(client, fn, client.scatter(setup, broadcast=True), tasks, window, progress)
        finally:
            if not isinstance(cluster, str):
                cluster.close()
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
        return total


def _reduce_on_workers(client: Any, fn: BlockFunction, setup: Any,
                       tasks: list[list[tuple[int, np.random.SeedSequence]]], window: int,
                       progress: Callable[[str], None]) -> BlockCounts:
    """Run ``tasks`` (at most ``window`` at once) and add their counts pairwise on the cluster; fetch the total."""
    from distributed import as_completed

    waiting = iter(tasks)
    running = as_completed([client.submit(run_task, fn, setup, task, pure=False)
                            for task in itertools.islice(waiting, window)], with_results=False)
    unpaired: Any = None  # a finished partial sum waiting for a partner (its data stays on its worker)
    finished = 0
    for future in running:
        if future.key.startswith("run_task"):
            finished += 1
            following = next(waiting, None)
            if following is not None:
                running.add(client.submit(run_task, fn, setup, following, pure=False))
            if finished % max(1, len(tasks) // 10) == 0:
                progress(f"dask: {finished}/{len(tasks)} tasks")
        if unpaired is None:
            unpaired = future
        else:
            running.add(client.submit(add_counts, unpaired, future, pure=False))
            unpaired = None
    total: BlockCounts = unpaired.result()
    return total
