"""The administrator's dashboard session: a signed, HTTP-only cookie, and its CSRF token.

Logging in with the admin key sets ``taas_ops`` = ``<expires>.<nonce>.<signature>``, signed
with HMAC-SHA256 under a key derived from the admin key, so changing the admin key ends every
session. The key itself never travels again: not in the cookie, not in a URL. The cookie is
``HttpOnly``, ``SameSite=Strict``, scoped to ``/ops`` and ``Secure`` over HTTPS. Every
state-changing request also carries the session's CSRF token (an HMAC of its nonce) in a form
field or the ``X-CSRF-Token`` header.

A session is also live on the server: login writes ``taas:ops:session:<nonce>`` to Redis, shared
by every API replica, expiring with the cookie (``SESSION_SECONDS``), and logout deletes it, so a
copied cookie is refused after logout. A cookie whose key is gone is no session. When Redis
cannot be reached no session is valid (fail closed): :class:`SessionStoreDown`, a 503 that says so.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

import redis
from fastapi import Depends, Request, Response

from service.core.errors import Forbidden, ServiceUnavailable, TaasError
from service.core.settings import Settings

log = logging.getLogger(__name__)

COOKIE = "taas_ops"
CSRF_HEADER = "X-CSRF-Token"
SESSION_SECONDS = 8 * 3600
KEY_PREFIX = "taas:ops:session:"


class NoSession(TaasError):
    """An ops data request without a valid session (401 without a Basic challenge, so that a
    browser shows no password dialog)."""

    status, title = 401, "Unauthorized"


class SessionStoreDown(ServiceUnavailable):
    """Redis, which holds the live sessions, cannot be reached or is not configured: no session
    can be checked, so none is valid."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"the ops dashboard cannot check sessions: {reason}; no session is valid until it is back"
        )


@dataclass(frozen=True)
class OpsSession:
    """A valid administrator session."""

    nonce: str
    expires: int
    csrf: str


def start(response: Response, request: Request, settings: Settings) -> None:
    """Record a fresh session in Redis and set its cookie on ``response`` (the caller has checked
    the admin key). Raises SessionStoreDown when Redis cannot be reached."""
    expires = int(time.time()) + SESSION_SECONDS
    nonce = secrets.token_urlsafe(18)
    with _store(request) as store:
        store.set(KEY_PREFIX + nonce, expires, ex=SESSION_SECONDS)
    payload = f"{expires}.{nonce}"
    response.set_cookie(
        COOKIE,
        f"{payload}.{_sign(settings, payload)}",
        max_age=SESSION_SECONDS,
        path="/ops",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def revoke(request: Request, session: OpsSession) -> None:
    """End ``session`` on the server: no copy of its cookie is accepted again. Raises
    SessionStoreDown when Redis cannot be reached (the session goes on)."""
    with _store(request) as store:
        store.delete(KEY_PREFIX + session.nonce)


def end(response: Response) -> None:
    """Delete the session cookie."""
    response.delete_cookie(COOKIE, path="/ops", httponly=True, samesite="strict")


def current(request: Request) -> OpsSession | None:
    """The request's valid session, or None (no cookie, bad signature, expired, logged out, no
    admin key). Raises SessionStoreDown when Redis cannot be reached to tell."""
    settings: Settings = request.app.state.settings
    expires, _, rest = request.cookies.get(COOKIE, "").partition(".")
    nonce, _, signature = rest.partition(".")
    if not (settings.admin_key and expires.isdigit() and nonce and signature):
        return None
    if not _same(signature, _sign(settings, f"{expires}.{nonce}")):
        return None
    if int(expires) < time.time():
        return None
    with _store(request) as store:
        if not store.exists(KEY_PREFIX + nonce):
            return None
    return OpsSession(nonce, int(expires), _sign(settings, f"csrf.{nonce}"))


def check_store(request: Request) -> None:
    """Raise SessionStoreDown unless Redis, where sessions live, answers: the login form says
    so at once rather than after the key is typed."""
    with _store(request) as store:
        store.ping()


def check_csrf(session: OpsSession, token: str | None) -> None:
    """Raise Forbidden unless ``token`` is the session's CSRF token."""
    if not token or not _same(token, session.csrf):
        raise Forbidden("missing or wrong CSRF token; reload the page")


def _same(sent: str, expected: str) -> bool:
    """Constant-time equality of a value the client sent; compare_digest refuses str with
    non-ASCII characters (a TypeError, so a 500), which a forged cookie or header may hold."""
    return hmac.compare_digest(sent.encode("utf-8", "surrogatepass"), expected.encode())


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


@contextmanager
def _store(request: Request) -> Iterator[redis.Redis]:
    """The app's Redis client; its errors become SessionStoreDown."""
    client: redis.Redis | None = request.app.state.redis
    if client is None:
        raise SessionStoreDown("no Redis is configured (TAAS_REDIS_URL), and sessions live there")
    try:
        yield client
    except redis.RedisError as error:
        log.warning("ops sessions: Redis is unreachable: %s", error)  # its address: not for the page
        raise SessionStoreDown("Redis is unreachable (the API's log says why)") from error


def _sign(settings: Settings, payload: str) -> str:
    assert settings.admin_key is not None
    key = hashlib.sha256(b"taas-ops-session\0" + settings.admin_key.encode()).digest()
    return hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()
