"""The administrator's calls (``/v1/admin``, the admin key only), a part of :class:`Api`
(``service.client.api``) kept in a module of its own."""

from __future__ import annotations

from typing import Any

from service.client.models import Quotas
from service.client.paths import segments


class AdminCalls:
    """Tenants, their keys and quotas; :class:`service.client.api.Api` provides ``call``."""

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        raise NotImplementedError  # pragma: no cover - Api's

    def create_tenant(self, name: str) -> dict[str, Any]:
        """A new tenant: its id, name and first API key (shown only in this reply)."""
        created: dict[str, Any] = self.call("POST", "/v1/admin/tenants", json={"name": name})
        return created

    def delete_tenant(self, tenant_id: str) -> dict[str, Any]:
        """Delete a tenant and everything it owns; how many classifiers and datasets went."""
        deleted: dict[str, Any] = self.call("DELETE", segments("admin", "tenants", tenant_id))
        return deleted

    def rotate_key(self, tenant_id: str, *, revoke_others: bool = False) -> dict[str, Any]:
        """A new key for the tenant (shown only in this reply); with ``revoke_others`` every
        older key stops working at once."""
        path = segments("admin", "tenants", tenant_id, "keys")
        issued: dict[str, Any] = self.call("POST", path, json={"revoke_others": revoke_others})
        return issued

    def revoke_key(self, tenant_id: str, key_id: str) -> None:
        """Revoke one key of the tenant."""
        self.call("DELETE", segments("admin", "tenants", tenant_id, "keys", key_id))

    def tenant_quotas(self, tenant_id: str) -> Quotas:
        """The tenant's quotas in force, the overrides, the defaults and its usage."""
        found: Quotas = self.call("GET", segments("admin", "tenants", tenant_id, "quotas"))
        return found

    def set_quotas(self, tenant_id: str, changes: dict[str, int | None]) -> Quotas:
        """Override some quotas of the tenant (None: back to the default)."""
        path = segments("admin", "tenants", tenant_id, "quotas")
        found: Quotas = self.call("PATCH", path, json=changes)
        return found
