"""Tables of decoded answers: the CSV that the API's ``format=csv`` and the CLI share.

Pure functions of an answer's ``rows``: no server, no numpy.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

ESTIMATE_COLUMNS = (
    "candidate", "estimate", "std_error", "lower", "upper", "proportion", "p_value", "detected", "selected",
)
CERTIFICATE_COLUMNS = ("candidate", "upper_bound", "safe", "verdict")




CSV_DIGITS = 6  # significant digits of a float in CSV: well under any estimate's standard error


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(float(f"{value:.{CSV_DIGITS}g}")) if math.isfinite(value) else repr(value)
    return str(value)


DISPLAY_CLIPPED = ("estimate", "lower", "upper", "proportion")


def display_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows with ``max(0, x)`` of the estimate, its bounds and proportion: for display only.

    An unbiased estimate of a small count is negative about half the time;
    clipping at 0 reads better but is biased upwards, so JSON and CSV keep
    the unbiased values and only tables and the dashboard show these.

    >>> display_rows([{"candidate": "a", "estimate": -3.5, "lower": -9.0, "upper": 2.0}])
    [{'candidate': 'a', 'estimate': 0.0, 'lower': 0.0, 'upper': 2.0}]
    """
    return [{k: max(0.0, v) if k in DISPLAY_CLIPPED and isinstance(v, int | float) and not isinstance(v, bool)
             else v for k, v in row.items()} for row in rows]


def rows_to_csv(rows: Iterable[Mapping[str, Any]] | None, columns: Sequence[str]) -> str:
    """A header of ``columns`` and one line per row (``None``: the header only).

    >>> print(rows_to_csv([{"candidate": "a,b", "upper_bound": 3, "safe": True, "verdict": "safe"}],
    ...                   CERTIFICATE_COLUMNS), end="")
    candidate,upper_bound,safe,verdict
    "a,b",3,true,safe
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows or ():
        writer.writerow([_cell(row.get(c)) for c in columns])
    return buffer.getvalue()


def estimates_csv(body: Mapping[str, Any]) -> str:
    """The ``rows`` of an answer of :meth:`DecodingService.estimates` as CSV."""
    return rows_to_csv(body.get("rows"), ESTIMATE_COLUMNS)


def certificates_csv(body: Mapping[str, Any]) -> str:
    """The ``rows`` of an answer of :meth:`DecodingService.certificates` as CSV."""
    return rows_to_csv(body.get("rows"), CERTIFICATE_COLUMNS)
