"""``onesided doctor``: is this set-up ready? The server, the token's role and the pinned key, in one go.

Three checks, each one line (``ok``, ``FAIL`` with what to do, or ``skip``
when its input is not given), and exit code 0 when none failed, 1 otherwise:

1. **server**: ``GET /v1/health`` answers (its status and database);
2. **token**: the server knows the token (``GET /v1/metrics``, analyst or
   admin) and whether it may administer (``POST /v1/metrics`` with an empty
   body: an admin token hears "invalid", an analyst token "forbidden";
   nothing is registered either way);
3. **key**: the signed ``GET /v1/config`` verifies with the pinned key, as
   every client checks it before it sends anything.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from aggregator.cli.options import Subparsers, add_server_options, client_from_args

Check = tuple[str, str, str]  # (name, "ok" | "FAIL" | "skip", what it found or what to do)


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "doctor", help="check a set-up in one go: server reachable, token role, pinned key",
        description="Check that the aggregator answers, what the token may do, and that the pinned key "
                    "verifies the server's signed config. Exit code 0 when no check failed, 1 otherwise.",
    )
    add_server_options(parser)
    parser.add_argument("--server-key", help="the pinned Ed25519 public key to check (base64url, the sign_public "
                        "of `onesided keys show`); env ONESIDED_SERVER_KEY")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    api = client_from_args(args)
    checks = [_server(api)]
    reachable = checks[0][1] == "ok"
    checks.append(_token(api) if reachable else ("token", "skip", "the server does not answer"))
    key = args.server_key or os.environ.get("ONESIDED_SERVER_KEY")
    checks.append(_key(api, key) if reachable else ("key", "skip", "the server does not answer"))
    for name, verdict, text in checks:
        print(f"{name:<7} {verdict:<5} {text}")
    return 1 if any(verdict == "FAIL" for _, verdict, _ in checks) else 0


def _answer(call: Callable[[], Any]) -> tuple[Any, Any]:
    """``(body, None)`` of a 2xx answer, or ``(None, the ApiRequestError)``."""
    from aggregator.api_client import ApiRequestError

    try:
        return call(), None
    except ApiRequestError as exc:
        return None, exc


def _server(api: Any) -> Check:
    body, error = _answer(lambda: api.get("/v1/health"))
    if error is not None:
        return "server", "FAIL", str(error)
    state = body.get("status")
    verdict = "ok" if state in ("ok", "degraded") else "FAIL"
    problems = "; ".join(str(p.get("detail")) for p in body.get("problems") or [])
    return "server", verdict, (f"{api.server} answers: {state}, database {body.get('database')}"
                               + (f" ({problems})" if problems else ""))


def _token(api: Any) -> Check:
    if not api.token:
        return "token", "skip", "no token given (--token or ONESIDED_TOKEN)"
    _, error = _answer(lambda: api.get("/v1/metrics"))
    if error is not None:
        if error.status == 401:
            return "token", "FAIL", "the server does not know this token (mistyped or revoked? onesided token list)"
        return "token", "FAIL", str(error)
    _, refused = _answer(lambda: api.post("/v1/metrics", {}))
    if refused is not None and refused.status == 403:
        return "token", "ok", "role analyst: reads estimates and releases; cannot create metrics or rounds"
    if refused is not None and refused.status in (400, 422):
        return "token", "ok", "role admin: creates metrics, rounds and releases"
    return "token", "FAIL", f"unexpected answer to an empty metric: {refused or 'accepted'}"


def _key(api: Any, key: str | None) -> Check:
    from protocol.crypto import b64d
    from protocol.errors import OnesidedError
    from protocol.wire import verify_config

    if not key:
        return "key", "skip", "no pinned key given (--server-key or ONESIDED_SERVER_KEY)"
    document, error = _answer(lambda: api.get("/v1/config"))
    if error is not None:
        return "key", "FAIL", str(error)
    try:
        verify_config(document, sign_public=b64d(key, "server_key"))
    except OnesidedError as exc:
        return "key", "FAIL", (f"the server's config does not verify with this key ({exc}): pin the sign_public "
                               "that `onesided keys show` prints on the server (keys rotated?)")
    return "key", "ok", "the server's signed config verifies with the pinned key"
