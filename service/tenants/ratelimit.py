"""A Redis-backed per-tenant rate limiter (GCRA: a token bucket stored as one timestamp).

Every API replica shares the same bucket, because the bucket lives in Redis and is updated by
one Lua script (atomic, using Redis's clock, so replicas' clocks do not matter). A tenant may
spend ``burst_seconds`` worth of its rate at once, then one call every ``1/rate`` seconds.

When Redis cannot be reached the limiter lets calls through and logs it (at most once a
minute): classify stays available, and quotas on stored data are enforced by the database.
After a failure it does not ask Redis again for ``retry_s`` seconds, so an unreachable Redis
costs one timeout per ``retry_s``, not one per call.

A Redis round trip per call would be most of a classify call's cost at high rates, so a replica
takes its calls from the shared bucket in chunks of ``lease_seconds`` worth of the rate (at
least one call; one while the rate is under ``1 / lease_seconds``) and spends them locally
until they run out or the lease ends; unspent calls are forfeited, never carried over. Every
call is still counted in Redis before it is served, so the limit holds across replicas; at
most ``lease_seconds`` of rate per replica is taken ahead of use.

A refusal is answered locally too, until the moment Redis named for the bucket's next room:
the calls of other replicas can only push that moment later, never sooner, so no call is
refused that Redis would have served. Each refused call of a tenant flooding over its rate
asked Redis, on one of the few threads that classify calls share, and other tenants' calls
waited for those threads.

A call may cost several units (classify_collection: one per text). It is served when the
bucket has room for one unit and is charged all of them, so the bucket may run into debt by
a call's cost less one, which the tenant's next calls wait out: a collection larger than the
burst is still served, and its texts are paid for at the same rate as single calls.
"""

from __future__ import annotations

import logging
import math
import threading
import time

import redis

from service.core.errors import QuotaIsZero, RateLimited

log = logging.getLogger(__name__)

# KEYS[1]: the bucket; ARGV[1]: emission interval (µs); ARGV[2]: tolerance (µs); ARGV[3]: units
# wanted; ARGV[4]: units needed (at most wanted). When the bucket has room for one unit, grants
# as many as wanted as it has room for but at least the needed (recording them) and returns
# {granted, 0}; else {0, µs to wait for one unit}.
_GCRA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local wanted = tonumber(ARGV[3])
local needed = tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local room = math.floor((now + tolerance - tat) / interval)
if room < 1 then return {0, math.ceil(tat + interval - now - tolerance)} end
local granted = math.max(needed, math.min(wanted, room))
local new_tat = tat + interval * granted
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1)
return {granted, 0}
"""
_WARN_EVERY_S = 60.0
_FULL_KEPT = 4096  # refusals remembered before the lapsed ones are dropped


class RateLimiter:
    """Per-tenant call rates in Redis; a limiter without a URL allows everything."""

    def __init__(
        self,
        redis_url: str | None,
        *,
        burst_seconds: float,
        timeout_s: float = 0.5,
        retry_s: float = 5.0,
        lease_seconds: float = 0.05,
    ) -> None:
        self.burst_seconds = burst_seconds
        self.retry_s = retry_s
        self.lease_seconds = lease_seconds
        # (bucket, rate) -> (calls left, spendable until): a lease taken at another rate is not
        # spent once the tenant's rate changes
        self._leases: dict[tuple[str, int], tuple[int, float]] = {}
        # (bucket, rate) -> when Redis said the bucket has room for a unit again
        self._full_until: dict[tuple[str, int], float] = {}
        self._lock = threading.Lock()
        self._skip_until = -math.inf
        self._client = (
            redis.Redis.from_url(redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
            if redis_url
            else None
        )
        self._script = self._client.register_script(_GCRA) if self._client else None
        self._warned_at = -math.inf

    def acquire(self, quota: str, tenant_id: str, per_second: int, units: int = 1) -> None:
        """Record a call of ``tenant_id`` costing ``units`` against ``quota`` (``per_second``
        units a second).

        Raises RateLimited (429, with the whole seconds to wait) when over the rate, and
        QuotaIsZero (a QuotaExceeded) when the rate is 0 (the tenant may not make such calls at all).
        """
        if self.acquire_nowait(quota, tenant_id, per_second, units):
            return
        assert self._script is not None
        bucket = _bucket(quota, tenant_id)
        interval_us = 1_000_000 / per_second
        tolerance_us = max(self.burst_seconds * 1_000_000, interval_us)
        wanted = max(units, int(per_second * self.lease_seconds))
        try:
            granted, wait_us = self._script(keys=[bucket], args=[interval_us, tolerance_us, wanted, units])
        except redis.RedisError as exc:
            self._skip_until = time.monotonic() + self.retry_s
            self._warn(exc)
            return
        if not granted:
            self._note_full((bucket, per_second), time.monotonic() + int(wait_us) / 1_000_000)
            raise RateLimited(quota, per_second, max(1, math.ceil(int(wait_us) / 1_000_000)))
        if granted > units:
            with self._lock:
                self._leases[(bucket, per_second)] = (
                    int(granted) - units,
                    time.monotonic() + self.lease_seconds,
                )

    def acquire_nowait(self, quota: str, tenant_id: str, per_second: int, units: int = 1) -> bool:
        """Record a call costing ``units`` if that needs no Redis round trip (this replica holds
        a lease with as many units left, or the limiter is off); False if it does: then call
        :meth:`acquire`, on a worker thread. Raises QuotaIsZero when the rate is 0, and
        RateLimited while Redis's last refusal for the bucket stands (its room is still ahead)."""
        if per_second <= 0:
            raise QuotaIsZero(quota)
        if self._script is None or time.monotonic() < self._skip_until:
            return True
        lease = (_bucket(quota, tenant_id), per_second)
        if (wait := self._still_full(lease)) is not None:
            raise RateLimited(quota, per_second, max(1, math.ceil(wait)))
        return self._spend_leased(lease, units)

    def _still_full(self, lease: tuple[str, int]) -> float | None:
        """Seconds until the bucket has room, as Redis's last refusal said; None once it has."""
        with self._lock:
            until = self._full_until.get(lease)
            if until is None:
                return None
            wait = until - time.monotonic()
            if wait <= 0:
                del self._full_until[lease]
                return None
            return wait

    def _note_full(self, lease: tuple[str, int], until: float) -> None:
        with self._lock:
            if len(self._full_until) >= _FULL_KEPT:  # tenants that stopped calling
                now = time.monotonic()
                self._full_until = {k: t for k, t in self._full_until.items() if t > now}
            self._full_until[lease] = until

    def _spend_leased(self, lease: tuple[str, int], units: int = 1) -> bool:
        """Take ``units`` from this replica's lease, if it holds one with as many left."""
        with self._lock:
            left, until = self._leases.get(lease, (0, 0.0))
            if time.monotonic() >= until:
                self._leases.pop(lease, None)
                return False
            if left < units:
                return False
            self._leases[lease] = (left - units, until)
            return True

    def close(self) -> None:
        """Release the Redis connections."""
        if self._client is not None:
            self._client.close()

    def _warn(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = now
            log.warning("rate limiter cannot reach Redis (calls are let through): %s", exc)


def _bucket(quota: str, tenant_id: str) -> str:
    return f"taas:rate:{quota}:{tenant_id}"
