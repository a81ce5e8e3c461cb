"""Serving invalidations across API processes: Redis pub/sub on one channel.

A change that classify must see at once (a key revoked or rotated, a tenant's rate quota
changed, a classifier deleted or its out-of-scope rate changed, a version promoted by the tenant
or by a worker's finished training) is announced after its commit with
:meth:`Invalidations.announce`. Every API process runs one listener thread that subscribes to
the channel and drops the tenant's entries from its :class:`service.serving.lookup_cache.LookupCache`
on each message. The listener pings Redis every ``ping_s`` on the subscribed connection and
marks the cache as heard-from on each reply; Redis answers a connection's commands in order,
so by the time a ping's reply arrives every invalidation published before that ping has been
applied. Silence (a partition) makes the cache unusable after ``stale_after_s``; an error
clears it and it stays unusable until the listener has resubscribed. A Redis that cannot
persist refuses PING with MISCONF but still publishes; that refusal counts as the reply (it
had turned the cache off and on again, two log lines, every second of a full disk).
"""

from __future__ import annotations

import logging
import threading
import time

import redis

from service.serving.lookup_cache import LookupCache

log = logging.getLogger(__name__)

CHANNEL = "taas:serving:invalidate"
_PING = "taas-invalidation-listener"


class Invalidations:
    """The announcer and, once :meth:`start` ed, the listener of one API process.

    Without a Redis URL nothing is shared: announcements act on this process only and the
    listener does not run, so the cache is never usable and every call asks the database.
    """

    def __init__(
        self, redis_url: str | None, cache: LookupCache, *, ping_s: float = 0.25, retry_s: float = 1.0
    ) -> None:
        self.cache = cache
        self.ping_s = ping_s
        self.retry_s = retry_s
        self._client = (
            redis.Redis.from_url(redis_url, socket_timeout=2.0, socket_connect_timeout=2.0)
            if redis_url
            else None
        )
        self._stop = threading.Event()
        self._outage = False  # Redis was lost and is not subscribed to again yet: logged once
        self._thread = threading.Thread(target=self._listen, name="serving-invalidations", daemon=True)

    def start(self) -> None:
        """Start listening (a no-op without Redis)."""
        if self._client is not None:
            self._thread.start()

    def close(self) -> None:
        """Stop the listener and release the connections."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._client is not None:
            self._client.close()
        self.cache.lost()

    def announce(self, tenant_id: str) -> None:
        """Tell every API process (this one at once) that ``tenant_id``'s serving facts changed.

        Call after the change is committed. If Redis cannot take the message the other
        processes' listeners have most likely lost it too (and stopped trusting their caches);
        otherwise their entries age out within the cache's ``max_age_s``.
        """
        self.cache.forget_tenant(tenant_id)
        if self._client is not None:
            _publish(self._client, tenant_id)

    def _listen(self) -> None:
        assert self._client is not None
        while not self._stop.is_set():
            pubsub = self._client.pubsub()
            try:
                pubsub.subscribe(CHANNEL)
                self._receive(pubsub)
            except (redis.RedisError, OSError) as exc:
                if not self._outage:  # once an outage, not at every retry
                    log.warning(
                        "serving invalidations: lost Redis (cache off until resubscribed, "
                        "retrying every %g s): %s",
                        self.retry_s,
                        exc,
                    )
                self._outage = True
            finally:
                self.cache.lost()
                pubsub.close()
            self._stop.wait(self.retry_s)

    def _receive(self, pubsub: redis.client.PubSub) -> None:
        subscribed, next_ping = False, 0.0
        while not self._stop.is_set():
            if subscribed and time.monotonic() >= next_ping:
                pubsub.ping(_PING)
                next_ping = time.monotonic() + self.ping_s
            try:
                message = pubsub.get_message(timeout=self.ping_s)
            except redis.ResponseError as error:
                if not str(error).startswith("MISCONF"):
                    raise
                # A Redis that cannot persist (its disk full) refuses PING, yet it still delivers
                # every message and answers in order: the refusal is the ping's reply.
                message = {"type": "pong"}
            if message is None:
                continue
            if message["type"] == "subscribe":
                self.cache.clear()  # what was missed while away is unknown
                subscribed = True
                if self._outage:
                    log.warning("serving invalidations: subscribed to Redis again, cache on")
                self._outage = False
            elif message["type"] == "message":
                self.cache.forget_tenant(message["data"].decode())
            if subscribed:
                self.cache.heard()


def announce(redis_url: str | None, tenant_id: str) -> None:
    """:meth:`Invalidations.announce` from a process without a lookup cache (a worker whose
    finished training a classifier now serves). A no-op without Redis."""
    if not redis_url:
        return
    client = redis.Redis.from_url(redis_url, socket_timeout=2.0, socket_connect_timeout=2.0)
    try:
        _publish(client, tenant_id)
    finally:
        client.close()


def _publish(client: redis.Redis, tenant_id: str) -> None:
    try:
        client.publish(CHANNEL, tenant_id)
    except redis.RedisError as exc:
        log.warning("cannot announce a serving change of tenant %s: %s", tenant_id, exc)
