"""A worker's lease on a job, and every write it makes under it: reserve and claim the job, renew
the lease, record progress and checkpoints, then give the job back, finish it, fail it or retry
it (the job state machine is drawn in :mod:`service.training.jobs`).

Every write after the claim carries the lease's epoch and wins only while the lease holds (a
compare-and-set on the job row), so a worker that lost its lease writes nothing. Each function
commits before returning.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, or_, select, update
from sqlalchemy.orm import Session

from service.core.models import ClassifierStatus, JobEvent, JobState, TrainingJob
from service.training import status
from service.training.job_views import claimable
from service.training.jobs import BackOff, JobLease, end_job, job_event, update_job


def reserve_job(session: Session, job_id: str, worker_id: str, *, now: datetime, hold: timedelta) -> bool:
    """Set a claimable job aside for ``worker_id`` until ``now + hold``; False if another won it.

    The fair dispatcher's pick (``service.training.scheduling``): the job stays queued, but only
    ``worker_id`` can claim it until the hold ends, so of two workers that picked the same job
    exactly one proceeds. A hold that ends unclaimed (the worker died) just lapses.
    """
    result = session.execute(
        update_job(job_id, claimable(now, worker_id)).values(
            lease_owner=worker_id, lease_expires_at=now + hold
        )
    )
    won = bool(result.rowcount == 1)  # type: ignore[attr-defined]
    session.commit()
    return won


def claim_job(
    session: Session, job_id: str, worker_id: str, *, now: datetime, lease: timedelta
) -> JobLease | None:
    """Take the job: queued (back-off over) -> training, epoch + 1, attempts + 1.

    Returns None when the job is training elsewhere, reserved by another worker, waiting out a
    back-off, done, failed, cancelled or missing: a duplicate message then does nothing.
    """
    claimed = session.execute(
        update_job(job_id, claimable(now, worker_id))
        .values(
            state=JobState.TRAINING.value,
            epoch=TrainingJob.epoch + 1,
            attempts=TrainingJob.attempts + 1,
            lease_owner=worker_id,
            lease_expires_at=now + lease,
            not_before=None,
            started_at=now,
            updated_at=now,
        )
        .returning(TrainingJob.epoch, TrainingJob.attempts)
    ).one_or_none()
    if claimed is None:
        session.rollback()
        return None
    held = JobLease(job_id, worker_id, claimed.epoch, claimed.attempts)
    session.add(job_event(held, "claimed", now))
    session.commit()
    return held


def renew_lease(session: Session, lease: JobLease, *, now: datetime, duration: timedelta) -> bool:
    """Extend the lease to ``now + duration``; False when the lease was lost (stop working)."""
    return _fenced(session, lease, lease_expires_at=now + duration, updated_at=now)


def record_progress(session: Session, lease: JobLease, progress: dict[str, Any], *, now: datetime) -> bool:
    """Store the worker's progress report (JSON-safe); False when the lease was lost."""
    return _fenced(session, lease, progress=progress, updated_at=now)


def record_resumed(session: Session, lease: JobLease, *, step: int, now: datetime) -> bool:
    """Note on the timeline that this claim resumed from the checkpoint at ``step`` updates."""
    return _fenced(session, lease, event=job_event(lease, "resumed", now, step=step), updated_at=now)


def record_checkpoint(session: Session, lease: JobLease, *, path: str, step: int, now: datetime) -> bool:
    """Point the job at a newer checkpoint (store-relative ``path``, ``step`` updates).

    Fenced by epoch; also accepted right after a tenant's cancel, so that the checkpoint a
    cancelled worker writes as it stops is the one ``resume`` continues from.
    """
    return _fenced(
        session,
        lease,
        event=job_event(lease, "checkpoint", now, step=step),
        states=(JobState.TRAINING.value, JobState.CANCELLED.value),
        extra=[or_(TrainingJob.checkpoint_step.is_(None), TrainingJob.checkpoint_step <= step)],
        checkpoint_path=path,
        checkpoint_step=step,
        updated_at=now,
    )


def rewind_checkpoint(
    session: Session, lease: JobLease, *, path: str | None, step: int, now: datetime
) -> bool:
    """Point the job back at an earlier checkpoint of this claim (store-relative ``path``, at
    ``step`` updates), or at none (``path`` None): its training began below the recorded step,
    which :func:`record_checkpoint` never moves the pointer under. Fenced by epoch; accepted
    after a tenant's cancel too, as :func:`record_checkpoint` is."""
    return _fenced(
        session,
        lease,
        states=(JobState.TRAINING.value, JobState.CANCELLED.value),
        checkpoint_path=path,
        checkpoint_step=None if path is None else step,
        updated_at=now,
    )


def release_job(session: Session, lease: JobLease, *, now: datetime, why: str = "at shutdown") -> bool:
    """Give the job back (not a failure): training -> queued at once. ``why`` completes the
    timeline's "released by <worker> ..." (a shutdown, or a slot yielded to a fairer tenant)."""
    return _fenced(
        session,
        lease,
        event=job_event(lease, "queued", now, detail=f"released by {lease.worker_id} {why}"),
        state=JobState.QUEUED.value,
        lease_owner=None,
        lease_expires_at=None,
        enqueued_at=now,  # the worker puts its message back on the queue itself
        updated_at=now,
    )


def finish_job(
    session: Session,
    lease: JobLease,
    *,
    model_dir: str,
    metrics: dict[str, Any],
    now: datetime,
    applied_updates: int | None = None,
) -> bool:
    """Mark the job succeeded and its version Available with ``model_dir`` (store-relative); the
    version serves if it should (:func:`service.training.status.promotes_on_available`).

    False when the lease was lost or the job was cancelled: the caller should discard its model.
    """
    if not _end_job(session, lease, JobState.SUCCEEDED, kind="done", detail=None, now=now):
        return False
    if applied_updates is not None:
        session.execute(
            update(JobEvent)
            .where(JobEvent.job_id == lease.job_id, JobEvent.kind == "done", JobEvent.epoch == lease.epoch)
            .values(step=applied_updates)
        )
    status.change(
        session,
        lease.job_id,
        ClassifierStatus.AVAILABLE,
        status.AVAILABLE_DESCRIPTION,
        now,
        model_dir=model_dir,
        metrics=metrics,
    )
    session.commit()
    return True


def fail_job(session: Session, lease: JobLease, *, reason: str, now: datetime) -> bool:
    """Mark the job failed and its version Failed, with a reason the tenant can read.

    For failures that a retry cannot cure (invalid training data); see :func:`retry_job`.
    """
    if not _end_job(session, lease, JobState.FAILED, kind="failed", detail=reason, now=now):
        return False
    status.change(session, lease.job_id, ClassifierStatus.FAILED, reason, now)
    session.commit()
    return True


def retry_job(
    session: Session,
    lease: JobLease,
    *,
    reason: str,
    max_attempts: int,
    backoff: BackOff,
    now: datetime,
    counted: bool = True,
) -> str | None:
    """Record a failed attempt (the worker caught an error it cannot blame on the data).

    The job goes back to queued, claimable after the back-off for its failure count, or, at
    ``max_attempts`` failures, is Failed with ``reason``. An attempt not ``counted`` (the
    worker's disk was full: no fault of the job) leaves the count as it is and waits the
    back-off's longest delay. Returns "retry", "failed", or None when the lease was already lost.
    """
    row = session.execute(
        select(TrainingJob.failures).where(TrainingJob.id == lease.job_id, TrainingJob.epoch == lease.epoch)
    ).one_or_none()
    session.rollback()
    if row is None:
        return None
    failures = row.failures + 1 if counted else row.failures
    wait = backoff.delay(failures) if counted else timedelta(seconds=backoff.max_seconds)
    if counted and failures >= max_attempts:
        final = f"{reason} (failed {failures} times)"
        if not _end_job(session, lease, JobState.FAILED, kind="failed", detail=final, now=now):
            return None
        session.execute(update_job(lease.job_id).values(failures=failures))
        status.change(session, lease.job_id, ClassifierStatus.FAILED, final, now)
        session.commit()
        return "failed"
    won = _fenced(
        session,
        lease,
        event=job_event(lease, "crashed", now, detail=reason),
        extra=[TrainingJob.failures == row.failures],
        state=JobState.QUEUED.value,
        failures=failures,
        not_before=now + wait,
        lease_owner=None,
        lease_expires_at=None,
        updated_at=now,
    )
    return "retry" if won else None


def _fenced(
    session: Session,
    lease: JobLease,
    *,
    event: JobEvent | None = None,
    states: tuple[str, ...] = (JobState.TRAINING.value,),
    extra: list[ColumnElement[bool]] | None = None,
    **values: Any,
) -> bool:
    """One UPDATE of the job row that wins only while ``lease`` holds (its epoch, an allowed
    state); ``event`` is recorded with it. Returns whether it won."""
    result = session.execute(
        update_job(
            lease.job_id,
            TrainingJob.state.in_(states),
            TrainingJob.epoch == lease.epoch,
            *(extra or []),
        ).values(**values)
    )
    won = bool(result.rowcount == 1)  # type: ignore[attr-defined]
    if won and event is not None:
        session.add(event)
    session.commit()
    return won


def _end_job(
    session: Session, lease: JobLease, state: JobState, *, kind: str, detail: str | None, now: datetime
) -> bool:
    """CAS training(epoch) -> ``state`` (:func:`~service.training.jobs.end_job`) with its ``kind``
    event; False (rolled back) if lost."""
    expected = (TrainingJob.state == JobState.TRAINING.value, TrainingJob.epoch == lease.epoch)
    if not end_job(session, lease.job_id, state, expected, detail=detail, now=now):
        return False
    session.add(job_event(lease, kind, now, detail=detail))
    return True
