"""Jobs queued and training at the end of each minute of the last hour, read back from the jobs'
timelines (``job_events``), so every API replica draws the same history and a restart loses none.

Every change of a job's state is recorded as a timeline event in the same transaction
(``service.training.jobs`` and ``leases``); the state each kind leads to is
:data:`STATE_AFTER`. The counts now (``training_jobs``) are walked back over the hour's events
to the hour's start, then forward minute by minute: the cost follows the events of the hour,
not the length of the queue. :class:`ActiveHistory` keeps the finished minutes between the
dashboard's 2-second polls.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.core.models import JobEvent, JobState
from service.ops import observe

STATE_AFTER = {
    "queued": JobState.QUEUED.value,  # created, released by its worker, resumed by the tenant
    "claimed": JobState.TRAINING.value,
    "resumed": JobState.TRAINING.value,  # from its checkpoint, by the worker that claimed it
    "lease_lost": JobState.QUEUED.value,  # back in the queue (a "failed" follows when it gives up)
    "crashed": JobState.QUEUED.value,
    "done": JobState.SUCCEEDED.value,
    "failed": JobState.FAILED.value,
    "cancelled": JobState.CANCELLED.value,
}
SHOWN = (JobState.QUEUED.value, JobState.TRAINING.value)


def active_history(session: Session, *, now: datetime) -> list[dict[str, float]]:
    """Per minute of the last hour, the current one last: ``{"t": the minute's end (unix s),
    "queued": n, "training": n}``, the current minute's as of ``now``."""
    last = int(now.timestamp() // observe.MINUTE)
    first = last - int(observe.RECENT.total_seconds() // observe.MINUTE) + 1
    start = datetime.fromtimestamp(first * observe.MINUTE, now.tzinfo)
    kinds = tuple(STATE_AFTER)
    events = session.execute(
        select(JobEvent.job_id, JobEvent.kind, JobEvent.at)
        .where(JobEvent.at >= start, JobEvent.at <= now, JobEvent.kind.in_(kinds))
        .order_by(JobEvent.id)
    ).all()
    in_window = select(JobEvent.job_id).where(JobEvent.at >= start, JobEvent.kind.in_(kinds))
    last_before = (
        select(func.max(JobEvent.id))
        .where(JobEvent.at < start, JobEvent.kind.in_(kinds), JobEvent.job_id.in_(in_window))
        .group_by(JobEvent.job_id)
    )
    # each job's state at the hour's start (absent: it did not exist yet)
    state: dict[str, str] = {
        job_id: STATE_AFTER[kind]
        for job_id, kind in session.execute(
            select(JobEvent.job_id, JobEvent.kind).where(JobEvent.id.in_(last_before))
        )
    }
    counts = Counter(observe.job_counts(session))
    final = dict(state)
    for job_id, kind, _at in events:
        final[job_id] = STATE_AFTER[kind]
    for job_id, after in final.items():  # undo the hour: each job back to its state at the start
        counts[after] -= 1
        if job_id in state:
            counts[state[job_id]] += 1
    points: list[dict[str, float]] = []
    pending = iter(events)
    event = next(pending, None)
    for minute in range(first, last + 1):
        end = min((minute + 1) * observe.MINUTE, now.timestamp())
        while event is not None and event.at.timestamp() <= end:
            job_id, after = event.job_id, STATE_AFTER[event.kind]
            if job_id in state:
                counts[state[job_id]] -= 1
            state[job_id], counts[after] = after, counts[after] + 1
            event = next(pending, None)
        points.append(_point(minute, counts))
    return points


def _point(minute: int, counts: Counter[str] | dict[str, int]) -> dict[str, float]:
    """The chart's point at the end of ``minute`` (unix minutes): the jobs queued and training
    (never below zero: a job deleted with its timeline leaves the walked counts short)."""
    return {"t": float((minute + 1) * observe.MINUTE), **{s: float(max(0, counts[s])) for s in SHOWN}}


class ActiveHistory:
    """:func:`active_history` for each poll of the overview: the finished minutes worked out
    again only when the minute turns (3,000 jobs finished within the hour: 60 ms a read), the
    current minute's point the counts now. An event written late, stamped in a finished minute,
    shows from the next minute on. Thread-safe (the routes run on worker threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: tuple[int, list[dict[str, float]]] | None = None

    def read(self, session: Session, counts: dict[str, int], *, now: datetime) -> list[dict[str, float]]:
        """The last hour's points; ``counts``: the jobs by state now (observe.job_counts)."""
        minute = int(now.timestamp() // observe.MINUTE)
        with self._lock:
            held = self._held
        if held is None or held[0] != minute:
            held = (minute, active_history(session, now=now)[:-1])
            with self._lock:
                self._held = held
        return [*held[1], _point(minute, counts)]
