"""Encodings of a value, or a set of values, as a bit vector.

* :class:`BloomEncoding` (RAPPOR): ``num_bits`` bits, ``num_hashes`` hash
  functions, ``num_cohorts`` cohorts. Two index derivations:

  - ``"mmh3"`` (ours): bit ``i`` (``0 <= i < num_hashes``) of value ``v`` in
    cohort ``c`` is ``murmur3_x86_32(v, seed=c * num_hashes + i) mod num_bits``,
    the hash read as an unsigned 32-bit integer and ``v`` as UTF-8 bytes.
  - ``"rappor-md5"`` (interop with Google's reference client): with
    ``d = md5(uint32_be(c) || v)``, bit ``i`` is ``d[i] mod num_bits``
    (so ``num_hashes <= 16``).

* :class:`DirectEncoding` (unary): one bit per item of a declared domain,
  one cohort.

* :class:`PrefixEncoding` (unknown-dictionary discovery, PEM-style): cohort
  ``c`` encodes only the first ``lengths[c]`` bytes of the value, followed
  by an end byte ``0x00`` when the value is shorter (:func:`prefix_of`), as
  an ``"mmh3"`` Bloom filter of cohort ``c``. A client's cohort is its
  group: it reports one prefix, of its group's length
  (docs/decoding.md, "Discovery").

A *set* of values (the places visited today) is encoded as the OR of its
members' vectors.

>>> bloom_bits("home", 0, num_bits=16, num_hashes=2, hashing="rappor-md5")
[10, 7]
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import mmh3
import numpy as np
import numpy.typing as npt

from .errors import ParameterError
from .validation import check_int

Hashing = Literal["mmh3", "rappor-md5"]
HASHINGS: tuple[str, ...] = ("mmh3", "rappor-md5")
BoolArray = npt.NDArray[np.bool_]
Value = str | bytes
_ONE_MEMBER = b"S" + struct.pack(">I", 1)


def value_bytes(value: Value, field_name: str = "value") -> bytes:
    """A value as bytes: ``str`` is UTF-8, ``bytes`` are taken as they are."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise ParameterError(field_name, f"must be str or bytes, got {type(value).__name__}")


def bloom_bits(
    value: Value,
    cohort: int,
    *,
    num_bits: int,
    num_hashes: int,
    hashing: Hashing = "mmh3",
) -> list[int]:
    """Bit indices of ``value`` in ``cohort`` (the module docstring gives the derivation).

    Args:
        value: the value; ``str`` is hashed as UTF-8.
        cohort: the cohort, ``>= 0``.
        num_bits: the filter size ``m``.
        num_hashes: how many indices ``k``.
        hashing: ``"mmh3"`` or ``"rappor-md5"``.

    Returns:
        ``num_hashes`` indices in ``[0, num_bits)`` (repeats are possible).
    """
    data = value_bytes(value)
    check_int("cohort", cohort, low=0, high=2**32 - 1)
    check_int("num_bits", num_bits, low=1, high=2**20)
    check_int("num_hashes", num_hashes, low=1, high=64)
    if hashing not in HASHINGS:
        raise ParameterError("hashing", f"must be one of {HASHINGS}, got {hashing!r}")
    if hashing == "rappor-md5" and num_hashes > 16:
        raise ParameterError("num_hashes", f"must be <= 16 for rappor-md5, got {num_hashes}")
    return _bloom_indexer(cohort, num_bits, num_hashes, hashing)(data)


def _bloom_indexer(cohort: int, num_bits: int, num_hashes: int, hashing: str) -> Callable[[bytes], list[int]]:
    """The derivation of :func:`bloom_bits` for one cohort, arguments already checked: bytes -> indices."""
    if hashing == "mmh3":
        seeds = range(cohort * num_hashes, (cohort + 1) * num_hashes)
        hash32 = mmh3.hash
        return lambda data: [hash32(data, seed, signed=False) % num_bits for seed in seeds]
    prefix = struct.pack(">I", cohort)
    md5 = hashlib.md5
    hashes = range(num_hashes)

    def indices(data: bytes) -> list[int]:
        digest = md5(prefix + data).digest()
        return [digest[i] % num_bits for i in hashes]

    return indices


def canonical_value(value_or_set: Value | Iterable[Value]) -> bytes:
    """Canonical bytes of a value or a set, the key of its memoized noise.

    A single value is the set of one. The encoding is ``b"S"``, the member
    count as uint32_be, then the distinct members sorted bytewise, each as
    uint32_be length || bytes. The same set always gives the same bytes.
    """
    if isinstance(value_or_set, str | bytes):  # a set of one, without building it
        data = value_bytes(value_or_set)
        return _ONE_MEMBER + struct.pack(">I", len(data)) + data
    members = sorted(set(as_members(value_or_set)))
    out = [b"S", struct.pack(">I", len(members))]
    for m in members:
        out.append(struct.pack(">I", len(m)) + m)
    return b"".join(out)


def members_of_canonical(key: bytes) -> list[bytes]:
    """The members of a :func:`canonical_value` (its inverse, up to order and repeats).

    Raises:
        ParameterError: ``key`` is not a canonical value.
    """
    if not key.startswith(b"S") or len(key) < 5:
        raise ParameterError("value", "is not a canonical value")
    (count,) = struct.unpack(">I", key[1:5])
    members, at = [], 5
    for _ in range(count):
        if at + 4 > len(key):
            raise ParameterError("value", "is not a canonical value (truncated)")
        (size,) = struct.unpack(">I", key[at : at + 4])
        members.append(key[at + 4 : at + 4 + size])
        at += 4 + size
    if at != len(key):
        raise ParameterError("value", "is not a canonical value (trailing bytes)")
    return members


def as_members(value_or_set: Value | Iterable[Value]) -> list[bytes]:
    """The members of a value or a set, as bytes."""
    if isinstance(value_or_set, str | bytes):
        return [value_bytes(value_or_set)]
    if isinstance(value_or_set, Iterable):
        return [value_bytes(v, "value") for v in value_or_set]
    raise ParameterError("value", f"must be str, bytes or a set of them, got {type(value_or_set).__name__}")


def _members_vector(num_bits: int, indices: Callable[[bytes], list[int]],
                    value_or_set: Value | Iterable[Value]) -> BoolArray:
    """The OR of the members' bits (``indices`` of a member, in one cohort) as a bool vector of ``num_bits``."""
    out = np.zeros(num_bits, dtype=bool)
    for member in as_members(value_or_set):
        out[indices(member)] = True
    return out


@dataclass(frozen=True, kw_only=True)
class BloomEncoding:
    """RAPPOR Bloom filter: ``num_bits`` x ``num_hashes`` x ``num_cohorts``."""

    num_bits: int
    num_hashes: int
    num_cohorts: int
    hashing: Hashing = "mmh3"
    kind: str = field(default="bloom", init=False)

    def __post_init__(self) -> None:
        check_int("num_bits", self.num_bits, low=1, high=4096)
        check_int("num_hashes", self.num_hashes, low=1, high=64)
        check_int("num_cohorts", self.num_cohorts, low=1, high=2**16)
        if self.num_hashes > self.num_bits:
            raise ParameterError("num_hashes", f"must be <= num_bits ({self.num_bits}), got {self.num_hashes}")
        if self.hashing not in HASHINGS:
            raise ParameterError("hashing", f"must be one of {HASHINGS}, got {self.hashing!r}")
        if self.hashing == "rappor-md5" and self.num_hashes > 16:
            raise ParameterError("num_hashes", f"must be <= 16 for rappor-md5, got {self.num_hashes}")

    def bits_of(self, value: Value, cohort: int) -> list[int]:
        """Indices of one value in one cohort."""
        self.check_cohort(cohort)
        return bloom_bits(value, cohort, num_bits=self.num_bits, num_hashes=self.num_hashes, hashing=self.hashing)

    def check_cohort(self, cohort: int) -> None:
        check_int("cohort", cohort, low=0, high=self.num_cohorts - 1)

    def indexer(self, cohort: int) -> Callable[[bytes], list[int]]:
        """:meth:`bits_of` in ``cohort`` for a member given as bytes, with the cohort checked once.

        The client's one-report path takes it once per metric (the same derivation).
        """
        self.check_cohort(cohort)
        return _bloom_indexer(cohort, self.num_bits, self.num_hashes, self.hashing)

    def encode(self, value_or_set: Value | Iterable[Value], cohort: int) -> BoolArray:
        """The OR of the members' filters, as a bool vector of ``num_bits``."""
        return _members_vector(self.num_bits, lambda member: self.bits_of(member, cohort), value_or_set)

    def bit_table(self, values: Sequence[Value]) -> npt.NDArray[np.int64]:
        """Indices of every value in every cohort: shape ``(num_cohorts, len(values), num_hashes)``.

        The vectorized simulation path encodes millions of clients with it.
        """
        data = [value_bytes(v) for v in values]
        k, m = self.num_hashes, self.num_bits
        table = np.empty((self.num_cohorts, len(values), k), dtype=np.int64)
        if not data:
            return table
        if self.hashing == "mmh3":  # the derivation of bloom_bits, without re-validating per call
            hash32 = mmh3.hash
            for c in range(self.num_cohorts):
                table[c] = [[hash32(d, c * k + i, signed=False) % m for i in range(k)] for d in data]
            return table
        for c in range(self.num_cohorts):
            prefix = struct.pack(">I", c)
            table[c] = [[digest[i] % m for i in range(k)] for digest in (hashlib.md5(prefix + d).digest() for d in data)]
        return table

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "bloom",
            "num_bits": self.num_bits,
            "num_hashes": self.num_hashes,
            "num_cohorts": self.num_cohorts,
            "hashing": self.hashing,
        }


@dataclass(frozen=True, kw_only=True)
class DirectEncoding:
    """Unary encoding over a declared finite domain: one bit per item, one cohort."""

    domain: tuple[str, ...]
    kind: str = field(default="direct", init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.domain, tuple) or not self.domain:
            raise ParameterError("domain", "must be a non-empty tuple of strings")
        if not all(isinstance(d, str) for d in self.domain):
            raise ParameterError("domain", "must contain only strings")
        if len(set(self.domain)) != len(self.domain):
            raise ParameterError("domain", "must not contain duplicates")
        if len(self.domain) > 4096:
            raise ParameterError("domain", f"must have at most 4096 items, got {len(self.domain)}")
        object.__setattr__(self, "_index", {d.encode("utf-8"): i for i, d in enumerate(self.domain)})

    @property
    def num_bits(self) -> int:
        return len(self.domain)

    @property
    def num_hashes(self) -> int:
        return 1

    @property
    def num_cohorts(self) -> int:
        return 1

    def check_cohort(self, cohort: int) -> None:
        check_int("cohort", cohort, low=0, high=0)

    def bits_of(self, value: Value, cohort: int = 0) -> list[int]:
        return self.indexer(cohort)(value_bytes(value))

    def indexer(self, cohort: int = 0) -> Callable[[bytes], list[int]]:
        """:meth:`bits_of` for a member given as bytes, with the cohort checked once."""
        self.check_cohort(cohort)
        index: dict[bytes, int] = self._index  # type: ignore[attr-defined]

        def indices(key: bytes) -> list[int]:
            position = index.get(key)
            if position is None:
                raise ParameterError("value", f"{key!r} is not in the declared domain")
            return [position]

        return indices

    def encode(self, value_or_set: Value | Iterable[Value], cohort: int = 0) -> BoolArray:
        return _members_vector(self.num_bits, lambda member: self.bits_of(member, cohort), value_or_set)

    def bit_table(self, values: Sequence[Value]) -> npt.NDArray[np.int64]:
        return np.array([[self.bits_of(v) for v in values]], dtype=np.int64)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "direct", "domain": list(self.domain)}


PREFIX_END = b"\x00"  # appended to a value before cutting: a complete value's prefix ends with it


def prefix_of(value: Value, length: int) -> bytes:
    """The first ``length`` bytes of ``value + 0x00`` (UTF-8): what a prefix cohort encodes.

    A value of fewer than ``length`` bytes keeps its end byte, so a complete
    value is told apart from the prefix of a longer one.

    >>> prefix_of("home", 2), prefix_of("home", 8)
    (b'ho', b'home\\x00')

    Raises:
        ParameterError: the value holds the end byte (field ``value``).
    """
    data = value_bytes(value)
    if PREFIX_END in data:
        raise ParameterError("value", "must not contain the byte 0x00 (the prefix encoding's end marker)")
    return (data + PREFIX_END)[:length]


@dataclass(frozen=True, kw_only=True)
class PrefixEncoding:
    """Bloom filters of prefixes: cohort ``c`` encodes :func:`prefix_of` ``(value, lengths[c])``.

    Bit ``i`` of prefix ``x`` in cohort ``c`` is ``murmur3_x86_32(x, seed=c * num_hashes + i)
    mod num_bits`` (the ``"mmh3"`` derivation of :func:`bloom_bits`, on the prefix's bytes).
    Several cohorts may share a length: their different hash seeds separate colliding prefixes.
    """

    num_bits: int
    num_hashes: int
    lengths: tuple[int, ...]
    kind: str = field(default="prefix", init=False)

    def __post_init__(self) -> None:
        check_int("num_bits", self.num_bits, low=1, high=4096)
        check_int("num_hashes", self.num_hashes, low=1, high=64)
        if self.num_hashes > self.num_bits:
            raise ParameterError("num_hashes", f"must be <= num_bits ({self.num_bits}), got {self.num_hashes}")
        if not isinstance(self.lengths, tuple) or not 1 <= len(self.lengths) <= 2**16:
            raise ParameterError("lengths", "must be a tuple of 1 to 65536 prefix lengths (one per cohort)")
        for length in self.lengths:
            check_int("lengths", length, low=1, high=1024)

    @property
    def num_cohorts(self) -> int:
        return len(self.lengths)

    def check_cohort(self, cohort: int) -> None:
        check_int("cohort", cohort, low=0, high=self.num_cohorts - 1)

    def prefix_bits(self, prefixes: Sequence[bytes], cohort: int) -> npt.NDArray[np.int64]:
        """Bit indices of already-cut prefixes in ``cohort``: shape ``(len(prefixes), num_hashes)``."""
        k, m, hash32 = self.num_hashes, self.num_bits, mmh3.hash
        out = np.empty((len(prefixes), k), dtype=np.int64)
        if prefixes:
            out[:] = [[hash32(x, cohort * k + i, signed=False) % m for i in range(k)] for x in prefixes]
        return out

    def bits_of(self, value: Value, cohort: int) -> list[int]:
        """Indices of one value's prefix in one cohort."""
        self.check_cohort(cohort)
        return [int(b) for b in self.prefix_bits([prefix_of(value, self.lengths[cohort])], cohort)[0]]

    def indexer(self, cohort: int) -> Callable[[bytes], list[int]]:
        """:meth:`bits_of` in ``cohort`` for a member given as bytes."""
        self.check_cohort(cohort)
        return lambda data: self.bits_of(data, cohort)

    def encode(self, value_or_set: Value | Iterable[Value], cohort: int) -> BoolArray:
        """The OR of the members' prefix filters, as a bool vector of ``num_bits``."""
        return _members_vector(self.num_bits, lambda member: self.bits_of(member, cohort), value_or_set)

    def bit_table(self, values: Sequence[Value]) -> npt.NDArray[np.int64]:
        """Indices of every value's prefix in every cohort: ``(num_cohorts, len(values), num_hashes)``."""
        data = [value_bytes(v) for v in values]
        table = np.empty((self.num_cohorts, len(data), self.num_hashes), dtype=np.int64)
        for c, length in enumerate(self.lengths):
            table[c] = self.prefix_bits([prefix_of(d, length) for d in data], c)
        return table

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "prefix", "num_bits": self.num_bits, "num_hashes": self.num_hashes,
                "lengths": list(self.lengths)}


Encoding = BloomEncoding | DirectEncoding | PrefixEncoding


def encoding_from_dict(data: dict[str, Any]) -> Encoding:
    """Inverse of ``to_dict``; errors name the field."""
    if not isinstance(data, dict):
        raise ParameterError("encoding", "must be an object")
    kind = data.get("kind")
    if kind == "bloom":
        extra = set(data) - {"kind", "num_bits", "num_hashes", "num_cohorts", "hashing"}
        if extra:
            raise ParameterError(f"encoding.{sorted(extra)[0]}", "is not a known field")
        for name in ("num_bits", "num_hashes", "num_cohorts"):
            if name not in data:
                raise ParameterError(f"encoding.{name}", "is required")
        return BloomEncoding(
            num_bits=data["num_bits"],
            num_hashes=data["num_hashes"],
            num_cohorts=data["num_cohorts"],
            hashing=data.get("hashing", "mmh3"),
        )
    if kind == "direct":
        domain = data.get("domain")
        if not isinstance(domain, list):
            raise ParameterError("encoding.domain", "must be a list of strings")
        return DirectEncoding(domain=tuple(domain))
    if kind == "prefix":
        return _prefix_from_dict(data)
    raise ParameterError("encoding.kind", f"must be 'bloom', 'direct' or 'prefix', got {kind!r}")


def _prefix_from_dict(data: dict[str, Any]) -> PrefixEncoding:
    extra = set(data) - {"kind", "num_bits", "num_hashes", "lengths"}
    if extra:
        raise ParameterError(f"encoding.{sorted(extra)[0]}", "is not a known field")
    for name in ("num_bits", "num_hashes", "lengths"):
        if name not in data:
            raise ParameterError(f"encoding.{name}", "is required")
    if not isinstance(data["lengths"], list):
        raise ParameterError("encoding.lengths", "must be a list of prefix lengths (one per cohort)")
    return PrefixEncoding(num_bits=data["num_bits"], num_hashes=data["num_hashes"], lengths=tuple(data["lengths"]))


def encode_population(
    encoding: Encoding,
    item_sets: Sequence[Sequence[int]] | npt.NDArray[np.int64],
    cohorts: npt.NDArray[np.int64],
    bit_table: npt.NDArray[np.int64],
) -> BoolArray:
    """Vectorized encoding of many clients for simulations.

    Args:
        encoding: the encoding.
        item_sets: per client, indices into the values behind ``bit_table``;
            either a ragged list or a 2-D array padded with ``-1``.
        cohorts: per client, its cohort.
        bit_table: from ``encoding.bit_table(values)``.

    Returns:
        ``(clients, num_bits)`` bools, identical to ``encoding.encode`` per client.
    """
    n = len(cohorts)
    out = np.zeros((n, encoding.num_bits), dtype=bool)
    if isinstance(item_sets, np.ndarray):
        padded = item_sets
    else:
        width = max((len(s) for s in item_sets), default=0)
        padded = np.full((n, max(width, 1)), -1, dtype=np.int64)
        for i, s in enumerate(item_sets):
            padded[i, : len(s)] = s
    rows, cols = np.nonzero(padded >= 0)
    items = padded[rows, cols]
    idx = bit_table[cohorts[rows], items]  # (pairs, k)
    out[np.repeat(rows, idx.shape[1]), idx.ravel()] = True
    return out
