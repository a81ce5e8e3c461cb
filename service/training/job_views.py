"""Read-only views of training jobs: what a worker needs to run one, the tenant's timeline and
progress, the version a classifier shows, and the reconciler's and the dispatcher's questions
(which jobs expired, which need a wake-up message, which can be claimed). Nothing here writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from service.core.models import (
    Classifier,
    ClassifierMode,
    ClassifierVersion,
    Dataset,
    JobEvent,
    JobState,
    TrainingJob,
)


@dataclass(frozen=True)
class JobContext:
    """What a worker needs to run a job. Paths are relative to the artifact root."""

    job_id: str
    tenant_id: str
    classifier_id: str
    version: int
    multi_label: bool  # the classifier's mode
    language: str  # the classifier's (an NLC language code): whether a sentence encoder reads it
    state: str
    epoch: int
    attempts: int
    dataset_path: str | None  # None when the dataset was deleted
    checkpoint_dir: str
    checkpoint_path: str | None = None  # the newest recorded checkpoint, to resume from
    checkpoint_step: int | None = None


def claimable(now: datetime, worker_id: str | None = None) -> ColumnElement[bool]:
    """The condition a job must meet to be claimed at ``now`` (by ``worker_id``): queued, its
    back-off over, and not reserved by another worker (see :func:`~service.training.leases.reserve_job`)."""
    return and_(
        TrainingJob.state == JobState.QUEUED.value,
        or_(TrainingJob.not_before.is_(None), TrainingJob.not_before <= now),
        or_(
            TrainingJob.lease_owner.is_(None),
            TrainingJob.lease_expires_at < now,
            TrainingJob.lease_owner == worker_id,
        ),
    )


def job_context(session: Session, job_id: str) -> JobContext | None:
    """What a worker needs to train ``job_id``; None when the job row is gone."""
    row = session.execute(
        select(TrainingJob, Dataset.path, Classifier.mode, Classifier.language)
        .join(Classifier, Classifier.id == TrainingJob.classifier_id)
        .join(ClassifierVersion, version_of_job())
        .outerjoin(Dataset, Dataset.id == ClassifierVersion.dataset_id)
        .where(TrainingJob.id == job_id)
    ).one_or_none()
    session.commit()  # end the read transaction; callers hold no locks between calls
    if row is None:
        return None
    job, dataset_path, mode, language = row
    return JobContext(
        job_id=job.id,
        tenant_id=job.tenant_id,
        classifier_id=job.classifier_id,
        version=job.version,
        multi_label=mode == ClassifierMode.MULTI_LABEL.value,
        language=language,
        state=job.state,
        epoch=job.epoch,
        attempts=job.attempts,
        dataset_path=dataset_path,
        checkpoint_dir=job.checkpoint_dir,
        checkpoint_path=job.checkpoint_path,
        checkpoint_step=job.checkpoint_step,
    )


def version_of_job() -> ColumnElement[bool]:
    """The join condition of a training job and the version it trains."""
    return and_(
        ClassifierVersion.classifier_id == TrainingJob.classifier_id,
        ClassifierVersion.number == TrainingJob.version,
    )


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


def next_not_before(session: Session, *, now: datetime) -> datetime | None:
    """The earliest future back-off end of a queued job (when the reconciler should look again)."""
    found = session.scalar(
        select(func.min(TrainingJob.not_before)).where(
            TrainingJob.state == JobState.QUEUED.value, TrainingJob.not_before > now
        )
    )
    session.rollback()
    return found


def reclaimable_jobs(session: Session, *, now: datetime) -> list[str]:
    """Ids of jobs a worker could claim now (queued, back-off over), oldest first."""
    return list(
        session.scalars(select(TrainingJob.id).where(claimable(now)).order_by(TrainingJob.created_at))
    )


def cancelled_jobs(session: Session, classifier_id: str) -> list[str]:
    """The classifier's cancelled trainings: each version's newest job where it is cancelled,
    oldest first. A cancel stops every version in training, so a resume takes them all."""
    newest: dict[int, TrainingJob] = {}
    for job in session.scalars(
        select(TrainingJob).where(TrainingJob.classifier_id == classifier_id).order_by(TrainingJob.created_at)
    ):
        newest[job.version] = job
    return [job.id for job in newest.values() if job.state == JobState.CANCELLED.value]


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
