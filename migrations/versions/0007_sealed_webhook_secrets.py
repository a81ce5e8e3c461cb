"""tenants' webhook secrets sealed at rest

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

Webhook secrets were stored in plain text: a database dump, a backup or a local account that
could read the SQLite file could forge any tenant's webhooks. The column now holds a sealed value
(AES-256-GCM, ``service.core.sealing``), wide enough for one, and may be NULL: a tenant's
secret is made when it is first needed.

Every existing secret is sealed here, in the upgrade's transaction, so that no plain text is left
once it commits (sealing on first read instead would have left the secrets of tenants that
never read theirs, or have no webhooks, in the clear for ever). The key is the installation's:
``taas migrate`` passes it in (``TAAS_SECRETS_KEY``, else ``<data-dir>/secrets.key``); a plain
``alembic upgrade`` reads the same settings. With secrets to seal and no key, the upgrade stops
before it changes anything, saying what to set. A database without tenants needs no key.

The downgrade opens them with the same key and puts the column back as it was (NOT NULL; a
tenant without a secret gets a fresh one).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from alembic import context, op

from service.core.sealing import KeyRing, is_sealed, key_ring
from service.core.settings import get_settings

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_tenants = sa.table("tenants", sa.column("id", sa.String), sa.column("webhook_secret", sa.String))


def _place(tenant_id: str) -> str:  # service.webhooks.secrets.place, as of this revision
    return f"tenants.webhook_secret:{tenant_id}"


def _ring() -> KeyRing:
    """The key ring ``taas migrate`` passed in, else the settings' (the environment's)."""
    provided: Callable[[], KeyRing] | None = context.config.attributes.get("key_ring")
    return provided() if provided is not None else key_ring(get_settings())


def _secrets() -> list[tuple[str, str | None]]:
    rows = op.get_bind().execute(sa.select(_tenants.c.id, _tenants.c.webhook_secret))
    return [(row[0], row[1]) for row in rows]


def _write(values: dict[str, str]) -> None:
    bind = op.get_bind()
    for tenant_id, value in values.items():
        bind.execute(_tenants.update().where(_tenants.c.id == tenant_id).values(webhook_secret=value))


def upgrade() -> None:
    plain = {tid: value for tid, value in _secrets() if value is not None and not is_sealed(value)}
    ring = _ring() if plain else None  # NoSecretsKey here changes nothing: it says what to set
    with op.batch_alter_table("tenants") as batch:
        batch.alter_column(
            "webhook_secret",
            existing_type=sa.String(64),
            type_=sa.String(255),
            existing_nullable=False,
            nullable=True,
        )
    if ring is not None:
        _write({tid: ring.seal(value, place=_place(tid)) for tid, value in plain.items()})


def downgrade() -> None:
    found = _secrets()
    ring = _ring() if any(value is not None and is_sealed(value) for _, value in found) else None
    opened: dict[str, str] = {}
    for tid, value in found:
        if value is None:
            opened[tid] = "whsec_" + secrets.token_urlsafe(32)
        elif is_sealed(value):
            assert ring is not None
            opened[tid] = ring.open(value, place=_place(tid))
    _write(opened)
    with op.batch_alter_table("tenants") as batch:
        batch.alter_column(
            "webhook_secret",
            existing_type=sa.String(255),
            type_=sa.String(64),
            existing_nullable=True,
            nullable=False,
        )
