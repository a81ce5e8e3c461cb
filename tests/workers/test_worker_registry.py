"""The registry of live workers on a real Redis: a heartbeat shows a worker and its job, an entry
nobody renews expires, a clean stop removes it at once, and a Redis outage never stops the beat."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.chaos import ExternalRedis
from service.core.settings import Settings
from service.training.worker_registry import WorkerInfo, WorkerRegistry, connect
from tests.conftest import empty_redis_db, redis_test_url
from workers.heartbeat import TTL_BEATS, Heartbeat, describe, worker_identity

pytestmark = pytest.mark.integration

REGISTRY_URL = redis_test_url(12)
EVERY = 0.2


@pytest.fixture
def registry() -> Iterator[WorkerRegistry]:
    """A registry on Redis db 12 of the machine's server, emptied before and after the test."""
    with empty_redis_db(REGISTRY_URL):
        client = connect(REGISTRY_URL)
        yield WorkerRegistry(client)
        client.close()


@pytest.fixture
def idle() -> WorkerInfo:
    """This process, idle, on the CPU with two learners."""
    return describe(Settings(device="cpu", learners=2))


def _entry(registry: WorkerRegistry, worker_id: str) -> WorkerInfo | None:
    return next((w for w in registry.alive() if w.worker_id == worker_id), None)


def _shown(registry: WorkerRegistry, worker_id: str, job_id: str | None) -> WorkerInfo | None:
    """The worker's entry once it shows ``job_id`` (None: idle)."""
    entry = _entry(registry, worker_id)
    return entry if entry is not None and entry.job_id == job_id else None


def test_an_entry_describes_this_process_as_its_job_leases_name_it(idle: WorkerInfo) -> None:
    assert idle.worker_id == worker_identity() == f"{idle.host}:{idle.pid}"
    assert (idle.device, idle.learners, idle.job_id) == ("cpu", 2, None)


def test_a_heartbeat_shows_the_worker_idle_then_with_its_job_then_idle_again(
    registry: WorkerRegistry, idle: WorkerInfo, wait_until: Callable[..., Any]
) -> None:
    beat = Heartbeat(registry, idle, every=EVERY)
    beat.start()
    try:
        shown = wait_until(lambda: _shown(registry, idle.worker_id, None), message="the first beat")
        assert (shown.device, shown.learners) == ("cpu", 2)
        beat.set_job("job-1")
        wait_until(lambda: _shown(registry, idle.worker_id, "job-1"), timeout=2, message="the job")
        beat.set_job(None)
        later = wait_until(lambda: _shown(registry, idle.worker_id, None), timeout=2, message="idle again")
        assert later.last_heartbeat > shown.last_heartbeat and later.started_at == shown.started_at
        ttl_ms = registry.client.pttl(f"taas:worker:{idle.worker_id}")
        assert 0 < ttl_ms <= TTL_BEATS * EVERY * 1000
    finally:
        beat.stop()


def test_an_entry_nobody_renews_expires_after_its_ttl(
    registry: WorkerRegistry, idle: WorkerInfo, wait_until: Callable[..., Any]
) -> None:
    registry.publish(idle, ttl_seconds=0.3)
    assert _entry(registry, idle.worker_id) == idle

    wait_until(lambda: _entry(registry, idle.worker_id) is None, timeout=2, message="the entry expired")


def test_a_clean_stop_removes_the_entry_at_once(
    registry: WorkerRegistry, idle: WorkerInfo, wait_until: Callable[..., Any]
) -> None:
    beat = Heartbeat(registry, idle, every=EVERY)
    beat.start()
    wait_until(lambda: _entry(registry, idle.worker_id), message="the first beat")

    beat.stop()

    assert not beat.running and _entry(registry, idle.worker_id) is None


def test_a_redis_outage_does_not_stop_the_heartbeat(
    idle: WorkerInfo, tmp_path: Path, wait_until: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    # given: a beating worker on a Redis server of the test's own
    server = ExternalRedis(tmp_path / "redis")
    server.start()
    client = connect(server.url)
    registry = WorkerRegistry(client)
    beat = Heartbeat(registry, idle, every=EVERY)
    beat.start()
    try:
        wait_until(lambda: _entry(registry, idle.worker_id), message="the first beat")
        # when: Redis is down while beats fail, then back, empty
        server.kill()
        wait_until(lambda: "heartbeat failed" in caplog.text, timeout=5, message="a failed beat")
        assert beat.running
        server.start()
        client.flushdb()
        # then: the next beats publish the entry again
        wait_until(lambda: _entry(registry, idle.worker_id), timeout=5, message="a beat after the outage")
    finally:
        beat.stop()
        server.kill()
        client.close()
