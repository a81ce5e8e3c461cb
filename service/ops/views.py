"""What the ops dashboard shows, as JSON-safe dicts read from the database and, for the live
workers, the worker registry in Redis (no writes here)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.core.errors import NotFound
from service.core.models import Classifier, ClassifierVersion, JobEvent, JobState, Tenant, TrainingJob
from service.core.settings import Settings
from service.ops import observe, state_history
from service.tenants import accounts, quotas
from service.tenants.accounts import page_count
from service.training.history import HISTORY_KEY
from service.training.job_views import eta_seconds, shown_phase
from service.training.worker_registry import WorkerRegistry

PAGE_SIZE = 25
TENANTS_PER_PAGE = 20  # a card each, with its keys and classifiers
CLASSIFIERS_PER_TENANT = 50  # listed on a tenant's card, the newest
ATTENTION_EVENTS = ("crashed", "lease_lost", "failed", "resumed")


@dataclass(frozen=True)
class JobFilter:
    """The job list's filters; None means any."""

    tenant_id: str | None = None
    state: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    page: int = 1


def overview(
    session: Session,
    registry: WorkerRegistry | None,
    digests: observe.ProgressDigests,
    history: state_history.ActiveHistory,
    *,
    now: datetime,
) -> dict[str, Any]:
    """Queue depth, jobs by state (now, and queued and training per minute of the last hour),
    running jobs, live workers (``workers_error`` says why there are none when the registry
    cannot be read), throughput, recent failures and resumes."""
    counts = observe.job_counts(session)
    running = list(
        session.scalars(
            select(TrainingJob)
            .where(TrainingJob.state == JobState.TRAINING.value)
            .order_by(TrainingJob.updated_at.desc())
        )
    )
    names = _names(session, running)
    workers, workers_error = _workers(session, registry, now=now)
    recent = observe.recent_jobs(session, now=now)
    return {
        "queue_depth": counts[JobState.QUEUED.value],
        "jobs_by_state": counts,
        "running": [_job_row(job, names) for job in running],
        "workers": workers,
        "workers_error": workers_error,
        "throughput": _throughput(digests.of(session, recent).values(), now=now),
        "active_history": history.read(session, counts, now=now),
        "attention": _attention(session, now=now),
    }


def job_list(session: Session, where: JobFilter, *, with_choices: bool = False) -> dict[str, Any]:
    """One page of jobs matching ``where``, newest first, with the total count; and with
    ``with_choices``, the tenants and states the filters offer (asked once by the page: every
    tenant in every 2-second poll was 377 KB a poll with 3,000 tenants)."""
    query = select(TrainingJob)
    if where.tenant_id:
        query = query.where(TrainingJob.tenant_id == where.tenant_id)
    if where.state:
        query = query.where(TrainingJob.state == where.state)
    if where.since:
        query = query.where(TrainingJob.created_at >= where.since)
    if where.until:
        query = query.where(TrainingJob.created_at < where.until)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    page = max(1, where.page)
    jobs = list(
        session.scalars(
            query.order_by(TrainingJob.created_at.desc(), TrainingJob.id)
            .offset((page - 1) * PAGE_SIZE)
            .limit(PAGE_SIZE)
        )
    )
    names = _names(session, jobs)
    found: dict[str, Any] = {
        "jobs": [_job_row(job, names) for job in jobs],
        "total": total,
        "page": page,
        "pages": page_count(total, PAGE_SIZE),
    }
    if with_choices:
        tenants = session.execute(select(Tenant.id, Tenant.name).order_by(Tenant.name))
        found["tenants"] = [{"tenant_id": tenant_id, "name": name} for tenant_id, name in tenants]
        found["states"] = [state.value for state in JobState]
    return found


def job_detail(session: Session, job_id: str) -> dict[str, Any]:
    """One job: its row, progress and time series, timeline, and the status and metrics of the
    classifier version it trains."""
    job = session.get(TrainingJob, job_id) if accounts.well_formed_id(job_id) else None  # no NUL to SQL
    if job is None:
        raise NotFound("training job", job_id)
    classifier = session.get(Classifier, job.classifier_id)
    trained = session.scalar(
        select(ClassifierVersion).where(
            ClassifierVersion.classifier_id == job.classifier_id, ClassifierVersion.number == job.version
        )
    )
    if classifier is None or trained is None:  # deleted between these reads (SQLite: no one snapshot)
        raise NotFound("training job", job_id)
    progress = dict(job.progress or {})
    events = session.scalars(select(JobEvent).where(JobEvent.job_id == job.id).order_by(JobEvent.id))
    return {
        **_job_row(job, _names(session, [job])),
        "error": job.error,
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        "lease_expires_at": _iso(job.lease_expires_at),
        "checkpoint_step": job.checkpoint_step,
        "progress": {k: v for k, v in progress.items() if k != HISTORY_KEY},
        "history": progress.get(HISTORY_KEY) or [],
        "events": [
            {
                "event": e.kind,
                "at": e.at.isoformat(),
                "worker": e.worker_id,
                "attempt": e.attempt,
                "epoch": e.epoch,
                "step": e.step,
                "detail": e.detail,
            }
            for e in events
        ],
        "model": {
            "version": job.version,
            "serving": classifier.serving_version == job.version,
            "status": trained.status,
            "status_description": trained.status_description,
            "metrics": trained.metrics,
        },
    }


def tenants(session: Session, settings: Settings, *, page: int = 1, name: str = "") -> dict[str, Any]:
    """One page of tenants (oldest first; those whose name contains ``name``, in any case), each
    with its keys (never their secrets), quotas, usage and newest CLASSIFIERS_PER_TENANT
    classifiers, newest first (``usage`` counts them all), and the total count. Every tenant with every
    classifier made one reply of megabytes with a thousand tenants, and one tenant of 10,000
    classifiers a page of 3.5 MB."""
    page = max(1, page)
    found = accounts.find_tenants(session, name=name, page=page, per_page=TENANTS_PER_PAGE)
    ids = [t.id for t in found.tenants]
    classifiers: dict[str, list[dict[str, Any]]] = {}
    newest_first = (Classifier.created_at.desc(), Classifier.id)
    ranked = (
        select(
            Classifier.id,
            Classifier.tenant_id,
            Classifier.name,
            Classifier.status,
            Classifier.created_at,
            func.row_number().over(partition_by=Classifier.tenant_id, order_by=newest_first).label("rank"),
        )
        .where(Classifier.tenant_id.in_(ids))
        .subquery()
    )
    shown = select(ranked).where(ranked.c.rank <= CLASSIFIERS_PER_TENANT).order_by(ranked.c.rank)
    for c in session.execute(shown):
        classifiers.setdefault(c.tenant_id, []).append(
            {"classifier_id": c.id, "name": c.name, "status": c.status, "created": c.created_at.isoformat()}
        )
    in_force, default = quotas.quotas_by_tenant(session, settings, ids), quotas.defaults(settings)
    held, nothing = quotas.usage_by_tenant(session, ids), quotas.Usage(0, 0, 0, 0, 0, 0)
    return {
        "total": found.total,
        "page": page,
        "pages": found.pages,
        "tenants": [
            {
                "tenant_id": tenant.id,
                "name": tenant.name,
                "created": tenant.created_at.isoformat(),
                "keys": [
                    {
                        "key_id": k.id,
                        "prefix": k.prefix,
                        "created": k.created_at.isoformat(),
                        "revoked": _iso(k.revoked_at),
                    }
                    for k in keys
                ],
                "quotas": asdict(in_force.get(tenant.id, default)),
                "usage": asdict(held.get(tenant.id, nothing)),
                "classifiers": classifiers.get(tenant.id, []),
            }
            for tenant, keys in accounts.with_keys(session, found.tenants)
        ],
    }


def _job_row(job: TrainingJob, names: dict[str, str]) -> dict[str, Any]:
    progress = job.progress or {}
    step, total = progress.get("step"), progress.get("total_steps")
    return {
        "job_id": job.id,
        "classifier_id": job.classifier_id,
        "classifier": names.get(job.classifier_id, ""),
        "tenant_id": job.tenant_id,
        "tenant": names.get(job.tenant_id, ""),
        "state": job.state,
        "phase": shown_phase(job),
        "epoch": progress.get("epoch"),
        "step": step,
        "total_steps": total,
        "fraction": 1.0
        if job.state == JobState.SUCCEEDED.value
        else (step / total if step and total else 0.0),
        "loss": progress.get("loss"),
        "samples_per_second": progress.get("samples_per_second"),
        "eta_seconds": eta_seconds(job),
        "learners": progress.get("learners"),
        "worker": job.lease_owner,
        "attempts": job.attempts,
        "failures": job.failures,
        "created": job.created_at.isoformat(),
        "updated": job.updated_at.isoformat(),
    }


def _workers(
    session: Session, registry: WorkerRegistry | None, *, now: datetime
) -> tuple[list[dict[str, Any]], str | None]:
    """The live workers of the registry, each with the classifier name of its current job."""
    if registry is None:
        return [], "no Redis is configured (TAAS_REDIS_URL): workers register there"
    try:
        alive = registry.alive()
    except redis.RedisError as error:
        return [], f"the worker registry (Redis) is unreachable: {error}"
    job_ids = {w.job_id for w in alive if w.job_id}
    named = (
        select(TrainingJob.id, Classifier.name)
        .join(Classifier, Classifier.id == TrainingJob.classifier_id)
        .where(TrainingJob.id.in_(job_ids))
    )
    classifiers: dict[str, str] = dict(session.execute(named).all()) if job_ids else {}
    return [
        {
            "worker": w.worker_id,
            "host": w.host,
            "pid": w.pid,
            "device": w.device,
            "learners": w.learners,
            "state": "idle" if w.job_id is None else "training",
            "job_id": w.job_id,
            "classifier": classifiers.get(w.job_id or "", ""),
            "started_at": _unix_iso(w.started_at),
            "last_heartbeat": _unix_iso(w.last_heartbeat),
            "heartbeat_age_seconds": round(max(0.0, now.timestamp() - w.last_heartbeat), 1),
        }
        for w in alive
    ], None


def _names(session: Session, jobs: list[TrainingJob]) -> dict[str, str]:
    """Display names of the jobs' classifiers and tenants, by id."""
    names: dict[str, str] = {}
    classifier_ids = {job.classifier_id for job in jobs}
    tenant_ids = {job.tenant_id for job in jobs}
    for model, ids in ((Classifier, classifier_ids), (Tenant, tenant_ids)):
        if ids:
            names.update(
                (row.id, row.name)
                for row in session.execute(select(model.id, model.name).where(model.id.in_(ids)))
            )
    return names


def _throughput(digests: Iterable[observe.JobDigest], *, now: datetime) -> list[dict[str, float]]:
    """Samples/s of all jobs together per minute of the last hour, the current one last (each
    job's mean in a minute); each point is stamped with its minute's end."""
    last = int(now.timestamp() // observe.MINUTE)
    minutes = range(last - int(observe.RECENT.total_seconds() // observe.MINUTE) + 1, last + 1)
    totals = dict.fromkeys(minutes, 0.0)
    for digest in digests:
        for minute, rate in digest.minutes.items():
            if minute in totals:
                totals[minute] += rate
    return [
        {"t": float((minute + 1) * observe.MINUTE), "samples_per_second": round(total, 2)}
        for minute, total in totals.items()
    ]


def _attention(session: Session, *, now: datetime) -> list[dict[str, Any]]:
    """The last day's crashes, lost leases, failures and resumes, newest first (at most 20)."""
    rows = session.execute(
        select(JobEvent, Classifier.name, Tenant.name)
        .join(TrainingJob, TrainingJob.id == JobEvent.job_id)
        .join(Classifier, Classifier.id == TrainingJob.classifier_id)
        .join(Tenant, Tenant.id == TrainingJob.tenant_id)
        .where(JobEvent.kind.in_(ATTENTION_EVENTS), JobEvent.at >= now - timedelta(days=1))
        .order_by(JobEvent.id.desc())
        .limit(20)
    )
    return [
        {
            "event": event.kind,
            "at": event.at.isoformat(),
            "job_id": event.job_id,
            "classifier": classifier_name,
            "tenant": tenant_name,
            "worker": event.worker_id,
            "detail": event.detail,
        }
        for event, classifier_name, tenant_name in rows
    ]


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _unix_iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()
