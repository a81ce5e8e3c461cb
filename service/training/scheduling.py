"""Fair dispatch of training jobs: which claimable job a free worker takes next.

A wake-up message says "a slot is free", not "run this job": the worker that receives it calls
:func:`reserve_fair_job`, which picks with :func:`next_fair_job` and sets the pick aside for
itself with ``leases.reserve_job`` (a compare-and-set); the worker then claims it as usual with
``leases.claim_job``. When another worker reserved or claimed the pick first, it picks again.
The choice, among the jobs ``job_views.claimable`` admits (queued, back-off over, not reserved by
another worker):

1. prefer the tenant holding the fewest slots now (jobs training under a live lease, or
   reserved);
2. then the tenant whose last job started longest ago (never started: first);
3. then that tenant's oldest job.

So with S slots and T tenants, a tenant with one queued job starts at the first slot that
frees, however many jobs another tenant queued before it. Dispatch is work-conserving (a
tenant alone may use every slot), so a tenant that arrives while another holds every slot
would wait for a job to end; :func:`should_yield` makes the holder give one back at once
instead (the job checkpoints and is queued again, and resumes later), so under contention
no tenant holds more than its share. docs/scheduling.md argues the races.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, ScalarSelect, Subquery, and_, func, select
from sqlalchemy.orm import Session, aliased

from service.core.models import ACTIVE_STATES, JobState, TrainingJob
from service.training.job_views import claimable
from service.training.leases import reserve_job


def _holding(now: datetime) -> ColumnElement[bool]:
    """A job that holds a slot at ``now``: training under a live lease, or reserved."""
    return and_(
        TrainingJob.state.in_(ACTIVE_STATES),
        TrainingJob.lease_owner.is_not(None),
        TrainingJob.lease_expires_at >= now,
    )


def _slots(now: datetime) -> Subquery:
    """(tenant_id, n): the slots each tenant holds at ``now`` (tenants holding none are absent)."""
    return (
        select(TrainingJob.tenant_id, func.count().label("n"))
        .where(_holding(now))
        .group_by(TrainingJob.tenant_id)
        .subquery()
    )


def next_fair_job(session: Session, *, now: datetime, worker_id: str | None = None) -> str | None:
    """The id of the job ``worker_id`` should take next, or None when nothing is claimable."""
    slots = _slots(now)
    last_start = (
        select(TrainingJob.tenant_id, func.max(TrainingJob.started_at).label("at"))
        .group_by(TrainingJob.tenant_id)
        .subquery()
    )
    picked = session.scalar(
        select(TrainingJob.id)
        .outerjoin(slots, slots.c.tenant_id == TrainingJob.tenant_id)
        .outerjoin(last_start, last_start.c.tenant_id == TrainingJob.tenant_id)
        .where(claimable(now, worker_id))
        .order_by(
            func.coalesce(slots.c.n, 0),
            last_start.c.at.asc().nulls_first(),
            TrainingJob.created_at,
            TrainingJob.id,
        )
        .limit(1)
    )
    session.rollback()  # end the read: the reservation that follows is its own transaction
    return picked


def should_yield(session: Session, job_id: str, *, now: datetime) -> bool:
    """Whether the training job ``job_id`` should give its slot to a tenant holding fewer.

    True when a claimable job of another tenant waits, that tenant holds at least two slots
    fewer than this job's tenant, and this job is the most recently started of its tenant's
    training jobs (so a tenant gives back one slot at a time). Moving that one slot makes the
    split more even, and the same rule cannot move it back, so jobs do not ping-pong; with a
    gap of one (one slot in all, or a split as even as whole slots allow) nothing yields.

    The decision is ONE statement, so its three facts (the slots held, the newest job, the
    fewest held by a waiting tenant) come from one snapshot. As three statements (PostgreSQL's
    READ COMMITTED, and SQLite's SELECTs, which run outside a transaction, take a snapshot per
    statement) a check of a tenant's older job could count two slots before its newest job's
    release committed and find itself the newest after it: both jobs yielded where one evened
    the split, and the older one checkpointed and started over for nothing.
    """
    try:
        mine = _tenant_of(job_id)
        held = _held_by(mine, now)
        # the common case, one cheap count: nothing to give back (a count this stale only
        # rules a yield out, and the next check, a heartbeat later, reads again)
        if (session.scalar(select(held)) or 0) < 2:
            return False
        youngest = (
            select(TrainingJob.id)
            .where(_holding(now), TrainingJob.tenant_id == mine, TrainingJob.state == JobState.TRAINING.value)
            .order_by(TrainingJob.started_at.desc(), TrainingJob.id.desc())
            .limit(1)
            .scalar_subquery()
            .correlate(None)
        )
        slots = _slots(now)
        fewest_waiting = (
            select(func.min(func.coalesce(slots.c.n, 0)))
            .select_from(TrainingJob)
            .outerjoin(slots, slots.c.tenant_id == TrainingJob.tenant_id)
            .where(claimable(now), TrainingJob.tenant_id != mine)
            .scalar_subquery()
            .correlate(None)
        )
        facts = session.execute(select(held, youngest, fewest_waiting)).one()  # one snapshot
        held_now, youngest_now, fewest_now = facts[0] or 0, facts[1], facts[2]
        return youngest_now == job_id and fewest_now is not None and fewest_now + 2 <= held_now
    finally:
        session.rollback()  # a read only


def _tenant_of(job_id: str) -> ScalarSelect[str]:
    """The tenant of job ``job_id``, as a scalar subquery that no enclosing query correlates."""
    job = aliased(TrainingJob)
    return select(job.tenant_id).where(job.id == job_id).scalar_subquery().correlate(None)


def _held_by(tenant: ScalarSelect[str], now: datetime) -> ScalarSelect[int]:
    """The slots ``tenant`` holds at ``now``, as a scalar subquery."""
    return (
        select(func.count())
        .select_from(TrainingJob)
        .where(_holding(now), TrainingJob.tenant_id == tenant)
        .scalar_subquery()
        .correlate(None)
    )


def reserve_fair_job(session: Session, worker_id: str, *, now: datetime, hold: timedelta) -> str | None:
    """Pick the fairest claimable job and reserve it for ``worker_id`` until ``now + hold``.

    Returns its id, or None when nothing is claimable. A lost reservation means another worker
    took that job (it left the claimable set), so the loop ends once the set is exhausted.
    """
    while (job_id := next_fair_job(session, now=now, worker_id=worker_id)) is not None:
        if reserve_job(session, job_id, worker_id, now=now, hold=hold):
            return job_id
    return None
