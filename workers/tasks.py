"""Celery tasks: thin, named, idempotent shells around plain functions that re-read the database."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta

from celery.exceptions import Reject
from celery.signals import worker_shutting_down

from service.core.db import session_factory, shared_engine
from service.core.settings import get_settings
from service.training.queue import EVALUATE_TASK, EVALUATION_QUEUE, TRAIN_TASK
from service.training.scheduling import reserve_fair_job
from workers.app import celery_app
from workers.evaluation_run import run_evaluation
from workers.heartbeat import training, worker_identity
from workers.training_run import JobInterrupted, run_training_job

log = logging.getLogger(__name__)
_shutting_down = threading.Event()


class _RequeueIsNotAWarning(logging.Filter):
    """Celery logs every Reject at WARNING with a traceback (a fixed policy of its tracer). A
    training job that gave its slot to a fairer tenant, or stopped for a shutdown, has done what
    it should: this makes that an INFO line without the traceback (the reason is its message)."""

    def filter(self, record: logging.LogRecord) -> bool:
        said = getattr(record, "data", None)
        if not (
            isinstance(said, dict)
            and said.get("description") == "rejected"
            and said.get("name") == TRAIN_TASK
        ):
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.INFO):
            return False
        record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        record.exc_info = record.exc_text = None
        return True


logging.getLogger("celery.app.trace").addFilter(_RequeueIsNotAWarning())


@worker_shutting_down.connect
def _on_worker_shutting_down(**_: object) -> None:
    # Celery's warm shutdown (SIGTERM, first SIGINT) lets the running task finish; a training
    # job may take hours, so the job checkpoints and goes back to the queue instead.
    _shutting_down.set()


@celery_app.task(name=TRAIN_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def train(job_id: str) -> None:
    """A slot is free: train the fairest claimable job, which need not be ``job_id``.

    The message names the job it was sent for, but only wakes this worker: it reserves the job
    :func:`service.training.scheduling.reserve_fair_job` picks (a tenant's single job goes before
    another's backlog) and trains that one; the named job keeps waiting for the next free slot
    (the reconciler counts a message spent on another job as covering it). Nothing claimable
    (the job is gone, finished, leased elsewhere, backing off): return quietly.

    Raises celery's Reject (requeue) when the worker shuts down mid-job, or the job gives its
    slot to a tenant holding fewer: the job has written a checkpoint and released its lease, so
    the next worker to claim it resumes it (this one goes on to the fairest job).
    """
    settings = get_settings()
    worker_id = worker_identity()
    with session_factory(shared_engine(settings))() as session:
        picked = reserve_fair_job(
            session, worker_id, now=datetime.now(UTC), hold=timedelta(seconds=settings.lease_seconds)
        )
    if picked is None:
        log.info("message for job %s: nothing claimable", job_id)
        return
    if picked != job_id:
        log.info("message for job %s: the fairest claimable job is %s", job_id, picked)
    try:
        with training(picked):
            run_training_job(picked, settings, worker_id, stop_requested=_shutting_down.is_set)
    except JobInterrupted as interrupted:
        # an expected end: one INFO line without a traceback (_RequeueIsNotAWarning); not
        # chained, so the Reject does not carry the whole trainer's stack with it
        raise Reject(str(interrupted), requeue=True) from None


@celery_app.task(name=EVALUATE_TASK, queue=EVALUATION_QUEUE, acks_late=True, ignore_result=True)
def evaluate(evaluation_id: str) -> None:
    """Score a version on a tenant's test rows (:func:`workers.evaluation_run.run_evaluation`).
    A duplicate message, or one for an evaluation deleted or finished, does nothing; a worker
    lost mid-run leaves a lease that expires, and the reconciler sends the evaluation again."""
    outcome = run_evaluation(evaluation_id, get_settings())
    log.info("evaluation %s: %s", evaluation_id, outcome)
