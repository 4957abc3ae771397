"""A small HTTP client of the aggregator's API: the CLI's admin and analyst commands, ``doctor``,
the demo (which drives its in-process aggregator with it) and scripts.

A module of its own under both the CLI and the demo, so the demo imports it without climbing
into the CLI (its old path, ``aggregator.cli.api_client``, still works).

``ApiClient(server, token)`` defaults to ``ONESIDED_SERVER`` and
``ONESIDED_TOKEN``. An error answer raises :class:`ApiRequestError` with the
server's ``{"error", "field", "detail"}``; no retries (an operator re-runs
the command). Devices upload through ``client_sdk.transport`` instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import requests

from protocol.errors import OnesidedError, ParameterError

DEFAULT_SERVER = "http://127.0.0.1:8080"


class ApiRequestError(OnesidedError):
    """The aggregator answered with an error, or could not be reached."""

    code = "api_error"

    def __init__(self, detail: str, *, status: int | None = None, code: str | None = None, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.field = field
        if code is not None:
            self.code = code


class ApiClient:
    """Calls ``/v1/...`` on one aggregator with a bearer token.

    Args:
        server: base URL; default ``$ONESIDED_SERVER`` or ``http://127.0.0.1:8080``.
        token: bearer token; default ``$ONESIDED_TOKEN`` (``None``: public routes only).
        timeout: per-request timeout in seconds.
        session: a ``requests.Session`` to reuse.
    """

    def __init__(
        self,
        server: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        session: requests.Session | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        base = server or env.get("ONESIDED_SERVER") or DEFAULT_SERVER
        if not base.startswith(("http://", "https://")):
            raise ParameterError("server", f"must be an http(s) URL, got {base!r}")
        self.server = base.rstrip("/")
        self.token = token or env.get("ONESIDED_TOKEN") or None
        self.timeout = timeout
        self.session = session or requests.Session()

    def request(self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None) -> Any:
        """Send one request; return the decoded JSON body of a 2xx answer.

        Raises:
            ApiRequestError: unreachable server, or a 4xx/5xx answer (with its code and field).
        """
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        url = self.server + path
        try:
            response = self.session.request(
                method, url, json=json, params=params, headers=headers, timeout=self.timeout
            )
        except requests.ConnectionError:
            raise ApiRequestError(
                f"{method} {url}: ConnectionError: no aggregator answers at {self.server} "
                "(is it running? choose another with --server or ONESIDED_SERVER)"
            ) from None
        except requests.RequestException as exc:
            raise ApiRequestError(f"{method} {url}: {type(exc).__name__}: {exc}") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.ok:
            return body
        if isinstance(body, dict) and "error" in body:
            where = f" ({body.get('field')})" if body.get("field") else ""
            raise ApiRequestError(
                f"HTTP {response.status_code} {body['error']}{where}: {body.get('detail')}",
                status=response.status_code, code=str(body["error"]), field=body.get("field"),
            )
        raise ApiRequestError(f"HTTP {response.status_code} from {method} {url}", status=response.status_code)

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, json=body)


__all__ = ["DEFAULT_SERVER", "ApiClient", "ApiRequestError"]
