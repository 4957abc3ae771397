"""One randomness interface, injected everywhere.

Three sources implement :class:`RandomSource`:

* :class:`SecureRandom` (the default wherever ``rng=None``): bytes from
  ``os.urandom``; a bulk request (:data:`BULK_BYTES` or more) is a ChaCha20
  keystream under a fresh 256-bit key from ``os.urandom`` (no state kept, so
  nothing is shared across ``fork``).
* :class:`SeededRandom`: a seeded NumPy ``Generator`` (PCG64) for tests and
  simulations. It is never the global ``np.random`` state.
* :class:`KeyedRandom`: deterministic uniforms derived from a client secret,
  for memoized noise (RAPPOR's permanent randomized response).

Every source's uniforms lie on an evenly spaced grid of at least 2**48
points (``k / 2**52 + 2**-53`` for the word mapping, ``k / 2**53`` for the
seeded stream): :mod:`protocol.central` turns them back into exact random
integers and relies on it. Keep it so when adding a source.

All samplers (exponential, Laplace, geometric, Bernoulli) are written once,
on top of :meth:`RandomSource.uniform`, by inversion. Every sampler draws a
fixed number of uniforms per output element, whatever the values, so a keyed
stream is reproducible by a port in another language.

:meth:`RandomSource.random_bytes` feeds the exact Bernoulli sampler
(:func:`protocol.exact.bernoulli_choose`) used by the simulation paths; the
default cuts 6 bytes from each uniform (exact on the grid above).

Uniform doubles are made from 64-bit words ``w`` as ``((w >> 12) + 0.5) / 2**52``:
52 random bits, strictly inside (0, 1) and exactly representable (the largest
is ``1 - 2**-53``), so ``log(u)`` and ``log(1 - u)`` are always finite.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from abc import ABC, abstractmethod
from typing import Any

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from .errors import ParameterError

FloatArray = npt.NDArray[np.float64]
ByteArray = npt.NDArray[np.uint8]
Shape = int | tuple[int, ...]

_TWO52 = float(2**52)
_TINY = 2.0**-54
_BYTES_PER_UNIFORM = 6  # floor(u * 2**48): 48 exact random bits from any source's uniform
BULK_BYTES = 1 << 16
"""Requests of at least this many bytes come from a ChaCha20 keystream keyed by ``os.urandom(32)``."""


def words_to_uniforms(words: npt.NDArray[np.uint64]) -> FloatArray:
    """Map 64-bit words to doubles strictly inside (0, 1): ``((w >> 12) + 0.5) / 2**52``."""
    return ((words >> np.uint64(12)).astype(np.float64) + 0.5) / _TWO52


def _size_of(shape: Shape) -> int:
    return int(np.prod(shape)) if isinstance(shape, tuple) else int(shape)


class RandomSource(ABC):
    """Uniforms in (0, 1) plus the samplers built on them by inversion."""

    @abstractmethod
    def uniform(self, shape: Shape) -> FloatArray:
        """Independent uniforms strictly inside (0, 1)."""

    def exponential(self, rate: float | FloatArray, shape: Shape) -> FloatArray:
        """Exponential with the given rate (mean ``1/rate``): ``-log(u) / rate``."""
        return -np.log(self.uniform(shape)) / rate

    def laplace(self, rate: float | FloatArray, shape: Shape) -> FloatArray:
        """Laplace(0, 1/rate), density ``rate/2 * exp(-rate |x|)``.

        Inversion with one uniform: ``-sign(u - 1/2) log(1 - 2|u - 1/2|) / rate``.
        """
        u = self.uniform(shape) - 0.5
        return -np.sign(u) * np.log1p(-2.0 * np.abs(u)) / rate

    def geometric(self, rate: float | FloatArray, shape: Shape) -> npt.NDArray[np.int64]:
        """One-sided geometric on {0, 1, ...} with ``P(G >= n) = exp(-rate n)``.

        ``floor(-log(u) / rate)``: used for memoized noise and simulations.
        Published integers on the central side use the exact integer
        samplers of :mod:`protocol.central` instead.
        """
        return np.floor(-np.log(self.uniform(shape)) / rate).astype(np.int64)

    def bernoulli(self, p: float | FloatArray, shape: Shape) -> npt.NDArray[np.bool_]:
        """True with probability ``p``: ``u < p``."""
        return self.uniform(shape) < p

    def random_bytes(self, n: int) -> ByteArray:
        """``n`` independent uniform bytes.

        This default cuts 6 bytes from each uniform, ``floor(u * 2**48)``: exact
        because every source's uniforms lie on a dyadic grid of at least
        ``2**48`` points (module docstring), so each cell of width ``2**-48``
        holds the same number of them. Sources with a raw byte stream override it.
        """
        words = np.floor(self.uniform(-(-n // _BYTES_PER_UNIFORM)) * 2.0**48).astype("<u8")
        return words.view(np.uint8).reshape(-1, 8)[:, :_BYTES_PER_UNIFORM].reshape(-1)[:n]

    def integers(self, high: int, shape: Shape) -> npt.NDArray[np.int64]:
        """Uniform integers in ``[0, high)`` (``floor(u * high)``)."""
        if high < 1:
            raise ParameterError("high", f"must be >= 1, got {high}")
        return np.minimum(np.floor(self.uniform(shape) * high), high - 1).astype(np.int64)


def os_random_bytes(n: int) -> bytes:
    """``n`` bytes from the OS CSPRNG: ``os.urandom``, or for a bulk request a ChaCha20 keystream.

    ``os.urandom`` runs at ~150 MB/s here, ChaCha20 (OpenSSL) at several GB/s.
    A bulk request (``n >= BULK_BYTES``) is the keystream of ChaCha20 under a
    fresh key ``os.urandom(32)`` (zero nonce and counter: the key is used for
    this request only, at most 2**38 bytes): the same construction as the
    kernel's own generator, seeded by it, and stateless, so a forked process
    never repeats its parent's bytes.
    """
    if n < BULK_BYTES:
        return os.urandom(n)
    encryptor = Cipher(algorithms.ChaCha20(os.urandom(32), bytes(16)), mode=None).encryptor()
    return encryptor.update(bytes(n))


_UNIFORM_CHUNK = 1 << 17  # words a chunk of a bulk request: 1 MiB, in cache, memory flat


class SecureRandom(RandomSource):
    """Uniforms and bytes from the operating system's CSPRNG (:func:`os_random_bytes`)."""

    def uniform(self, shape: Shape) -> FloatArray:
        n = _size_of(shape)
        if 8 * n < BULK_BYTES:
            return words_to_uniforms(np.frombuffer(os.urandom(8 * n), dtype="<u8")).reshape(shape)
        # A bulk request: the keystream of one ChaCha20 key from os.urandom (as os_random_bytes),
        # written chunk by chunk into one buffer and mapped in place (words_to_uniforms' formula):
        # no n-sized temporaries, 2-3x faster than mapping the whole keystream at once.
        encryptor = Cipher(algorithms.ChaCha20(os.urandom(32), bytes(16)), mode=None).encryptor()
        # buffers of one chunk at most, no larger than the request: a device's IRR block (~100 KB) would
        # otherwise pay for touching 2 MiB of fresh pages (0.64 against 0.1 ms for 100 x 128 uniforms)
        chunk_words = min(_UNIFORM_CHUNK, n)
        zeros = memoryview(bytes(8 * chunk_words))
        keystream = bytearray(8 * chunk_words)
        words = np.frombuffer(keystream, dtype="<u8")
        out = np.empty(n, dtype=np.float64)
        for start in range(0, n, chunk_words):
            m = min(chunk_words, n - start)
            encryptor.update_into(zeros[: 8 * m], keystream)
            np.right_shift(words[:m], np.uint64(12), out=words[:m])
            chunk = out[start : start + m]
            chunk[...] = words[:m]  # < 2**52: exact as a double
            chunk += 0.5
            chunk /= _TWO52
        return out.reshape(shape)

    def random_bytes(self, n: int) -> ByteArray:
        return np.frombuffer(os_random_bytes(n), dtype=np.uint8)


class SeededRandom(RandomSource):
    """A seeded PCG64 stream, for tests and simulations (never for real clients)."""

    def __init__(self, seed: int | np.random.SeedSequence) -> None:
        self.generator = np.random.Generator(np.random.PCG64(seed))

    def uniform(self, shape: Shape) -> FloatArray:
        # NumPy's 53-bit doubles in [0, 1); the one value 0.0 is moved to 2**-54 so
        # the interval is open (simulation speed matters here, portability does not).
        u = self.generator.random(shape)
        return np.maximum(u, _TINY, out=u)

    def random_bytes(self, n: int) -> ByteArray:
        """The raw PCG64 output as little-endian bytes (reproducible: same seed, same bytes)."""
        words = self.generator.bit_generator.random_raw(-(-n // 8)).astype("<u8", copy=False)
        return words.view(np.uint8)[:n]

    def spawn(self, n: int) -> list[SeededRandom]:
        """``n`` independent child streams (for parallel simulations)."""
        return [SeededRandom(s) for s in self.generator.bit_generator.seed_seq.spawn(n)]  # type: ignore[attr-defined]


_U32 = struct.Struct(">I").pack


def _field(data: bytes) -> bytes:
    return _U32(len(data)) + data


NOISE_LABEL = b"onesided/noise/v1"
_SHA256_BLOCK = 64


def noise_prefix(metric: str) -> bytes:
    """The start of :func:`noise_message` that depends on the metric only."""
    return NOISE_LABEL + _field(metric.encode("utf-8"))


def noise_suffix(canonical_value: bytes, step: int) -> bytes:
    """The rest of :func:`noise_message`: ``len32(value) || value || u32be(step)``."""
    if step < 0:
        raise ParameterError("step", f"must be >= 0, got {step}")
    return _U32(len(canonical_value)) + canonical_value + _U32(step)


def noise_message(metric: str, canonical_value: bytes, step: int) -> bytes:
    """The message :func:`noise_seed` authenticates (the secret is the HMAC key)."""
    return noise_prefix(metric) + noise_suffix(canonical_value, step)


def noise_seed(secret: bytes, metric: str, canonical_value: bytes, step: int) -> bytes:
    """The 32-byte seed of one memoized-noise stream.

    ``HMAC-SHA256(secret, b"onesided/noise/v1" || len32(metric) || metric ||
    len32(value) || value || uint32_be(step))`` with ``len32`` a 4-byte
    big-endian length. ``step`` 0 is the first draw; step ``s`` feeds the
    ``s``-th relaxation.
    """
    return hmac.digest(secret, noise_message(metric, canonical_value, step), "sha256")


class KeyedHmac:
    """HMAC-SHA256 under one key (RFC 2104) with the key schedule, and optionally a message prefix, done once.

    ``KeyedHmac(key).digest(msg) == hmac.digest(key, msg, "sha256")`` and
    ``KeyedHmac(key, prefix).digest(msg)`` is the HMAC of ``prefix || msg``:
    the inner hash is kept after ``(key ^ ipad) || prefix`` and copied per
    message, so a client's per-report noise seed hashes only the part that
    changes. The same function, not a variant of it.
    """

    def __init__(self, key: bytes, prefix: bytes = b"") -> None:
        if len(key) > _SHA256_BLOCK:
            key = hashlib.sha256(key).digest()
        block = key.ljust(_SHA256_BLOCK, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))
        self._inner.update(prefix)
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))

    def extended(self, prefix: bytes) -> KeyedHmac:
        """The same key with ``prefix`` appended to the fixed part of the message."""
        out = object.__new__(KeyedHmac)
        out._inner = self._inner.copy()
        out._inner.update(prefix)
        out._outer = self._outer
        return out

    def digest(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


def keyed_stream(seed: bytes, num_words: int) -> bytes:
    """The first ``num_words`` 64-bit words of the keyed stream of ``seed``: ``SHAKE-256(seed)``, 8 bytes a word.

    Read as little-endian words (docs/wire.md 3). :class:`KeyedRandom` and the
    client's one-report path (:mod:`client_sdk.memo`) both read the stream here.
    """
    return hashlib.shake_256(seed).digest(8 * num_words)


class KeyedRandom(RandomSource):
    """Deterministic uniforms for memoized noise (docs/privacy.md).

    The stream is ``SHAKE-256(noise_seed(...))`` read as little-endian 64-bit
    words, each mapped by :func:`words_to_uniforms`. Bit ``j`` of a vector of
    ``m`` bits takes word ``d * m + j`` for its ``d``-th draw, because every
    sampler here draws its uniforms array by array. One HMAC per
    (metric, value, step) instead of one per bit keeps a report fast; the
    bit index enters through the position in the stream.
    """

    def __init__(self, seed: bytes) -> None:
        if len(seed) < 16:
            raise ParameterError("seed", f"must be at least 16 bytes, got {len(seed)}")
        self._seed = seed
        self._offset = 0
        self._buffer = b""

    @classmethod
    def for_value(cls, secret: bytes, metric: str, canonical_value: bytes, step: int) -> KeyedRandom:
        return cls(noise_seed(secret, metric, canonical_value, step))

    def uniform(self, shape: Shape) -> FloatArray:
        n = _size_of(shape)
        end = self._offset + 8 * n
        if end > len(self._buffer):
            self._buffer = keyed_stream(self._seed, max(end, 2 * len(self._buffer), 1024) // 8)
        chunk = self._buffer[self._offset : end]
        self._offset = end
        return words_to_uniforms(np.frombuffer(chunk, dtype="<u8")).reshape(shape)


def as_rng(rng: RandomSource | int | None) -> RandomSource:
    """``None`` -> :class:`SecureRandom`; an ``int`` -> :class:`SeededRandom`; a source as is."""
    if rng is None:
        return SecureRandom()
    if isinstance(rng, RandomSource):
        return rng
    if isinstance(rng, int | np.integer) and not isinstance(rng, bool):
        return SeededRandom(int(rng))
    raise ParameterError("rng", f"must be a RandomSource, an int seed or None, got {type(rng).__name__}")


__all__: list[Any] = [
    "BULK_BYTES",
    "ByteArray",
    "FloatArray",
    "KeyedHmac",
    "KeyedRandom",
    "RandomSource",
    "SecureRandom",
    "SeededRandom",
    "NOISE_LABEL",
    "as_rng",
    "keyed_stream",
    "noise_message",
    "noise_prefix",
    "noise_seed",
    "noise_suffix",
    "os_random_bytes",
    "words_to_uniforms",
]
