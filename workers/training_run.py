"""One training job, start to finish, as a plain function a Celery task (or a test) calls.

claim the job's lease → read its dataset → train (resuming from the job's checkpoints) into a
staging folder → move the model to this claim's own folder → finish the job, which points the
classifier at that folder. Every write to the job row carries
the lease's epoch: once one is refused (the lease expired and another worker took the job, or the
tenant deleted it), ``should_stop`` turns true and the trainer stops at its next check.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from service.db import make_engine, session_factory
from service.jobs import (
    JobContext,
    JobLease,
    claim_job,
    fail_job,
    finish_job,
    job_context,
    record_progress,
    renew_lease,
)
from service.settings import Settings
from service.store import ArtifactStore
from trainer.data import read_labelled_csv
from trainer.engine import Progress, train
from trainer.errors import InvalidTrainingData, NonFiniteLoss, TrainerError, TrainingStopped

log = logging.getLogger(__name__)

GENERIC_FAILURE = "Training failed because of an internal error; the operators have the details."


class JobInterrupted(Exception):
    """The worker is shutting down: the job checkpointed and released its lease, and should be
    delivered again so that the next worker resumes it."""


def run_training_job(
    job_id: str,
    settings: Settings,
    worker_id: str,
    *,
    stop_requested: Callable[[], bool] = lambda: False,
) -> None:
    """Train job ``job_id`` as ``worker_id``; return quietly if the job cannot be claimed.

    A job that is gone, finished, cancelled or leased by a live worker is left alone. Trainer
    errors (bad data, divergence) fail the job with a reason the tenant can read; any other
    error fails it with a generic reason and logs the traceback. ``stop_requested`` is polled
    while training: when it turns true the trainer checkpoints, the lease is released and
    :class:`JobInterrupted` is raised. Database errors propagate (the job's lease then expires
    and the job is resumed elsewhere).
    """
    engine = make_engine(settings)
    try:
        _JobRun(job_id, settings, worker_id, session_factory(engine), stop_requested).run()
    finally:
        engine.dispose()


class _JobRun:
    def __init__(
        self,
        job_id: str,
        settings: Settings,
        worker_id: str,
        sessions: sessionmaker[Session],
        stop_requested: Callable[[], bool],
    ) -> None:
        self.job_id = job_id
        self.settings = settings
        self.worker_id = worker_id
        self.sessions = sessions
        self.stop_requested = stop_requested
        self.store = ArtifactStore(settings.resolved_artifacts_dir())
        self.lease_duration = timedelta(seconds=settings.lease_seconds)
        self.lease: JobLease | None = None
        self.lease_lost = False
        self._last_renewal = 0.0
        self._last_progress = 0.0
        self._last_phase = ""

    def run(self) -> None:
        with self.sessions() as session:
            self.lease = claim_job(
                session, self.job_id, self.worker_id, now=_now(), lease=self.lease_duration
            )
        if self.lease is None:
            log.info("job %s: not claimable (gone, done or leased elsewhere)", self.job_id)
            return
        self._last_renewal = time.monotonic()
        log.info("job %s: claimed by %s at epoch %d", self.job_id, self.worker_id, self.lease.epoch)
        with self.sessions() as session:
            context = job_context(session, self.job_id)
        if context is None:
            log.info("job %s: deleted after it was claimed", self.job_id)
            return
        if context.dataset_path is None:
            self._fail(self.lease, "The classifier's training data was deleted before training finished.")
            return
        try:
            self._train_and_finish(self.lease, context.dataset_path, context)
        except TrainingStopped:
            self._stopped(self.lease)
        except TrainerError as error:
            log.info("job %s: failed: %s", self.job_id, error)
            self._fail(self.lease, _tenant_reason(error))
        except SQLAlchemyError:
            raise
        except Exception:
            log.exception("job %s: unexpected error", self.job_id)
            self._fail(self.lease, GENERIC_FAILURE)

    def _train_and_finish(self, lease: JobLease, dataset_path: str, context: JobContext) -> None:
        data = read_labelled_csv(self.store.resolve(dataset_path))
        checkpoints = self.store.resolve(context.checkpoint_dir)
        # Each claim writes its own model folder, and only the fenced finish_job decides which
        # one the classifier points at: a worker that lost its lease overwrites nothing.
        models = self.store.model_dir(context.tenant_id, context.classifier_id)
        model_dir = models / f"epoch-{lease.epoch}"
        staging = self.store.temp_path(".model")
        try:
            result = train(
                data,
                workdir=checkpoints,
                out_dir=staging,
                learners=self.settings.learners,
                on_progress=self._on_progress,
                should_stop=self._should_stop,
            )
            shutil.rmtree(model_dir, ignore_errors=True)
            model_dir.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging, model_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        with self.sessions() as session:
            finished = finish_job(
                session, lease, model_dir=self.store.relative(model_dir), metrics=result.metrics, now=_now()
            )
        if not finished:
            log.warning("job %s: lease lost before the model could be recorded", self.job_id)
            shutil.rmtree(model_dir, ignore_errors=True)
            return
        shutil.rmtree(checkpoints, ignore_errors=True)
        for stale in models.iterdir():
            if stale != model_dir:
                shutil.rmtree(stale, ignore_errors=True)
        log.info(
            "job %s: done in %.1fs, accuracy %s",
            self.job_id,
            result.train_seconds,
            result.metrics.get("accuracy"),
        )

    def _on_progress(self, progress: Progress) -> None:
        clock = time.monotonic()
        phase_changed = progress.phase != self._last_phase
        if not phase_changed and clock - self._last_progress < self.settings.progress_every_seconds:
            self._heartbeat()
            return
        self._last_phase, self._last_progress = progress.phase, clock
        assert self.lease is not None
        with self.sessions() as session:
            if not record_progress(session, self.lease, progress.as_dict(), now=_now()):
                log.warning("job %s: progress refused, lease lost", self.job_id)
                self.lease_lost = True
        self._heartbeat()

    def _should_stop(self) -> bool:
        self._heartbeat()
        return self.lease_lost or self.stop_requested()

    def _heartbeat(self) -> None:
        """Renew the lease a few times per lease period; a refused renewal means it is lost."""
        clock = time.monotonic()
        if self.lease_lost or clock - self._last_renewal < self.settings.lease_seconds / 4:
            return
        self._last_renewal = clock
        assert self.lease is not None
        with self.sessions() as session:
            if not renew_lease(session, self.lease, now=_now(), duration=self.lease_duration):
                log.warning("job %s: lease lost (expired, taken over or cancelled)", self.job_id)
                self.lease_lost = True

    def _stopped(self, lease: JobLease) -> None:
        if self.lease_lost:
            log.info("job %s: stopped, lease lost", self.job_id)
            return
        # Shutting down: release the lease (expire it now) so the next worker claims the job at
        # once and resumes from the checkpoint just written.
        with self.sessions() as session:
            renew_lease(session, lease, now=_now(), duration=timedelta(0))
        raise JobInterrupted(f"job {self.job_id} interrupted by worker shutdown; checkpoint kept")

    def _fail(self, lease: JobLease, reason: str) -> None:
        with self.sessions() as session:
            if not fail_job(session, lease, reason=reason, now=_now()):
                log.info("job %s: failure not recorded, lease lost", self.job_id)


def _tenant_reason(error: TrainerError) -> str:
    if isinstance(error, InvalidTrainingData):
        return f"Invalid training data: {error}"
    if isinstance(error, NonFiniteLoss):
        return "Training diverged (the loss became infinite or NaN); check the training data."
    return f"Training failed: {error}"


def _now() -> datetime:
    return datetime.now(UTC)
