"""What the commands print for people: aligned tables, ``key: value`` records, ISO-8601 times.

Scripts ask for ``--json`` and get the server's answer unchanged; these
functions only shape what a person reads. Plain text (no colour, no
dependency), so output piped to a file or a pager stays clean; the standard
library only, imported by the commands when they run.

>>> print(table([{"name": "places", "reports": 1200, "share": 0.123456}], ["name", "reports", "share"]), end="")
name    reports  share
places    1,200  0.1235
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

# Fields that hold unix seconds; shown as ISO-8601 UTC times.
TIME_FIELDS = frozenset({"created_at", "updated_at", "opened_at", "expires_at", "closed_at", "revoked_at",
                         "last_used_at", "window", "window_start", "window_end", "relaxed_at", "until",
                         "period_start", "renews_at", "at"})


def iso_time(seconds: float) -> str:
    """Unix seconds as an ISO-8601 UTC time (``2026-11-26T12:00:00Z``).

    >>> iso_time(0)
    '1970-01-01T00:00:00Z'
    """
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def number(value: float) -> str:
    """A number as a person reads it: thousands separated, four significant digits below 1,000.

    >>> [number(x) for x in (3, 12345.678, -0.000123456, 2.5, float("inf"))]
    ['3', '12,346', '-0.0001235', '2.5', 'inf']
    """
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def cell(key: str, value: Any) -> str:
    """One value of field ``key`` as text (``-`` for none, times in ISO-8601, lists joined, objects as
    ``key=value`` pairs: never raw JSON with every digit of a float).

    >>> cell("top", {"candidate": "a", "estimate": 1234.56789, "std_error": 0.123456789})
    'candidate=a estimate=1,235 std_error=0.1235'
    """
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        if key in TIME_FIELDS and math.isfinite(value):
            return iso_time(value)
        return number(value)
    if isinstance(value, list | tuple):
        return ", ".join(cell(key, v) for v in value)
    if isinstance(value, Mapping):
        return " ".join(f"{k}={cell(k, v)}" for k, v in value.items()) or "-"
    return str(value)


def table(rows: Iterable[Mapping[str, Any]], columns: Sequence[str], headers: Sequence[str] | None = None) -> str:
    """An aligned table of ``rows`` (numbers right-aligned); ``headers`` default to the column names."""
    names = list(headers or columns)
    texts = [[cell(c, row.get(c)) for c in columns] for row in rows]
    right = _numeric_columns(texts)
    widths = [max([len(names[i])] + [len(t[i]) for t in texts]) for i in range(len(columns))]

    def line(values: Sequence[str], align: Sequence[bool]) -> str:
        parts = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, align, strict=True)]
        return "  ".join(parts).rstrip()

    out = [line(names, [False] * len(names))] + [line(t, right) for t in texts]
    return "\n".join(out) + "\n"


def _numeric_columns(texts: Sequence[Sequence[str]]) -> list[bool]:
    """Columns whose every cell reads as a number (or ``-``): right-aligned."""
    if not texts:
        return []
    columns = len(texts[0])
    return [all(_looks_numeric(t[i]) for t in texts) and any(t[i] != "-" for t in texts) for i in range(columns)]


def _looks_numeric(text: str) -> bool:
    if text == "-":
        return True
    try:
        float(text.replace(",", ""))
    except ValueError:
        return False
    return True


def record(data: Mapping[str, Any], keys: Sequence[str] | None = None) -> str:
    """``key: value`` lines, one per field (nested objects as ``outer.inner``), keys aligned."""
    flat: list[tuple[str, str]] = []

    def walk(prefix: str, value: Any, key: str) -> None:
        if isinstance(value, Mapping) and value:
            for k, v in value.items():
                walk(f"{prefix}{k}.", v, k)
        else:
            flat.append((prefix[:-1], cell(key, value)))

    for k in keys if keys is not None else list(data):
        if k in data:
            walk(f"{k}.", data[k], k)
    width = max((len(k) for k, _ in flat), default=0)
    return "".join(f"{k.ljust(width)}  {v}\n" for k, v in flat)


def byte_size(size: int) -> str:
    """A file size in binary units.

    >>> [byte_size(n) for n in (512, 98304, 14 * 2**20 + 1)]
    ['512 bytes', '96 KiB', '14 MiB']
    """
    if size < 1024:
        return f"{size:,} bytes"
    value, unit = size / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.3g} {unit}"


def duration(seconds: float) -> str:
    """Seconds in the largest whole unit a person reads, with the seconds beside.

    >>> [duration(s) for s in (45, 3600, 7776000, 90061)]
    ['45 s', '1 hour (3,600 s)', '90 days (7,776,000 s)', '90,061 s']
    """
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count:,} {unit}{'' if count == 1 else 's'} ({number(int(seconds))} s)"
    return f"{number(seconds)} s"
