"""``GET /dashboard``: the analysts' page (docs/dashboard.md), static and token-less.

The page is a few files in ``aggregator/server/dashboard/`` sent as they are: no
server-side data, no template. In the browser it asks for an analyst token
(kept in ``sessionStorage``, sent only as ``Authorization: Bearer`` to the
``/v1`` API, never in a URL) and reads ``/v1/metrics``, ``/v1/metrics/<name>``,
``/v1/rounds/<id>``, the estimates and the certificates (and their CSV), the
caller's releases and budget (``/v1/releases``), and draws them as plain SVG
(docs/dashboard.md).

Every answer of this blueprint carries a strict Content-Security-Policy
(scripts, styles and fetches from this origin only, no inline script or
style, no form submission, no framing), ``X-Content-Type-Options: nosniff``
and ``Referrer-Policy: no-referrer``.

Not part of the ``/v1`` API: ``OPENAPI_PATHS`` is empty.

>>> sorted(ASSETS)
['dashboard.css', 'dashboard.js', 'favicon.svg']
>>> "'unsafe-inline'" in CONTENT_SECURITY_POLICY
False
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from flask import Blueprint, Response

from aggregator.server.errors import NotFound

blueprint = Blueprint("dashboard", __name__)

PAGE = "index.html"
ASSETS: dict[str, str] = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-cache",
}


def asset_bytes(name: str) -> bytes:
    """The bytes of one file of ``aggregator/server/dashboard/`` (the package data)."""
    return resources.files("aggregator.server").joinpath("dashboard", name).read_bytes()


@blueprint.after_request
def _secure(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response


@blueprint.get("/dashboard")
def page() -> Response:
    return Response(asset_bytes(PAGE), content_type="text/html; charset=utf-8")


@blueprint.get("/dashboard/static/<name>")
def asset(name: str) -> Response:
    """One of :data:`ASSETS`; any other name is 404 (no path is ever built from the request)."""
    content_type = ASSETS.get(name)
    if content_type is None:
        raise NotFound("asset", f"the dashboard has no file {name!r}")
    return Response(asset_bytes(name), content_type=content_type)


OPENAPI_PATHS: dict[str, Any] = {}
