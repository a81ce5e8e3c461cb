"""Tenants and what limits them: tenants and their API keys (``accounts``: issue, rotate,
revoke, authenticate), per-tenant quotas on what they store and train (``quotas``), the shared
classify rate limiter (``ratelimit``), the throttle on addresses presenting wrong keys
(``failed_keys``) and what a tenant's requests hold in the store's staging folder, counted
against its quota and removed when each request ends (``staging``)."""
