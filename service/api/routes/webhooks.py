"""The tenant's webhook signing secret (extension): read it, rotate it."""

from __future__ import annotations

from service.api.deps import SessionDep, TenantDep
from service.api.routing import Router
from service.api.schemas import WebhookSecret
from service.webhooks import delivery

router = Router(prefix="/v1/webhook_secret", tags=["webhooks"])


@router.get("", response_model=WebhookSecret)
def get_secret(tenant: TenantDep) -> WebhookSecret:
    """The secret that signs the caller's status webhooks (``X-Taas-Signature``)."""
    return WebhookSecret(secret=tenant.webhook_secret)


@router.post("", response_model=WebhookSecret)
def rotate_secret(tenant: TenantDep, session: SessionDep) -> WebhookSecret:
    """Replace the secret; every delivery attempt from now on is signed with the new one."""
    return WebhookSecret(secret=delivery.rotate_secret(session, tenant.id))
