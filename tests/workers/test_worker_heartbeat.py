"""A real ``python -m workers`` process in the registry of live workers: listed idle once Celery
is ready (on the ops overview too), with its job while it trains, and gone within the entry's
TTL after kill -9. Its fork server (trainer.processes) runs before the first job and does not
outlive it."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.app import create_app
from service.core.models import JobEvent
from service.core.settings import Settings
from service.training.worker_registry import WorkerInfo, WorkerRegistry
from tests.conftest import empty_redis_db, migrated_database, redis_test_url
from tests.ops.conftest import log_in
from tests.processes import alive, command_line, descendants
from workers.heartbeat import TTL_BEATS

pytestmark = pytest.mark.integration

BROKER_URL = redis_test_url(11)
HEARTBEAT_SECONDS = 0.5


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    """A migrated SQLite database of this test's own: a worker takes the fairest job in the whole
    database, and the registry does not depend on the database."""
    with migrated_database("sqlite", tmp_path) as url:
        yield url


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    """Redis db 11 of the machine's server, emptied before and after the test."""
    with empty_redis_db(BROKER_URL) as client:
        yield client


def _entry(registry: WorkerRegistry, pid: int, job_id: str | None = None) -> WorkerInfo | None:
    """The entry of the worker ``pid`` once it shows ``job_id`` (None: idle)."""
    return next((w for w in registry.alive() if w.pid == pid and w.job_id == job_id), None)


def _fork_servers(pid: int) -> list[int]:
    """The trainer's fork servers below the worker ``pid``."""
    return [p for p in descendants(pid) if "multiprocessing.forkserver" in command_line(p)]


def _claims(session: Session, job_id: str) -> list[str | None]:
    """The lease owners named by the job's "claimed" events (read afresh)."""
    session.rollback()
    claims = select(JobEvent.worker_id).where(JobEvent.job_id == job_id, JobEvent.kind == "claimed")
    return list(session.scalars(claims))


def test_a_worker_is_listed_idle_with_its_fork_server_then_with_its_job_and_both_go_after_kill_9(
    broker: redis.Redis,
    settings_factory: Callable[..., Settings],
    queue_job: Callable[..., Any],
    start_workers: Callable[..., list[subprocess.Popen[bytes]]],
    intents_csv: Path,
    session: Session,
    tmp_path: Path,
    wait_until: Callable[..., Any],
) -> None:
    # given: a worker process, beating every half second
    settings = settings_factory(redis_url=BROKER_URL)
    registry = WorkerRegistry(broker)
    env = {"TAAS_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS), "TAAS_LEARNERS": "1", "TAAS_DEVICE": "cpu"}
    [worker] = start_workers(settings, **env)
    log = tmp_path / "worker-0.log"
    # then: it is listed idle, in the registry and on the ops overview
    idle = wait_until(lambda: _entry(registry, worker.pid), timeout=120, message=f"idle worker; log: {log}")
    assert (idle.host, idle.device, idle.learners) == (socket.gethostname(), "cpu", 1)
    with TestClient(create_app(settings)) as client:
        log_in(client)
        listed = {w["worker"]: w for w in client.get("/ops/api/overview").json()["workers"]}
    assert listed[idle.worker_id]["state"] == "idle" and listed[idle.worker_id]["device"] == "cpu"
    # and: its fork server already runs, so the first job's learners need not wait for it
    [fork_server] = wait_until(lambda: _fork_servers(worker.pid), message=f"the fork server; log: {log}")
    # when: a job is queued, then: the worker shows it while training it, under its lease owner id
    queued = queue_job(intents_csv, settings)
    busy = wait_until(
        lambda: _entry(registry, worker.pid, queued.job_id), timeout=60, interval=0.02, message=f"log: {log}"
    )
    claimed_by = wait_until(lambda: _claims(session, queued.job_id), message="the job's claim")
    assert claimed_by == [busy.worker_id] == [idle.worker_id]
    # when: the worker is killed, then: its entry expires within three beats
    worker.kill()
    worker.wait()
    wait_until(
        lambda: all(w.pid != worker.pid for w in registry.alive()),
        timeout=TTL_BEATS * HEARTBEAT_SECONDS + 1.0,
        message="the killed worker's entry expired",
    )
    wait_until(lambda: not alive(fork_server), timeout=10, message="the fork server ended with its worker")


def test_a_worker_stopped_cleanly_leaves_the_registry_at_once(
    broker: redis.Redis,
    settings_factory: Callable[..., Settings],
    start_workers: Callable[..., list[subprocess.Popen[bytes]]],
    wait_until: Callable[..., Any],
) -> None:
    registry = WorkerRegistry(broker)
    [worker] = start_workers(settings_factory(redis_url=BROKER_URL), TAAS_HEARTBEAT_SECONDS="60")
    wait_until(lambda: _entry(registry, worker.pid), timeout=120, message="the idle worker")

    worker.terminate()

    assert worker.wait(timeout=30) == 0
    assert all(w.pid != worker.pid for w in registry.alive())  # long before its 180 s expiry
