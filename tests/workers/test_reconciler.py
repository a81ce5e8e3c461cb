"""The reconciler's pass against the real databases and the machine's Redis (db 14)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import update
from sqlalchemy.orm import Session

from service.core.db import make_engine, session_factory
from service.core.models import Classifier, ClassifierStatus, ClassifierVersion, JobState, TrainingJob
from service.core.settings import Settings
from service.storage.store import ArtifactStore
from service.training.leases import claim_job
from tests.conftest import empty_redis_db, redis_test_url
from workers.reconciler import queued_job_ids, reconcile_once
from workers.unrecorded import sweep_unrecorded

pytestmark = pytest.mark.integration

BROKER_URL = redis_test_url(14)


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    with empty_redis_db(BROKER_URL) as client:
        yield client


def _job(session: Session, job_id: str) -> TrainingJob:
    session.rollback()
    session.expire_all()
    job = session.get(TrainingJob, job_id)
    assert job is not None
    return job


def test_pass_requeues_expired_leases_resends_lost_messages_and_fails_after_max_attempts(
    broker: redis.Redis,
    settings_factory: Callable[..., Settings],
    queue_job: Callable[..., Any],
    intents_csv: Path,
    session: Session,
) -> None:
    settings = settings_factory(redis_url=BROKER_URL, max_attempts=2, retry_backoff_seconds=5)
    queued = queue_job(intents_csv)  # recorded with no broker: its message was never sent
    engine = make_engine(settings)
    sessions = session_factory(engine)
    now = datetime.now(UTC) + timedelta(seconds=11)  # past the grace for a missing message
    try:
        report = reconcile_once(settings, sessions, now=now)
        assert queued.job_id in report.sent
        assert queued.job_id in queued_job_ids(BROKER_URL)
        broker.delete("training")  # the message is lost (a Redis restart without its file)

        for attempt in (1, 2):
            lease = claim_job(session, queued.job_id, "w1", now=now, lease=timedelta(seconds=10))
            assert lease is not None and lease.attempt == attempt
            now += timedelta(seconds=11)  # the worker died: its lease runs out
            report = reconcile_once(settings, sessions, now=now)
            job = _job(session, queued.job_id)
            if attempt == 1:
                assert queued.job_id in report.requeued
                assert (job.state, job.failures) == (JobState.QUEUED, 1)
                assert queued.job_id not in report.sent  # backing off
                now = job.not_before or now
                assert queued.job_id in reconcile_once(settings, sessions, now=now).sent
        assert queued.job_id in report.failed
        assert job.state == JobState.FAILED
        found = session.get(Classifier, job.classifier_id)
        assert found is not None and found.status == ClassifierStatus.FAILED
        assert "interrupted 2 times" in found.status_description
    finally:
        engine.dispose()


def test_pass_sweeps_staging_files_older_than_the_limit(
    broker: redis.Redis, settings_factory: Callable[..., Settings]
) -> None:
    settings = settings_factory(redis_url=BROKER_URL, temp_max_age_seconds=60)
    store = ArtifactStore(settings.resolved_artifacts_dir())
    old, fresh = store.temp_path(".csv"), store.temp_path(".csv")
    old.write_text("half an upload")
    fresh.write_text("an upload in progress")
    an_hour_ago = datetime.now(UTC).timestamp() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    engine = make_engine(settings)
    try:
        report = reconcile_once(settings, session_factory(engine), now=datetime.now(UTC))
    finally:
        engine.dispose()

    assert report.swept == 1
    assert not old.exists() and fresh.exists()


def _age(path: Path, seconds: float) -> None:
    """Make ``path`` and everything in it look untouched for ``seconds``."""
    then = datetime.now(UTC).timestamp() - seconds
    for inner in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(inner, (then, then))


def test_files_no_row_records_are_swept_once_old_and_recorded_ones_never(
    session: Session,
    worker_settings: Settings,
    queue_job: Callable[..., Any],
    intents_csv: Path,
) -> None:
    """A crash between storing a file and committing its row left it for ever: a dataset's CSV,
    an imported classifier's folder, a deleted tenant's folder."""
    kept = queue_job(intents_csv)
    store = ArtifactStore(worker_settings.resolved_artifacts_dir())
    tenant = store.root / "tenants" / kept.tenant_id
    recorded = sorted(p for p in tenant.rglob("*") if p.is_file())
    unrecorded_csv = tenant / "datasets" / "0b8d9f06-1c1e-4a39-9d6b-3f2a0c6c1a11.csv"
    unrecorded_csv.write_text("text,label\na,b\n")
    unrecorded_model = tenant / "classifiers" / "5d1c7a7e-2b0e-4a54-8a55-0f6c6f0c9b22" / "versions" / "1"
    unrecorded_model.mkdir(parents=True)
    (unrecorded_model / "weights.pt").write_bytes(b"w")
    gone_tenant = store.root / "tenants" / "7f3e2d1c-0b9a-4877-8665-544332211000"
    (gone_tenant / "datasets").mkdir(parents=True)
    (gone_tenant / "datasets" / "x.csv").write_text("text,label\n")
    fresh = tenant / "datasets" / "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d.csv"  # its commit may be on its way
    for path in (tenant, gone_tenant):
        _age(path, 7200)
    fresh.write_text("text,label\nc,d\n")

    swept = sweep_unrecorded(session, store, 3600)

    assert swept == 3
    assert not unrecorded_csv.exists() and not unrecorded_model.parent.parent.exists()
    assert not gone_tenant.exists() and fresh.exists()
    assert sorted(p for p in tenant.rglob("*") if p.is_file() and p != fresh) == recorded


@pytest.mark.parametrize(
    ("state", "swept"),
    [
        (JobState.FAILED, True),
        (JobState.SUCCEEDED, True),
        (JobState.CANCELLED, False),
        (JobState.TRAINING, False),
    ],
)
def test_checkpoints_no_resumable_job_trains_in_are_swept_once_old(
    session: Session,
    worker_settings: Settings,
    queue_job: Callable[..., Any],
    intents_csv: Path,
    state: JobState,
    swept: bool,
) -> None:
    """A job the reconciler failed (its worker lost) left its checkpoints for ever."""
    queued = queue_job(intents_csv)
    session.execute(update(TrainingJob).where(TrainingJob.id == queued.job_id).values(state=state.value))
    session.commit()
    store = ArtifactStore(worker_settings.resolved_artifacts_dir())
    checkpoints = store.checkpoint_dir(queued.tenant_id, queued.classifier_id, 1)
    checkpoints.mkdir(parents=True)
    (checkpoints / "ckpt-00000100.pt").write_bytes(b"c")
    _age(store.root / "tenants" / queued.tenant_id, 7200)

    assert sweep_unrecorded(session, store, 3600) == int(swept)
    assert checkpoints.exists() != swept


def test_a_deleted_versions_folder_and_unrecorded_model_folders_are_swept_once_old(
    session: Session,
    worker_settings: Settings,
    queue_job: Callable[..., Any],
    intents_csv: Path,
) -> None:
    """A version deletion cut off between its commit and its files, and a worker dead between
    moving its model into place and recording it (the job then Failed), left them for ever."""
    queued = queue_job(intents_csv)
    store = ArtifactStore(worker_settings.resolved_artifacts_dir())
    models = store.model_dir(queued.tenant_id, queued.classifier_id, 1)
    recorded, stray, fresh = models / "epoch-2", models / "epoch-1", models / "epoch-3"
    deleted = store.version_dir(queued.tenant_id, queued.classifier_id, 99)
    for folder in (recorded, stray, deleted / "model" / "epoch-1", deleted / "checkpoints"):
        folder.mkdir(parents=True)
        (folder / "weights.pt").write_bytes(b"w")
    session.execute(
        update(ClassifierVersion)
        .where(ClassifierVersion.classifier_id == queued.classifier_id, ClassifierVersion.number == 1)
        .values(model_dir=store.relative(recorded))
    )
    session.commit()
    _age(store.root / "tenants" / queued.tenant_id, 7200)
    fresh.mkdir()  # its worker may be about to record it
    (fresh / "weights.pt").write_bytes(b"w")

    assert sweep_unrecorded(session, store, 3600) == 2

    assert not deleted.exists() and not stray.exists()
    assert (recorded / "weights.pt").exists() and (fresh / "weights.pt").exists()
    assert store.version_dir(queued.tenant_id, queued.classifier_id, 1).exists()
