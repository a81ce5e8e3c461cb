"""The training-job state machine: every compare-and-set on a ``training_jobs`` row lives here.

::

    queued ──claim──> training ──finish──────────────> succeeded   (version Available)
      ▲ ▲               │ │ └──fail (bad data)──────> failed      (version Failed + reason)
      │ │   crash/error │ └─lease expires (reconciler)┐
      │ └── failures<N ─┴────────────────────────────┤ failures+1: back to queued after a back-off,
      │                                  failures=N ─┴> failed     or Failed with a reason
      │ resume          cancel (queued or training)
      └──────────────── cancelled <── (tenant cancel keeps the checkpoint; delete removes the rows)

Each transition is ONE conditional UPDATE (the compare-and-set) whose row count or RETURNING
says whether it won, and its timeline event is added in the same transaction, as is the status
event of a version whose status it changes (``service.training.status_events``, the webhook outbox),
and the change of the classifier's view of that version (``service.training.version_view``). A claim
bumps ``epoch``; every later write by that worker (lease renewal, progress, checkpoint
pointer, final model, failure) carries the epoch it got, so a worker that lost its lease (the
reconciler requeued the job, another worker claimed it, or the tenant cancelled it) writes
nothing. Only a queued job whose back-off has passed (``not_before``), and that no other worker
reserved (:func:`reserve_job`, the fair dispatcher's pick), can be claimed, so a duplicate
wake-up message is harmless. Every function commits before returning, except
:func:`create_job`, which joins the caller's transaction so that the version and its job
appear together. Times are timezone-aware UTC.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Update, and_, func, inspect, or_, select, update
from sqlalchemy.exc import InvalidRequestError
from sqlalchemy.orm import Session

from service.core.db import hold_write_lock
from service.core.errors import NotFound
from service.core.models import (
    Classifier,
    ClassifierMode,
    ClassifierStatus,
    ClassifierVersion,
    Dataset,
    JobEvent,
    JobState,
    TrainingJob,
)
from service.training import status_events, version_view

_ACTIVE = (JobState.QUEUED.value, JobState.TRAINING.value)
AVAILABLE_DESCRIPTION = "The classifier instance is now available and is ready to take classifier requests."
TRAINING_DESCRIPTION = (
    "The classifier instance is in its training phase, not yet ready to accept classify requests"
)
CANCELLED_DESCRIPTION = (
    "Training was cancelled; its last checkpoint is kept. POST /v1/classifiers/{id}/resume continues it."
)
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
class JobContext:
    """What a worker needs to run a job. Paths are relative to the artifact root."""

    job_id: str
    tenant_id: str
    classifier_id: str
    version: int
    multi_label: bool  # the classifier's mode
    state: str
    epoch: int
    attempts: int
    dataset_path: str | None  # None when the dataset was deleted
    checkpoint_dir: str
    checkpoint_path: str | None = None  # the newest recorded checkpoint, to resume from
    checkpoint_step: int | None = None


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
    added = ClassifierVersion(
        classifier_id=classifier.id,
        tenant_id=classifier.tenant_id,
        number=version,
        dataset_id=dataset_id,
        status=ClassifierStatus.TRAINING.value,
        status_description=TRAINING_DESCRIPTION,
        created_at=now,
        updated_at=now,
    )
    session.add(added)
    status_events.record_created(session, added, callback_url=callback_url, now=now)
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


def claimable(now: datetime, worker_id: str | None = None) -> ColumnElement[bool]:
    """The condition a job must meet to be claimed at ``now`` (by ``worker_id``): queued, its
    back-off over, and not reserved by another worker (see :func:`reserve_job`)."""
    return and_(
        TrainingJob.state == JobState.QUEUED.value,
        or_(TrainingJob.not_before.is_(None), TrainingJob.not_before <= now),
        or_(
            TrainingJob.lease_owner.is_(None),
            TrainingJob.lease_expires_at < now,
            TrainingJob.lease_owner == worker_id,
        ),
    )


def reserve_job(session: Session, job_id: str, worker_id: str, *, now: datetime, hold: timedelta) -> bool:
    """Set a claimable job aside for ``worker_id`` until ``now + hold``; False if another won it.

    The fair dispatcher's pick (``service.training.scheduling``): the job stays queued, but only
    ``worker_id`` can claim it until the hold ends, so of two workers that picked the same job
    exactly one proceeds. A hold that ends unclaimed (the worker died) just lapses.
    """
    result = session.execute(
        _update_job(job_id, claimable(now, worker_id)).values(
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
        _update_job(job_id, claimable(now, worker_id))
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
    session.add(_event(held, "claimed", now))
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
    return _fenced(session, lease, event=_event(lease, "resumed", now, step=step), updated_at=now)


def record_checkpoint(session: Session, lease: JobLease, *, path: str, step: int, now: datetime) -> bool:
    """Point the job at a newer checkpoint (store-relative ``path``, ``step`` updates).

    Fenced by epoch; also accepted right after a tenant's cancel, so that the checkpoint a
    cancelled worker writes as it stops is the one ``resume`` continues from.
    """
    return _fenced(
        session,
        lease,
        event=_event(lease, "checkpoint", now, step=step),
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
        event=_event(lease, "queued", now, detail=f"released by {lease.worker_id} {why}"),
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
    version serves if it should (:func:`service.training.version_view.promotes_on_available`).

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
    _set_status(
        session,
        lease.job_id,
        ClassifierStatus.AVAILABLE,
        AVAILABLE_DESCRIPTION,
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
    _set_status(session, lease.job_id, ClassifierStatus.FAILED, reason, now)
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
        session.execute(_update_job(lease.job_id).values(failures=failures))
        _set_status(session, lease.job_id, ClassifierStatus.FAILED, final, now)
        session.commit()
        return "failed"
    won = _fenced(
        session,
        lease,
        event=_event(lease, "crashed", now, detail=reason),
        extra=[TrainingJob.failures == row.failures],
        state=JobState.QUEUED.value,
        failures=failures,
        not_before=now + wait,
        lease_owner=None,
        lease_expires_at=None,
        updated_at=now,
    )
    return "retry" if won else None


@dataclass(frozen=True)
class BackOff:
    """Exponential back-off before a failed job's next claim: base * 2^(failures - 1), capped."""

    base_seconds: float
    max_seconds: float

    def delay(self, failures: int) -> timedelta:
        """The wait before the claim that follows the ``failures``-th failure."""
        seconds = self.base_seconds * 2 ** max(failures - 1, 0)
        return timedelta(seconds=min(seconds, self.max_seconds))


def expired_jobs(session: Session, *, now: datetime) -> list[str]:
    """Ids of training jobs whose lease expired (their worker died or is cut off)."""
    ids = list(
        session.scalars(
            select(TrainingJob.id)
            .where(TrainingJob.state == JobState.TRAINING.value, TrainingJob.lease_expires_at < now)
            .order_by(TrainingJob.lease_expires_at)
        )
    )
    session.rollback()
    return ids


def requeue_expired(
    session: Session, job_id: str, *, max_attempts: int, backoff: BackOff, now: datetime
) -> str | None:
    """The reconciler's verdict on an expired lease: a failed attempt (see :func:`retry_job`).

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
        _lock_classifier_of(session, job_id)
        ended = session.execute(
            _update_job(job_id, *expired).values(
                state=JobState.FAILED.value,
                epoch=epoch + 1,
                failures=failures,
                error=reason,
                lease_owner=None,
                lease_expires_at=None,
                finished_at=now,
                updated_at=now,
            )
        )
        if ended.rowcount != 1:  # type: ignore[attr-defined]
            session.rollback()
            return None
        session.add(_event(lost, "lease_lost", now, detail=detail, step=step))
        session.add(_event(lost, "failed", now, detail=reason))
        _set_status(session, job_id, ClassifierStatus.FAILED, reason, now)
        session.commit()
        return "failed"
    result = session.execute(
        _update_job(job_id, *expired).values(
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
    session.add(_event(lost, "lease_lost", now, detail=detail, step=step))
    session.commit()
    return "retry"


def jobs_to_send(
    session: Session, *, now: datetime, grace: timedelta, in_queue: Collection[str]
) -> list[str]:
    """Queued jobs that need a wake-up message now.

    Either the job's back-off ended after its last message was sent (a retry), or its message
    is missing from the queue (``in_queue``: the job id of each message the broker holds,
    duplicates repeated) and was last sent more than ``grace`` ago (lost with a Redis restart,
    or never sent because Redis was down). A message wakes a worker that claims the fairest
    claimable job, not necessarily the one it names (``service.training.scheduling``), so a job whose
    own message was spent on another job is covered by a spare one: a message naming a job
    that is not claimable (taken, backing off, gone) or a second message for one job.
    """
    last_sent = func.coalesce(TrainingJob.enqueued_at, TrainingJob.created_at)
    rows = session.execute(
        select(TrainingJob.id, TrainingJob.not_before, last_sent.label("last_sent"))
        .where(claimable(now))
        .order_by(TrainingJob.created_at)
    ).all()
    session.rollback()
    messages = Counter(in_queue)
    spare = messages.total() - sum(1 for row in rows if messages[row.id])
    due: list[str] = []
    for row in rows:
        backoff_over = row.not_before is not None and row.last_sent < row.not_before
        uncovered = not messages[row.id] and row.last_sent < now - grace
        if uncovered and not backoff_over and spare > 0:
            spare -= 1
            continue
        if backoff_over or uncovered:
            due.append(row.id)
    return due


def mark_enqueued(session: Session, job_id: str, *, now: datetime) -> None:
    """Remember that a wake-up message for ``job_id`` was sent at ``now``."""
    session.execute(_update_job(job_id).values(enqueued_at=now))
    session.commit()


def next_not_before(session: Session, *, now: datetime) -> datetime | None:
    """The earliest future back-off end of a queued job (when the reconciler should look again)."""
    found = session.scalar(
        select(func.min(TrainingJob.not_before)).where(
            TrainingJob.state == JobState.QUEUED.value, TrainingJob.not_before > now
        )
    )
    session.rollback()
    return found


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
        _set_status(
            session,
            job_id,
            ClassifierStatus.UNAVAILABLE,
            CANCELLED_DESCRIPTION.replace("{id}", classifier_id),
            now,
        )
    session.commit()
    return True


def cancelled_jobs(session: Session, classifier_id: str) -> list[str]:
    """The classifier's cancelled trainings: each version's newest job where it is cancelled,
    oldest first. A cancel stops every version in training, so a resume takes them all."""
    newest: dict[int, TrainingJob] = {}
    for job in session.scalars(
        select(TrainingJob).where(TrainingJob.classifier_id == classifier_id).order_by(TrainingJob.created_at)
    ):
        newest[job.version] = job
    return [job.id for job in newest.values() if job.state == JobState.CANCELLED.value]


def resume_jobs(session: Session, classifier_id: str, job_ids: list[str], *, now: datetime) -> list[str]:
    """Put the classifier's cancelled jobs ``job_ids`` (:func:`cancelled_jobs`) back in the
    queue, each to resume from its checkpoint; one no longer cancelled is left as it is.

    Failures are forgiven (the tenant asked). Returns the job ids to send messages for. The
    caller checked the training_jobs quota for ``job_ids`` in this transaction.
    """
    lock_classifier(session, classifier_id)
    resumed_ids = []
    for job_id in job_ids:
        resumed = session.execute(
            _update_job(job_id, TrainingJob.state == JobState.CANCELLED.value)
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
        session.add(_event(held, "queued", now, detail="resumed by the tenant"))
        _set_status(session, job_id, ClassifierStatus.TRAINING, TRAINING_DESCRIPTION, now)
        resumed_ids.append(job_id)
    session.commit()
    return resumed_ids


def cancel_jobs(session: Session, classifier_id: str, *, now: datetime) -> int:
    """Cancel the classifier's queued or training jobs (it is being deleted; the caller locked it,
    :func:`lock_classifier`, and commits); returns how many. A worker holding one finds its next
    fenced write refused and stops."""
    return len(_cancel_active(session, classifier_id, now=now, detail=None))


def cancel_version_jobs(session: Session, classifier_id: str, version: int, *, now: datetime) -> int:
    """Cancel the queued or training job of one version (it is being deleted; not committed);
    returns how many. A worker holding it finds its next fenced write refused and stops."""
    return len(
        _cancel_active(session, classifier_id, now=now, detail="its version was deleted", version=version)
    )


def job_events(session: Session, classifier_id: str) -> list[JobEvent]:
    """The timeline of every job of the classifier, oldest first."""
    events = list(
        session.scalars(
            select(JobEvent)
            .join(TrainingJob, TrainingJob.id == JobEvent.job_id)
            .where(TrainingJob.classifier_id == classifier_id)
            .order_by(JobEvent.id)
        )
    )
    session.rollback()
    return events


def reclaimable_jobs(session: Session, *, now: datetime) -> list[str]:
    """Ids of jobs a worker could claim now (queued, back-off over), oldest first."""
    return list(
        session.scalars(select(TrainingJob.id).where(claimable(now)).order_by(TrainingJob.created_at))
    )


def job_context(session: Session, job_id: str) -> JobContext | None:
    """What a worker needs to train ``job_id``; None when the job row is gone."""
    row = session.execute(
        select(TrainingJob, Dataset.path, Classifier.mode)
        .join(Classifier, Classifier.id == TrainingJob.classifier_id)
        .join(ClassifierVersion, _version_of_job())
        .outerjoin(Dataset, Dataset.id == ClassifierVersion.dataset_id)
        .where(TrainingJob.id == job_id)
    ).one_or_none()
    session.commit()  # end the read transaction; callers hold no locks between calls
    if row is None:
        return None
    job, dataset_path, mode = row
    return JobContext(
        job_id=job.id,
        tenant_id=job.tenant_id,
        classifier_id=job.classifier_id,
        version=job.version,
        multi_label=mode == ClassifierMode.MULTI_LABEL.value,
        state=job.state,
        epoch=job.epoch,
        attempts=job.attempts,
        dataset_path=dataset_path,
        checkpoint_dir=job.checkpoint_dir,
        checkpoint_path=job.checkpoint_path,
        checkpoint_step=job.checkpoint_step,
    )


def eta_seconds(job: TrainingJob) -> float | None:
    """The job's remaining seconds as its last progress report estimated them, while it trains
    (a cancelled, queued or ended job keeps its last report, not its estimate)."""
    if job.state != JobState.TRAINING.value:
        return None
    return (job.progress or {}).get("eta_seconds")


def shown_phase(job: TrainingJob) -> str:
    """The phase its last progress report named while the job trains; its state otherwise (a
    job released to the queue, cancelled or ended keeps its last report: a queued job showed
    "training", a cancelled one "45% · training")."""
    if job.state != JobState.TRAINING.value:
        return job.state
    return str((job.progress or {}).get("phase") or job.state)


def version_job(session: Session, classifier_id: str, number: int) -> TrainingJob | None:
    """The newest job of version ``number`` of the classifier (its progress, its callback URL)."""
    return session.scalars(
        select(TrainingJob)
        .where(TrainingJob.classifier_id == classifier_id, TrainingJob.version == number)
        .order_by(TrainingJob.created_at.desc())
        .limit(1)
    ).first()


def shown_job(session: Session, classifier: Classifier) -> TrainingJob | None:
    """The newest job of the version that the classifier's view shows (the serving one, or while
    none serves the newest): the view's training progress."""
    number = classifier.latest_version if classifier.serving_version is None else classifier.serving_version
    return version_job(session, classifier.id, number)


def lock_classifier(session: Session, classifier_id: str) -> bool:
    """Lock the classifier's row for the rest of the transaction (on SQLite, the database's write
    lock); False when it is gone.

    One lock order: a transaction that changes a classifier and its jobs locks the classifier
    before any job row. A worker's finish or a tenant's cancel (job rows, then the classifier's
    status) against a version's delete (the classifier, then its job) deadlocked on PostgreSQL
    in the other order.
    """
    hold_write_lock(session)
    found = session.scalar(select(Classifier.id).where(Classifier.id == classifier_id).with_for_update())
    return found is not None


def lock_existing_classifier(session: Session, classifier_id: str) -> None:
    """:func:`lock_classifier`; when a concurrent delete removed it, roll back and raise NotFound."""
    if not lock_classifier(session, classifier_id):
        session.rollback()
        raise NotFound("classifier", classifier_id)


def reread(session: Session, classifier: Classifier) -> None:
    """Refresh ``classifier`` after a commit; NotFound when a concurrent delete removed it since."""
    identity = inspect(classifier).identity  # readable however expired the object is
    classifier_id = str(identity[0]) if identity else "?"
    try:
        session.refresh(classifier)
    except InvalidRequestError:
        raise NotFound("classifier", classifier_id) from None


def _lock_classifier_of(session: Session, job_id: str) -> None:
    """:func:`lock_classifier` for the classifier of job ``job_id``."""
    hold_write_lock(session)
    session.execute(
        select(Classifier.id)
        .join(TrainingJob, TrainingJob.classifier_id == Classifier.id)
        .where(TrainingJob.id == job_id)
        .with_for_update(of=Classifier)
    )


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


def _event(
    lease: JobLease, kind: str, now: datetime, *, detail: str | None = None, step: int | None = None
) -> JobEvent:
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
        _update_job(
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
    """CAS training(epoch) -> ``state``; False (rolled back) if lost. Its status change follows, so
    the classifier is locked first."""
    _lock_classifier_of(session, lease.job_id)
    ended = session.execute(
        _update_job(
            lease.job_id,
            TrainingJob.state == JobState.TRAINING.value,
            TrainingJob.epoch == lease.epoch,
        ).values(
            state=state.value,
            error=detail,
            lease_owner=None,
            lease_expires_at=None,
            finished_at=now,
            updated_at=now,
        )
    )
    if ended.rowcount != 1:  # type: ignore[attr-defined]
        session.rollback()
        return False
    session.add(_event(lease, kind, now, detail=detail))
    return True


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
        .where(TrainingJob.classifier_id == classifier_id, TrainingJob.state.in_(_ACTIVE), *only)
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
        _event(JobLease(row.id, "", row.epoch, row.attempts), "cancelled", now, detail=detail)
        for row in cancelled
    )
    return [row.id for row in sorted(cancelled, key=lambda row: row.created_at)]


def _version_of_job() -> ColumnElement[bool]:
    return and_(
        ClassifierVersion.classifier_id == TrainingJob.classifier_id,
        ClassifierVersion.number == TrainingJob.version,
    )


def _newest_available(session: Session, classifier_id: str, other_than: int) -> int | None:
    """The highest number among the classifier's Available versions but ``other_than``."""
    return session.scalar(
        select(func.max(ClassifierVersion.number)).where(
            ClassifierVersion.classifier_id == classifier_id,
            ClassifierVersion.status == ClassifierStatus.AVAILABLE.value,
            ClassifierVersion.number != other_than,
        )
    )


def _set_status(
    session: Session,
    job_id: str,
    status: ClassifierStatus,
    description: str,
    now: datetime,
    **values: Any,
) -> None:
    """Set the status (and ``values``) of the job's version, and record the change, if it is one,
    as a status event for the job's callback URL (not committed). The classifier's NLC view
    follows when it shows this version (:func:`service.training.version_view.shows`), and an Available
    version that should serve is promoted (:func:`service.training.version_view.promotes_on_available`).

    The caller has just won a compare-and-set on the job, and the classifier row is locked here
    (``service.catalogue.versions`` takes the same lock to promote or delete a version), so the statuses
    read are the ones replaced."""
    row = session.execute(
        select(
            Classifier.id.label("classifier_id"),
            Classifier.tenant_id,
            Classifier.serving_version,
            Classifier.latest_version,
            Classifier.promote,
            ClassifierVersion.id.label("version_id"),
            ClassifierVersion.number,
            ClassifierVersion.status,
            ClassifierVersion.dataset_id,
            TrainingJob.callback_url,
        )
        .join(TrainingJob, TrainingJob.classifier_id == Classifier.id)
        .join(ClassifierVersion, _version_of_job())
        .where(TrainingJob.id == job_id)
        .with_for_update(of=Classifier)
    ).one()
    changes = {"status": status.value, "status_description": description, "updated_at": now, **values}
    session.execute(
        update(ClassifierVersion)
        .where(ClassifierVersion.id == row.version_id)
        .values(**changes)
        .execution_options(synchronize_session=False)
    )
    promoted = status is ClassifierStatus.AVAILABLE and version_view.promotes_on_available(
        row.serving_version,
        _newest_available(session, row.classifier_id, row.number),
        row.promote,
        row.number,
    )
    if promoted:
        view = {**changes, "serving_version": row.number, "dataset_id": row.dataset_id}
        session.execute(_update_classifier(row.classifier_id).values(**view))
    elif version_view.shows(row.serving_version, row.latest_version, row.number):
        session.execute(_update_classifier(row.classifier_id).values(**changes))
    if row.status != status.value:
        status_events.record(
            session,
            tenant_id=row.tenant_id,
            classifier_id=row.classifier_id,
            version=row.number,
            previous=row.status,
            status=status.value,
            description=description,
            callback_url=row.callback_url,
            now=now,
        )
    if promoted and row.serving_version is not None:
        status_events.record_promoted(
            session,
            tenant_id=row.tenant_id,
            classifier_id=row.classifier_id,
            version=row.number,
            replaced=row.serving_version,
            callback_url=row.callback_url,
            now=now,  # recorded after the Available above (status_events.AFTER_THE_LAST)
        )
