"""The training-job state machine.

::

    queued ──claim──> training ──finish──────────────> succeeded   (version Available)
      ▲ ▲               │ │ └──fail (bad data)──────> failed      (version Failed + reason)
      │ │   crash/error │ └─lease expires (reconciler)┐
      │ └── failures<N ─┴────────────────────────────┤ failures+1: back to queued after a back-off,
      │                                  failures=N ─┴> failed     or Failed with a reason
      │ resume          cancel (queued or training)
      └──────────────── cancelled <── (tenant cancel keeps the checkpoint; delete removes the rows)

This module and :mod:`service.training.leases` hold every compare-and-set on a job row: here
the transitions outside a worker's hold (create, requeue when a lease expired, cancel, resume)
and what every transition is built of, there the ones a worker makes under its lease (reserve,
claim, renew, progress, checkpoint, release, finish, fail, retry). Each transition is ONE
conditional UPDATE (the compare-and-set) whose row count or RETURNING says whether it won, and
its timeline event is added in the same transaction, as is any status change of its version and
of the classifier's view (:func:`service.training.status.change`, with its status event). A
claim bumps ``epoch``; every later write by that worker (lease renewal, progress, checkpoint
pointer, final model, failure) carries the epoch it got, so a worker that lost its lease (the
reconciler requeued the job, another worker claimed it, or the tenant cancelled it) writes
nothing. Only a queued job whose back-off has passed (``not_before``), and that no other worker
reserved (:func:`~service.training.leases.reserve_job`, the fair dispatcher's pick), can be
claimed, so a duplicate wake-up message is harmless. Every function commits before returning,
except :func:`create_job`, which joins the caller's transaction so that the version and its job
appear together, and the cancels of a deletion, which the deletion commits. Times are
timezone-aware UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Update, select, update
from sqlalchemy.orm import Session

from service.core.models import ACTIVE_STATES, Classifier, ClassifierStatus, JobEvent, JobState, TrainingJob
from service.training import status
from service.training.locks import lock_classifier, lock_classifier_of

LOST_WORKER_REASON = (
    "Training was interrupted {n} times because its worker stopped responding; "
    "the operators have the details."
)


@dataclass(frozen=True)
class JobLease:
    """A worker's hold on a job; ``epoch`` fences every write it makes."""

    job_id: str
    worker_id: str
    epoch: int
    attempt: int = 0  # the claim number (``attempts`` after this claim), for the timeline


@dataclass(frozen=True)
class BackOff:
    """Exponential back-off before a failed job's next claim: base * 2^(failures - 1), capped."""

    base_seconds: float
    max_seconds: float

    def delay(self, failures: int) -> timedelta:
        """The wait before the claim that follows the ``failures``-th failure."""
        seconds = self.base_seconds * 2 ** max(failures - 1, 0)
        return timedelta(seconds=min(seconds, self.max_seconds))


def create_job(
    session: Session,
    classifier: Classifier,
    *,
    version: int,
    dataset_id: str | None,
    checkpoint_dir: str,
    now: datetime,
    callback_url: str | None = None,
) -> TrainingJob:
    """Add version ``version`` of ``classifier`` (Training, on ``dataset_id``; its status event)
    and its queued job (with the ``queued`` event) to the session; the status events of its
    transitions go to ``callback_url``.

    Does NOT commit: the caller commits it together with the classifier row, and only then
    enqueues the wake-up message.
    """
    status.add_version(
        session, classifier, number=version, dataset_id=dataset_id, now=now, callback_url=callback_url
    )
    job = TrainingJob(
        classifier_id=classifier.id,
        tenant_id=classifier.tenant_id,
        version=version,
        state=JobState.QUEUED.value,
        checkpoint_dir=checkpoint_dir,
        callback_url=callback_url,
        created_at=now,
        updated_at=now,
    )
    session.add(job)
    session.flush()
    session.add(JobEvent(job_id=job.id, kind="queued", epoch=0, at=now))
    return job


def requeue_expired(
    session: Session, job_id: str, *, max_attempts: int, backoff: BackOff, now: datetime
) -> str | None:
    """The reconciler's verdict on an expired lease: a failed attempt (see
    :func:`~service.training.leases.retry_job`).

    Bumps the epoch, so the lost worker, should it wake up, can write nothing. Returns
    "retry", "failed", or None when the job is no longer expired (renewed, finished, gone).
    """
    job = session.execute(
        select(
            TrainingJob.state,
            TrainingJob.epoch,
            TrainingJob.failures,
            TrainingJob.lease_owner,
            TrainingJob.progress,
            TrainingJob.attempts,
        ).where(TrainingJob.id == job_id)
    ).one_or_none()
    session.rollback()
    if job is None or job.state != JobState.TRAINING.value:
        return None
    epoch, failures, owner, attempt = job.epoch, job.failures + 1, job.lease_owner, job.attempts
    step = int((job.progress or {}).get("step") or 0)
    expired = (
        TrainingJob.state == JobState.TRAINING.value,
        TrainingJob.epoch == epoch,
        TrainingJob.lease_expires_at < now,
    )
    lost = JobLease(job_id, owner or "", epoch + 1, attempt)
    detail = f"worker {owner} stopped renewing its lease"
    if failures >= max_attempts:
        reason = LOST_WORKER_REASON.format(n=failures)
        ended = {"epoch": epoch + 1, "failures": failures}
        if not end_job(session, job_id, JobState.FAILED, expired, detail=reason, now=now, **ended):
            return None
        session.add(job_event(lost, "lease_lost", now, detail=detail, step=step))
        session.add(job_event(lost, "failed", now, detail=reason))
        status.change(session, job_id, ClassifierStatus.FAILED, reason, now)
        session.commit()
        return "failed"
    result = session.execute(
        update_job(job_id, *expired).values(
            state=JobState.QUEUED.value,
            epoch=epoch + 1,
            failures=failures,
            not_before=now + backoff.delay(failures),
            lease_owner=None,
            lease_expires_at=None,
            updated_at=now,
        )
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        session.rollback()
        return None
    session.add(job_event(lost, "lease_lost", now, detail=detail, step=step))
    session.commit()
    return "retry"


def mark_enqueued(session: Session, job_id: str, *, now: datetime) -> None:
    """Remember that a wake-up message for ``job_id`` was sent at ``now``."""
    session.execute(update_job(job_id).values(enqueued_at=now))
    session.commit()


def cancel_job(session: Session, classifier_id: str, *, now: datetime) -> bool:
    """The tenant's cancel: stop the classifier's queued or training jobs, keep their checkpoints.

    Their versions become Unavailable until :func:`resume_jobs` (the classifier too, unless
    another version serves). A worker holding the job has
    its next lease renewal refused and stops. False when no job was active.
    """
    lock_classifier(session, classifier_id)
    cancelled = _cancel_active(session, classifier_id, now=now, detail="cancelled by the tenant")
    if not cancelled:
        session.rollback()
        return False
    for job_id in cancelled:
        status.change(
            session,
            job_id,
            ClassifierStatus.UNAVAILABLE,
            status.CANCELLED_DESCRIPTION.replace("{id}", classifier_id),
            now,
        )
    session.commit()
    return True


def resume_jobs(session: Session, classifier_id: str, job_ids: list[str], *, now: datetime) -> list[str]:
    """Put the classifier's cancelled jobs ``job_ids``
    (:func:`~service.training.job_views.cancelled_jobs`) back in the queue, each to resume from its
    checkpoint; one no longer cancelled is left as it is.

    Failures are forgiven (the tenant asked). Returns the job ids to send messages for. The
    caller checked the training_jobs quota for ``job_ids`` in this transaction.
    """
    lock_classifier(session, classifier_id)
    resumed_ids = []
    for job_id in job_ids:
        resumed = session.execute(
            update_job(job_id, TrainingJob.state == JobState.CANCELLED.value)
            .values(
                state=JobState.QUEUED.value,
                failures=0,
                not_before=None,
                enqueued_at=now,
                finished_at=None,
                error=None,
                updated_at=now,
            )
            .returning(TrainingJob.epoch, TrainingJob.attempts)
        ).one_or_none()
        if resumed is None:  # resumed or deleted since the caller looked
            continue
        held = JobLease(job_id, "", resumed.epoch, resumed.attempts)
        session.add(job_event(held, "queued", now, detail="resumed by the tenant"))
        status.change(session, job_id, ClassifierStatus.TRAINING, status.TRAINING_DESCRIPTION, now)
        resumed_ids.append(job_id)
    session.commit()
    return resumed_ids


def cancel_jobs(session: Session, classifier_id: str, *, now: datetime) -> int:
    """Cancel the classifier's queued or training jobs (it is being deleted; the caller locked it,
    :func:`~service.training.locks.lock_classifier`, and commits); returns how many. A worker
    holding one finds its next fenced write refused and stops."""
    return len(_cancel_active(session, classifier_id, now=now, detail=None))


def cancel_version_jobs(session: Session, classifier_id: str, version: int, *, now: datetime) -> int:
    """Cancel the queued or training job of one version (it is being deleted; not committed);
    returns how many. A worker holding it finds its next fenced write refused and stops."""
    return len(
        _cancel_active(session, classifier_id, now=now, detail="its version was deleted", version=version)
    )


def update_job(job_id: str, *conditions: Any) -> Update:
    """The UPDATE of job ``job_id`` where ``conditions`` hold: what every compare-and-set on a job
    row is built of (its row count says whether it won)."""
    return (
        update(TrainingJob)
        .where(TrainingJob.id == job_id, *conditions)
        .execution_options(synchronize_session=False)
    )


def end_job(
    session: Session,
    job_id: str,
    state: JobState,
    conditions: Sequence[ColumnElement[bool]],
    *,
    detail: str | None,
    now: datetime,
    **values: Any,
) -> bool:
    """CAS the training job, where ``conditions`` hold, -> ``state`` (ended, its lease cleared,
    ``detail`` its error), with ``values``; False, rolled back, if it lost. Not committed: its
    timeline event and its version's status change follow, so the classifier is locked first."""
    lock_classifier_of(session, job_id)
    ended = session.execute(
        update_job(job_id, *conditions).values(
            state=state.value,
            error=detail,
            lease_owner=None,
            lease_expires_at=None,
            finished_at=now,
            updated_at=now,
            **values,
        )
    )
    if ended.rowcount != 1:  # type: ignore[attr-defined]
        session.rollback()
        return False
    return True


def job_event(
    lease: JobLease, kind: str, now: datetime, *, detail: str | None = None, step: int | None = None
) -> JobEvent:
    """The timeline event ``kind`` of a transition made under ``lease``, to add with it."""
    return JobEvent(
        job_id=lease.job_id,
        kind=kind,
        epoch=lease.epoch,
        worker_id=lease.worker_id or None,
        attempt=lease.attempt,
        step=step,
        detail=detail,
        at=now,
    )


def _cancel_active(
    session: Session, classifier_id: str, *, now: datetime, detail: str | None, version: int | None = None
) -> list[str]:
    """CAS the classifier's (or one ``version``'s) queued or training jobs -> cancelled, each with
    a ``cancelled`` event (not committed); returns their ids, oldest first. Clears any lease or
    reservation, so a worker holding one has its next fenced write refused and a worker that
    reserved one cannot claim it."""
    only = [] if version is None else [TrainingJob.version == version]
    cancelled = session.execute(
        update(TrainingJob)
        .where(TrainingJob.classifier_id == classifier_id, TrainingJob.state.in_(ACTIVE_STATES), *only)
        .values(
            state=JobState.CANCELLED.value,
            lease_owner=None,
            lease_expires_at=None,
            not_before=None,
            finished_at=now,
            updated_at=now,
        )
        .returning(TrainingJob.id, TrainingJob.epoch, TrainingJob.attempts, TrainingJob.created_at)
        .execution_options(synchronize_session=False)
    ).all()
    session.add_all(
        job_event(JobLease(row.id, "", row.epoch, row.attempts), "cancelled", now, detail=detail)
        for row in cancelled
    )
    return [row.id for row in sorted(cancelled, key=lambda row: row.created_at)]
