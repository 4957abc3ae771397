"""Tables of decoded answers: the CSV that the API's ``format=csv`` and the CLI share.

Pure functions of an answer's ``rows``: no server, no numpy.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

ESTIMATE_COLUMNS = (
    "candidate", "estimate", "std_error", "lower", "upper", "proportion", "p_value", "detected", "selected",
)
CERTIFICATE_COLUMNS = ("candidate", "upper_bound", "safe", "verdict")




def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


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
