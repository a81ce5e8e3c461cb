"""The job state machine's compare-and-set semantics, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.core.models import Classifier, ClassifierStatus, JobEvent, JobState, Tenant, TrainingJob, new_id
from service.training import job_views, jobs, leases
from tests.conftest import TenantHandle
from tests.service.helpers import nlc_files

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
    job = jobs.create_job(
        session, classifier, version=1, dataset_id=None, checkpoint_dir="x/checkpoints", now=T0
    )
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
    lease = leases.claim_job(session, job_id, "w1", now=T0, lease=LEASE)

    assert lease == jobs.JobLease(job_id, "w1", 1, attempt=1)
    job = _job(session, job_id)
    assert (job.state, job.attempts, job.lease_owner) == (JobState.TRAINING, 1, "w1")
    assert job.lease_expires_at == T0 + LEASE
    assert job.lease_expires_at.tzinfo is not None
    assert _events(session, job_id) == ["queued", "claimed"]


def test_second_claim_of_a_leased_job_gets_none(session: Session, job_id: str) -> None:
    assert leases.claim_job(session, job_id, "w1", now=T0, lease=LEASE) is not None

    assert leases.claim_job(session, job_id, "w2", now=T0 + timedelta(seconds=59), lease=LEASE) is None
    assert _job(session, job_id).lease_owner == "w1"


BACKOFF = jobs.BackOff(base_seconds=5, max_seconds=60)


def _expire(session: Session, job_id: str, *, now: datetime, max_attempts: int = 3) -> str | None:
    return jobs.requeue_expired(session, job_id, max_attempts=max_attempts, backoff=BACKOFF, now=now)


def test_expired_lease_is_requeued_with_backoff_and_claimed_with_next_epoch(
    session: Session, job_id: str
) -> None:
    first = leases.claim_job(session, job_id, "w1", now=T0, lease=LEASE)
    assert first is not None
    expired_at = T0 + LEASE + timedelta(seconds=1)
    assert leases.claim_job(session, job_id, "w2", now=expired_at, lease=LEASE) is None  # reconciler first
    assert job_id in job_views.expired_jobs(session, now=expired_at)

    assert _expire(session, job_id, now=expired_at) == "retry"

    job = _job(session, job_id)
    assert (job.state, job.failures, job.lease_owner) == (JobState.QUEUED, 1, None)
    assert job.not_before == expired_at + timedelta(seconds=5)
    assert leases.claim_job(session, job_id, "w2", now=expired_at, lease=LEASE) is None  # backing off
    second = leases.claim_job(session, job_id, "w2", now=expired_at + timedelta(seconds=5), lease=LEASE)
    assert second is not None and second.epoch > first.epoch + 1 and second.attempt == 2
    assert _events(session, job_id) == ["queued", "claimed", "lease_lost", "claimed"]


def test_live_lease_is_not_requeued(session: Session, job_id: str) -> None:
    assert leases.claim_job(session, job_id, "w1", now=T0, lease=LEASE) is not None

    assert job_id not in job_views.expired_jobs(session, now=T0 + LEASE - timedelta(seconds=1))
    assert _expire(session, job_id, now=T0 + LEASE - timedelta(seconds=1)) is None
    assert _job(session, job_id).state == JobState.TRAINING


def test_stale_epoch_writes_are_refused(session: Session, job_id: str) -> None:
    stale = leases.claim_job(session, job_id, "w1", now=T0, lease=LEASE)
    assert stale is not None
    assert _expire(session, job_id, now=T0 + 2 * LEASE) == "retry"
    fresh = leases.claim_job(session, job_id, "w2", now=T0 + 3 * LEASE, lease=LEASE)
    assert fresh is not None

    later = T0 + 3 * LEASE + timedelta(seconds=1)
    assert not leases.record_progress(session, stale, {"phase": "training"}, now=later)
    assert not leases.renew_lease(session, stale, now=later, duration=LEASE)
    assert not leases.record_checkpoint(session, stale, path="x/stale.pt", step=99, now=later)
    assert not leases.record_resumed(session, stale, step=1, now=later)
    assert not leases.release_job(session, stale, now=later)
    assert leases.retry_job(session, stale, reason="boom", max_attempts=3, backoff=BACKOFF, now=later) is None
    assert not leases.finish_job(session, stale, model_dir="m", metrics={}, now=later)
    assert not leases.fail_job(session, stale, reason="boom", now=later)
    assert leases.record_progress(session, fresh, {"phase": "training", "step": 3}, now=later)

    job = _job(session, job_id)
    assert (job.state, job.lease_owner, job.progress, job.checkpoint_path) == (
        JobState.TRAINING,
        "w2",
        {"phase": "training", "step": 3},
        None,
    )


def test_a_deliberately_stale_epoch_cannot_write_even_while_the_job_trains(
    session: Session, job_id: str
) -> None:
    lease = leases.claim_job(session, job_id, "w1", now=T0, lease=LEASE)
    assert lease is not None
    forged = jobs.JobLease(job_id, "w1", lease.epoch - 1)

    assert not leases.renew_lease(session, forged, now=T0, duration=LEASE)
    assert not leases.record_checkpoint(session, forged, path="x/forged.pt", step=5, now=T0)
    assert not leases.finish_job(session, forged, model_dir="m", metrics={}, now=T0)
    assert leases.record_checkpoint(session, lease, path="x/ckpt.pt", step=5, now=T0)
    assert not leases.record_checkpoint(session, lease, path="x/older.pt", step=4, now=T0)  # never backwards

    job = _job(session, job_id)
    assert (job.state, job.checkpoint_path, job.checkpoint_step) == (JobState.TRAINING, "x/ckpt.pt", 5)


def test_the_phase_shown_is_the_reported_one_only_while_the_job_trains(session: Session, job_id: str) -> None:
    """A job released to the queue kept its last report and showed "training" while it waited."""
    lease = leases.claim_job(session, job_id, "w1", now=T0, lease=LEASE)
    assert lease is not None
    assert leases.record_progress(session, lease, {"phase": "evaluating", "step": 40}, now=T0)
    assert job_views.shown_phase(_job(session, job_id)) == "evaluating"

    assert leases.release_job(session, lease, now=T0)

    assert job_views.shown_phase(_job(session, job_id)) == "queued"
    assert jobs.cancel_job(session, _job(session, job_id).classifier_id, now=T0)
    assert job_views.shown_phase(_job(session, job_id)) == "cancelled"


def test_renew_extends_the_lease(session: Session, job_id: str) -> None:
    lease = leases.claim_job(session, job_id, "w1", now=T0, lease=LEASE)
    assert lease is not None

    assert leases.renew_lease(session, lease, now=T0 + timedelta(seconds=50), duration=LEASE)

    assert _job(session, job_id).lease_expires_at == T0 + timedelta(seconds=110)
    assert job_id not in job_views.expired_jobs(session, now=T0 + timedelta(seconds=100))


def test_finish_makes_classifier_available_and_job_unclaimable(session: Session, job_id: str) -> None:
    lease = leases.claim_job(session, job_id, "w1", now=T0, lease=LEASE)
    assert lease is not None

    assert leases.finish_job(session, lease, model_dir="t/c/model", metrics={"accuracy": 1.0}, now=T0)

    job = _job(session, job_id)
    classifier = session.get(Classifier, job.classifier_id)
    assert classifier is not None
    assert (job.state, job.finished_at) == (JobState.SUCCEEDED, T0)
    assert (classifier.status, classifier.model_dir, classifier.metrics) == (
        ClassifierStatus.AVAILABLE,
        "t/c/model",
        {"accuracy": 1.0},
    )
    assert leases.claim_job(session, job_id, "w2", now=T0 + 10 * LEASE, lease=LEASE) is None
    assert _events(session, job_id) == ["queued", "claimed", "done"]


def test_fail_marks_classifier_failed_with_reason(session: Session, job_id: str) -> None:
    lease = leases.claim_job(session, job_id, "w1", now=T0, lease=LEASE)
    assert lease is not None

    assert leases.fail_job(session, lease, reason="row 3: text is empty", now=T0)

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
    lease = leases.claim_job(session, job_id, "w1", now=T0, lease=LEASE)
    assert lease is not None

    assert jobs.cancel_jobs(session, _job(session, job_id).classifier_id, now=T0) == 1

    assert not leases.record_progress(session, lease, {"phase": "training"}, now=T0)
    assert leases.claim_job(session, job_id, "w2", now=T0 + 10 * LEASE, lease=LEASE) is None
    assert _events(session, job_id)[-1] == "cancelled"


def test_expired_lease_out_of_attempts_fails_the_classifier_with_a_reason(
    session: Session, job_id: str
) -> None:
    now = T0
    for _ in range(2):
        assert leases.claim_job(session, job_id, "w1", now=now, lease=LEASE) is not None
        now += 2 * LEASE
        assert _expire(session, job_id, now=now, max_attempts=2) in {"retry", "failed"}
        now += timedelta(minutes=5)

    job = _job(session, job_id)
    classifier = session.get(Classifier, job.classifier_id)
    assert classifier is not None
    assert (job.state, job.failures) == (JobState.FAILED, 2)
    assert classifier.status == ClassifierStatus.FAILED
    assert "interrupted 2 times" in classifier.status_description
    assert _events(session, job_id)[-2:] == ["lease_lost", "failed"]


def test_retry_backs_off_exponentially_then_fails_after_max_attempts(session: Session, job_id: str) -> None:
    now = T0
    outcomes = []
    for _ in range(3):
        lease = leases.claim_job(session, job_id, "w1", now=now, lease=LEASE)
        assert lease is not None
        outcomes.append(
            leases.retry_job(session, lease, reason="disk full", max_attempts=3, backoff=BACKOFF, now=now)
        )
        job = _job(session, job_id)
        if job.not_before is not None:
            assert job.not_before - now == timedelta(seconds=5 * 2 ** (job.failures - 1))
            now = job.not_before

    assert outcomes == ["retry", "retry", "failed"]
    job = _job(session, job_id)
    classifier = session.get(Classifier, job.classifier_id)
    assert classifier is not None
    assert (classifier.status, classifier.status_description) == (
        ClassifierStatus.FAILED,
        "disk full (failed 3 times)",
    )
    assert _events(session, job_id).count("crashed") == 2


def test_cancel_keeps_checkpoint_and_resume_requeues_for_a_fresh_claim(session: Session, job_id: str) -> None:
    lease = leases.claim_job(session, job_id, "w1", now=T0, lease=LEASE)
    assert lease is not None
    classifier_id = _job(session, job_id).classifier_id

    assert jobs.cancel_job(session, classifier_id, now=T0)
    assert not leases.renew_lease(session, lease, now=T0, duration=LEASE)  # the worker stops
    assert leases.record_checkpoint(session, lease, path="x/last.pt", step=40, now=T0)  # its last one counts
    classifier = session.get(Classifier, classifier_id)
    assert classifier is not None and classifier.status == ClassifierStatus.UNAVAILABLE
    assert not jobs.cancel_job(session, classifier_id, now=T0)  # nothing left to cancel

    assert job_views.cancelled_jobs(session, classifier_id) == [job_id]
    assert jobs.resume_jobs(session, classifier_id, [job_id], now=T0) == [job_id]
    assert job_views.cancelled_jobs(session, classifier_id) == []
    assert jobs.resume_jobs(session, classifier_id, [job_id], now=T0) == []  # no longer cancelled
    session.refresh(classifier)
    assert classifier.status == ClassifierStatus.TRAINING
    resumed = leases.claim_job(session, job_id, "w2", now=T0, lease=LEASE)
    assert resumed is not None and resumed.epoch == lease.epoch + 1
    context = job_views.job_context(session, job_id)
    assert context is not None and (context.checkpoint_path, context.checkpoint_step) == ("x/last.pt", 40)
    kinds = _events(session, job_id)
    assert kinds == ["queued", "claimed", "cancelled", "checkpoint", "queued", "claimed"]


def test_jobs_to_send_covers_lost_messages_and_ended_backoffs(session: Session, job_id: str) -> None:
    def sends(at: datetime, in_queue: set[str]) -> bool:
        return job_id in job_views.jobs_to_send(
            session, now=at, grace=timedelta(seconds=10), in_queue=in_queue
        )

    assert not sends(T0 + timedelta(seconds=5), set())  # the API's own message may be on its way
    assert not sends(T0 + timedelta(seconds=11), {job_id})  # its message is in the queue
    later = T0 + timedelta(seconds=11)
    assert sends(later, set())  # lost
    jobs.mark_enqueued(session, job_id, now=later)
    assert not sends(later + timedelta(seconds=1), set())

    lease = leases.claim_job(session, job_id, "w1", now=later, lease=LEASE)
    assert lease is not None
    assert leases.retry_job(session, lease, reason="x", max_attempts=3, backoff=BACKOFF, now=later) == "retry"
    assert not sends(later + timedelta(seconds=4), {job_id})
    ended = later + timedelta(seconds=5)
    next_look = job_views.next_not_before(session, now=later)
    assert next_look is not None and next_look <= ended
    assert sends(ended, {job_id})  # the back-off ended after the last message: send one


# --- the HTTP extensions: cancel, resume, events ----------------------------------------------


def test_tenant_cancels_resumes_and_reads_the_training_timeline(
    client: TestClient, tenant_factory: Callable[..., TenantHandle]
) -> None:
    owner, stranger = tenant_factory(), tenant_factory()
    created = client.post("/v1/classifiers", files=nlc_files(), headers=owner.headers)
    assert created.status_code == 200, created.text
    classifier_id = created.json()["classifier_id"]
    base = f"/v1/classifiers/{classifier_id}"

    cancelled = client.post(f"{base}/cancel", headers=owner.headers)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "Unavailable"
    assert "resume" in cancelled.json()["status_description"]
    assert client.post(f"{base}/cancel", headers=owner.headers).status_code == 409
    resumed = client.post(f"{base}/resume", headers=owner.headers)
    assert resumed.status_code == 200, resumed.text
    assert (resumed.json()["status"], resumed.json()["progress"]["state"]) == ("Training", "queued")
    assert client.post(f"{base}/resume", headers=owner.headers).status_code == 409

    timeline = client.get(f"{base}/events", headers=owner.headers)
    assert timeline.status_code == 200, timeline.text
    events = timeline.json()["events"]
    assert [e["event"] for e in events] == ["queued", "cancelled", "queued"]
    assert events[-1]["detail"] == "resumed by the tenant"
    assert {"job_id", "at", "worker", "attempt", "epoch", "step"} <= set(events[0])
    for path in ("events", "cancel", "resume"):
        method = client.get if path == "events" else client.post
        assert method(f"{base}/{path}", headers=stranger.headers).status_code == 404
