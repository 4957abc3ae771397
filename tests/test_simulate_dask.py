"""Per-client simulations on Dask (city, relaxation, asymmetric-advantage, certificates): identical to local.

A LocalCluster of 2 workers runs in this process (threads). Blocks are
seeded by ``SeedSequence.spawn`` children, so neither the engine nor the
grouping of blocks into tasks changes a single count.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("distributed")

from test_simulate import simulate  # noqa: E402

from aggregator.research.engine import DaskEngine, LocalEngine, block_seeds, run_task  # noqa: E402
from aggregator.research.scenarios import run_scenario  # noqa: E402
from aggregator.research.scenarios.advantage import (  # noqa: E402
    ADVANTAGE_SETUPS,
    advantage_block,
    asymmetric_advantage,
)
from aggregator.research.scenarios.certificates import (  # noqa: E402
    CERTIFICATE_SETUPS,
    certificate_block,
    certificates,
)
from aggregator.research.scenarios.city import CITY_SETUPS, city, city_block  # noqa: E402
from aggregator.research.scenarios.relaxation import RELAXATION_SETUPS, relaxation, relaxation_block  # noqa: E402
from protocol.encodings import BloomEncoding  # noqa: E402
from protocol.errors import ParameterError  # noqa: E402
from protocol.rng import SeededRandom  # noqa: E402

# 5 blocks of 1,000 clients and a last one of 500 over a 300-place city
SETUP = replace(CITY_SETUPS["small"], clients=5_500, block=1_000, places=300, threshold=20)


def _without_engine(figures: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in figures.items() if k != "engine"}


def test_block_seeds_are_the_spawned_children_whatever_was_spawned_before() -> None:
    root = np.random.SeedSequence(42)
    expected = [s.generate_state(2).tolist() for s in np.random.SeedSequence(42).spawn(4)]
    root.spawn(3)  # the root's own spawn counter does not shift the blocks' seeds
    assert [s.generate_state(2).tolist() for s in block_seeds(root, 4)] == expected


def test_task_grouping_changes_nothing() -> None:
    seeds = block_seeds(np.random.SeedSequence(7), SETUP.blocks())
    whole = run_task(city_block, SETUP, list(enumerate(seeds)))
    parts = [run_task(city_block, SETUP, list(enumerate(seeds))[i : i + 2]) for i in range(0, len(seeds), 2)]
    for key, value in whole.items():
        assert np.array_equal(np.sum([p[key] for p in parts], axis=0), value), key
    assert int(whole["clients"][0]) == 5_500


@pytest.mark.parametrize("blocks_per_task", [1, 4])
def test_dask_equals_local(blocks_per_task: int) -> None:
    local = city(SETUP, SeededRandom(3), engine=LocalEngine())
    dask = city(SETUP, SeededRandom(3), engine=DaskEngine(workers=2, processes=False, blocks_per_task=blocks_per_task))
    assert (local["engine"], dask["engine"]) == ("local", "dask")
    assert _without_engine(dask) == _without_engine(local)
    assert city(SETUP, SeededRandom(4), engine=LocalEngine())["ones_round"] != local["ones_round"]


def test_keyed_noise_on_dask_equals_local() -> None:
    """Each client's memoized noise from its own secret (the SDK's derivation), 300 clients."""
    keyed = replace(SETUP, clients=300, block=100, noise="keyed")
    local = city(keyed, SeededRandom(5), engine=LocalEngine())
    dask = city(keyed, SeededRandom(5), engine=DaskEngine(workers=2, processes=False, blocks_per_task=1))
    assert _without_engine(dask) == _without_engine(local) and local["noise"] == "keyed"
    seeded = city(replace(keyed, noise="seeded"), SeededRandom(5), engine=LocalEngine())
    assert seeded["truth"] == local["truth"]  # the same people; only the noise source differs
    assert seeded["ones_round0"] != local["ones_round0"]
    # one-sided: every holder's bit is reported, so reported ones >= holders in both collections
    assert all(o >= t for o, t in zip(local["ones_round0"], local["truth"], strict=True))
    assert all(o >= t for o, t in zip(local["ones_round"], local["round_truth"], strict=True))


def test_cli_engine_dask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DaskEngine, "__init__", _threaded_init(DaskEngine.__init__))
    code, text = simulate(tmp_path, "city", "--clients", "4000", "--engine", "dask", "--json", "--seed", "9")
    assert code == 0
    doc = json.loads(text)
    assert (doc["engine"], doc["clients"], doc["method"]) == ("dask", 4000, "per-client")
    local = run_scenario("city", clients=4000, seed=9, engine=LocalEngine())
    assert _without_engine(doc["figures"]) == _without_engine(local)
    with pytest.raises(ParameterError) as err:
        DaskEngine(workers=0)
    assert err.value.field == "workers"


def _threaded_init(init: Any) -> Any:
    """The CLI's LocalCluster with threads (processes=False) inside the test process."""
    def patched(self: DaskEngine, *args: Any, **kwargs: Any) -> None:
        kwargs["processes"] = False
        init(self, *args, **kwargs)
    return patched


# Small setups of the other per-client scenarios: a few blocks each, the last one short.
RELAXATION = replace(RELAXATION_SETUPS["small"], clients=5_000, chunk=2_000, places=300,
                     encoding=BloomEncoding(num_bits=32, num_hashes=2, num_cohorts=8), levels=(1.0, 2.0, 4.0),
                     repetitions=2)
ADVANTAGE = replace(ADVANTAGE_SETUPS["small"], clients=2_500, chunk=1_000, items=16, epsilons=(0.5, 2.0),
                    repetitions=5)
CERTIFICATES = replace(CERTIFICATE_SETUPS["small"], clients=2_500, chunk=1_000, places=200, thresholds=(2, 20),
                       epsilons=(1.0, 4.0), sweep_thresholds=(5,), repetitions=2)


@pytest.mark.parametrize(("run", "setup", "block"), [
    (relaxation, RELAXATION, relaxation_block),
    (asymmetric_advantage, ADVANTAGE, advantage_block),
    (certificates, CERTIFICATES, certificate_block),
], ids=["relaxation", "asymmetric-advantage", "certificates"])
def test_other_scenarios_on_dask_equal_local(run: Any, setup: Any, block: Any) -> None:
    # The same seed gives the same figures on the local engine and on 2 Dask workers, whatever the grouping
    # of blocks into tasks; another seed gives other figures.
    local = run(setup, SeededRandom(21), engine=LocalEngine())
    dask = run(setup, SeededRandom(21), engine=DaskEngine(workers=2, processes=False, blocks_per_task=2))
    assert (local["engine"], dask["engine"], local["clients"]) == ("local", "dask", setup.clients)
    assert _without_engine(dask) == _without_engine(local)
    assert _without_engine(run(setup, SeededRandom(22), engine=LocalEngine())) != _without_engine(local)
    seeds = block_seeds(np.random.SeedSequence(5), 3)
    whole = run_task(block, setup, list(enumerate(seeds)))
    parts = [run_task(block, setup, [(i, s)]) for i, s in enumerate(seeds)]
    for key, value in whole.items():
        assert np.array_equal(np.sum([p[key] for p in parts], axis=0), value), key


def test_run_scenario_takes_an_engine_for_per_client_paths_only() -> None:
    engine = DaskEngine(workers=2, processes=False)
    with pytest.raises(ParameterError) as err:
        run_scenario("relaxation", clients=1_000, method="aggregate", engine=engine)
    assert err.value.field == "engine"
    with pytest.raises(ParameterError) as err:
        run_scenario("collusion", engine=engine)
    assert err.value.field == "method"


def test_a_bounded_window_of_tasks_changes_nothing() -> None:
    # One task in flight at a time (each submitted when the previous one is summed): the same figures.
    local = relaxation(RELAXATION, SeededRandom(23), engine=LocalEngine())
    dask = relaxation(RELAXATION, SeededRandom(23),
                      engine=DaskEngine(workers=2, processes=False, blocks_per_task=1, in_flight=1))
    assert _without_engine(dask) == _without_engine(local)
    with pytest.raises(ParameterError) as err:
        DaskEngine(in_flight=0)
    assert err.value.field == "in_flight"
