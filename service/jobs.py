"""The training-job state machine: every compare-and-set on a ``training_jobs`` row lives here.

::

    queued ──claim──> training ──finish──> succeeded      (classifier Available)
       │                 │ └─────fail────> failed         (classifier Failed + reason)
       │                 └─lease expires─> claimable again, epoch + 1 (resume from checkpoint)
       └──────cancel (either state)──────> cancelled      (the classifier is being deleted)

Each transition is ONE conditional UPDATE (the compare-and-set) whose row count or RETURNING
says whether it won. A claim bumps ``epoch``; every later write by that worker carries the
epoch it got, so a worker that lost its lease (the job was reclaimed) writes nothing. Every
function commits before returning, except :func:`create_job`, which joins the caller's
transaction so that the classifier and its job appear together. Times are timezone-aware UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Update, and_, or_, select, update
from sqlalchemy.orm import Session

from service.models import Classifier, ClassifierStatus, Dataset, JobEvent, JobState, TrainingJob

_ACTIVE = (JobState.QUEUED.value, JobState.TRAINING.value)
AVAILABLE_DESCRIPTION = "The classifier instance is now available and is ready to take classifier requests."
TRAINING_DESCRIPTION = (
    "The classifier instance is in its training state, not yet ready to accept classify requests"
)


@dataclass(frozen=True)
class JobLease:
    """A worker's hold on a job; ``epoch`` fences every write it makes."""

    job_id: str
    worker_id: str
    epoch: int


@dataclass(frozen=True)
class JobContext:
    """What a worker needs to run a job. Paths are relative to the artifact root."""

    job_id: str
    tenant_id: str
    classifier_id: str
    state: str
    epoch: int
    attempts: int
    dataset_path: str | None  # None when the dataset was deleted
    checkpoint_dir: str


def create_job(
    session: Session, classifier: Classifier, *, checkpoint_dir: str, now: datetime
) -> TrainingJob:
    """Add a queued job (and its ``queued`` event) for ``classifier`` to the session.

    Does NOT commit: the caller commits it together with the classifier row, and only then
    enqueues the wake-up message.
    """
    job = TrainingJob(
        classifier_id=classifier.id,
        tenant_id=classifier.tenant_id,
        state=JobState.QUEUED.value,
        checkpoint_dir=checkpoint_dir,
        created_at=now,
        updated_at=now,
    )
    session.add(job)
    session.flush()
    session.add(JobEvent(job_id=job.id, kind="queued", epoch=0, at=now))
    return job


def claim_job(
    session: Session, job_id: str, worker_id: str, *, now: datetime, lease: timedelta
) -> JobLease | None:
    """Take the job: queued (or training with an expired lease) -> training, epoch + 1, attempts + 1.

    Returns None when the job is done, failed, cancelled, leased by someone else, or missing.
    """
    claimed = session.execute(
        _update_job(
            job_id,
            or_(
                TrainingJob.state == JobState.QUEUED.value,
                and_(TrainingJob.state == JobState.TRAINING.value, TrainingJob.lease_expires_at < now),
            ),
        )
        .values(
            state=JobState.TRAINING.value,
            epoch=TrainingJob.epoch + 1,
            attempts=TrainingJob.attempts + 1,
            lease_owner=worker_id,
            lease_expires_at=now + lease,
            started_at=now,
            updated_at=now,
        )
        .returning(TrainingJob.epoch)
    ).one_or_none()
    if claimed is None:
        session.rollback()
        return None
    session.add(JobEvent(job_id=job_id, kind="claimed", epoch=claimed.epoch, worker_id=worker_id, at=now))
    session.commit()
    return JobLease(job_id, worker_id, claimed.epoch)


def renew_lease(session: Session, lease: JobLease, *, now: datetime, duration: timedelta) -> bool:
    """Extend the lease to ``now + duration``; False when the lease was lost (stop working)."""
    return _fenced(session, lease, lease_expires_at=now + duration, updated_at=now)


def record_progress(session: Session, lease: JobLease, progress: dict[str, Any], *, now: datetime) -> bool:
    """Store the worker's progress report (JSON-safe); False when the lease was lost."""
    return _fenced(session, lease, progress=progress, updated_at=now)


def finish_job(
    session: Session, lease: JobLease, *, model_dir: str, metrics: dict[str, Any], now: datetime
) -> bool:
    """Mark the job succeeded and its classifier Available with ``model_dir`` (store-relative).

    False when the lease was lost or the job was cancelled: the caller should discard its model.
    """
    classifier_id = _end_job(session, lease, JobState.SUCCEEDED, kind="done", detail=None, now=now)
    if classifier_id is None:
        return False
    session.execute(
        _update_classifier(classifier_id).values(
            status=ClassifierStatus.AVAILABLE.value,
            status_description=AVAILABLE_DESCRIPTION,
            model_dir=model_dir,
            metrics=metrics,
            updated_at=now,
        )
    )
    session.commit()
    return True


def fail_job(session: Session, lease: JobLease, *, reason: str, now: datetime) -> bool:
    """Mark the job failed and its classifier Failed, with a reason the tenant can read."""
    classifier_id = _end_job(session, lease, JobState.FAILED, kind="failed", detail=reason, now=now)
    if classifier_id is None:
        return False
    _mark_classifier_failed(session, classifier_id, reason, now)
    session.commit()
    return True


def give_up_job(session: Session, job_id: str, *, max_attempts: int, reason: str, now: datetime) -> bool:
    """Fail a job whose lease expired after ``max_attempts`` claims (the reconciler's verdict).

    Returns False if the job is not in that condition (it is running, done, or has tries left).
    """
    ended = session.execute(
        _update_job(
            job_id,
            TrainingJob.state == JobState.TRAINING.value,
            TrainingJob.lease_expires_at < now,
            TrainingJob.attempts >= max_attempts,
        )
        .values(
            state=JobState.FAILED.value,
            error=reason,
            lease_owner=None,
            lease_expires_at=None,
            finished_at=now,
            updated_at=now,
        )
        .returning(TrainingJob.classifier_id, TrainingJob.epoch)
    ).one_or_none()
    if ended is None:
        session.rollback()
        return False
    session.add(JobEvent(job_id=job_id, kind="failed", epoch=ended.epoch, detail=reason, at=now))
    _mark_classifier_failed(session, ended.classifier_id, reason, now)
    session.commit()
    return True


def cancel_jobs(session: Session, classifier_id: str, *, now: datetime) -> int:
    """Cancel the classifier's queued or training jobs (it is being deleted); returns how many.

    A worker holding one finds its next fenced write refused and stops.
    """
    cancelled = session.execute(
        update(TrainingJob)
        .where(TrainingJob.classifier_id == classifier_id, TrainingJob.state.in_(_ACTIVE))
        .values(
            state=JobState.CANCELLED.value,
            lease_owner=None,
            lease_expires_at=None,
            finished_at=now,
            updated_at=now,
        )
        .returning(TrainingJob.id, TrainingJob.epoch)
        .execution_options(synchronize_session=False)
    ).all()
    session.add_all(JobEvent(job_id=row.id, kind="cancelled", epoch=row.epoch, at=now) for row in cancelled)
    session.commit()
    return len(cancelled)


def reclaimable_jobs(session: Session, *, now: datetime) -> list[str]:
    """Ids of jobs a worker could claim now: queued, or training with an expired lease.

    For the reconciler, which re-sends their wake-up messages (a claim sorts out duplicates).
    """
    return list(
        session.scalars(
            select(TrainingJob.id)
            .where(
                or_(
                    TrainingJob.state == JobState.QUEUED.value,
                    and_(TrainingJob.state == JobState.TRAINING.value, TrainingJob.lease_expires_at < now),
                )
            )
            .order_by(TrainingJob.created_at)
        )
    )


def job_context(session: Session, job_id: str) -> JobContext | None:
    """What a worker needs to train ``job_id``; None when the job row is gone."""
    row = session.execute(
        select(TrainingJob, Dataset.path)
        .join(Classifier, Classifier.id == TrainingJob.classifier_id)
        .outerjoin(Dataset, Dataset.id == Classifier.dataset_id)
        .where(TrainingJob.id == job_id)
    ).one_or_none()
    session.commit()  # end the read transaction; callers hold no locks between calls
    if row is None:
        return None
    job, dataset_path = row
    return JobContext(
        job_id=job.id,
        tenant_id=job.tenant_id,
        classifier_id=job.classifier_id,
        state=job.state,
        epoch=job.epoch,
        attempts=job.attempts,
        dataset_path=dataset_path,
        checkpoint_dir=job.checkpoint_dir,
    )


def latest_job(session: Session, classifier_id: str) -> TrainingJob | None:
    """The classifier's most recent job (its progress and state), or None."""
    return session.scalars(
        select(TrainingJob)
        .where(TrainingJob.classifier_id == classifier_id)
        .order_by(TrainingJob.created_at.desc())
        .limit(1)
    ).first()


def _update_job(job_id: str, *conditions: Any) -> Update:
    return (
        update(TrainingJob)
        .where(TrainingJob.id == job_id, *conditions)
        .execution_options(synchronize_session=False)
    )


def _update_classifier(classifier_id: str) -> Update:
    return (
        update(Classifier).where(Classifier.id == classifier_id).execution_options(synchronize_session=False)
    )


def _fenced(session: Session, lease: JobLease, **values: Any) -> bool:
    result = session.execute(
        _update_job(
            lease.job_id,
            TrainingJob.state == JobState.TRAINING.value,
            TrainingJob.epoch == lease.epoch,
        ).values(**values)
    )
    won = bool(result.rowcount == 1)  # type: ignore[attr-defined]
    session.commit()
    return won


def _end_job(
    session: Session, lease: JobLease, state: JobState, *, kind: str, detail: str | None, now: datetime
) -> str | None:
    """CAS training(epoch) -> ``state``; returns the classifier id, or None (rolled back) if lost."""
    ended = session.execute(
        _update_job(
            lease.job_id,
            TrainingJob.state == JobState.TRAINING.value,
            TrainingJob.epoch == lease.epoch,
        )
        .values(
            state=state.value,
            error=detail,
            lease_owner=None,
            lease_expires_at=None,
            finished_at=now,
            updated_at=now,
        )
        .returning(TrainingJob.classifier_id)
    ).one_or_none()
    if ended is None:
        session.rollback()
        return None
    session.add(
        JobEvent(
            job_id=lease.job_id,
            kind=kind,
            epoch=lease.epoch,
            worker_id=lease.worker_id,
            detail=detail,
            at=now,
        )
    )
    return str(ended.classifier_id)


def _mark_classifier_failed(session: Session, classifier_id: str, reason: str, now: datetime) -> None:
    session.execute(
        _update_classifier(classifier_id).values(
            status=ClassifierStatus.FAILED.value, status_description=reason, updated_at=now
        )
    )
