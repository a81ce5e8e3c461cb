"""Response headers for the browser pages and the operator side: ``/ops`` (pages, feed, static
files), the tenant console ``/console`` and ``/v1/admin``.

* ``Cache-Control: no-store`` on both: their replies carry key secrets (a new key is shown once)
  and tenants' data, which no browser or proxy cache should keep.
* On ``/ops`` and ``/console`` besides: a Content-Security-Policy that lets a page load only
  the site's own script, styles and data (so an injected ``<script>`` or ``onerror`` would not
  run) and be framed by no page (``frame-ancestors 'none'``, and ``X-Frame-Options: DENY`` for
  older browsers): the session cookie is ``SameSite=Strict``, which does not stop a page of a
  sibling subdomain from framing the key actions under a decoy (clickjacking).
* ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: no-referrer`` on both.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_BOTH = [
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]
_OPS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        b" connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    (b"x-frame-options", b"DENY"),
]


class OperatorHeaders:
    """ASGI middleware adding those headers to every reply under ``/ops``, ``/console`` and ``/v1/admin``
    (any header a route set itself, such as its own Cache-Control, is replaced)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "") if scope["type"] == "http" else ""
        if path in ("/ops", "/console") or path.startswith(("/ops/", "/console/")):
            added = _BOTH + _OPS
        elif path == "/v1/admin" or path.startswith("/v1/admin/"):
            added = _BOTH
        else:
            await self.app(scope, receive, send)
            return
        names = {name for name, _ in added}

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": kept + added}
            await send(message)

        await self.app(scope, receive, with_headers)
