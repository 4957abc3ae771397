"""The server's one helper-process pool: its limits, errors that cross it, and a dead helper replaced."""

from __future__ import annotations

import os
import signal

import pytest

from aggregator.server.helper_pool import MAX_PROCESSES, HelperPool
from aggregator.server.services.offload import Offloader
from protocol.errors import ParameterError
from protocol.validation import check_int


@pytest.mark.parametrize("bad", [-1, MAX_PROCESSES + 1, True, 1.5, "2"])
def test_the_number_of_helpers_is_checked_and_the_setting_named(bad: object) -> None:
    with pytest.raises(ParameterError) as info:
        HelperPool("decode_processes", bad)  # type: ignore[arg-type]
    assert info.value.field == "decode_processes"


def test_without_helpers_nothing_starts() -> None:
    pool = HelperPool("decrypt_processes", 0)
    assert not pool.enabled
    assert Offloader(processes=0).run(os.getpid) == os.getpid()  # in place
    pool.close()  # nothing to stop


def test_a_parameter_error_comes_back_with_its_field_and_a_dead_helper_is_replaced() -> None:
    offloader = Offloader(processes=1)
    try:
        with pytest.raises(ParameterError) as info:
            offloader.run(check_int, "threshold", "x")
        assert info.value.field == "threshold" and "integer" in info.value.detail
        helper = offloader.run(os.getpid)
        assert helper != os.getpid()
        os.kill(helper, signal.SIGKILL)
        assert offloader.run(os.getpid) == os.getpid()  # the pool broke: this call ran in place
        again = offloader.run(os.getpid)
        assert again not in (helper, os.getpid())  # and the next one in a new helper
    finally:
        offloader.close()
