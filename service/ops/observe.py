"""Read-only views of the platform for operators: job counts, recent jobs, the workers seen.

Shared by the scrape-time metrics (``service.ops.metrics``) and the ops dashboard (``service.ops``).
:func:`workers_seen` knows a worker by what it wrote to the database, its lease renewals and
progress (``training_jobs.lease_owner`` / ``updated_at`` while it trains) and its timeline
events, so a worker appears there once it has claimed a job within the window; the workers
alive now, idle ones included, are in the worker registry (``service.training.worker_registry``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from service.core.models import JobEvent, JobState, TrainingJob
from service.training.history import HISTORY_KEY

RECENT = timedelta(hours=1)
MINUTE = 60  # seconds: the throughput's bucket
_READ_AT_ONCE = 500  # job ids in one IN (...) list, well under SQLite's and PostgreSQL's bounds


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


class RecentJob(NamedTuple):
    """What the overview and the scrape need of each recent job (a busy platform finishes
    thousands an hour: full rows with their progress took most of a read)."""

    id: str
    state: str
    updated_at: datetime
    lease_owner: str | None
    lease_expires_at: datetime | None


def recent_jobs(session: Session, *, now: datetime, window: timedelta = RECENT) -> list[RecentJob]:
    """Jobs training now or updated within ``window``, newest first (:class:`ProgressDigests`
    reads their progress)."""
    rows = session.execute(
        select(*(getattr(TrainingJob, field) for field in RecentJob._fields))
        .where(or_(TrainingJob.state == JobState.TRAINING.value, TrainingJob.updated_at >= now - window))
        .order_by(TrainingJob.updated_at.desc())
    )
    return [RecentJob(*row) for row in rows]


@dataclass(frozen=True)
class JobDigest:
    """What the overview's throughput chart and the scrape-time series read of a job's progress:
    its last samples/s, parameter-server counters and staleness histogram, and per minute
    (unix time // MINUTE) the mean samples/s of its history's points in it."""

    samples_per_second: float
    pushed: float
    applied: float
    staleness: tuple[float, ...]
    minutes: dict[int, float]

    @classmethod
    def of(cls, progress: dict[str, Any] | None) -> JobDigest:
        """The digest of a job's ``progress`` (None: nothing reported yet)."""
        progress = progress or {}
        ps = progress.get("ps") or {}
        rates: dict[int, list[float]] = {}
        for point in progress.get(HISTORY_KEY) or []:
            if point.get("samples_per_second") is not None:
                rates.setdefault(int(point["t"] // MINUTE), []).append(float(point["samples_per_second"]))
        return cls(
            samples_per_second=float(progress.get("samples_per_second") or 0.0),
            pushed=float(ps.get("pushed") or 0),
            applied=float(ps.get("applied") or 0),
            staleness=tuple(float(count) for count in ps.get("staleness_histogram") or []),
            minutes={minute: sum(found) / len(found) for minute, found in rates.items()},
        )


class ProgressDigests:
    """Each recent job's :class:`JobDigest`, kept between reads and worked out again only when
    the job was written since (its ``updated_at`` moved). A busy platform has thousands of jobs
    finished within the hour, each progress holding a 240-point history: reading and walking
    them all on every 2-second poll of the overview and every scrape took seconds of an API
    replica's CPU, and its tenants' classify calls waited behind it. Thread-safe (the routes
    run on worker threads); holds only the jobs of the last read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, tuple[datetime, JobDigest]] = {}

    def of(self, session: Session, jobs: Sequence[RecentJob]) -> dict[str, JobDigest]:
        """The digest of each of ``jobs`` (from :func:`recent_jobs`), by job id."""
        with self._lock:
            held = dict(self._held)
        changed = [job.id for job in jobs if job.id not in held or held[job.id][0] != job.updated_at]
        for ids in _batches(changed):
            rows = session.execute(
                select(TrainingJob.id, TrainingJob.updated_at, TrainingJob.progress).where(
                    TrainingJob.id.in_(ids)
                )
            )
            for job_id, updated_at, progress in rows:
                held[job_id] = (updated_at, JobDigest.of(progress))
        kept = {job.id: held[job.id] for job in jobs if job.id in held}  # a job deleted meanwhile: none
        with self._lock:
            self._held = kept
        return {job_id: digest for job_id, (_, digest) in kept.items()}


def workers_seen(session: Session, jobs: Sequence[RecentJob]) -> list[WorkerSeen]:
    """The workers that wrote to ``jobs`` (see :func:`recent_jobs`), most recently seen first."""
    seen: dict[str, datetime] = {}
    for job in jobs:
        if job.state == JobState.TRAINING.value and job.lease_owner and job.lease_expires_at:
            seen[job.lease_owner] = max(seen.get(job.lease_owner, job.updated_at), job.updated_at)
    for ids in _batches([job.id for job in jobs]):
        events = session.execute(
            select(JobEvent.worker_id, func.max(JobEvent.at))
            .where(JobEvent.job_id.in_(ids), JobEvent.worker_id.is_not(None))
            .group_by(JobEvent.worker_id)
        )
        for worker, at in events:
            assert worker is not None
            seen[worker] = max(seen.get(worker, at), at)
    found = [WorkerSeen(worker, at) for worker, at in seen.items()]
    return sorted(found, key=lambda w: w.last_seen, reverse=True)


def _batches(ids: list[str]) -> Iterator[list[str]]:
    """``ids`` in lists of at most _READ_AT_ONCE, one IN (...) query each."""
    for start in range(0, len(ids), _READ_AT_ONCE):
        yield ids[start : start + _READ_AT_ONCE]
