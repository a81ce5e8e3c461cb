"""A tenant's console session: an HTTP-only cookie naming a session that lives in Redis.

Signing in with a tenant's API key writes ``taas:console:session:<nonce>`` to Redis (shared by
every API replica, expiring with the cookie) holding the key's stored digest and the session's
CSRF token; the cookie ``taas_console`` carries only the nonce (unguessable: 192 random bits),
is ``HttpOnly``, ``SameSite=Strict`` and ``Secure`` over HTTPS. The key itself never travels
again. The session speaks for the key: the ``/v1`` routes accept it instead of one
(:func:`service.api.deps.TenantDep`), every request looks the key up, so revoking the key ends
its sessions at once, and every request that changes anything must carry the CSRF token in
``X-CSRF-Token`` (or the ``csrf`` field of the logout form). Signing out deletes the session on
the server, so a copied cookie is refused after it. When Redis cannot be reached no session is
valid (fail closed): :class:`SessionStoreDown`, a 503 that says so.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from fastapi import Request, Response
from sqlalchemy.orm import Session

from service.core.errors import Forbidden, ServiceUnavailable
from service.core.models import Tenant
from service.tenants.accounts import tenant_for_key_hash

log = logging.getLogger(__name__)

COOKIE = "taas_console"
CSRF_HEADER = "X-CSRF-Token"
SESSION_SECONDS = 8 * 3600
KEY_PREFIX = "taas:console:session:"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_NONCE = re.compile(r"[A-Za-z0-9_-]{32}")  # token_urlsafe(24)


class SessionStoreDown(ServiceUnavailable):
    """Redis, which holds the live sessions, cannot be reached or is not configured."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the console cannot check sessions: {reason}; no session is valid until it is back")


@dataclass(frozen=True)
class ConsoleSession:
    """A live console session: its nonce, the digest of the key it speaks for, its CSRF token."""

    nonce: str
    key_hash: str
    csrf: str


def start(response: Response, request: Request, key_hash: str) -> None:
    """Record a fresh session for the key whose digest is ``key_hash`` and set its cookie on
    ``response`` (the caller has checked the key). SessionStoreDown when Redis cannot take it."""
    nonce = secrets.token_urlsafe(24)
    record = json.dumps({"key": key_hash, "csrf": secrets.token_urlsafe(24)})
    with _store(request) as store:
        store.set(KEY_PREFIX + nonce, record, ex=SESSION_SECONDS)
    response.set_cookie(
        COOKIE,
        nonce,
        max_age=SESSION_SECONDS,
        path="/",  # the console's script calls /v1 with it
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def current(request: Request) -> ConsoleSession | None:
    """The request's live session, or None (no cookie, a malformed one, expired or signed out).
    SessionStoreDown when a cookie came and Redis cannot be reached to tell."""
    nonce = request.cookies.get(COOKIE, "")
    if not _NONCE.fullmatch(nonce):
        return None
    with _store(request) as store:
        raw = store.get(KEY_PREFIX + nonce)
    if raw is None:
        return None
    record = json.loads(raw)
    return ConsoleSession(nonce, str(record["key"]), str(record["csrf"]))


def key_digest(request: Request) -> str | None:
    """The digest of the key the request's console session speaks for (None without one);
    Forbidden for a request that changes something without the session's CSRF token."""
    found = current(request)
    if found is None:
        return None
    if request.method not in SAFE_METHODS:
        check_csrf(found, request.headers.get(CSRF_HEADER))
    return found.key_hash


def tenant(request: Request, db: Session) -> Tenant | None:
    """The tenant of :func:`key_digest` (None without a session, or when its key was revoked)."""
    digest = key_digest(request)
    return None if digest is None else tenant_for_key_hash(db, digest)


def check_csrf(session: ConsoleSession, token: str | None) -> None:
    """Forbidden unless ``token`` is the session's CSRF token."""
    if not token or not hmac.compare_digest(token.encode("utf-8", "surrogatepass"), session.csrf.encode()):
        raise Forbidden("missing or wrong CSRF token; reload the page")


def revoke(request: Request, session: ConsoleSession) -> None:
    """End ``session`` on the server: no copy of its cookie is accepted again."""
    with _store(request) as store:
        store.delete(KEY_PREFIX + session.nonce)


def end(response: Response) -> None:
    """Delete the session cookie."""
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")


def check_store(request: Request) -> None:
    """SessionStoreDown unless Redis answers: the sign-in form says so before a key is typed."""
    with _store(request) as store:
        store.ping()


@contextmanager
def _store(request: Request) -> Iterator[redis.Redis]:
    client: redis.Redis | None = request.app.state.redis
    if client is None:
        raise SessionStoreDown("no Redis is configured (TAAS_REDIS_URL), and sessions live there")
    try:
        yield client
    except redis.RedisError as error:
        log.warning("console sessions: Redis is unreachable: %s", error)
        raise SessionStoreDown("Redis is unreachable (the API's log says why)") from error
