"""Serving invalidations over real Redis pub/sub: two API processes' listeners, and a Redis that dies."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from benchmarks.chaos import ExternalRedis
from service.core.models import ClassifierStatus
from service.serving.classifying import Servable, ServingLookup
from service.serving.invalidation import Invalidations
from service.serving.lookup_cache import LookupCache
from tests.conftest import REDIS_TEST_URL, empty_redis_db

CID = "c" * 36


def _entry(tenant_id: str) -> ServingLookup:
    return ServingLookup(tenant_id, None, Servable(CID, ClassifierStatus.AVAILABLE.value, "m"))


@pytest.fixture
def replicas() -> Iterator[tuple[Invalidations, Invalidations]]:
    """Two API processes' invalidations on the test Redis, both listening."""
    with empty_redis_db(REDIS_TEST_URL):  # skips the test without a Redis
        pair = (Invalidations(REDIS_TEST_URL, LookupCache()), Invalidations(REDIS_TEST_URL, LookupCache()))
        for replica in pair:
            replica.start()
        yield pair
        for replica in pair:
            replica.close()


def test_an_announcement_empties_the_tenant_on_every_replica(
    replicas: tuple[Invalidations, Invalidations], wait_until: Callable[..., Any]
) -> None:
    here, there = replicas
    wait_until(lambda: here.cache.usable() and there.cache.usable(), message="both listeners subscribed")
    for replica in replicas:
        replica.cache.put("a" * 64, CID, _entry("t1"), replica.cache.generation())
        replica.cache.put("b" * 64, CID, _entry("t2"), replica.cache.generation())
    here.announce("t1")
    assert here.cache.get("a" * 64, CID) is None, "the announcing replica forgets at once"
    wait_until(lambda: there.cache.get("a" * 64, CID) is None, timeout=2, message="the other replica forgot")
    assert there.cache.get("b" * 64, CID) is not None, "other tenants' entries stay"


def test_the_listener_keeps_the_cache_fresh_while_redis_answers(
    replicas: tuple[Invalidations, Invalidations], wait_until: Callable[..., Any]
) -> None:
    here, _ = replicas
    wait_until(here.cache.usable, message="subscribed")
    here.cache.put("a" * 64, CID, _entry("t1"), here.cache.generation())
    deadline = time.monotonic() + 3 * here.cache.stale_after_s
    while time.monotonic() < deadline:  # its pings' replies keep it usable, period after period
        assert here.cache.get("a" * 64, CID) is not None
        time.sleep(0.05)


def test_a_dead_redis_turns_the_cache_off_and_a_restarted_one_back_on(
    tmp_path: Path, wait_until: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    server = ExternalRedis(tmp_path / "redis")
    server.start()
    invalidations = Invalidations(server.url, LookupCache(), retry_s=0.2)
    invalidations.start()
    try:
        cache = invalidations.cache
        wait_until(cache.usable, message="subscribed")
        cache.put("a" * 64, CID, _entry("t1"), cache.generation())
        server.kill()
        wait_until(lambda: not cache.usable(), timeout=2, message="the cache turned off")
        assert cache.get("a" * 64, CID) is None
        invalidations.announce("t1")  # no Redis to take it: logged, not raised
        time.sleep(1.0)  # five retries
        server.start()
        wait_until(cache.usable, timeout=10, message="resubscribed")
        assert len(cache) == 0, "nothing from before the outage survives it"
        said = [r.getMessage() for r in caplog.records if r.name == "service.serving.invalidation"]
        assert sum("lost Redis" in line for line in said) == 1, said  # once an outage, not a retry
        assert sum("subscribed to Redis again" in line for line in said) == 1, said
    finally:
        invalidations.close()
        server.kill()


def test_a_redis_that_cannot_persist_keeps_the_cache_on_and_its_invalidations_flowing(
    tmp_path: Path, wait_until: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Redis refuses PING with MISCONF once a snapshot fails (a full disk), but still publishes:
    the listener took the refusal for a lost Redis, every second, two log lines each time."""
    server = ExternalRedis(tmp_path / "redis")
    server.start()
    here, there = (Invalidations(server.url, LookupCache(), retry_s=0.2) for _ in range(2))
    admin = redis.Redis.from_url(server.url)
    try:
        for replica in (here, there):
            replica.start()
        wait_until(lambda: here.cache.usable() and there.cache.usable(), message="both subscribed")
        admin.config_set("save", "900 1")
        shutil.rmtree(server.folder)  # its working folder: the snapshot cannot be written
        admin.bgsave()
        wait_until(lambda: _refuses_ping(admin), message="Redis refuses PING (MISCONF)")
        there.cache.put("a" * 64, CID, _entry("t1"), there.cache.generation())

        deadline = time.monotonic() + 3 * there.cache.stale_after_s
        while time.monotonic() < deadline:
            assert there.cache.get("a" * 64, CID) is not None
            time.sleep(0.05)
        here.announce("t1")
        wait_until(
            lambda: there.cache.get("a" * 64, CID) is None, timeout=2, message="the other replica forgot"
        )
        assert not [r for r in caplog.records if r.name == "service.serving.invalidation"]
    finally:
        for replica in (here, there):
            replica.close()
        admin.close()
        server.kill()


def _refuses_ping(client: redis.Redis) -> bool:
    try:
        client.ping()
    except redis.ResponseError as error:
        return str(error).startswith("MISCONF")
    return False


def test_without_redis_the_cache_is_never_used() -> None:
    invalidations = Invalidations(None, LookupCache())
    invalidations.start()
    invalidations.cache.put("a" * 64, CID, _entry("t1"), invalidations.cache.generation())
    invalidations.announce("t1")
    assert not invalidations.cache.usable() and len(invalidations.cache) == 0
    invalidations.close()
