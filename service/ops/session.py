"""The administrator's dashboard session: a signed, HTTP-only cookie, and its CSRF token.

Logging in with the admin key sets ``taas_ops`` = ``<expires>.<nonce>.<signature>``, signed
with HMAC-SHA256 under a key derived from the admin key, so every API replica accepts it
without shared state, and changing the admin key ends every session. The key itself never
travels again: not in the cookie, not in a URL. The cookie is ``HttpOnly``, ``SameSite=Strict``,
scoped to ``/ops`` and ``Secure`` over HTTPS. Every state-changing request also carries the
session's CSRF token (an HMAC of its nonce) in a form field or the ``X-CSRF-Token`` header.
Logout deletes the cookie; a copied cookie stays valid until it expires (``SESSION_SECONDS``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request, Response

from service.errors import Forbidden, TaasError
from service.settings import Settings

COOKIE = "taas_ops"
CSRF_HEADER = "X-CSRF-Token"
SESSION_SECONDS = 8 * 3600


class NoSession(TaasError):
    """An ops data request without a valid session (401 without a Basic challenge, so that a
    browser shows no password dialog)."""

    status, title = 401, "Unauthorized"


@dataclass(frozen=True)
class OpsSession:
    """A valid administrator session."""

    nonce: str
    expires: int
    csrf: str


def start(response: Response, request: Request, settings: Settings) -> None:
    """Set a fresh session cookie on ``response`` (the caller has checked the admin key)."""
    expires = int(time.time()) + SESSION_SECONDS
    payload = f"{expires}.{secrets.token_urlsafe(18)}"
    response.set_cookie(
        COOKIE,
        f"{payload}.{_sign(settings, payload)}",
        max_age=SESSION_SECONDS,
        path="/ops",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def end(response: Response) -> None:
    """Delete the session cookie."""
    response.delete_cookie(COOKIE, path="/ops", httponly=True, samesite="strict")


def current(request: Request) -> OpsSession | None:
    """The request's valid session, or None (no cookie, bad signature, expired, no admin key)."""
    settings: Settings = request.app.state.settings
    expires, _, rest = request.cookies.get(COOKIE, "").partition(".")
    nonce, _, signature = rest.partition(".")
    if not (settings.admin_key and expires.isdigit() and nonce and signature):
        return None
    if not hmac.compare_digest(signature, _sign(settings, f"{expires}.{nonce}")):
        return None
    if int(expires) < time.time():
        return None
    return OpsSession(nonce, int(expires), _sign(settings, f"csrf.{nonce}"))


def check_csrf(session: OpsSession, token: str | None) -> None:
    """Raise Forbidden unless ``token`` is the session's CSRF token."""
    if not token or not hmac.compare_digest(token, session.csrf):
        raise Forbidden("missing or wrong CSRF token; reload the page")


def _required(request: Request) -> OpsSession:
    found = current(request)
    if found is None:
        raise NoSession("log in at /ops/login with the admin key")
    return found


def _required_with_csrf(request: Request, session: Annotated[OpsSession, Depends(_required)]) -> OpsSession:
    check_csrf(session, request.headers.get(CSRF_HEADER))
    return session


SessionDep = Annotated[OpsSession, Depends(_required)]
"""An ops data route: 401 without a session."""
CsrfSessionDep = Annotated[OpsSession, Depends(_required_with_csrf)]
"""A state-changing ops data route: 401 without a session, 403 without its CSRF header."""


def _sign(settings: Settings, payload: str) -> str:
    assert settings.admin_key is not None
    key = hashlib.sha256(b"taas-ops-session\0" + settings.admin_key.encode()).digest()
    return hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()
