"""A tenant's webhook signing secret: made when first needed, stored only sealed
(:mod:`service.core.sealing`), read, rotated and sealed again under a new key.

A plain-text secret (an older release's: ``taas migrate`` seals them all, but a replica of that
release still running during an upgrade may write one) is sealed when it is next read.
"""

from __future__ import annotations

import secrets

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.core.errors import NotFound
from service.core.models import Tenant
from service.core.sealing import KeyRing, is_sealed

_RESEAL_BATCH = 500


def place(tenant_id: str) -> str:
    """Where a tenant's secret lives, bound into its seal (a seal moved to another row does not open)."""
    return f"tenants.webhook_secret:{tenant_id}"


def new_secret() -> str:
    """A fresh secret for signing a tenant's webhooks (an HMAC-SHA256 key)."""
    return "whsec_" + secrets.token_urlsafe(32)


def current_secret(session: Session, ring: KeyRing, tenant_id: str) -> str:
    """The tenant's secret, made (and committed) if it has none yet. NotFound when the tenant
    is gone; SealingError when the ring cannot open it."""
    stored = _stored(session, tenant_id)
    if stored is None:  # none yet: made once, whoever asks first (a concurrent first use wins)
        session.execute(
            update(Tenant)
            .where(Tenant.id == tenant_id, Tenant.webhook_secret.is_(None))
            .values(webhook_secret=ring.seal(new_secret(), place=place(tenant_id)))
        )
        session.commit()
        stored = _stored(session, tenant_id)
    assert stored is not None
    if not is_sealed(stored):
        _write(session, ring, tenant_id, stored, replacing=stored)
        return stored
    return ring.open(stored, place=place(tenant_id))


def rotate_secret(session: Session, ring: KeyRing, tenant_id: str) -> str:
    """Give the tenant a new secret, used from the next delivery attempt on; returns it."""
    secret = new_secret()
    _write(session, ring, tenant_id, secret)
    return secret


def reseal_all(session: Session, ring: KeyRing) -> int:
    """Seal every tenant's secret under the ring's current key (opened with whichever key of the
    ring sealed it; plain text sealed for the first time); returns how many were sealed anew.
    SealingError names the first that no key of the ring opens (what was done stays done)."""
    resealed = 0
    after = ""
    while True:
        rows = session.execute(
            select(Tenant.id, Tenant.webhook_secret)
            .where(Tenant.id > after, Tenant.webhook_secret.is_not(None))
            .order_by(Tenant.id)
            .limit(_RESEAL_BATCH)
        ).all()
        session.commit()
        if not rows:
            return resealed
        for tenant_id, stored in rows:
            assert stored is not None  # selected so
            if ring.is_current(stored):
                continue
            plain = ring.open(stored, place=place(tenant_id)) if is_sealed(stored) else stored
            resealed += _write(session, ring, tenant_id, plain, replacing=stored)
        after = rows[-1][0]


def _stored(session: Session, tenant_id: str) -> str | None:
    row = session.execute(select(Tenant.webhook_secret).where(Tenant.id == tenant_id)).one_or_none()
    if row is None:
        raise NotFound("tenant", tenant_id)
    return row[0]


def _write(
    session: Session, ring: KeyRing, tenant_id: str, secret: str, *, replacing: str | None = None
) -> int:
    """Store ``secret`` sealed (only over ``replacing``, when given: a rotation meanwhile wins);
    commits; how many rows it wrote."""
    statement = update(Tenant).where(Tenant.id == tenant_id)
    if replacing is not None:
        statement = statement.where(Tenant.webhook_secret == replacing)
    result = session.execute(statement.values(webhook_secret=ring.seal(secret, place=place(tenant_id))))
    session.commit()
    return int(result.rowcount)  # type: ignore[attr-defined]
