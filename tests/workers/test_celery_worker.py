"""The wiring: a real `python -m workers` process on the machine's Redis picks up a job that the
service enqueued by task name, and trains it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy.orm import Session

from service.models import Classifier, ClassifierStatus, JobState, TrainingJob
from service.settings import Settings

pytestmark = pytest.mark.integration

BROKER_URL = "redis://127.0.0.1:6379/14"


@pytest.fixture
def broker() -> Iterator[str]:
    """Redis db 14 of the machine's server, emptied before and after the test."""
    client = redis.Redis.from_url(BROKER_URL, socket_connect_timeout=2)
    try:
        client.flushdb()
    except redis.ConnectionError as error:
        pytest.skip(f"Redis at 127.0.0.1:6379 is unreachable: {error}")
    yield BROKER_URL
    client.flushdb()
    client.close()


def _job_state(session: Session, job_id: str) -> str | None:
    session.rollback()
    session.expire_all()
    job = session.get(TrainingJob, job_id)
    return None if job is None else job.state


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_worker_process_trains_a_job_enqueued_by_task_name(
    broker: str,
    settings_factory: Callable[..., Settings],
    queue_job: Callable[..., Any],
    intents_csv: Path,
    session: Session,
    tmp_path: Path,
    wait_until: Callable[..., Any],
) -> None:
    settings = settings_factory(redis_url=broker)
    env = {
        **os.environ,
        "TAAS_DATABASE_URL": settings.resolved_database_url(),
        "TAAS_REDIS_URL": broker,
        "TAAS_DATA_DIR": str(settings.data_dir),
        "TAAS_ARTIFACTS_DIR": str(settings.resolved_artifacts_dir()),
    }
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "workers"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        queued = queue_job(intents_csv, settings)

        wait_until(
            lambda: _job_state(session, queued.job_id) == JobState.SUCCEEDED,
            timeout=120,
            interval=0.2,
            message=f"job trained by the worker process; its log: {log_path}",
        )
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()

    classifier = session.get(Classifier, queued.classifier_id)
    assert classifier is not None and classifier.status == ClassifierStatus.AVAILABLE
    assert worker.returncode == 0, log_path.read_text(errors="replace")
