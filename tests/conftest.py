"""Shared fixtures, and the test layers.

``pytest -m fast`` runs the unit layer: the doctests of the packages and the
test modules of :data:`UNIT_MODULES` (pure functions and the client against a
fake transport: no server, database, browser, subprocess or long simulation),
less any test marked ``slow`` (:data:`LONG_UNIT_TESTS` are). The plain ``pytest`` (what CI runs) runs every
layer. A new module joins the fast layer only when listed here, so the layer
stays fast as the suite grows.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from protocol.rng import SeededRandom

UNIT_MODULES: frozenset[str] = frozenset({
    "test_accounting.py", "test_arrays.py", "test_bernoulli.py", "test_central.py", "test_central_certificate.py",
    "test_central_errata.py", "test_central_grid.py", "test_certificates.py", "test_client_budget.py",
    "test_client_fast.py", "test_client_guest.py", "test_client_ledger.py", "test_client_memo.py",
    "test_client_offline.py", "test_client_options.py", "test_client_rounds.py", "test_client_sign_rotation.py",
    "test_client_state.py", "test_client_sync.py", "test_client_transport.py", "test_client_year.py",
    "test_counting.py", "test_crypto.py", "test_decoding.py", "test_encodings.py", "test_irr_enclosure.py",
    "test_layers.py",
    "test_irr_relaxation.py", "test_laplace_bits.py", "test_local_mechanisms.py", "test_opener_dates.py",
    "test_privacy_history.py", "test_privacy_neighbours.py", "test_privacy_shared_limits.py",
    "test_randomizers.py", "test_rappor_io.py", "test_relaxation.py", "test_relaxation_chains.py",
    "test_report_pipeline.py", "test_rng.py", "test_vectors.py", "test_wire.py", "test_wire_fast.py",
    "test_key_pool.py", "test_seal_cost.py", "test_exact_stream.py", "test_client_queue_form.py", "test_device_cost.py",
    "test_kernels.py", "test_highwater_marks.py",
})
# The longest tests of those modules (2 to 11 CPU-seconds each, measured): in the slow layer.
LONG_UNIT_TESTS: frozenset[str] = frozenset({
    "test_salap_bottoms_are_never_wrong_and_the_prefix_law_matches",
    "test_the_report_plan_equals_the_vectorized_path_bit_for_bit",
    "test_scalar_path_equals_the_vectorized_path_bit_for_bit",
    "test_the_ledger_check_without_a_prior_is_the_rounded_formula",
    "test_long_chains_are_consistent_with_every_sub_chain",
    "test_a_year_in_the_field",
    "test_the_exact_computation_agrees_with_sampling",
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the unit layer ``fast``: doctests and the tests of :data:`UNIT_MODULES` not marked ``slow``."""
    for item in items:
        path = Path(str(item.fspath))
        unit = path.name in UNIT_MODULES or not path.name.startswith("test_")  # a package module's doctests
        if getattr(item, "originalname", item.name) in LONG_UNIT_TESTS:
            item.add_marker(pytest.mark.slow)
        if unit and item.get_closest_marker("slow") is None and item.get_closest_marker("postgres") is None:
            item.add_marker(pytest.mark.fast)


@pytest.fixture
def rng() -> SeededRandom:
    return SeededRandom(20261122)


MEMORY_TMP = Path("/dev/shm")
MEMORY_TMP_FREE = 4 << 30  # bytes free it needs
TMP_SETTING = "ONESIDED_TEST_TMP"  # "disk": pytest's own temporary folder


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """``tmp_path`` in memory where the machine has a tmpfs with room (/dev/shm, 4 GiB free): the suite writes
    tens of thousands of small files (the field tests' app states, SQLite databases), which a disk makes about
    8% of its time. Durability is tested by counting fsyncs and by simulated crashes, never by the disk itself.
    ``ONESIDED_TEST_TMP=disk`` or ``--basetemp`` keeps them on disk; the folder is removed at the end."""
    if config.option.basetemp or os.environ.get(TMP_SETTING, "").strip().lower() == "disk":
        return
    try:
        if shutil.disk_usage(MEMORY_TMP).free < MEMORY_TMP_FREE or not os.access(MEMORY_TMP, os.W_OK):
            return
        base = tempfile.mkdtemp(prefix="onesided-tests-", dir=MEMORY_TMP)
    except OSError:
        return
    config.option.basetemp = base
    config.stash[_MEMORY_BASE] = base


_MEMORY_BASE = pytest.StashKey[str]()


def pytest_unconfigure(config: pytest.Config) -> None:
    base = config.stash.get(_MEMORY_BASE, None)
    if base is not None:
        shutil.rmtree(base, ignore_errors=True)
