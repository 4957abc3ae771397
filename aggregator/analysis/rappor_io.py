"""Google RAPPOR's file formats, so its data sets decode here and ours there.

The reference analysis (google/rappor ``analysis/R/read_input.R``,
``doc/data-flow.md``, ``bin/hash_candidates.py``, ``tests/gen_counts.R``)
reads three CSV files:

* **params**: a header ``k,h,m,p,q,f`` and one row: ``k`` Bloom bits,
  ``h`` hashes, ``m`` cohorts, IRR ``p = P(1 | PRR 0)``, ``q = P(1 | PRR 1)``,
  PRR ``f``.
* **counts**: no header, ``m`` rows (cohort 0 first) of ``k + 1`` integers:
  the cohort's number of reports, then for bit ``i = 0 .. k-1`` the
  reports with bit ``i`` at 1. Bit ``i`` is the Bloom index of
  ``get_bloom_bits`` (``1 << i`` in the client's integer), i.e. the *last*
  character of a report printed as a bit string, which RAPPOR prints most
  significant bit first.
* **reports** (input of RAPPOR's ``sum_bits``): a header with ``cohort`` and
  ``irr``, the report as a bit string, most significant bit first.
* **map**: no header, one row per candidate: the string, then ``h * m``
  1-based row indices ``cohort * k + bit + 1`` (cohort-major, the ``h``
  hashes of cohort 0 first). The reader renames ``""`` to ``"Empty"`` and
  keeps the first of repeated strings, as RAPPOR's does.

RAPPOR's ``f, p, q`` are our ``Randomizer(mode="symmetric",
level=laplace_rate_from_f(f), irr_p=p, irr_q=q)``; decoding needs only
``p* = p (1 - f/2) + q f/2`` and ``q* = q (1 - f/2) + p f/2`` (RAPPOR's
``p01``, ``p11``). Exporting an asymmetric metric uses ``f = 0``,
``p = p*``, ``q = 1``: the same ``(p*, q*)``, so the reference decoder
gives the right counts (its privacy columns do not apply).

:func:`decode_rappor` prints RAPPOR's result columns
``string,estimate,std_error,proportion,prop_std_error,prop_low_95,prop_high_95``
for the detected strings, largest first, with RAPPOR's conventions
(estimate and standard error floored to integers, proportions over all
reports, 95% interval ``+- 1.96`` standard errors clamped to ``[0, 1]``).
Detection differs on purpose: RAPPOR keeps coefficients above two
resampled standard deviations; here a candidate is detected by the
one-sided test with Bonferroni (or Benjamini-Hochberg) control of
:mod:`aggregator.analysis.decoding.fit`.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from aggregator.analysis.decoding.counts import BitCounts
from aggregator.analysis.decoding.fit import check_candidates, fit_bit_table
from protocol.encodings import BloomEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.randomizers import laplace_rate_from_f
from protocol.validation import check_int, check_probability

IntArray = npt.NDArray[np.int64]
PathLike = str | Path

PARAMS_HEADER = ("k", "h", "m", "p", "q", "f")
RESULT_COLUMNS = (
    "string",
    "estimate",
    "std_error",
    "proportion",
    "prop_std_error",
    "prop_low_95",
    "prop_high_95",
)
_Z95 = 1.96  # RAPPOR's 95% multiplier


@dataclass(frozen=True, kw_only=True)
class RapporParams:
    """RAPPOR's parameters, with its names: ``k`` bits, ``h`` hashes, ``m`` cohorts, ``p, q, f``."""

    k: int
    h: int
    m: int
    p: float
    q: float
    f: float

    def __post_init__(self) -> None:
        for name in ("k", "h", "m"):
            object.__setattr__(self, name, check_int(name, getattr(self, name), low=1))
        for name in ("p", "q", "f"):
            object.__setattr__(self, name, check_probability(name, getattr(self, name)))
        if self.h > self.k:
            raise ParameterError("h", f"must be <= k ({self.k}), got {self.h}")

    def probabilities(self) -> tuple[float, float]:
        """``(p*, q*) = (p01, p11)``: ``P(report 1 | true 0)``, ``P(report 1 | true 1)``."""
        half = self.f / 2.0
        return (self.p * (1.0 - half) + self.q * half, self.q * (1.0 - half) + self.p * half)

    def to_metric_params(self, name: str = "rappor") -> MetricParams:
        """The equivalent symmetric metric with RAPPOR's md5 hashing (needs ``0 < f < 1``, ``p < q``)."""
        return MetricParams(
            name=name,
            encoding=BloomEncoding(
                num_bits=self.k, num_hashes=self.h, num_cohorts=self.m, hashing="rappor-md5"
            ),
            mode="symmetric",
            level=laplace_rate_from_f(self.f),
            irr_p=self.p,
            irr_q=self.q,
        )

    @classmethod
    def from_metric_params(cls, params: MetricParams, level: float | None = None) -> RapporParams:
        """RAPPOR parameters with the same ``(p*, q*)`` as ``params`` at ``level`` (module docstring)."""
        enc = params.encoding
        k, h, m = enc.num_bits, enc.num_hashes, enc.num_cohorts
        randomizer = params.randomizer(level)
        if params.mode == "symmetric":
            p = 0.0 if randomizer.irr_p is None else randomizer.irr_p
            q = 1.0 if randomizer.irr_q is None else randomizer.irr_q
            return cls(k=k, h=h, m=m, p=p, q=q, f=randomizer.f)
        p_star, q_star = randomizer.probabilities()
        return cls(k=k, h=h, m=m, p=p_star, q=q_star, f=0.0)


def _fmt(x: float) -> str:
    return repr(float(x))


def _parse_number(text: str, where: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise ParameterError(where, f"is not a number: {text!r}") from None


def _parse_count(text: str, where: str) -> int:
    value = _parse_number(text, where)
    if not math.isfinite(value) or value != int(value) or value < 0:
        raise ParameterError(where, f"must be a whole number >= 0, got {text!r}")
    return int(value)


def _read_rows(path: PathLike) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return [row for row in csv.reader(fh) if row and any(cell.strip() for cell in row)]


def read_params(path: PathLike) -> RapporParams:
    """Read a params file (header ``k,h,m,p,q,f``, spaces allowed, one row)."""
    rows = _read_rows(path)
    if len(rows) != 2:
        raise ParameterError(
            "params", f"{path}: needs a header and exactly one row, got {len(rows)} rows"
        )
    header = tuple(cell.strip() for cell in rows[0])
    if header != PARAMS_HEADER:
        raise ParameterError(
            "params", f"{path}: header must be {','.join(PARAMS_HEADER)}, got {','.join(header)}"
        )
    if len(rows[1]) != 6:
        raise ParameterError("params", f"{path}: needs 6 values, got {len(rows[1])}")
    values = dict(zip(PARAMS_HEADER, rows[1], strict=True))
    return RapporParams(
        k=_parse_count(values["k"], "params.k"),
        h=_parse_count(values["h"], "params.h"),
        m=_parse_count(values["m"], "params.m"),
        p=_parse_number(values["p"], "params.p"),
        q=_parse_number(values["q"], "params.q"),
        f=_parse_number(values["f"], "params.f"),
    )


def write_params(path: PathLike, params: RapporParams) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(PARAMS_HEADER)
        writer.writerow(
            [params.k, params.h, params.m, _fmt(params.p), _fmt(params.q), _fmt(params.f)]
        )


def read_counts(path: PathLike, params: RapporParams | None = None) -> BitCounts:
    """Read a counts file: per cohort, reports then ones of bits ``0 .. k-1``."""
    rows = _read_rows(path)
    if not rows:
        raise ParameterError("counts", f"{path}: is empty")
    width = len(rows[0])
    if any(len(r) != width for r in rows) or width < 2:
        raise ParameterError(
            "counts", f"{path}: every row needs the same number (k + 1 >= 2) of columns"
        )
    if params is not None and (len(rows) != params.m or width != params.k + 1):
        raise ParameterError(
            "counts",
            f"{path}: must be m={params.m} rows of k+1={params.k + 1} columns, got {len(rows)} x {width}",
        )
    table = np.array(
        [
            [_parse_count(cell, f"counts[{i}][{j}]") for j, cell in enumerate(r)]
            for i, r in enumerate(rows)
        ],
        dtype=np.int64,
    )
    return BitCounts(ones=table[:, 1:], totals=table[:, 0])


def write_counts(path: PathLike, counts: BitCounts) -> None:
    table = np.column_stack([counts.totals, counts.ones])
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\n").writerows(table.tolist())


def read_reports(path: PathLike, params: RapporParams) -> BitCounts:
    """Sum a reports CSV (header with ``cohort`` and ``irr`` columns, as RAPPOR's simulator writes).

    ``irr`` is the report as a bit string, most significant bit first, so
    character ``i`` is Bloom bit ``k - 1 - i`` (RAPPOR's ``sum_bits``).
    """
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh, skipinitialspace=True)
        if reader.fieldnames is None or not {"cohort", "irr"} <= {
            f.strip() for f in reader.fieldnames
        }:
            raise ParameterError(
                "reports", f"{path}: needs a header with 'cohort' and 'irr' columns"
            )
        rows = [(row["cohort"], row["irr"].strip()) for row in reader]
    cohorts = np.array([_parse_count(c, "reports.cohort") for c, _ in rows], dtype=np.int64)
    if any(len(bits) != params.k or set(bits) - {"0", "1"} for _, bits in rows):
        raise ParameterError(
            "reports", f"{path}: every irr must be {params.k} characters of 0 and 1"
        )
    strings = np.array([bits for _, bits in rows], dtype=f"S{params.k}")
    msb_first = np.frombuffer(strings.tobytes(), dtype=np.uint8).reshape(
        len(rows), params.k
    ) == ord("1")
    return BitCounts.from_reports(msb_first[:, ::-1], cohorts, params.m)


def read_map(path: PathLike, params: RapporParams) -> tuple[list[str], IntArray]:
    """Read a map file.

    Returns:
        ``(candidates, bit_table)`` with ``bit_table[j, i]`` the ``h`` bits
        (0-based) of candidate ``i`` in cohort ``j``.
    """
    k, h, m = params.k, params.h, params.m
    names: list[str] = []
    seen: set[str] = set()
    positions: list[list[int]] = []
    for i, row in enumerate(_read_rows(path)):
        if len(row) != h * m + 1:
            raise ParameterError(
                "map", f"{path} row {i + 1}: needs 1 + h*m = {h * m + 1} columns, got {len(row)}"
            )
        name = row[0] if row[0] != "" else "Empty"
        if name in seen:
            continue
        seen.add(name)
        names.append(name)
        positions.append(
            [_parse_count(cell, f"map[{i}][{j + 1}]") for j, cell in enumerate(row[1:])]
        )
    if not names:
        raise ParameterError("map", f"{path}: has no candidate")
    index = np.array(positions, dtype=np.int64) - 1  # (S, h*m), 0-based rows of the (m*k) filter
    if index.min() < 0 or index.max() >= m * k:
        raise ParameterError("map", f"{path}: indices must be in [1, m*k = {m * k}]")
    cohort = index // k
    order = np.argsort(cohort, axis=1, kind="stable")
    cohort = np.take_along_axis(cohort, order, axis=1)
    if not np.array_equal(cohort, np.broadcast_to(np.repeat(np.arange(m), h), cohort.shape)):
        raise ParameterError(
            "map",
            f"{path}: every candidate needs exactly h={h} indices in each of the m={m} cohorts",
        )
    bits = (np.take_along_axis(index, order, axis=1) % k).reshape(len(names), m, h)
    return names, np.ascontiguousarray(bits.transpose(1, 0, 2))


def write_map(
    path: PathLike, candidates: Sequence[str], bit_table: npt.ArrayLike, num_bits: int
) -> None:
    """Write a map file from ``bit_table[j, i]`` = bits of candidate ``i`` in cohort ``j``."""
    cands = check_candidates(candidates)
    if "" in cands:
        raise ParameterError(
            "candidates",
            "the empty string does not survive RAPPOR's map reader (it becomes 'Empty')",
        )
    table = np.asarray(bit_table, dtype=np.int64)
    if table.ndim != 3 or table.shape[1] != len(cands):
        raise ParameterError("bit_table", f"must be (m, {len(cands)}, h), got shape {table.shape}")
    rows = (np.arange(table.shape[0])[:, None, None] * num_bits + table + 1).transpose(1, 0, 2)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        for name, idx in zip(cands, rows.reshape(len(cands), -1).tolist(), strict=True):
            writer.writerow([name, *idx])


def export_rappor(
    directory: PathLike,
    counts: BitCounts,
    params: MetricParams,
    level: float | None,
    candidates: Sequence[str],
    *,
    prefix: str = "",
) -> dict[str, Path]:
    """Write ``params.csv``, ``counts.csv`` and ``map.csv`` for the reference decoder.

    A direct metric is written as one cohort, one hash, one bit per item
    (RAPPOR's "basic" diagonal map).
    """
    counts.check_shape(params.num_cohorts, params.num_bits)
    cands = check_candidates(candidates)
    folder = Path(directory)
    paths = {name: folder / f"{prefix}{name}.csv" for name in ("params", "counts", "map")}
    rappor = RapporParams.from_metric_params(params, level)
    table = params.encoding.bit_table(list(cands))  # direct: (1, S, 1)
    write_params(paths["params"], rappor)
    write_counts(paths["counts"], counts)
    write_map(paths["map"], cands, table, rappor.k)
    return paths


def decode_rappor(
    params_path: PathLike,
    counts_path: PathLike,
    map_path: PathLike,
    *,
    alpha: float = 0.05,
    correction: str = "bonferroni",
) -> list[dict[str, Any]]:
    """Decode RAPPOR files: one dict per detected string with :data:`RESULT_COLUMNS`."""
    rappor = read_params(params_path)
    counts = read_counts(counts_path, rappor)
    names, table = read_map(map_path, rappor)
    fit = fit_bit_table(
        counts, rappor.probabilities(), table, names, alpha=alpha, correction=correction
    )
    n = max(fit.num_reports, 1)
    out = []
    for row in fit.rows(detected_only=True):
        estimate = math.floor(row["estimate"])
        std_error = math.floor(row["std_error"])
        proportion = estimate / n
        prop_se = std_error / n
        out.append(
            {
                "string": row["candidate"],
                "estimate": estimate,
                "std_error": std_error,
                "proportion": proportion,
                "prop_std_error": prop_se,
                "prop_low_95": max(proportion - _Z95 * prop_se, 0.0),
                "prop_high_95": min(proportion + _Z95 * prop_se, 1.0),
            }
        )
    return out


def rows_to_csv(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as CSV text with a header of :data:`RESULT_COLUMNS`."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(RESULT_COLUMNS)
    for row in rows:
        writer.writerow(
            [row[c] if isinstance(row[c], str | int) else _fmt(row[c]) for c in RESULT_COLUMNS]
        )
    return buf.getvalue()


def main_decode_rappor(argv: Sequence[str] | None = None) -> int:
    """``onesided decode-rappor --params P --counts C --map M [--alpha A] [--correction bonferroni|bh]``.

    Prints the detected strings as CSV on stdout; returns 0, or 2 with a
    message on stderr when an input is unusable.
    """
    parser = argparse.ArgumentParser(
        prog="onesided decode-rappor", description="Decode RAPPOR counts/map/params files."
    )
    parser.add_argument("--params", required=True, help="params CSV (k,h,m,p,q,f)")
    parser.add_argument("--counts", required=True, help="counts CSV (m rows of k+1 integers)")
    parser.add_argument("--map", required=True, help="map CSV (string, then h*m 1-based indices)")
    parser.add_argument(
        "--alpha", type=float, default=0.05, help="family level of the detections (default 0.05)"
    )
    parser.add_argument("--correction", choices=("bonferroni", "bh"), default="bonferroni")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        rows = decode_rappor(
            args.params, args.counts, args.map, alpha=args.alpha, correction=args.correction
        )
    except (ParameterError, OSError, UnicodeDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(rows_to_csv(rows))
    return 0
