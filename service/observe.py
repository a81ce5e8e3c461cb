"""Read-only views of the platform for operators: job counts, recent jobs, the workers seen.

Shared by the scrape-time metrics (``service.metrics``) and the ops dashboard (``service.ops``).
:func:`workers_seen` knows a worker by what it wrote to the database, its lease renewals and
progress (``training_jobs.lease_owner`` / ``updated_at`` while it trains) and its timeline
events, so a worker appears there once it has claimed a job within the window; the workers
alive now, idle ones included, are in the worker registry (``service.worker_registry``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from service.models import JobEvent, JobState, TrainingJob

RECENT = timedelta(hours=1)


@dataclass(frozen=True)
class WorkerSeen:
    """A worker (``host:pid``) and when it last showed a sign of life."""

    worker: str
    last_seen: datetime


def job_counts(session: Session) -> dict[str, int]:
    """Training jobs by state, every state present (zero when none)."""
    rows = session.execute(select(TrainingJob.state, func.count()).group_by(TrainingJob.state))
    counted = dict(rows.all())  # not dict(rows): a Result has keys(), the column names
    return {state.value: int(counted.get(state.value, 0)) for state in JobState}


def recent_jobs(session: Session, *, now: datetime, window: timedelta = RECENT) -> list[TrainingJob]:
    """Jobs training now or updated within ``window``, newest first."""
    return list(
        session.scalars(
            select(TrainingJob)
            .where(or_(TrainingJob.state == JobState.TRAINING.value, TrainingJob.updated_at >= now - window))
            .order_by(TrainingJob.updated_at.desc())
        )
    )


def workers_seen(session: Session, jobs: list[TrainingJob]) -> list[WorkerSeen]:
    """The workers that wrote to ``jobs`` (see :func:`recent_jobs`), most recently seen first."""
    seen: dict[str, datetime] = {}
    for job in jobs:
        if job.state == JobState.TRAINING.value and job.lease_owner and job.lease_expires_at:
            seen[job.lease_owner] = max(seen.get(job.lease_owner, job.updated_at), job.updated_at)
    if jobs:
        events = session.execute(
            select(JobEvent.worker_id, func.max(JobEvent.at))
            .where(JobEvent.job_id.in_([job.id for job in jobs]), JobEvent.worker_id.is_not(None))
            .group_by(JobEvent.worker_id)
        )
        for worker, at in events:
            assert worker is not None
            seen[worker] = max(seen.get(worker, at), at)
    found = [WorkerSeen(worker, at) for worker, at in seen.items()]
    return sorted(found, key=lambda w: w.last_seen, reverse=True)
