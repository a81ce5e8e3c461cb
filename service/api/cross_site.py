"""Requests a browser makes on another site's behalf, refused before any route runs.

A browser attaches the credentials it holds for taas to requests that any page makes to it:
Basic credentials typed once into its prompt, and the dashboard's session cookie (which is
``SameSite=Strict`` besides). Such a page cannot read taas's replies (taas sends no CORS
headers), but a request that changes something acts all the same: before, a ``text/plain``
POST from any page to ``/v1/webhook_secret`` rotated the visitor's secret. So:

* **No Basic challenge.** A 401 says ``WWW-Authenticate: Bearer realm="taas"``; browsers
  prompt for, and then remember, only the Basic scheme. SDKs, the ``taas`` client and curl send
  their Basic credentials unasked. ``TAAS_BASIC_AUTH_CHALLENGE=true`` brings the Basic
  challenge back for a client that waits for one (:func:`challenge`).
* **Origin check** (:class:`CrossSiteGuard`). A request that may change something (any method
  but GET, HEAD and OPTIONS) that a browser sent for a page of another origin is a 403: its
  ``Sec-Fetch-Site`` is not ``same-origin`` (or ``none``, the user's own navigation), or, from
  a browser without Fetch Metadata, its ``Origin`` is not the service's own (its scheme and
  ``Host``); pages of ``TAAS_TRUSTED_ORIGINS`` excepted. Browsers send these headers with
  every such request and let no page forge them; clients that are not browsers send neither,
  and are not affected.
* **Content types.** A ``/v1`` route reads a body only in the type it reads: JSON
  (``application/json`` or ``…+json``), and on the upload routes also multipart and the data's
  own type (``text/csv``, ``application/gzip``, …). The types a page may send without the
  browser first asking taas's leave (a CORS preflight, which taas never grants):
  ``text/plain``, ``application/x-www-form-urlencoded`` and, outside the upload routes,
  ``multipart/form-data``, are a 415 naming what to send, and so is a body of no declared
  type. The dashboard's own forms (``/ops``) are checked by their CSRF token instead.

The fast classify path (:mod:`service.api.fast_classify`) answers only JSON bodies, which a page
cannot send across sites without a preflight.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from python_multipart.multipart import parse_options_header
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from service.core.errors import Forbidden, TaasError, UnsupportedMediaType

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
# what a page may send across sites without a preflight (the CORS-safelisted types), besides
# multipart, which the upload routes read
_FORM_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded"})


def challenge(basic: bool) -> str:
    """The ``WWW-Authenticate`` of a 401: Bearer, which no browser prompts for, and Basic too
    only when the operator asks for it (``TAAS_BASIC_AUTH_CHALLENGE``)."""
    return 'Basic realm="taas", Bearer realm="taas"' if basic else 'Bearer realm="taas"'


class CrossSiteGuard:
    """ASGI middleware: the Origin check and the content types above. ``upload_paths`` matches
    (whole) the paths of the routes that take uploads."""

    def __init__(
        self, app: ASGIApp, *, upload_paths: re.Pattern[str], trusted_origins: frozenset[str]
    ) -> None:
        self.app = app
        self.upload_paths = upload_paths
        self.trusted = frozenset(filter(None, (_normal_origin(o) for o in trusted_origins)))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        refused = self._foreign(scope, headers) or self._unreadable(scope, headers)
        if refused is None:
            await self.app(scope, receive, send)
            return
        body = {"code": refused.status, "error": refused.title, "description": str(refused)}
        # the body is not read: the connection goes with the reply
        await JSONResponse(body, status_code=refused.status, headers={"Connection": "close"})(
            scope, receive, send
        )

    def _foreign(self, scope: Scope, headers: dict[bytes, bytes]) -> TaasError | None:
        """Forbidden when a browser sent the request for a page of another origin.

        A browser that sends Fetch Metadata (``Sec-Fetch-Site``: every current one) is taken at
        its word, which no page can forge: the dashboard's own form is sent with ``Origin: null``
        (its pages' ``Referrer-Policy: no-referrer``) and ``Sec-Fetch-Site: same-origin``. An
        older browser's ``Origin`` must be the service's own (or trusted)."""
        origin = headers.get(b"origin")
        fetch_site = headers.get(b"sec-fetch-site")
        normal = None if origin is None else _normal_origin(origin.decode("latin-1"))
        trusted = normal is not None and normal in self.trusted
        if fetch_site is not None:
            if fetch_site.strip().lower() in (b"same-origin", b"none") or trusted:
                return None
        elif origin is None:  # not a browser
            return None
        else:
            own = _normal_origin(
                f"{scope.get('scheme', 'http')}://{headers.get(b'host', b'').decode('latin-1')}"
            )
            if normal is not None and (normal == own or trusted):
                return None
        shown = "an unnamed origin" if origin is None else repr(origin.decode("latin-1"))
        return Forbidden(
            f"cross-site request refused: a page of {shown} sent {scope['method']} {scope['path']}, "
            "which only this service's own pages may (an API client sends no Origin header; the "
            "operator may trust other origins with TAAS_TRUSTED_ORIGINS)"
        )

    def _unreadable(self, scope: Scope, headers: dict[bytes, bytes]) -> TaasError | None:
        """UnsupportedMediaType when a ``/v1`` route would be sent a body in a type it does not read."""
        path: str = scope["path"]
        if not path.startswith("/v1/"):
            return None
        declared = headers.get(b"content-type", b"")
        media, _ = parse_options_header(declared)
        media_type = media.decode("latin-1").lower()
        has_body = _has_body(headers)
        upload = self.upload_paths.fullmatch(path.rstrip("/")) is not None
        if not media_type:
            if not has_body:
                return None
            wanted = _WANTED_UPLOAD if upload else _WANTED_JSON
            return UnsupportedMediaType(f"a body without a Content-Type is not read here: send {wanted}")
        if _is_json(media_type) or (upload and media_type not in _FORM_TYPES):
            return None
        wanted = _WANTED_UPLOAD if upload else _WANTED_JSON
        return UnsupportedMediaType(f"Content-Type {media_type!r} is not read here: send {wanted}")


_WANTED_JSON = "application/json"
_WANTED_UPLOAD = (
    "multipart/form-data, application/json or the data's own type (text/csv, application/gzip, …)"
)


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def _has_body(headers: dict[bytes, bytes]) -> bool:
    length = headers.get(b"content-length", b"").strip()
    if length:
        return not length.isdigit() or int(length) > 0  # a malformed length is the server's to refuse
    return b"transfer-encoding" in headers


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers, each name's first value (as Starlette reads them)."""
    found: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        found.setdefault(name.lower(), value)
    return found


def _normal_origin(origin: str) -> str | None:
    """``scheme://host:port`` in lower case with the scheme's default port made explicit, or None
    when ``origin`` is not one (``null``, a path, garbage)."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return None
    if parts.scheme.lower() not in _DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    return f"{parts.scheme.lower()}://{parts.hostname.lower()}:{port}"
