"""Who sent a request and which one it is: the client address behind trusted proxies, and a request id.

* ``X-Forwarded-For`` is believed only from the proxies the operator lists
  (setting ``trusted_proxies``: addresses or networks): the client is the
  right-most address of the chain that is not one of them, so a client
  cannot forge its address by sending the header itself. The rest of the
  server (rate limits, access log, audit rows) sees it as ``REMOTE_ADDR``.
* Every request gets an id (``X-Request-Id`` from a trusted proxy when it
  sent a sane one, else 16 random bytes in hex): it is on the response
  (``X-Request-Id``) and on every log line written while the request runs.

>>> trusted = parse_networks("10.0.0.0/8")
>>> forwarded_client("10.1.1.1", "198.51.100.7, 10.2.2.2", trusted)
'198.51.100.7'
>>> forwarded_client("203.0.113.9", "198.51.100.7", trusted)  # not from a trusted proxy: ignored
'203.0.113.9'
"""

from __future__ import annotations

import contextvars
import ipaddress
import logging
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

from protocol.errors import ParameterError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
REQUEST_ID_HEADER = "X-Request-Id"
_SANE_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("onesided_request_id", default=None)


def parse_networks(text: str) -> tuple[Network, ...]:
    """Comma-separated addresses or networks (``10.0.0.0/8, ::1``).

    Raises:
        ParameterError: field ``trusted_proxies``.
    """
    networks = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError as exc:
            raise ParameterError("trusted_proxies", f"{item!r} is not an address or network: {exc}") from None
    return tuple(networks)


def _trusted(address: str, trusted: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip().split("%", 1)[0])
    except ValueError:
        return False
    return any(ip in network for network in trusted)


def forwarded_client(remote: str, forwarded_for: str | None, trusted: tuple[Network, ...]) -> str:
    """The client's address: ``remote``, or the right-most untrusted hop of ``X-Forwarded-For`` behind a trusted proxy."""
    if not forwarded_for or not _trusted(remote, trusted):
        return remote
    hops = [hop.strip() for hop in forwarded_for.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, trusted):
            try:
                return str(ipaddress.ip_address(hop))
            except ValueError:
                return remote  # a garbled hop: trust nothing beyond the proxy
    return hops[0] if hops else remote


def stamp_log_records() -> None:
    """Give every log record made while a request runs its ``request_id`` (once per process; idempotent)."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, "stamps_request_ids", False):
        return

    def stamped(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        record.request_id = REQUEST_ID.get()
        return record

    stamped.stamps_request_ids = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(stamped)


def request_middleware(app: WsgiApp, trusted: tuple[Network, ...] = ()) -> WsgiApp:
    """Wrap ``app``: the forwarded client address as ``REMOTE_ADDR``, a request id on the response and the logs."""
    stamp_log_records()

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        remote = environ.get("REMOTE_ADDR") or ""
        from_proxy = bool(trusted) and _trusted(remote, trusted)
        if from_proxy:
            environ["onesided.proxy_addr"] = remote
            environ["REMOTE_ADDR"] = forwarded_client(remote, environ.get("HTTP_X_FORWARDED_FOR"), trusted)
        offered = environ.get("HTTP_X_REQUEST_ID", "")
        request_id = offered if from_proxy and _SANE_ID.match(offered) else os.urandom(16).hex()
        environ["onesided.request_id"] = request_id

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, [*headers, (REQUEST_ID_HEADER, request_id)], *(
                (exc_info,) if exc_info is not None else ()))

        token = REQUEST_ID.set(request_id)
        try:
            return app(environ, start)
        finally:
            REQUEST_ID.reset(token)

    return wrapped
