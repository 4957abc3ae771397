"""Memoized noise without a per-value table (DESIGN 4 and 5, docs/privacy.md).

The noise behind a report's permanent bits is never stored: it is re-derived
from the client secret, keyed on the metric, the *window* and the value
(:func:`noise_key`). Within a window the same value always gives the same
permanent bits, and a round relaxes them lazily (RAPPOR's permanent
randomized response, made relaxable); different windows and different values
get independent noise. Keying on the value alone, as RAPPOR does, would send
identical bits on every day with an equal value: the equality of two days
then leaks which days differ (an infinite loss without IRR; docs/privacy.md).

* Step 0: ``V_0 = randomizer(l_0).draw_noise(m, KeyedRandom(secret, metric, key, 0))``.
* Step ``s >= 1`` (a relaxation from ``l_{s-1}`` to ``l_s``, gradual-release
  paper Sec. 3, Algorithm 1; the exponential step for the asymmetric mode):
  ``V_s = randomizer(l_{s-1}).relax_noise(V_{s-1}, l_s, KeyedRandom(..., s))``.
  Jumping several levels at once is one step (Markov property), so the chain
  follows the list of levels the client actually used.
* Permanent bits: ``[b + V_s > 1/2]``; the IRR on top is fresh per report.
* ``key = noise_key(window, canonical_value(value))``; ``levels`` is the
  chain of the window's releases (``levels[0]`` the window's first report).

Nothing in this module leaves the device; none of it is logged.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from protocol.encodings import Value, canonical_value
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.rng import FloatArray, KeyedRandom, RandomSource

BoolArray = npt.NDArray[np.bool_]

FINGERPRINT_LABEL = b"onesided/fingerprint/v1"
SECRET_BYTES = 32


def check_secret(secret: bytes) -> None:
    """The client secret is exactly 32 bytes."""
    if not isinstance(secret, bytes) or len(secret) != SECRET_BYTES:
        raise ParameterError("secret", f"must be {SECRET_BYTES} bytes")


def _check_levels(levels: Sequence[float]) -> None:
    if not levels:
        raise ParameterError("levels", "must hold at least the initial level")
    for i in range(1, len(levels)):
        if not levels[i] > levels[i - 1]:
            raise ParameterError("levels", f"must be strictly increasing, got {list(levels)}")


def noise_key(window: int, value_key: bytes) -> bytes:
    """The memoization key of a value in a window: ``b"W" || uint64_be(window) || value_key``.

    Args:
        window: the window's start in seconds (:func:`protocol.wire.window_start`).
        value_key: :func:`protocol.encodings.canonical_value` of the value or set.
    """
    if isinstance(window, bool) or not isinstance(window, int) or not 0 <= window < 2**64:
        raise ParameterError("window", f"must be an integer in [0, 2^64), got {window!r}")
    return b"W" + struct.pack(">Q", window) + value_key


def memoized_noise(
    secret: bytes, params: MetricParams, value_key: bytes, levels: Sequence[float]
) -> FloatArray:
    """The memoized noise ``V_s`` of one value after the relaxations in ``levels``.

    Args:
        secret: the client's 32-byte secret.
        params: the metric.
        value_key: :func:`noise_key` of the window and the value or set.
        levels: the window's chain of levels, ``levels[0]`` the first draw.

    Returns:
        ``num_bits`` noise values at ``levels[-1]`` (zeros in the trusted mode).
    """
    check_secret(secret)
    _check_levels(levels)
    shape = params.num_bits
    noise = params.randomizer(levels[0]).draw_noise(
        shape, KeyedRandom.for_value(secret, params.name, value_key, 0)
    )
    for step in range(1, len(levels)):
        stream = KeyedRandom.for_value(secret, params.name, value_key, step)
        noise = params.randomizer(levels[step - 1]).relax_noise(noise, levels[step], stream)
    return noise


def permanent_bits(
    secret: bytes, params: MetricParams, bits: npt.ArrayLike, value_key: bytes, levels: Sequence[float]
) -> BoolArray:
    """The memoized bits ``[b + V_s > 1/2]`` of a value's encoded ``bits``: never sent as they are.

    Args:
        secret: the client's 32-byte secret.
        params: the metric.
        bits: ``params.encode(value_or_set, cohort)``.
        value_key: :func:`noise_key` of the window and the same value or set.
        levels: the window's chain of levels.
    """
    noise = memoized_noise(secret, params, value_key, levels)
    return params.randomizer(levels[-1]).permanent(bits, noise)


def report_bits(
    secret: bytes,
    params: MetricParams,
    value_or_set: Value | Iterable[Value],
    *,
    cohort: int,
    window: int,
    levels: Sequence[float],
    rng: RandomSource,
) -> BoolArray:
    """Everything the client does to a value before sealing: encode, memoized noise, fresh IRR.

    The bits of one report of ``value_or_set`` in ``window`` after the
    window's chain ``levels``; ``rng`` feeds the IRR only. The client's
    :meth:`~client_sdk.Client.report` and the auditor's client path both
    call this one function.
    """
    bits = params.encode(value_or_set, cohort)
    key = noise_key(window, canonical_value(value_or_set))
    permanent = permanent_bits(secret, params, bits, key, levels)
    return params.randomizer(levels[-1]).instantaneous(permanent, rng)


def value_fingerprint(secret: bytes, metric: str, value_key: bytes) -> str:
    """A keyed fingerprint to count distinct values without storing them.

    ``hex(HMAC-SHA256(secret, "onesided/fingerprint/v1" || len32(metric) ||
    metric || len32(value_key) || value_key)[:16])``. Without the secret it
    tells nothing about the value; it stays in the encrypted state.
    """
    check_secret(secret)
    name = metric.encode("utf-8")
    msg = FINGERPRINT_LABEL + struct.pack(">I", len(name)) + name + struct.pack(">I", len(value_key)) + value_key
    return hmac.new(secret, msg, hashlib.sha256).digest()[:16].hex()


__all__ = ["check_secret", "memoized_noise", "noise_key", "permanent_bits", "report_bits", "value_fingerprint"]
