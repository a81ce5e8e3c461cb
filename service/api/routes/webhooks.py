"""The tenant's webhook signing secret (extension): read it, rotate it."""

from __future__ import annotations

from collections.abc import Callable

from service.api.deps import SessionDep, SettingsDep, TenantDep
from service.api.routing import Router
from service.api.schemas import WebhookSecret
from service.core.errors import unavailable
from service.core.sealing import KeyRing, SealingError, key_ring
from service.core.settings import Settings
from service.webhooks import secrets

router = Router(prefix="/v1/webhook_secret", tags=["webhooks"])


@router.get("", response_model=WebhookSecret)
def get_secret(tenant: TenantDep, session: SessionDep, settings: SettingsDep) -> WebhookSecret:
    """The secret that signs the caller's status webhooks (``X-Taas-Signature``)."""
    return WebhookSecret(
        secret=_unsealed(settings, lambda ring: secrets.current_secret(session, ring, tenant.id))
    )


@router.post("", response_model=WebhookSecret)
def rotate_secret(tenant: TenantDep, session: SessionDep, settings: SettingsDep) -> WebhookSecret:
    """Replace the secret; every delivery attempt from now on is signed with the new one."""
    return WebhookSecret(
        secret=_unsealed(settings, lambda ring: secrets.rotate_secret(session, ring, tenant.id))
    )


def _unsealed(settings: Settings, use: Callable[[KeyRing], str]) -> str:
    """``use(ring)``, a 503 when the operator's key is missing or does not open the secret."""
    try:
        return use(key_ring(settings))
    except SealingError as error:
        raise unavailable("the webhook secret cannot be read or written", error) from error
