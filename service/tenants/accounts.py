"""Tenants and their API keys: issue, rotate, revoke, and authenticate a presented key.

A key is shown once, when issued; only its SHA-256 is stored. Lookup is by hash, and the
stored hash is compared again in constant time. Revoking a key takes effect on the next
request, since every request looks its key up.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import unicodedata
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import String, func, literal, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.core.db import hold_write_lock
from service.core.errors import BadRequest, Conflict, NotFound, Unauthorized
from service.core.models import ApiKey, Tenant
from service.core.settings import Settings
from service.core.text import unprintable

KEY_PREFIX = "taas_"
ADMIN_KEY_PREFIX = "admin_"
BASIC_USER = "apikey"  # what the ibm-watson SDK's BasicAuthenticator/IAM-style config sends


@dataclass(frozen=True)
class IssuedKey:
    """A freshly issued key: ``api_key`` is the secret, never stored and never shown again."""

    key_id: str
    tenant_id: str
    api_key: str


def well_formed_id(ident: str) -> bool:
    """Whether ``ident`` has the form of the ids taas issues (a lower-case UUID string). Anything
    else cannot name a row, so callers answer 404 without asking the database (which keeps odd
    bytes such as NUL away from it)."""
    if len(ident) != 36:
        return False
    try:
        return str(uuid.UUID(ident)) == ident
    except ValueError:
        return False


def hash_key(api_key: str) -> str:
    """The stored form of a key (hex SHA-256)."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


def presented_key(authorization: str | None, x_api_key: str | None) -> str | None:
    """The key a request carries: ``Authorization: Bearer K``, ``X-API-Key: K``, or HTTP Basic
    with user ``apikey`` and password K. None when none is sent; Unauthorized when malformed."""
    if x_api_key:
        return x_api_key.strip()
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() == "bearer":
        if value.strip():
            return value.strip()
        raise Unauthorized("no API key after 'Bearer'")  # was "unsupported Authorization scheme"
    if scheme.lower() == "basic":
        try:
            user, sep, password = (
                base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
            )
        except (binascii.Error, UnicodeDecodeError):
            raise Unauthorized("malformed Basic credentials") from None
        if sep and user == BASIC_USER and password:
            return password
        raise Unauthorized(f"Basic credentials must use the user name '{BASIC_USER}' and the key as password")
    raise Unauthorized("unsupported Authorization scheme: use Bearer, Basic (apikey:KEY) or X-API-Key")


def new_admin_key() -> str:
    """A fresh administrator key.

    The prefix matters: a bare ``token_urlsafe`` starts with '-' once in 64 draws, and a command
    line (``taas login URL KEY``) then reads the key as an option.
    """
    return ADMIN_KEY_PREFIX + secrets.token_urlsafe(32)


def is_admin_key(settings: Settings, api_key: str) -> bool:
    """Whether ``api_key`` is the installation's administrator key (constant-time compare)."""
    if not settings.admin_key:
        return False
    return hmac.compare_digest(hash_key(api_key), hash_key(settings.admin_key))


def tenant_for_key(session: Session, api_key: str) -> Tenant | None:
    """The tenant owning an active (unrevoked) key, or None."""
    return tenant_for_key_hash(session, hash_key(api_key))


def tenant_for_key_hash(session: Session, digest: str) -> Tenant | None:
    """The tenant owning the active key whose stored form (:func:`hash_key`) is ``digest``, or
    None: a console session holds the digest, so a revoked key ends its sessions at once."""
    row = session.execute(
        select(ApiKey.key_hash, Tenant)
        .join(Tenant, Tenant.id == ApiKey.tenant_id)
        .where(ApiKey.key_hash == digest, ApiKey.revoked_at.is_(None))
    ).one_or_none()
    if row is None or not hmac.compare_digest(row.key_hash, digest):
        return None
    return row.Tenant


def tenant_name(name: str) -> str:
    """The name a tenant is stored under: stripped, and NFC-normalised ("é" typed as one code
    point or two is one name, not two tenants that list alike)."""
    return unicodedata.normalize("NFC", name.strip())


def create_tenant(session: Session, name: str, *, max_name_chars: int, now: datetime) -> IssuedKey:
    """Create a tenant with one key; commits. BadRequest on a bad name, Conflict if it is taken."""
    name = tenant_name(name)
    if not name or len(name) > max_name_chars:
        raise BadRequest("name", f"must be 1 to {max_name_chars} characters")
    if problem := unprintable(name):
        raise BadRequest("name", problem)
    tenant = Tenant(name=name, created_at=now)
    session.add(tenant)
    try:
        session.flush()
    except IntegrityError:
        session.rollback()
        raise Conflict(f"a tenant named '{name}' already exists") from None
    issued = _add_key(session, tenant.id, now)
    session.commit()
    return issued


def page_count(total: int, per_page: int) -> int:
    """How many pages of ``per_page`` items ``total`` items fill: one when there are none, so
    a listing always has a first page to show (the admin API's tenants, the dashboard's)."""
    return max(1, -(-total // per_page))


class TenantPage(NamedTuple):
    """One page of a tenant listing, and how many tenants the whole listing has."""

    total: int
    tenants: list[Tenant]
    per_page: int

    @property
    def pages(self) -> int:
        """How many pages the listing has (one, when it is empty)."""
        return page_count(self.total, self.per_page)


def find_tenants(session: Session, *, name: str = "", page: int = 1, per_page: int) -> TenantPage:
    """Page ``page`` (from 1) of the tenants, oldest first, ``per_page`` a page; only those whose
    name contains ``name`` in any case (``%`` and ``_`` taken literally) when it is given.
    BadRequest for a NUL in ``name``: PostgreSQL refused it (a 500), SQLite cut the pattern there
    (every tenant matched).

    ``name`` is NFC-normalised as a stored name is (tenant_name), and both sides are folded by
    the database's own lower(): Python's folded the search ('İ' to 'i̇', a final 'Σ' to 'ς')
    unlike PostgreSQL's folded the names, and a tenant's exact name did not find it there."""
    if "\x00" in name:
        raise BadRequest("name", "must not contain a NUL character")
    query = select(Tenant)
    if name:
        escaped = unicodedata.normalize("NFC", name)
        for special in ("/", "%", "_"):  # '/' first: the escape character escapes itself
            escaped = escaped.replace(special, "/" + special)
        pattern = func.lower(literal(f"%{escaped}%", type_=String))
        query = query.where(func.lower(Tenant.name).like(pattern, escape="/"))
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    ordered = query.order_by(Tenant.created_at, Tenant.id)
    shown = session.scalars(ordered.offset((page - 1) * per_page).limit(per_page)).all()
    return TenantPage(total, list(shown), per_page)


def with_keys(session: Session, tenants: Sequence[Tenant]) -> list[tuple[Tenant, list[ApiKey]]]:
    """Each of ``tenants`` (a page of them: their ids are the query's parameters) with its keys,
    revoked ones included."""
    query = select(ApiKey).where(ApiKey.tenant_id.in_([t.id for t in tenants])).order_by(ApiKey.created_at)
    return _keyed(tenants, session.scalars(query))


def _keyed(tenants: Sequence[Tenant], keys: Iterable[ApiKey]) -> list[tuple[Tenant, list[ApiKey]]]:
    held: dict[str, list[ApiKey]] = {t.id: [] for t in tenants}
    for key in keys:
        held.setdefault(key.tenant_id, []).append(key)
    return [(t, held[t.id]) for t in tenants]


def rotate_key(session: Session, tenant_id: str, *, revoke_others: bool, now: datetime) -> IssuedKey:
    """Issue a new key for the tenant, optionally revoking all its others; commits. NotFound."""
    require_tenant(session, tenant_id)
    lock_tenant(session, tenant_id)  # two rotations that revoke the others leave one key, not two
    if revoke_others:
        _revoke_all(session, tenant_id, now)
    issued = _add_key(session, tenant_id, now)
    session.commit()
    return issued


def revoke_all_keys(session: Session, tenant_id: str, *, now: datetime) -> None:
    """Revoke every key of the tenant (a tenant being deleted); commits."""
    lock_tenant(session, tenant_id)
    _revoke_all(session, tenant_id, now)
    session.commit()


def _revoke_all(session: Session, tenant_id: str, now: datetime) -> None:
    session.execute(
        update(ApiKey)
        .where(ApiKey.tenant_id == tenant_id, ApiKey.revoked_at.is_(None))
        .values(revoked_at=now)
        .execution_options(synchronize_session=False)
    )


def revoke_key(session: Session, tenant_id: str, key_id: str, *, now: datetime) -> None:
    """Revoke one of the tenant's keys (idempotent); commits. NotFound for an unknown pair."""
    if not (well_formed_id(key_id) and well_formed_id(tenant_id)):
        raise NotFound("key", key_id)
    key = session.scalar(select(ApiKey).where(ApiKey.id == key_id, ApiKey.tenant_id == tenant_id))
    if key is None:
        raise NotFound("key", key_id)
    if key.revoked_at is None:
        key.revoked_at = now
    session.commit()


def require_tenant(session: Session, tenant_id: str) -> Tenant:
    """The tenant ``tenant_id``; NotFound if there is none."""
    tenant = session.get(Tenant, tenant_id) if well_formed_id(tenant_id) else None
    if tenant is None:
        raise NotFound("tenant", tenant_id)
    return tenant


def lock_tenant(session: Session, tenant_id: str) -> None:
    """Lock the tenant's row for the rest of the transaction, so that checks of what the tenant
    holds (quotas, keys) and the changes made on them are serialised per tenant. FOR NO KEY
    UPDATE does not block inserts that merely reference the tenant (those take KEY SHARE);
    SQLite ignores it and is serialised by its one write lock instead. When the tenant was
    deleted meanwhile, roll back and raise NotFound (an upload that a deletion overtook went on
    to insert its dataset, and the foreign key failed it: a 500)."""
    hold_write_lock(session)
    locked = select(Tenant.id).where(Tenant.id == tenant_id).with_for_update(key_share=True)
    if session.scalar(locked) is None:
        session.rollback()
        raise NotFound("tenant", tenant_id)


def _add_key(session: Session, tenant_id: str, now: datetime) -> IssuedKey:
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(tenant_id=tenant_id, key_hash=hash_key(secret), prefix=secret[:12], created_at=now)
    session.add(key)
    session.flush()
    return IssuedKey(key_id=key.id, tenant_id=tenant_id, api_key=secret)
