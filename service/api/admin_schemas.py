"""Wire models of the admin API (an extension of NLC's): tenants, their keys, their quotas."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from service.catalogue.tenant_deletion import TenantDeleted
from service.core.models import ApiKey, Tenant, timestamp


class TenantCreate(BaseModel):
    """``POST /v1/admin/tenants``; any other field is refused (quotas are set on their own route)."""

    model_config = ConfigDict(extra="forbid")

    name: str


class KeyIssued(BaseModel):
    """A new key; ``api_key`` is shown only here."""

    tenant_id: str
    key_id: str
    api_key: str


class TenantCreated(KeyIssued):
    """A new tenant and its first key."""

    name: str


class KeyInfo(BaseModel):
    """A key as the admin sees it (never the secret)."""

    key_id: str
    prefix: str
    created: str
    revoked: str | None

    @classmethod
    def build(cls, k: ApiKey) -> KeyInfo:
        """The view of ``k``."""
        return cls(
            key_id=k.id,
            prefix=k.prefix,
            created=timestamp(k.created_at),
            revoked=timestamp(k.revoked_at) if k.revoked_at else None,
        )


class TenantInfo(BaseModel):
    """A tenant with its keys."""

    tenant_id: str
    name: str
    created: str
    keys: list[KeyInfo]

    @classmethod
    def build(cls, t: Tenant, keys: list[ApiKey]) -> TenantInfo:
        """The view of ``t``."""
        return cls(
            tenant_id=t.id,
            name=t.name,
            created=timestamp(t.created_at),
            keys=[KeyInfo.build(k) for k in keys],
        )


class TenantList(BaseModel):
    """``GET /v1/admin/tenants``: one page of tenants, oldest first, and where it lies."""

    tenants: list[TenantInfo]
    total: int
    page: int
    per_page: int
    pages: int


class TenantDeletedInfo(BaseModel):
    """``DELETE /v1/admin/tenants/{id}``: the tenant, and how many classifiers and datasets went."""

    tenant_id: str
    classifiers: int
    datasets: int

    @classmethod
    def build(cls, deleted: TenantDeleted) -> TenantDeletedInfo:
        return cls(
            tenant_id=deleted.tenant_id, classifiers=len(deleted.classifiers), datasets=deleted.datasets
        )


class KeyRotate(BaseModel):
    """``POST /v1/admin/tenants/{id}/keys``. Any other field is refused: a misspelt
    ``revoke_other`` issued a key and left the old ones working, without a word."""

    model_config = ConfigDict(extra="forbid")

    revoke_others: StrictBool = False  # "yes" or 1 revoked every other key


# --- quotas (extension, admin) -------------------------------------------------------------

_INT32_MAX = 2**31 - 1  # the quota columns are INTEGER, dataset_bytes BIGINT
_BYTES_MAX = 2**53


class QuotaValues(BaseModel):
    """A value for each quota."""

    classifiers: int
    versions: int
    training_jobs: int
    dataset_bytes: int
    dataset_rows: int
    datasets: int
    classify_rps: int


class QuotaUsage(BaseModel):
    """What a tenant holds now (its classify rate is not stored)."""

    classifiers: int
    versions: int
    training_jobs: int
    dataset_bytes: int
    dataset_rows: int
    datasets: int


class QuotaOverrides(BaseModel):
    """``PATCH /v1/admin/tenants/{id}/quotas``: the quotas named are set (an integer) or reset to
    the installation default (``null``); those left out keep their current value. Strict: a
    boolean or a numeric string is refused, not read as a number."""

    model_config = ConfigDict(extra="forbid", strict=True)

    classifiers: int | None = Field(None, ge=0, le=_INT32_MAX)
    versions: int | None = Field(None, ge=0, le=_INT32_MAX)
    training_jobs: int | None = Field(None, ge=0, le=_INT32_MAX)
    dataset_bytes: int | None = Field(None, ge=0, le=_BYTES_MAX)
    dataset_rows: int | None = Field(None, ge=0, le=_INT32_MAX)
    datasets: int | None = Field(None, ge=0, le=_INT32_MAX)
    classify_rps: int | None = Field(None, ge=0, le=_INT32_MAX)

    def changes(self) -> dict[str, int | None]:
        """Only the quotas the request named."""
        return {name: getattr(self, name) for name in self.model_fields_set}


class TenantQuotas(BaseModel):
    """A tenant's quotas in force, the admin's overrides, the defaults, and its usage."""

    tenant_id: str
    quotas: QuotaValues
    overrides: dict[str, int | None]
    defaults: QuotaValues
    usage: QuotaUsage
