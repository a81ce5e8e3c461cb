"""The job state machine's compare-and-set semantics, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from service import jobs
from service.models import Classifier, ClassifierStatus, JobEvent, JobState, Tenant, TrainingJob, new_id

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=60)


@pytest.fixture
def job_id(session: Session) -> str:
    tenant = Tenant(name=f"jobs-{new_id()}", created_at=T0)
    session.add(tenant)
    session.flush()
    classifier = Classifier(tenant_id=tenant.id, name="c", language="en", created_at=T0, updated_at=T0)
    session.add(classifier)
    session.flush()
    job = jobs.create_job(session, classifier, checkpoint_dir="x/checkpoints", now=T0)
    session.commit()
    return job.id


def _job(session: Session, job_id: str) -> TrainingJob:
    session.expire_all()
    job = session.get(TrainingJob, job_id)
    assert job is not None
    return job


def _events(session: Session, job_id: str) -> list[str]:
    return list(session.scalars(select(JobEvent.kind).where(JobEvent.job_id == job_id).order_by(JobEvent.id)))


def test_claim_moves_queued_job_to_training_with_epoch_one(session: Session, job_id: str) -> None:
    lease = jobs.claim_job(session, job_id, "w1", now=T0, lease=LEASE)

    assert lease == jobs.JobLease(job_id, "w1", 1)
    job = _job(session, job_id)
    assert (job.state, job.attempts, job.lease_owner) == (JobState.TRAINING, 1, "w1")
    assert job.lease_expires_at == T0 + LEASE
    assert job.lease_expires_at.tzinfo is not None
    assert _events(session, job_id) == ["queued", "claimed"]


def test_second_claim_of_a_leased_job_gets_none(session: Session, job_id: str) -> None:
    assert jobs.claim_job(session, job_id, "w1", now=T0, lease=LEASE) is not None

    assert jobs.claim_job(session, job_id, "w2", now=T0 + timedelta(seconds=59), lease=LEASE) is None
    assert _job(session, job_id).lease_owner == "w1"


def test_expired_lease_is_reclaimable_with_next_epoch(session: Session, job_id: str) -> None:
    first = jobs.claim_job(session, job_id, "w1", now=T0, lease=LEASE)
    assert first is not None

    second = jobs.claim_job(session, job_id, "w2", now=T0 + LEASE + timedelta(seconds=1), lease=LEASE)

    assert second == jobs.JobLease(job_id, "w2", first.epoch + 1)
    assert _job(session, job_id).attempts == 2
    assert job_id not in jobs.reclaimable_jobs(session, now=T0 + LEASE + timedelta(seconds=2))


def test_stale_epoch_writes_are_refused(session: Session, job_id: str) -> None:
    stale = jobs.claim_job(session, job_id, "w1", now=T0, lease=LEASE)
    assert stale is not None
    fresh = jobs.claim_job(session, job_id, "w2", now=T0 + 2 * LEASE, lease=LEASE)
    assert fresh is not None

    later = T0 + 2 * LEASE + timedelta(seconds=1)
    assert not jobs.record_progress(session, stale, {"phase": "training"}, now=later)
    assert not jobs.renew_lease(session, stale, now=later, duration=LEASE)
    assert not jobs.finish_job(session, stale, model_dir="m", metrics={}, now=later)
    assert not jobs.fail_job(session, stale, reason="boom", now=later)
    assert jobs.record_progress(session, fresh, {"phase": "training", "step": 3}, now=later)

    job = _job(session, job_id)
    assert (job.state, job.lease_owner, job.progress) == (
        JobState.TRAINING,
        "w2",
        {"phase": "training", "step": 3},
    )


def test_renew_extends_the_lease(session: Session, job_id: str) -> None:
    lease = jobs.claim_job(session, job_id, "w1", now=T0, lease=LEASE)
    assert lease is not None

    assert jobs.renew_lease(session, lease, now=T0 + timedelta(seconds=50), duration=LEASE)

    assert _job(session, job_id).lease_expires_at == T0 + timedelta(seconds=110)
    assert jobs.claim_job(session, job_id, "w2", now=T0 + timedelta(seconds=100), lease=LEASE) is None


def test_finish_makes_classifier_available_and_job_unclaimable(session: Session, job_id: str) -> None:
    lease = jobs.claim_job(session, job_id, "w1", now=T0, lease=LEASE)
    assert lease is not None

    assert jobs.finish_job(session, lease, model_dir="t/c/model", metrics={"accuracy": 1.0}, now=T0)

    job = _job(session, job_id)
    classifier = session.get(Classifier, job.classifier_id)
    assert classifier is not None
    assert (job.state, job.finished_at) == (JobState.SUCCEEDED, T0)
    assert (classifier.status, classifier.model_dir, classifier.metrics) == (
        ClassifierStatus.AVAILABLE,
        "t/c/model",
        {"accuracy": 1.0},
    )
    assert jobs.claim_job(session, job_id, "w2", now=T0 + 10 * LEASE, lease=LEASE) is None
    assert _events(session, job_id) == ["queued", "claimed", "done"]


def test_fail_marks_classifier_failed_with_reason(session: Session, job_id: str) -> None:
    lease = jobs.claim_job(session, job_id, "w1", now=T0, lease=LEASE)
    assert lease is not None

    assert jobs.fail_job(session, lease, reason="row 3: text is empty", now=T0)

    job = _job(session, job_id)
    classifier = session.get(Classifier, job.classifier_id)
    assert classifier is not None
    assert (job.state, job.error) == (JobState.FAILED, "row 3: text is empty")
    assert (classifier.status, classifier.status_description) == (
        ClassifierStatus.FAILED,
        "row 3: text is empty",
    )
    assert _events(session, job_id)[-1] == "failed"


def test_cancelled_job_refuses_claim_and_fenced_writes(session: Session, job_id: str) -> None:
    lease = jobs.claim_job(session, job_id, "w1", now=T0, lease=LEASE)
    assert lease is not None

    assert jobs.cancel_jobs(session, _job(session, job_id).classifier_id, now=T0) == 1

    assert not jobs.record_progress(session, lease, {"phase": "training"}, now=T0)
    assert jobs.claim_job(session, job_id, "w2", now=T0 + 10 * LEASE, lease=LEASE) is None
    assert _events(session, job_id)[-1] == "cancelled"


def test_give_up_fails_only_expired_jobs_out_of_attempts(session: Session, job_id: str) -> None:
    assert jobs.claim_job(session, job_id, "w1", now=T0, lease=LEASE) is not None
    assert not jobs.give_up_job(session, job_id, max_attempts=1, reason="lost", now=T0)  # still leased
    assert not jobs.give_up_job(session, job_id, max_attempts=2, reason="lost", now=T0 + 2 * LEASE)

    assert jobs.give_up_job(session, job_id, max_attempts=1, reason="worker lost 1 time", now=T0 + 2 * LEASE)

    assert _job(session, job_id).state == JobState.FAILED


def test_job_context_gives_paths_and_none_for_missing_job(session: Session, job_id: str) -> None:
    context = jobs.job_context(session, job_id)

    assert context is not None
    assert (context.checkpoint_dir, context.dataset_path, context.state) == ("x/checkpoints", None, "queued")
    assert jobs.job_context(session, "no-such-job") is None
    assert job_id in jobs.reclaimable_jobs(session, now=T0)
