"""A Redis-backed per-tenant rate limiter (GCRA: a token bucket stored as one timestamp).

Every API replica shares the same bucket, because the bucket lives in Redis and is updated by
one Lua script (atomic, using Redis's clock, so replicas' clocks do not matter). A tenant may
spend ``burst_seconds`` worth of its rate at once, then one call every ``1/rate`` seconds.

When Redis cannot be reached the limiter lets calls through and logs it (at most once a
minute): classify stays available, and quotas on stored data are enforced by the database.
After a failure it does not ask Redis again for ``retry_s`` seconds, so an unreachable Redis
costs one timeout per ``retry_s``, not one per call.
"""

from __future__ import annotations

import logging
import math
import time

import redis

from service.errors import QuotaExceeded, RateLimited

log = logging.getLogger(__name__)

# KEYS[1]: the bucket; ARGV[1]: emission interval (µs); ARGV[2]: tolerance (µs).
# Returns 0 when the call is allowed (and records it), else the µs to wait.
_GCRA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + interval
local wait = new_tat - now - tolerance
if wait > 0 then return math.ceil(wait) end
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1)
return 0
"""
_WARN_EVERY_S = 60.0


class RateLimiter:
    """Per-tenant call rates in Redis; a limiter without a URL allows everything."""

    def __init__(
        self, redis_url: str | None, *, burst_seconds: float, timeout_s: float = 0.5, retry_s: float = 5.0
    ) -> None:
        self.burst_seconds = burst_seconds
        self.retry_s = retry_s
        self._skip_until = -math.inf
        self._client = (
            redis.Redis.from_url(redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
            if redis_url
            else None
        )
        self._script = self._client.register_script(_GCRA) if self._client else None
        self._warned_at = -math.inf

    def acquire(self, quota: str, tenant_id: str, per_second: int) -> None:
        """Record one call of ``tenant_id`` against ``quota`` (``per_second`` calls a second).

        Raises RateLimited (429, with the whole seconds to wait) when over the rate, and
        QuotaExceeded when the rate is 0 (the tenant may not make such calls at all).
        """
        if per_second <= 0:
            raise QuotaExceeded(quota, 0, 0)
        if self._script is None or time.monotonic() < self._skip_until:
            return
        interval_us = 1_000_000 / per_second
        tolerance_us = max(self.burst_seconds * 1_000_000, interval_us)
        try:
            wait_us = int(
                self._script(keys=[f"taas:rate:{quota}:{tenant_id}"], args=[interval_us, tolerance_us])
            )
        except redis.RedisError as exc:
            self._skip_until = time.monotonic() + self.retry_s
            self._warn(exc)
            return
        if wait_us > 0:
            raise RateLimited(quota, per_second, max(1, math.ceil(wait_us / 1_000_000)))

    def close(self) -> None:
        """Release the Redis connections."""
        if self._client is not None:
            self._client.close()

    def _warn(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = now
            log.warning("rate limiter cannot reach Redis (calls are let through): %s", exc)
