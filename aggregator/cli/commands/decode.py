"""``onesided estimates|certify``: decoding for analysts, over the HTTP API.

``estimates`` and ``certify`` call the HTTP API (analyst token; shared
``--server`` / ``--token``) and print a table for people; ``--json`` prints
the answer, ``--format csv`` the rows as CSV, built from the JSON answer by
the same function the server uses for ``format=csv``. When no number may be released (``min_batch_size``) the
server's ``reason`` goes to stderr and the exit code is still 0.
Candidate lists that would make a long URL, or hold a comma, are sent as
a JSON body (``POST``) instead of a query string.

``decode-rappor``, which decodes google/rappor's files offline, is
:mod:`aggregator.cli.commands.decode_rappor`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from aggregator.cli.options import (
    Subparsers,
    add_format_option,
    add_round_option,
    add_server_options,
    add_window_option,
    client_from_args,
    print_answer,
)
from protocol.errors import ParameterError

MAX_QUERY_CANDIDATE_CHARS = 1500  # longer lists go in a POST body (gunicorn limits a request line to 4 KiB)


def register(subparsers: Subparsers) -> None:
    estimates = subparsers.add_parser(
        "estimates", help="decoded counts of candidates (HTTP API)",
        description="Decoded counts of a metric's candidates in one window, each with its standard error, "
                    "interval and whether it is detected (count > 0 beyond the noise). Needs an analyst token. "
                    "Counts are unbiased, so a small count's estimate may be negative (--nonnegative shows "
                    "max(0, x)). Example: onesided estimates places --window 2026-11-20T13:00")
    _add_collection_options(estimates)
    estimates.add_argument("--alpha", type=float, metavar="P",
                           help="error level of the detections, 0 < P < 1 (default 0.05): with bonferroni the "
                                "chance of any false detection among all the candidates, with bh the expected "
                                "share of false ones among the detected")
    estimates.add_argument("--correction", choices=("bonferroni", "bh"),
                           help="multiple-testing control: bonferroni (default) or bh (Benjamini-Hochberg)")
    estimates.add_argument("--confidence", type=float, metavar="C",
                           help="confidence of each candidate's interval (0 < C < 1; default 0.95)")
    estimates.add_argument("--nonnegative", action="store_true",
                           help="table: show max(0, x) of estimates and bounds (a count is never negative); "
                                "--format json/csv keep the unbiased values")
    estimates.set_defaults(func=run_estimates)
    certify = subparsers.add_parser(
        "certify", help="one-sided certificates: safe (count <= T) or obscure",
        description="For each candidate of an asymmetric (one-sided) metric in one window: 'safe' when its count is "
                    "certified at most --threshold (wrong with probability at most --alpha), else 'obscure' "
                    "(nothing is claimed). Needs an analyst token. Example: onesided certify places "
                    "--threshold 100 --alpha 0.05 --window 2026-11-20")
    _add_collection_options(certify)
    certify.add_argument("--threshold", type=int, required=True, metavar="T",
                         help="a whole number of clients: safe means the true count is <= T")
    certify.add_argument("--alpha", type=float, required=True, metavar="P",
                         help="chance, per candidate, that 'safe' is wrong (0 <= P < 1); 0: never wrong")
    certify.set_defaults(func=run_certify)


def _add_collection_options(parser: argparse.ArgumentParser) -> None:
    add_server_options(parser)
    parser.add_argument("name", metavar="NAME", help="the metric's name (onesided metric list)")
    add_window_option(parser)
    add_round_option(parser)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--candidates", metavar="A,B,...",
                        help="comma-separated values to decode (default: a direct metric's whole domain; "
                             "required for Bloom metrics)")
    source.add_argument("--candidates-file", type=Path, metavar="FILE",
                        help="the values to decode, one per line (blank lines skipped); for long lists or "
                             "values holding a comma")
    add_format_option(parser)


def candidates_from_args(args: argparse.Namespace) -> list[str] | None:
    """``--candidates a,b`` or the lines of ``--candidates-file`` (``None``: neither given).

    Raises:
        ParameterError: the file cannot be read (field ``candidates_file``).
    """
    if args.candidates is not None:
        return [c for c in args.candidates.split(",") if c]
    if args.candidates_file is None:
        return None
    try:
        text = args.candidates_file.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ParameterError("candidates_file", f"cannot read {args.candidates_file}: {exc}") from None
    return [line for line in text.splitlines() if line.strip()]


def fetch(args: argparse.Namespace, path: str, fields: dict[str, Any]) -> Any:
    """GET with a query string, or POST a JSON body when the candidates do not fit a URL."""
    fields = {k: v for k, v in fields.items() if v is not None}
    candidates = fields.get("candidates")
    client = client_from_args(args)
    if candidates is not None and (
        sum(len(c) + 1 for c in candidates) > MAX_QUERY_CANDIDATE_CHARS or any("," in c for c in candidates)
    ):
        return client.post(path, fields)
    if candidates is not None:
        fields["candidates"] = ",".join(candidates)
    return client.get(path, fields)


def _collection_fields(args: argparse.Namespace) -> dict[str, Any]:
    return {"window": args.window, "round": args.round, "candidates": candidates_from_args(args)}


def estimates_table(body: dict[str, Any], *, nonnegative: bool = False) -> str:
    """Estimates for people: one line per candidate, and a note on negative estimates."""
    from aggregator.analysis.tables import display_rows
    from aggregator.cli.render import table

    rows = body.get("rows")
    if rows is None:
        return ""
    shown = display_rows(rows) if nonnegative else rows
    text = table(shown, ["candidate", "estimate", "std_error", "lower", "upper", "p_value", "detected"])
    text += f"{body.get('detected', 0)} of {len(rows)} candidates detected (family level {body.get('alpha')}, " \
            f"{body.get('correction')}); interval: {body.get('confidence')} confidence\n"
    negative = sum(1 for r in rows if r.get("estimate") is not None and r["estimate"] < 0)
    if negative and not nonnegative:
        text += (f"note: {negative} estimates are negative: each is unbiased, so small counts scatter around "
                 "their true value on both sides; --nonnegative shows max(0, x)\n")
    return text


def certificates_table(body: dict[str, Any]) -> str:
    """Certificates for people: one line per candidate, then the count of safe ones."""
    from aggregator.cli.render import table

    rows = body.get("rows")
    if rows is None:
        return ""
    return table(rows, ["candidate", "upper_bound", "verdict"]) + (
        f"{body.get('safe', 0)} of {len(rows)} safe: count <= {body.get('threshold')} "
        f"(wrong with probability <= {body.get('alpha')} each)\n")


def run_estimates(args: argparse.Namespace) -> int:
    fields = {**_collection_fields(args), "alpha": args.alpha, "correction": args.correction,
              "confidence": args.confidence}
    from aggregator.analysis.tables import estimates_csv

    return print_answer(fetch(args, f"/v1/metrics/{args.name}/estimates", fields), args.format, estimates_csv,
                        lambda body: estimates_table(body, nonnegative=args.nonnegative))


def run_certify(args: argparse.Namespace) -> int:
    fields = {**_collection_fields(args), "threshold": args.threshold, "alpha": args.alpha}
    from aggregator.analysis.tables import certificates_csv

    return print_answer(fetch(args, f"/v1/metrics/{args.name}/certificates", fields), args.format,
                        certificates_csv, certificates_table)

