"""The registry of live training workers, kept in Redis (no database rows).

Each worker process publishes one key, ``taas:worker:<worker_id>``, holding a JSON
:class:`WorkerInfo`, every few seconds (``workers.heartbeat``). The key expires after about
three heartbeats, so a worker killed without a chance to clean up (SIGKILL, a lost node)
disappears on its own; a clean shutdown removes it at once. The dashboard and ``/metrics`` read
the keys back with :meth:`WorkerRegistry.alive`. Idle workers are listed too: unlike job rows,
the registry knows a worker from its first heartbeat, before it has claimed anything.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

KEY_PREFIX = "taas:worker:"


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker process says about itself at each heartbeat (times are Unix seconds)."""

    worker_id: str  # ``host:pid``, the owner its job leases carry
    host: str
    pid: int
    device: str  # "cpu", or "cuda:N <GPU name>"
    learners: int  # K, the most learner processes (or CUDA learners) one of its jobs uses
    job_id: str | None  # the job it is training now; None while idle
    started_at: float
    last_heartbeat: float


def connect(redis_url: str, *, timeout_s: float = 1.0) -> redis.Redis:
    """A client that fails fast when Redis is down (short timeouts, one immediate retry for a
    connection Redis has dropped), for reads that a web request waits on and for heartbeats."""
    return redis.Redis.from_url(
        redis_url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 1),
    )


class WorkerRegistry:
    """The live workers in one Redis database. Every method raises ``redis.RedisError`` when
    Redis cannot be reached."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def publish(self, info: WorkerInfo, *, ttl_seconds: float) -> None:
        """Write ``info`` as the worker's entry, to vanish after ``ttl_seconds`` unless renewed."""
        self.client.set(_key(info.worker_id), json.dumps(asdict(info)), px=max(1, round(ttl_seconds * 1000)))

    def remove(self, worker_id: str) -> None:
        """Delete the worker's entry (a clean shutdown)."""
        self.client.delete(_key(worker_id))

    def alive(self) -> list[WorkerInfo]:
        """Every worker whose entry has not expired, by host, then worker id."""
        keys = sorted(self.client.scan_iter(match=f"{KEY_PREFIX}*", count=500))
        values = self.client.mget(keys) if keys else []
        # An entry may expire between the scan and the read: skip the gaps.
        found = [WorkerInfo(**json.loads(value)) for value in values if value is not None]
        return sorted(found, key=lambda w: (w.host, w.worker_id))


def _key(worker_id: str) -> str:
    return KEY_PREFIX + worker_id
