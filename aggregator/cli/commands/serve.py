"""``onesided serve``: run the aggregator (see ``aggregator.server.serve``).

Before the server's log lines (``--log-format text``), two lines on stderr say where it will listen,
with how many workers and threads, which database (password hidden) and key
directory it uses, and how to stop it or reload its keys.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from aggregator.cli.options import Subparsers, add_storage_options, settings_from_args

if TYPE_CHECKING:
    from aggregator.server.settings import Settings


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("serve", help="run the aggregator HTTP server")
    add_storage_options(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (PostgreSQL only; default 1)")
    parser.add_argument("--threads", type=int, default=4, help="threads per worker (default 4)")
    parser.add_argument("--allow-plaintext", action="store_true", default=None,
                        help="accept unsealed reports (simulations only)")
    parser.add_argument("--max-reports", type=int, help="most reports per batch (default 10000)")
    parser.add_argument("--max-body-bytes", type=int, help="largest request body in bytes (default 16 MiB)")
    parser.add_argument("--decrypt-processes", type=int,
                        help="helper processes opening sealed reports of large batches (default 0; try 2 on SQLite)")
    parser.add_argument("--decode-processes", type=int,
                        help="helper processes running analysts' fits off the request threads (default 1; "
                             "0: in the request thread)")
    parser.add_argument("--max-decode-cells", type=int,
                        help="most candidates x (cohort, bit) rows one estimate may decode (default 4000000)")
    parser.add_argument("--read-timeout", type=float,
                        help="seconds a whole request may take to arrive, from its first byte (default 30; "
                             "then 408 and closed); env ONESIDED_READ_TIMEOUT")
    parser.add_argument("--db-wait", type=float,
                        help="seconds to wait for an unreachable PostgreSQL at start, retrying (default 30); "
                             "env ONESIDED_DB_WAIT")
    parser.add_argument("--header-timeout", type=float,
                        help="seconds a request's headers may take to arrive (default 10); env ONESIDED_HEADER_TIMEOUT")
    parser.add_argument("--idle-timeout", type=float,
                        help="seconds an idle kept-alive connection stays open (default 15); env ONESIDED_IDLE_TIMEOUT")
    parser.add_argument("--max-connections", type=int,
                        help="open connections per worker process (default 1000); env ONESIDED_MAX_CONNECTIONS")
    parser.add_argument("--max-connections-per-address", type=int,
                        help="open connections from one client address per worker (default 64; 0: no cap, "
                             "e.g. behind a reverse proxy); env ONESIDED_MAX_CONNECTIONS_PER_ADDRESS")
    parser.add_argument("--sync-interval", type=int,
                        help="seconds the signed config asks clients to wait before fetching it again (60 to "
                             "604800; default: not said, the SDK re-syncs hourly); env ONESIDED_SYNC_INTERVAL")
    parser.add_argument("--timeout", type=int, default=120,
                        help="gunicorn: a worker silent this long is restarted (default 120)")
    parser.add_argument("--graceful-timeout", type=int, default=20,
                        help="gunicorn: seconds a stopping worker may finish its requests (default 20)")
    parser.add_argument("--allow-shared-data-dir", action="store_true", default=None,
                        help="serve even if group or others may use the data directory (refused by default)")
    parser.add_argument("--rate-limit-per-address", type=float,
                        help="requests a second one client address may make per worker, bursts of twice that; "
                             "more get 429 + Retry-After (default 0: off); env ONESIDED_RATE_LIMIT_PER_ADDRESS")
    parser.add_argument("--rate-limit-per-token", type=float,
                        help="requests a second one bearer token may make per worker (default 0: off); "
                             "env ONESIDED_RATE_LIMIT_PER_TOKEN")
    parser.add_argument("--trusted-proxies",
                        help="comma-separated addresses or networks of reverse proxies whose X-Forwarded-For "
                             "names the client (default none); env ONESIDED_TRUSTED_PROXIES")
    parser.add_argument("--init", action="store_true",
                        help="create new keys (and database) if the data folder has none (SQLite; refused "
                             "otherwise, so that a typo cannot start a second aggregator)")
    parser.add_argument("--new-database", action="store_true",
                        help="start an empty SQLite database although these keys served one at that path "
                             "that is now missing (its acknowledged reports are lost)")
    parser.add_argument("--log-format", choices=("text", "json"), default="text",
                        help="log lines as text (default) or one JSON object each")
    parser.add_argument("--access-log", action="store_true", default=None,
                        help="a line per request (off by default); env ONESIDED_ACCESS_LOG=1")
    parser.add_argument("--access-log-addresses", choices=("truncated", "full", "none"), default=None,
                        help="client addresses in the access log: truncated to /24 (IPv4) or /48 (IPv6) "
                             "(default), full, or none; env ONESIDED_ACCESS_LOG_ADDRESSES")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aggregator.server.initialisation import check_initialised
    from aggregator.server.private_files import prepare_data_dir
    from aggregator.server.serve import check_port, check_workers, serve

    settings = settings_from_args(
        args,
        allow_plaintext=args.allow_plaintext,
        max_reports=args.max_reports,
        max_body_bytes=args.max_body_bytes,
        decrypt_processes=args.decrypt_processes,
        read_timeout_seconds=args.read_timeout,
        header_timeout_seconds=args.header_timeout,
        db_wait_seconds=args.db_wait,
        idle_timeout_seconds=args.idle_timeout,
        max_connections=args.max_connections,
        max_connections_per_address=args.max_connections_per_address,
        decode_processes=args.decode_processes,
        max_decode_cells=args.max_decode_cells,
        allow_shared_data_dir=args.allow_shared_data_dir,
        sync_interval=args.sync_interval,
        trusted_proxies=args.trusted_proxies,
        rate_limit_per_address=args.rate_limit_per_address,
        rate_limit_per_token=args.rate_limit_per_token,
    )
    check_workers(settings, args.workers)  # a refusal is one line, before the start-up lines
    check_initialised(settings, init=args.init, new_database=args.new_database)  # before any folder is made
    check_port(args.host, args.port)
    if settings.uses_data_dir:  # so is a data directory it cannot use (the server prepares it again: idempotent)
        prepare_data_dir(settings.data_dir, allow_shared=settings.allow_shared_data_dir)
    if args.log_format == "text":  # JSON logs are for machines: every stderr line stays one JSON object
        print(start_lines(settings, args), file=sys.stderr, flush=True)
    serve(settings, host=args.host, port=args.port, workers=args.workers, threads=args.threads,
          timeout=args.timeout, graceful_timeout=args.graceful_timeout, log_format=args.log_format,
          access_log=args.access_log, access_log_addresses=args.access_log_addresses, init=args.init,
          new_database=args.new_database)
    return 0


def start_lines(settings: Settings, args: argparse.Namespace) -> str:
    """What a person starting the server reads first: the address, the processes, the database and the keys."""
    from sqlalchemy.engine import make_url

    host = f"[{args.host}]" if ":" in args.host else args.host
    database = make_url(settings.database_url).render_as_string(hide_password=True)
    workers = f"{args.workers} worker{'s' if args.workers != 1 else ''} x {args.threads} threads"
    return (f"onesided serve: http://{host}:{args.port} ({workers}), database {database}, "
            f"keys in {settings.key_path}\n"
            "Ctrl-C or SIGTERM stops it gracefully; SIGHUP to this process reloads the keys; log lines follow")
