"""A training job's time series (loss, validation accuracy, samples/s, step over time), kept in
its progress JSON.

The worker appends one point per progress write (about once a second) under
:data:`HISTORY_KEY` of ``training_jobs.progress``, so the series travels with the fenced
progress write and survives a resume on another worker (the next claim starts from the
recorded one). It is bounded: past :data:`MAX_POINTS` every other point is dropped, which keeps
the whole run at a coarser resolution. The tenant's progress replies show only the named
progress fields; the series is the ops dashboard's job page and the tenant's
``GET /v1/classifiers/{id}/versions/{n}/history`` (the console's training curves).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.core.models import TrainingJob

HISTORY_KEY = "history"
MAX_POINTS = 240
_FIELDS = ("epoch", "step", "loss", "samples_per_second", "validation_accuracy")


def with_point(history: list[dict[str, Any]], progress: dict[str, Any], at: float) -> list[dict[str, Any]]:
    """``history`` plus a point of ``progress`` at unix time ``at``, thinned to MAX_POINTS.
    The encoding phase adds none: its steps count texts, not updates."""
    if progress.get("phase") == "encoding":
        return history
    point = {"t": round(at, 3), **{name: progress.get(name) for name in _FIELDS}}
    points = [*history, point]
    if len(points) > MAX_POINTS:
        points = points[::-2][::-1]  # every other point, always keeping the newest
    return points


def recorded(session: Session, job_id: str) -> list[dict[str, Any]]:
    """The series stored with the job so far (empty for a job that never reported)."""
    progress = session.scalar(select(TrainingJob.progress).where(TrainingJob.id == job_id))
    session.rollback()
    history = (progress or {}).get(HISTORY_KEY)
    return list(history) if isinstance(history, list) else []
