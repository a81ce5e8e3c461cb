"""Tenants and what limits them: tenants and their API keys (``accounts``: issue, rotate,
revoke, authenticate), per-tenant quotas on what they store and train (``quotas``), the shared
classify rate limiter (``ratelimit``) and the throttle on addresses presenting wrong keys
(``failed_keys``)."""
