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

**Association** (RAPPOR's ``bin/decode-assoc``, ``analysis/R/association.R``):
:func:`decode_rappor_association` reads a schema CSV (``metric, var,
var_type, params``; ``string`` or ``boolean``), ``<params-dir>/<params>.csv``,
a map per string variable and the reports CSV (a header with ``cohort`` and
the two variables' columns; bit strings most significant bit first, a boolean
one character), and decodes the joint with the per-report EM
(:func:`aggregator.analysis.association.em_reports_fit`), RAPPOR's ``Other``
category included (docs/decoding.md 5 lists where we differ on purpose).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from aggregator.analysis.decoding.counts import BitCounts
from aggregator.analysis.decoding.fit import check_candidates, fit_bit_table
from protocol.encodings import BloomEncoding
from protocol.errors import ParameterError
from protocol.params import MetricParams
from protocol.randomizers import laplace_rate_from_f
from protocol.validation import check_int, check_probability

if TYPE_CHECKING:  # the association's EM is imported by the functions that use it: decode-rappor of one
    from aggregator.analysis.association import ReportsEM  # variable starts faster without it

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
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
        if params.local_mechanism.two_sided:
            p = 0.0 if randomizer.irr_p is None else randomizer.irr_p
            q = 1.0 if randomizer.irr_q is None else randomizer.irr_q
            return cls(k=k, h=h, m=m, p=p, q=q, f=randomizer.f)
        p_star, q_star = randomizer.probabilities()
        return cls(k=k, h=h, m=m, p=p_star, q=q_star, f=0.0)


def _fmt(x: float) -> str:
    """A float with 6 significant digits (more would be noise: the estimates' errors are far larger)."""
    return repr(float(f"{float(x):.6g}")) if math.isfinite(x) else repr(float(x))


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
            [params.k, params.h, params.m, repr(float(params.p)), repr(float(params.q)), repr(float(params.f))]
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
    every_candidate: bool = False,
) -> list[dict[str, Any]]:
    """Decode RAPPOR files: one dict per detected string with :data:`RESULT_COLUMNS`.

    ``every_candidate``: one dict per string of the map, detected or not, with
    a ``detected`` flag (an undetected string outside the fitted model has no
    standard error: ``None``).
    """
    rappor = read_params(params_path)
    counts = read_counts(counts_path, rappor)
    names, table = read_map(map_path, rappor)
    fit = fit_bit_table(
        counts, rappor.probabilities(), table, names, alpha=alpha, correction=correction
    )
    n = max(fit.num_reports, 1)
    return [_result_row(row, n, every_candidate) for row in fit.rows(detected_only=not every_candidate)]


def _result_row(row: dict[str, Any], n: int, with_flag: bool) -> dict[str, Any]:
    """RAPPOR's result columns of one fitted candidate (counts floored, as RAPPOR's R does)."""
    estimate = math.floor(row["estimate"])
    proportion = estimate / n
    out: dict[str, Any] = {"string": row["candidate"], "estimate": estimate, "proportion": proportion}
    if row["std_error"] is None:
        out.update(std_error=None, prop_std_error=None, prop_low_95=None, prop_high_95=None)
    else:
        std_error = math.floor(row["std_error"])
        prop_se = std_error / n
        out.update(std_error=std_error, prop_std_error=prop_se,
                   prop_low_95=max(proportion - _Z95 * prop_se, 0.0),
                   prop_high_95=min(proportion + _Z95 * prop_se, 1.0))
    if with_flag:
        out["detected"] = row["detected"]
    return out


# ==========================================================================
# Association: RAPPOR's decode-assoc inputs (two variables per report)
# ==========================================================================

SCHEMA_COLUMNS = ("metric", "var", "var_type", "params")
VAR_TYPES = ("string", "boolean")
BOOLEAN_VALUES = ("TRUE", "FALSE")  # RAPPOR's order: P(1 | TRUE) = q*, P(1 | FALSE) = p*
OTHER = "Other"  # RAPPOR's name of the strings outside the map
ASSOC_STATS = ("estimate", "std_error", "proportion", "prop_std_error", "prop_low_95", "prop_high_95")


def _at(path: PathLike, line: int, column: int, name: str) -> str:
    """Where a bad cell is: file, line (1-based, the header is line 1), column (1-based) and its name."""
    return f"{path}, line {line}, column {column} ({name})"


@dataclass(frozen=True, kw_only=True)
class SchemaVariable:
    """One row of RAPPOR's variable schema (``rappor-vars.csv``: ``metric, var, var_type, params``)."""

    metric: str
    var: str
    var_type: str
    params: str


def read_schema(path: PathLike) -> list[SchemaVariable]:
    """Read a schema CSV (header ``metric, var, var_type, params``, spaces allowed, other columns ignored).

    Raises:
        ParameterError: (field ``schema``) a missing column, a short row, an unknown ``var_type``.
    """
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = [cell.strip() for cell in next(reader, [])]
        missing = [c for c in SCHEMA_COLUMNS if c not in header]
        if missing:
            raise ParameterError("schema", f"{path}, line 1: the header needs the columns "
                                 f"{', '.join(SCHEMA_COLUMNS)}; {', '.join(missing)} missing")
        index = {c: header.index(c) for c in SCHEMA_COLUMNS}
        out = []
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            if len(row) < len(header):
                raise ParameterError("schema", f"{path}, line {reader.line_num}: needs {len(header)} columns, "
                                     f"got {len(row)}")
            cells = {c: row[i].strip() for c, i in index.items()}
            if cells["var_type"] not in VAR_TYPES:
                raise ParameterError("schema", f"{_at(path, reader.line_num, index['var_type'] + 1, 'var_type')}: "
                                     f"must be one of {', '.join(VAR_TYPES)}, got {cells['var_type']!r}")
            out.append(SchemaVariable(**cells))
    return out


def _schema_variable(rows: Sequence[SchemaVariable], path: PathLike, metric: str, var: str) -> SchemaVariable:
    found = [r for r in rows if r.metric == metric and r.var == var]
    if not found:
        raise ParameterError("schema", f"{path}: no row for metric {metric!r}, var {var!r}")
    if len(found) > 1:
        raise ParameterError("schema", f"{path}: {len(found)} rows for metric {metric!r}, var {var!r}")
    return found[0]


@dataclass(frozen=True, kw_only=True)
class AssocReports:
    """Linked reports of two variables: ``cohorts`` (N,), ``bits`` per variable (N, k), bit ``i`` = ``1 << i``."""

    cohorts: IntArray
    bits: tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]
    removed: int


def read_assoc_reports(
    path: PathLike, names: tuple[str, str], widths: tuple[int, int], num_cohorts: int, *,
    remove_bad_rows: bool = False,
) -> AssocReports:
    """Read RAPPOR's association reports (``bin/decode-assoc --reports``).

    A header naming the columns (``client, cohort, <var1>, <var2>`` as RAPPOR's
    ``tests/rappor_sim.py --assoc-testdata`` writes; other columns are ignored),
    then one row per report: the 0-based cohort and each variable's report as a
    bit string, most significant bit first (a boolean is one character).

    Args:
        names: the two variables' column names.
        widths: their report widths in bits (``k``; 1 for a boolean).
        num_cohorts: ``m``; a cohort must be in ``[0, m)``.
        remove_bad_rows: drop rows where a variable's report is empty (RAPPOR's
            ``--remove-bad-rows``) instead of refusing the file.

    Raises:
        ParameterError: (field ``reports``) naming the file, line and column of the first bad cell;
            or no report left.
    """
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = [cell.strip() for cell in next(reader, [])]
        for name in ("cohort", *names):
            if name not in header:
                raise ParameterError("reports", f"{path}, line 1: the header needs a column {name!r}, got "
                                     f"{','.join(header) or 'nothing'}")
        where = [header.index(name) for name in ("cohort", *names)]
        cohorts: list[int] = []
        strings: tuple[list[str], list[str]] = ([], [])
        removed = 0
        for row in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise ParameterError("reports", f"{path}, line {line}: needs {len(header)} columns like the "
                                     f"header, got {len(row)}")
            cells = [row[i].strip() for i in where]
            if remove_bad_rows and not (cells[1] and cells[2]):
                removed += 1
                continue
            try:
                cohort = int(cells[0])
            except ValueError:
                cohort = -1
            if not 0 <= cohort < num_cohorts:
                raise ParameterError("reports", f"{_at(path, line, where[0] + 1, 'cohort')}: must be an integer "
                                     f"in [0, m = {num_cohorts}), got {cells[0]!r}")
            for v in range(2):
                text = cells[v + 1]
                if len(text) != widths[v] or set(text) - {"0", "1"}:
                    hint = " (--remove-bad-rows drops rows with an empty report)" if not text else ""
                    raise ParameterError("reports", f"{_at(path, line, where[v + 1] + 1, names[v])}: must be "
                                         f"{widths[v]} characters of 0 and 1, got {text!r}{hint}")
                strings[v].append(text)
            cohorts.append(cohort)
    if not cohorts:
        raise ParameterError("reports", f"{path}: no report to decode ({removed} rows removed as bad)")
    bits = []
    for v in range(2):
        raw = np.array(strings[v], dtype=f"S{widths[v]}")
        msb_first = np.frombuffer(raw.tobytes(), dtype=np.uint8).reshape(len(cohorts), widths[v]) == ord("1")
        bits.append(np.ascontiguousarray(msb_first[:, ::-1]))
    return AssocReports(cohorts=np.array(cohorts, dtype=np.int64), bits=(bits[0], bits[1]), removed=removed)


def _other_log_likelihoods(
    bits: npt.NDArray[np.bool_], cohorts: IntArray, table: IntArray, probabilities: tuple[float, float],
    shares: FloatArray,
) -> FloatArray:
    """``(N,)`` log-likelihood of each report under RAPPOR's "Other" category, on the scale of :func:`log_likelihoods`.

    Per cohort, the reports' ones not explained by the candidates (their shares
    times the cohort's reports, each bit at ``q*`` if set, else ``p*``) give
    each bit's rate ``r_b`` among the other strings' reports; a report's
    likelihood is ``prod_b r_b^x_b (1 - r_b)^(1 - x_b)``, minus the constant
    :func:`log_likelihoods` leaves out (every bit at ``p*``).
    """
    p_star, q_star = probabilities
    m, k = int(table.shape[0]), bits.shape[1]
    counts = BitCounts.from_reports(bits, cohorts, m)
    rate = np.full((m, k), p_star)
    for j in range(m):
        known = shares * counts.totals[j]
        member = np.zeros((k, shares.size))
        member[table[j], np.arange(shares.size)[:, None]] = 1.0
        expected = p_star * known.sum() + (q_star - p_star) * (member @ known)
        rest = counts.totals[j] - known.sum()
        if rest >= 1.0:
            rate[j] = (counts.ones[j] - expected) / rest
    rate = np.clip(rate, min(p_star, q_star), max(p_star, q_star))  # any population's bit rate lies there
    x = bits.astype(np.float64)
    up, down = np.log(rate[cohorts]), np.log1p(-rate[cohorts])
    const = x * np.log(p_star) + (1.0 - x) * np.log1p(-p_star)
    out: FloatArray = (x * up + (1.0 - x) * down - const).sum(axis=1)
    return out


def _variable_likelihoods(
    var: SchemaVariable, rappor: RapporParams, bits: npt.NDArray[np.bool_], cohorts: IntArray,
    map_path: PathLike | None, other: bool, field: str,
) -> tuple[tuple[str, ...], FloatArray]:
    """A variable's values (candidates, then ``Other``; or ``TRUE, FALSE``) and ``(N, S)`` log-likelihoods."""
    p_star, q_star = rappor.probabilities()
    if not (0.0 < p_star and q_star < 1.0 and p_star != q_star):
        raise ParameterError("params", f"{var.params}: per-report likelihoods need 0 < p* < 1, 0 < q* < 1 and "
                             f"p* != q*, got p* = {p_star}, q* = {q_star}")
    if var.var_type == "boolean":
        x = bits[:, :1].astype(np.float64)
        logs = np.hstack([x * np.log(q_star) + (1 - x) * np.log1p(-q_star),
                          x * np.log(p_star) + (1 - x) * np.log1p(-p_star)])
        return BOOLEAN_VALUES, logs
    if map_path is None:
        raise ParameterError(field, f"is required: {var.var!r} is a string variable")
    from aggregator.analysis.association import log_likelihoods

    names, table = read_map(map_path, rappor)
    logs = log_likelihoods(bits, cohorts, table, (p_star, q_star))
    if not other:
        return tuple(names), logs
    if OTHER in names:
        raise ParameterError(field, f"{map_path}: a candidate is named {OTHER!r}, the name of the strings "
                             "outside the map: rename it or pass --ignore-other")
    counts = BitCounts.from_reports(bits, cohorts, rappor.m)
    marginal = fit_bit_table(counts, (p_star, q_star), table, names)
    shares = np.maximum(marginal.estimates, 0.0) / max(counts.num_reports, 1)
    shares /= max(shares.sum(), 1.0)
    extra = _other_log_likelihoods(bits, cohorts, table, (p_star, q_star), shares)
    return (*names, OTHER), np.hstack([logs, extra[:, None]])


@dataclass(frozen=True, kw_only=True)
class AssocResult:
    """The decoded joint of RAPPOR association inputs: the values of each variable, the EM, the reports used."""

    names: tuple[str, str]
    values: tuple[tuple[str, ...], tuple[str, ...]]
    em: ReportsEM
    num_reports: int
    removed: int

    def rows(self) -> list[dict[str, Any]]:
        """One row per pair, ``var1``-major: the two values, then :data:`ASSOC_STATS`."""
        n = self.num_reports
        out = []
        for i, a in enumerate(self.values[0]):
            for j, b in enumerate(self.values[1]):
                share, se = float(self.em.joint[i, j]), float(self.em.std_errors[i, j])
                out.append({self.names[0]: a, self.names[1]: b, "estimate": share * n, "std_error": se * n,
                            "proportion": share, "prop_std_error": se,
                            "prop_low_95": max(share - _Z95 * se, 0.0), "prop_high_95": min(share + _Z95 * se, 1.0)})
        return out

    def metrics(self) -> dict[str, Any]:
        """What RAPPOR's ``assoc-metrics.json`` holds, and the EM's convergence."""
        return {"num_reports": self.num_reports, "removed_rows": self.removed,
                "estimate_dimensions": [len(self.values[0]), len(self.values[1])],
                "sum_estimates": float(self.em.joint.sum()), "num_em_iters": self.em.iterations,
                "num_newton_steps": self.em.newton_steps, "em_converged": self.em.converged, "em_gap": self.em.gap}

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow([*self.names, *ASSOC_STATS])
        for row in self.rows():
            writer.writerow([row[self.names[0]], row[self.names[1]], *(_fmt(row[c]) for c in ASSOC_STATS)])
        return buf.getvalue()


def decode_rappor_association(
    *, reports: PathLike, schema: PathLike, params_dir: PathLike, metric_name: str, var1: str, var2: str,
    map1: PathLike | None = None, map2: PathLike | None = None, remove_bad_rows: bool = False,
    ignore_other: bool = False, max_em_iters: int = 1000, em_tolerance: float = 1e-3,
) -> AssocResult:
    """Decode RAPPOR's association inputs (the files of ``bin/decode-assoc``) with :func:`em_reports_fit`.

    Each variable's type and params come from the schema row ``(metric_name, var)``;
    its params are ``<params_dir>/<params>.csv``. A string variable needs its map
    (``map1`` / ``map2``, the single-variable map format); a boolean needs none.
    String variables get RAPPOR's ``Other`` category unless ``ignore_other``.

    Raises:
        ParameterError: named after the file and, for cells, its line and column.
    """
    check_int("max_em_iters", max_em_iters, low=1)
    if not em_tolerance > 0.0:
        raise ParameterError("em_tolerance", f"must be > 0 (nats), got {em_tolerance!r}")
    if var1 == var2:
        raise ParameterError("var2", f"must differ from var1, got {var2!r} twice")
    rows = read_schema(schema)
    variables = (_schema_variable(rows, schema, metric_name, var1), _schema_variable(rows, schema, metric_name, var2))
    params = tuple(read_params(Path(params_dir) / f"{v.params}.csv") for v in variables)
    if params[0].m != params[1].m:
        raise ParameterError("schema", f"{schema}: {var1!r} and {var2!r} share each report's cohort, so their "
                             f"params need the same m, got {params[0].m} and {params[1].m}")
    widths = tuple(1 if v.var_type == "boolean" else p.k for v, p in zip(variables, params, strict=True))
    data = read_assoc_reports(reports, (var1, var2), (widths[0], widths[1]), params[0].m,
                              remove_bad_rows=remove_bad_rows)
    found = [_variable_likelihoods(v, p, bits, data.cohorts, path, not ignore_other, field)
             for v, p, bits, path, field in zip(variables, params, data.bits, (map1, map2), ("map1", "map2"),
                                                strict=True)]
    from aggregator.analysis.association import em_reports_fit

    em = em_reports_fit(found[0][1], found[1][1], max_iterations=max_em_iters, tolerance=em_tolerance)
    return AssocResult(names=(var1, var2), values=(found[0][0], found[1][0]), em=em,
                       num_reports=int(data.cohorts.size), removed=data.removed)


def rows_to_csv(rows: Sequence[dict[str, Any]], columns: Sequence[str] = RESULT_COLUMNS) -> str:
    """The rows as CSV text with a header of ``columns`` (default :data:`RESULT_COLUMNS`)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row[c]) for c in columns])
    return buf.getvalue()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"  # R's spelling, as RAPPOR's tables have it
    return value if isinstance(value, str) else str(value) if isinstance(value, int) else _fmt(value)
