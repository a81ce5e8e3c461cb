"""How many webhook delivery attempts each tenant may have in flight at once, across every
webhook worker: ``webhook_tenant_concurrency``, counted in Redis.

Without the cap, one tenant's receiver that answers slowly or not at all held every delivery
thread for up to ``webhook_timeout_seconds`` per event, and each other tenant's events waited
behind the whole burst. With it, that tenant's further events wait for its own attempts
(:func:`service.webhooks.delivery.deliver` answers :class:`~service.webhooks.delivery.Busy`), and the other
threads keep delivering everyone else's.

A slot is a member of the tenant's sorted set, scored with the time it lapses: a worker killed
mid-attempt never gives its slot back, so each slot lapses after the attempt's claim would
(``hold_seconds``). Redis's clock, read in the script, is the only clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

import redis
from redis.commands.core import Script

from service.training.worker_registry import connect

# KEYS[1]: the tenant's slots; ARGV[1]: the slots it may hold; ARGV[2]: the event; ARGV[3]: how
# long a slot lasts (ms). Drops lapsed slots; 2 if the event holds one already (another message
# for it is making its attempt), else takes one if one is free: 1, else 0.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[2]) then return 2 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
"""


@contextmanager
def slot(
    redis_url: str, tenant_id: str, event_id: str, *, per_tenant: int, hold_seconds: float
) -> Iterator[bool | None]:
    """Take one of ``tenant_id``'s ``per_tenant`` slots for the attempt at ``event_id``, and
    give it back on exit. Yields True when taken, False when none was free, None when the
    event holds one already (a duplicate message's attempt); only a slot taken is given back."""
    client, take = _client(redis_url)
    key = f"taas:webhook-slots:{tenant_id}"
    answer = int(take(keys=[key], args=[per_tenant, event_id, max(1, round(hold_seconds * 1000))]))
    taken = answer == 1
    try:
        yield None if answer == 2 else taken
    finally:
        if taken:
            client.zrem(key, event_id)


@lru_cache(maxsize=4)
def _client(redis_url: str) -> tuple[redis.Redis, Script]:
    # one connection pool per process, shared by the delivery threads
    client = connect(redis_url, timeout_s=5.0)
    return client, client.register_script(_TAKE)
