"""Administration (extension): tenants, their API keys and quotas. Every route needs the admin key."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import Depends, Query
from sqlalchemy.orm import Session

from service.api.admin_schemas import (
    KeyIssued,
    KeyRotate,
    QuotaOverrides,
    TenantCreate,
    TenantCreated,
    TenantDeletedInfo,
    TenantInfo,
    TenantList,
    TenantQuotas,
)
from service.api.deps import (
    AdminDep,
    InvalidationsDep,
    SessionDep,
    SettingsDep,
    TenantDeleterDep,
    refuse_unknown_query,
)
from service.api.routing import Router
from service.core.models import utcnow
from service.core.settings import Settings
from service.tenants import accounts, quotas

MAX_TENANTS_PER_PAGE = 1000

router = Router(prefix="/v1/admin", tags=["admin"], dependencies=[Depends(refuse_unknown_query)])


@router.post("/tenants", response_model=TenantCreated, status_code=201)
def create_tenant(
    _: AdminDep, body: TenantCreate, session: SessionDep, settings: SettingsDep
) -> TenantCreated:
    """Create a tenant; the reply carries its first API key, shown only this once."""
    issued = accounts.create_tenant(session, body.name, max_name_chars=settings.max_name_chars, now=utcnow())
    return TenantCreated(
        tenant_id=issued.tenant_id,
        key_id=issued.key_id,
        api_key=issued.api_key,
        name=accounts.tenant_name(body.name),
    )


@router.get("/tenants", response_model=TenantList)
def list_tenants(
    _: AdminDep,
    session: SessionDep,
    name: Annotated[
        str, Query(max_length=256, description="Only tenants whose name contains this, in any case.")
    ] = "",
    page: Annotated[int, Query(ge=1, le=2**31 - 1, description="The page, from 1.")] = 1,
    per_page: Annotated[int, Query(ge=1, le=MAX_TENANTS_PER_PAGE, description="Tenants a page.")] = 100,
) -> TenantList:
    """The tenants, oldest first, a page at a time, each with its keys (secrets never shown).
    Every tenant in one reply was megabytes with thousands of tenants, and the CLI read it
    before every admin command to tell an admin key from a tenant's."""
    found = accounts.find_tenants(session, name=name, page=page, per_page=per_page)
    return TenantList(
        tenants=[TenantInfo.build(t, keys) for t, keys in accounts.with_keys(session, found.tenants)],
        total=found.total,
        page=page,
        per_page=per_page,
        pages=found.pages,
    )


@router.delete("/tenants/{tenant_id}", response_model=TenantDeletedInfo)
def delete_tenant(_: AdminDep, tenant_id: str, delete: TenantDeleterDep) -> TenantDeletedInfo:
    """Delete the tenant and everything it owns: its keys at once, its classifiers (trainings
    stopped), datasets and files. A deletion cut off part-way is finished by the same request."""
    return TenantDeletedInfo.build(delete(tenant_id))


@router.post("/tenants/{tenant_id}/keys", response_model=KeyIssued, status_code=201)
def rotate_key(
    _: AdminDep,
    tenant_id: str,
    session: SessionDep,
    invalidations: InvalidationsDep,
    body: KeyRotate | None = None,
) -> KeyIssued:
    """Issue a new key; with ``revoke_others`` every older key stops working at once."""
    revoke = body.revoke_others if body else False
    issued = accounts.rotate_key(session, tenant_id, revoke_others=revoke, now=utcnow())
    if revoke:
        invalidations.announce(tenant_id)
    return KeyIssued(tenant_id=issued.tenant_id, key_id=issued.key_id, api_key=issued.api_key)


@router.delete("/tenants/{tenant_id}/keys/{key_id}")
def revoke_key(
    _: AdminDep, tenant_id: str, key_id: str, session: SessionDep, invalidations: InvalidationsDep
) -> dict[str, object]:
    """Revoke one key; requests with it fail from now on."""
    accounts.revoke_key(session, tenant_id, key_id, now=utcnow())
    invalidations.announce(tenant_id)
    return {}


@router.get("/tenants/{tenant_id}/quotas", response_model=TenantQuotas)
def get_quotas(_: AdminDep, tenant_id: str, session: SessionDep, settings: SettingsDep) -> TenantQuotas:
    """The tenant's quotas in force, with the overrides, the defaults and its usage."""
    return _quotas_view(session, settings, tenant_id)


@router.patch("/tenants/{tenant_id}/quotas", response_model=TenantQuotas)
def set_quotas(
    _: AdminDep,
    tenant_id: str,
    body: QuotaOverrides,
    session: SessionDep,
    settings: SettingsDep,
    invalidations: InvalidationsDep,
) -> TenantQuotas:
    """Override some quotas of one tenant (an integer), or reset them to the default (null)."""
    quotas.set_overrides(session, settings, tenant_id, body.changes(), now=utcnow())
    invalidations.announce(tenant_id)
    return _quotas_view(session, settings, tenant_id)


def _quotas_view(session: Session, settings: Settings, tenant_id: str) -> TenantQuotas:
    accounts.require_tenant(session, tenant_id)
    return TenantQuotas.model_validate(
        {
            "tenant_id": tenant_id,
            "quotas": asdict(quotas.quotas_for(session, settings, tenant_id)),
            "overrides": quotas.overrides_for(session, tenant_id),
            "defaults": asdict(quotas.defaults(settings)),
            "usage": asdict(quotas.usage(session, tenant_id)),
        }
    )
