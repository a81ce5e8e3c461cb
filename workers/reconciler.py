"""The reconciler: the periodic pass that makes an accepted job finish whatever crashed.

Every ``reconcile_every_seconds`` (sooner when a back-off ends before that), one pass:

1. **Expired leases** — a training job whose worker stopped renewing (SIGKILL, a dead node, a
   partition) is a failed attempt: requeued with a back-off and a new epoch, or, at
   ``max_attempts`` failures, Failed with a reason the tenant can read.
2. **Wake-up messages** — a queued job gets a ``taas.train`` message when its back-off has just
   ended, or when its message is missing from the Redis queue (lost with Redis, or never sent
   because Redis was down when the API accepted the job) for longer than
   ``requeue_grace_seconds`` and no spare message covers it (a message wakes a worker that takes
   the fairest job, so one naming a job already taken stands for any other). A message too many
   is harmless: claiming is a compare-and-set, and a worker that finds nothing returns.
3. **Evaluations** — a running evaluation whose lease expired goes back to the queue (Failed
   after ``max_attempts`` claims), and a queued one whose ``taas.evaluate`` message is missing
   from the evaluation queue for longer than ``requeue_grace_seconds`` is sent again.
4. **Staging sweep** — staging files untouched for ``temp_max_age_seconds`` (an upload cut off
   by an API crash) are deleted.
5. **Unrecorded files** — every ``temp_max_age_seconds``, stored files and folders that no row
   records and nothing touched for as long (a crash between storing a file and committing its
   row) are deleted (:mod:`workers.unrecorded`).

Every write goes through :mod:`service.training.jobs` compare-and-sets, so any number of reconcilers
may run at once (one per `taas up`, or one per deployment). ``python -m workers.reconciler``
runs the loop; `taas up` runs it as a child, `taas reconcile` in production.
"""

from __future__ import annotations

import base64
import json
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import redis
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from service.core.db import make_engine, session_factory
from service.core.settings import Settings, get_settings
from service.storage.store import ArtifactStore
from service.training import evaluations
from service.training.job_views import expired_jobs, jobs_to_send, next_not_before
from service.training.jobs import BackOff, mark_enqueued, requeue_expired
from service.training.queue import EVALUATION_QUEUE, TRAINING_QUEUE, enqueue_evaluation, enqueue_training
from workers.unrecorded import sweep_unrecorded

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    """What one pass did (for logs and tests)."""

    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)
    evaluations_requeued: list[str] = field(default_factory=list)
    evaluations_failed: list[str] = field(default_factory=list)
    evaluations_sent: list[str] = field(default_factory=list)
    swept: int = 0
    broker_error: str | None = None


def reconcile_once(settings: Settings, sessions: sessionmaker[Session], *, now: datetime) -> ReconcileReport:
    """One pass of the reconciler (see the module docstring); raises on database errors only."""
    report = ReconcileReport()
    backoff = BackOff(settings.retry_backoff_seconds, settings.retry_backoff_max_seconds)
    with sessions() as session:
        for job_id in expired_jobs(session, now=now):
            verdict = requeue_expired(
                session, job_id, max_attempts=settings.max_attempts, backoff=backoff, now=now
            )
            if verdict == "retry":
                report.requeued.append(job_id)
            elif verdict == "failed":
                report.failed.append(job_id)
        try:
            in_queue = queued_job_ids(settings.require_redis_url())
            due = jobs_to_send(
                session, now=now, grace=timedelta(seconds=settings.requeue_grace_seconds), in_queue=in_queue
            )
            for job_id in due:
                enqueue_training(settings, job_id)
                mark_enqueued(session, job_id, now=now)
                report.sent.append(job_id)
        except (redis.RedisError, KombuOperationalError, OSError) as error:
            # Redis is down: the jobs stay queued in the database and are sent on a later pass.
            report.broker_error = str(error)
        _reconcile_evaluations(settings, session, report, now=now)
    store = ArtifactStore(settings.resolved_artifacts_dir())
    report.swept = store.sweep_staging(settings.temp_max_age_seconds)
    for name in (
        "requeued",
        "failed",
        "sent",
        "evaluations_requeued",
        "evaluations_failed",
        "evaluations_sent",
    ):
        if getattr(report, name):
            log.info("reconciler: %s %s", name, getattr(report, name))
    if report.broker_error:
        log.warning("reconciler: broker unreachable: %s", report.broker_error)
    return report


def _reconcile_evaluations(
    settings: Settings, session: Session, report: ReconcileReport, *, now: datetime
) -> None:
    """Step 3: expired evaluations back to the queue (or Failed), lost messages sent again."""
    moved = evaluations.requeue_expired(session, now=now, max_attempts=settings.max_attempts)
    report.evaluations_requeued += moved["requeued"]
    report.evaluations_failed += moved["failed"]
    if report.broker_error is not None:
        return
    try:
        due = evaluations.evaluations_to_send(
            session,
            now=now,
            grace=timedelta(seconds=settings.requeue_grace_seconds),
            in_queue=queued_job_ids(settings.require_redis_url(), EVALUATION_QUEUE),
        )
        for evaluation_id in due:
            enqueue_evaluation(settings, evaluation_id)
            evaluations.mark_enqueued(session, evaluation_id, now=now)
            report.evaluations_sent.append(evaluation_id)
    except (redis.RedisError, KombuOperationalError, OSError) as error:
        report.broker_error = str(error)


def queued_job_ids(redis_url: str, queue: str = TRAINING_QUEUE) -> list[str]:
    """The job (or evaluation) id of each message waiting in a Redis queue (one with two
    messages appears twice)."""
    client = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=5)
    try:
        raw = client.lrange(queue, 0, -1)
    finally:
        client.close()
    found: list[str] = []
    for item in raw:
        try:
            message = json.loads(item)
            args = json.loads(base64.b64decode(message["body"]))[0]
            found.append(str(args[0]))
        except (ValueError, KeyError, IndexError, TypeError):
            continue  # not one of ours: it does not stand for any job
    return found


def run_forever(settings: Settings, stop: threading.Event) -> None:
    """Run passes until ``stop`` is set; a failed pass (database down) is logged and retried."""
    engine = make_engine(settings)
    sessions = session_factory(engine)
    store = ArtifactStore.open(settings)  # with S3: what no row records is swept from the bucket too
    next_unrecorded_sweep = time.monotonic()
    try:
        while not stop.is_set():
            now = datetime.now(UTC)
            wait = settings.reconcile_every_seconds
            try:
                reconcile_once(settings, sessions, now=now)
                if time.monotonic() >= next_unrecorded_sweep:
                    next_unrecorded_sweep = time.monotonic() + settings.temp_max_age_seconds
                    try:
                        with sessions() as session:
                            sweep_unrecorded(session, store, settings.temp_max_age_seconds)
                    except (OSError, SQLAlchemyError):  # housekeeping: the next sweep tries again
                        log.exception("reconciler: the sweep of unrecorded files failed")
                with sessions() as session:
                    soonest = next_not_before(session, now=now)
                if soonest is not None:
                    wait = min(wait, max((soonest - datetime.now(UTC)).total_seconds(), 0.05))
            except SQLAlchemyError as error:
                log.warning("reconciler: database unreachable: %s", str(error).splitlines()[0])
            stop.wait(wait)
    finally:
        engine.dispose()


def main() -> None:
    """``python -m workers.reconciler``: reconcile until SIGTERM or SIGINT."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = get_settings()
    settings.apply_umask()
    settings.require_redis_url()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("reconciler: every %.1fs, lease %ds", settings.reconcile_every_seconds, settings.lease_seconds)
    run_forever(settings, stop)


if __name__ == "__main__":
    main()
