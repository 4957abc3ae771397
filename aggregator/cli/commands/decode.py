"""``onesided estimates|certify|decode-rappor``: decoding for analysts.

``estimates`` and ``certify`` call the HTTP API (analyst token; shared
``--server`` / ``--token``); ``--format csv`` prints the rows as CSV, built
from the JSON answer by the same function the server uses for
``format=csv``. When no number may be released (``min_batch_size``) the
server's ``reason`` goes to stderr and the exit code is still 0.
Candidate lists that would make a long URL, or hold a comma, are sent as
a JSON body (``POST``) instead of a query string.

``decode-rappor`` decodes google/rappor's files offline
(:func:`aggregator.analysis.rappor_io.main_decode_rappor`; its own options):
params / counts / map for one variable, or the reports / schema / params
folder / maps of RAPPOR's ``decode-assoc`` for the joint of two.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from aggregator.cli.options import Subparsers, add_server_options, client_from_args, print_answer
from protocol.errors import ParameterError

MAX_QUERY_CANDIDATE_CHARS = 1500  # longer lists go in a POST body (gunicorn limits a request line to 4 KiB)


def register(subparsers: Subparsers) -> None:
    estimates = subparsers.add_parser("estimates", help="decoded counts of candidates (HTTP API)")
    _add_collection_options(estimates)
    estimates.add_argument("--alpha", type=float, help="family level of the detections (default 0.05)")
    estimates.add_argument("--correction", choices=("bonferroni", "bh"), help="default bonferroni")
    estimates.set_defaults(func=run_estimates)
    certify = subparsers.add_parser("certify", help="one-sided certificates: safe (count <= T) or obscure")
    _add_collection_options(certify)
    certify.add_argument("--threshold", type=int, required=True, help="safe means count <= threshold")
    certify.add_argument("--alpha", type=float, required=True,
                         help="P(safe and count > threshold) <= alpha per candidate; 0: never wrong")
    certify.set_defaults(func=run_certify)
    rappor = subparsers.add_parser(
        "decode-rappor", help="decode RAPPOR files: --params P --counts C --map M, or decode-assoc's "
        "--reports R --schema S --params-dir D --metric-name M --var1 X --var2 Y [--map1 F]",
        add_help=False, prefix_chars="+",  # every argument, -h included, goes to main_decode_rappor
    )
    rappor.add_argument("arguments", nargs="*", help=argparse.SUPPRESS)
    rappor.set_defaults(func=run_decode_rappor)


def _add_collection_options(parser: argparse.ArgumentParser) -> None:
    add_server_options(parser)
    parser.add_argument("name", help="the metric")
    parser.add_argument("--window", type=int, help="window start (default: the latest decodable window)")
    parser.add_argument("--round", type=int,
                        help="0 or a round id (default: the latest finished round with enough reports, else 0)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--candidates", help="comma-separated values (required for Bloom metrics)")
    source.add_argument("--candidates-file", type=Path, help="one candidate per line (blank lines skipped)")
    parser.add_argument("--format", choices=("json", "csv"), default="json", help="output (default json)")


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


def run_estimates(args: argparse.Namespace) -> int:
    fields = {**_collection_fields(args), "alpha": args.alpha, "correction": args.correction}
    from aggregator.analysis.tables import estimates_csv

    return print_answer(fetch(args, f"/v1/metrics/{args.name}/estimates", fields), args.format, estimates_csv)


def run_certify(args: argparse.Namespace) -> int:
    fields = {**_collection_fields(args), "threshold": args.threshold, "alpha": args.alpha}
    from aggregator.analysis.tables import certificates_csv

    return print_answer(fetch(args, f"/v1/metrics/{args.name}/certificates", fields), args.format, certificates_csv)


def run_decode_rappor(args: argparse.Namespace) -> int:
    from aggregator.analysis.rappor_io import main_decode_rappor
    return main_decode_rappor(args.arguments)
