"""Fair dispatch of training jobs: which claimable job a free worker should take next.

A wake-up message says "a slot may be free", not "run this job": the worker asks
:func:`next_fair_job` for a job id and takes it with ``jobs.claim_job`` (the compare-and-set,
which stays the only writer of ``training_jobs.state``). If another worker won the claim, it
asks again. The choice, among claimable jobs (queued, or training with an expired lease):

1. skip tenants already running ``running_cap`` jobs (a per-tenant share of the slots);
2. prefer the tenant running the fewest jobs now;
3. then the tenant whose last job started longest ago (never started: first);
4. then that tenant's oldest job.

So with S slots and T tenants, a tenant with one queued job starts at the first slot that
frees, however many jobs another tenant queued before it: it waits at most about one job
duration. Read-only; one indexed query.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from service.models import JobState, TrainingJob


def next_fair_job(session: Session, *, now: datetime, running_cap: int | None = None) -> str | None:
    """The id of the job a free worker should claim next, or None when nothing is claimable."""
    live = and_(TrainingJob.state == JobState.TRAINING.value, TrainingJob.lease_expires_at >= now)
    running = (
        select(TrainingJob.tenant_id, func.count().label("n"))
        .where(live)
        .group_by(TrainingJob.tenant_id)
        .subquery()
    )
    last_start = (
        select(TrainingJob.tenant_id, func.max(TrainingJob.started_at).label("at"))
        .group_by(TrainingJob.tenant_id)
        .subquery()
    )
    claimable = or_(
        TrainingJob.state == JobState.QUEUED.value,
        and_(
            TrainingJob.state == JobState.TRAINING.value,
            or_(TrainingJob.lease_expires_at.is_(None), TrainingJob.lease_expires_at < now),
        ),
    )
    busy = func.coalesce(running.c.n, 0)
    query = (
        select(TrainingJob.id)
        .outerjoin(running, running.c.tenant_id == TrainingJob.tenant_id)
        .outerjoin(last_start, last_start.c.tenant_id == TrainingJob.tenant_id)
        .where(claimable)
        .order_by(busy, last_start.c.at.asc().nulls_first(), TrainingJob.created_at, TrainingJob.id)
        .limit(1)
    )
    if running_cap is not None:
        query = query.where(busy < running_cap)
    return session.scalar(query)
