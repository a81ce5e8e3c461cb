"""Celery tasks: thin, named, idempotent shells around plain functions that re-read the database."""

from __future__ import annotations

import os
import socket
import threading

from celery.exceptions import Reject
from celery.signals import worker_shutting_down

from service.queue import TRAIN_TASK
from service.settings import get_settings
from workers.app import celery_app
from workers.training_run import JobInterrupted, run_training_job

_shutting_down = threading.Event()


@worker_shutting_down.connect
def _on_worker_shutting_down(**_: object) -> None:
    # Celery's warm shutdown (SIGTERM, first SIGINT) lets the running task finish; a training
    # job may take hours, so the job checkpoints and goes back to the queue instead.
    _shutting_down.set()


def worker_identity() -> str:
    """This process's identity as a lease owner: ``hostname:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


@celery_app.task(name=TRAIN_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def train(job_id: str) -> None:
    """Train the job ``job_id``; a job that is gone, finished or leased elsewhere is left alone.

    Raises celery's Reject (requeue) when the worker shuts down mid-job: the job has written a
    checkpoint and released its lease, so the next worker resumes it.
    """
    try:
        run_training_job(job_id, get_settings(), worker_identity(), stop_requested=_shutting_down.is_set)
    except JobInterrupted as interrupted:
        raise Reject(str(interrupted), requeue=True) from interrupted
