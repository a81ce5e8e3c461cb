"""One training job, start to finish, as a plain function a Celery task (or a test) calls.

claim the job's lease → start the LeaseKeeper heartbeat → read its dataset → train in this
claim's own checkpoint folder, seeded from the job's last recorded checkpoint (resume) → move
the model to this claim's own folder → finish the job, which points the classifier at it.

Every write to the job row carries the lease's epoch, the checkpoint pointer included: each
claim trains in ``<checkpoints>/epoch-<E>/`` and records its checkpoints there, so a worker
that lost its lease (the reconciler requeued the job, another worker took it, the tenant
cancelled or deleted it) can neither move the pointer nor overwrite what the next claim
resumes from. Once a write is refused, or the heartbeat fails for a whole lease period,
``should_stop`` turns true and the trainer checkpoints and stops at its next update.

Failures are sorted by cause: invalid training data fails the job at once (a retry cannot cure
it), and so does a training that diverged at every learning rate the trainer tried
(``trainer.engine.MAX_DIVERGENCE_RETRIES``); a full disk (ENOSPC, EDQUOT) is no fault of the
job: it is requeued to try again after the longest back-off, without counting a failed attempt,
for as long as the disk stays full; any other error (another I/O error, a trainer error, a bug)
is a failed attempt — the job is requeued with a back-off and is Failed after ``max_attempts``.
A database that cannot be reached for a while (a restart, a failover) costs nothing while the
lease holds: a write made while training (progress, the checkpoint pointer) is made again
later, and the finish, a release or a failure is tried again until it lands or the lease is
lost; other database errors propagate (the lease then expires and the reconciler requeues the
job).

The parts: the claim's checkpoint folder and the job's other files (workers.job_files), the
checkpoint pointer (workers.checkpoint_pointer), the progress written while training
(workers.progress_reports), the fenced writes in an outage (workers.job_writes) and the
tenant's failure reasons (workers.failure_reasons).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from service.core.db import session_factory, shared_engine
from service.core.models import ClassifierVersion
from service.core.settings import Settings
from service.serving.invalidation import announce
from service.storage.store import ArtifactStore, read_fetched
from service.training import history
from service.training.job_views import JobContext, job_context
from service.training.jobs import BackOff, JobLease
from service.training.leases import claim_job, fail_job, finish_job, release_job, retry_job
from trainer.data import read_labelled_csv
from trainer.encoder import SentenceEncoder, shared_encoder
from trainer.engine import TrainResult, train
from trainer.errors import (
    CheckpointCorrupt,
    InvalidTrainingData,
    NonFiniteLoss,
    TrainerError,
    TrainingStopped,
    WeightsOutOfBounds,
)
from trainer.hparams import DEFAULT_HPARAMS, HParams, encoder_for
from workers.checkpoint_pointer import CheckpointPointer
from workers.failure_reasons import GENERIC_FAILURE, IO_FAILURE, MISSING_DATA, tenant_reason, waits_for
from workers.fair_share import FairShare
from workers.job_files import clean_if_deleted, discard_checkpoints, empty_folder, seed_workdir
from workers.job_writes import JobWrites, utc_now
from workers.lease import LeaseKeeper
from workers.progress_reports import ProgressReports

log = logging.getLogger(__name__)


class DatasetMissing(Exception):
    """The database names a dataset file that this worker's artifact store lacks: most likely
    a worker whose TAAS_ARTIFACTS_DIR (or data dir) is not the API's."""


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

    A job that is gone, finished, cancelled, backing off or leased by a live worker is left
    alone. ``stop_requested`` is polled while training: when it turns true, or when the job
    should give its slot to a tenant holding fewer (:mod:`workers.fair_share`), the trainer
    checkpoints, the job is released and :class:`JobInterrupted` is raised. Database errors
    propagate (the job's lease then expires and the reconciler requeues it).
    """
    _JobRun(job_id, settings, worker_id, session_factory(shared_engine(settings)), stop_requested).run()


def operator_hparams(settings: Settings) -> HParams:
    """The installation's HParams with the operator's overrides (checkpoint cadence, folds,
    staleness bound)."""
    overrides: dict[str, object] = {}
    for name in (
        "checkpoint_every_updates",
        "checkpoint_every_seconds",
        "cross_fit_folds",
        "staleness_bound",
    ):
        if (value := getattr(settings, name)) is not None:
            overrides[name] = value
    return dataclasses.replace(DEFAULT_HPARAMS, **overrides)  # type: ignore[arg-type]


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
        self.store = ArtifactStore.open(settings)
        self.writes = JobWrites(job_id, sessions, settings.lease_seconds)
        self.keeper: LeaseKeeper | None = None
        self.fair_share = (
            FairShare(sessions, job_id, every_seconds=settings.heartbeat_seconds)
            if settings.yield_to_fairer
            else None
        )
        self.pointer: CheckpointPointer | None = None

    def run(self) -> None:
        with self.sessions() as session:
            lease = claim_job(
                session,
                self.job_id,
                self.worker_id,
                now=utc_now(),
                lease=timedelta(seconds=self.settings.lease_seconds),
            )
        if lease is None:
            log.info("job %s: not claimable (gone, done, backing off or leased elsewhere)", self.job_id)
            return
        log.info("job %s: claimed by %s at epoch %d", self.job_id, self.worker_id, lease.epoch)
        if self.store.remote is not None:  # a node of its own: no reconciler sweeps this disk
            self.store.sweep_staging(self.settings.temp_max_age_seconds)
            self.store.sweep_model_copies(self.settings.model_copy_max_age_seconds)
            self.store.sweep_work_copies(self.settings.model_copy_max_age_seconds)
        with self.sessions() as session:
            context = job_context(session, self.job_id)
        if context is None:
            log.info("job %s: deleted after it was claimed", self.job_id)
            return
        if context.dataset_path is None:
            self._fail(lease, context, "The classifier's training data was deleted before training finished.")
            return
        keeper = LeaseKeeper(
            lease,
            self.sessions,
            lease_seconds=self.settings.lease_seconds,
            heartbeat_seconds=self.settings.heartbeat_seconds,
        )
        self.keeper = keeper
        with keeper:
            try:
                self._train_and_finish(lease, context.dataset_path, context)
            except TrainingStopped as stopped:
                self._stopped(lease, context, stopped)
            except InvalidTrainingData as error:
                log.info("job %s: invalid training data: %s", self.job_id, error)
                self._fail(lease, context, tenant_reason(error))
            except (NonFiniteLoss, WeightsOutOfBounds) as error:
                # the trainer has started over at a half, a quarter and an eighth of the rate
                # already: another attempt would train the same data the same way, three times
                log.warning("job %s: training diverged at every learning rate: %s", self.job_id, error)
                self._fail(lease, context, tenant_reason(error))
            except SQLAlchemyError:
                raise
            except DatasetMissing as missing:
                log.error("job %s: attempt %d failed: %s", self.job_id, lease.attempt, missing)
                self._retry(lease, context, MISSING_DATA)
            except (TrainerError, OSError) as error:
                if (waits := waits_for(error)) is not None:
                    what, reason = waits
                    log.error(
                        "job %s: attempt %d: %s (%s); the job tries again in %.0f s "
                        "(not counted as a failed attempt)",
                        self.job_id,
                        lease.attempt,
                        what,
                        error,
                        self.settings.retry_backoff_max_seconds,
                    )
                    self._retry(lease, context, reason, counted=False)
                    return
                log.warning("job %s: attempt %d failed: %r", self.job_id, lease.attempt, error)
                reason = IO_FAILURE if isinstance(error, OSError) else tenant_reason(error)
                self._retry(lease, context, reason)
            except Exception:
                log.exception("job %s: unexpected error in attempt %d", self.job_id, lease.attempt)
                self._retry(lease, context, GENERIC_FAILURE)

    def _train_and_finish(self, lease: JobLease, dataset_path: str, context: JobContext) -> None:
        dataset_file = self.store.resolve(dataset_path)
        try:  # another worker on this root that finished a job on this dataset may have dropped it
            data = read_fetched(self.store.fetch, dataset_file, read_labelled_csv)
        except FileNotFoundError:
            raise DatasetMissing(
                f"the dataset {dataset_path} is not in this worker's artifact store "
                f"({self.store.root}): do the API and every worker share TAAS_ARTIFACTS_DIR?"
            ) from None
        checkpoints = self.store.resolve(context.checkpoint_dir)
        workdir = checkpoints / f"epoch-{lease.epoch}"
        resumed_from = seed_workdir(self.store, context, workdir)
        with self.sessions() as session:
            recorded = history.recorded(session, self.job_id)
        assert self.keeper is not None
        # The pointer records checkpoints past its step; a training that begins below it
        # (starting over, or from the checkpoint kept before an unusable one) moves it back
        # first (ProgressReports)
        self.pointer = CheckpointPointer(
            workdir, self.keeper, self.store, self.writes, context.checkpoint_step
        )
        progress = ProgressReports(
            self.keeper,
            self.writes,
            self.pointer,
            self.settings.progress_every_seconds,
            recorded,
            resumed_from,
        )
        # Each claim writes its own model folder, and only the fenced finish_job decides which
        # one the classifier points at: a worker that lost its lease overwrites nothing.
        models = self.store.model_dir(context.tenant_id, context.classifier_id, context.version)
        model_dir = models / f"epoch-{lease.epoch}"
        staging = self.store.temp_path(".model")

        def train_here() -> TrainResult:
            return train(
                data,
                workdir=workdir,
                out_dir=staging,
                hparams=operator_hparams(self.settings),
                learners=self.settings.learners,
                device=self.settings.device,
                on_progress=progress.on_progress,
                should_stop=self._should_stop,
                multi_label=context.multi_label,
                encoder=self._encoder(context.language),
            )

        try:
            result = self._train_or_start_over(train_here, workdir, progress)
            shutil.rmtree(model_dir, ignore_errors=True)
            model_dir.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging, model_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.store.publish(model_dir)  # stored for every node before a classifier can point at it
        finished = self.writes.until_landed(
            "the finish",
            lambda session: finish_job(
                session,
                lease,
                model_dir=self.store.relative(model_dir),
                metrics=result.metrics,
                now=utc_now(),
                applied_updates=result.applied_updates,
            ),
            self.keeper,
        )
        if not finished and not self._recorded_as_model(model_dir):
            log.warning("job %s: lease lost before the model could be recorded", self.job_id)
            self.store.delete_tree(model_dir)
            clean_if_deleted(self.store, self.sessions, context)
            return
        # The classifier may serve this model now (a promote): API replicas drop cached lookups.
        announce(self.settings.redis_url, context.tenant_id)
        # With a remote store, API nodes load the model from it and a later job fetches the
        # dataset again: this node's copies would only fill its disk. (Kept after a failed or
        # stopped attempt: a retry here resumes without a download.)
        self.store.drop_local(dataset_file)
        self.store.drop_local(model_dir)
        try:
            self.store.delete_tree(checkpoints)
            self.store.delete_tree(models, keep=model_dir)
        except OSError as error:
            # the job has succeeded: an S3 that does not answer now is no failed attempt (it
            # reached run() as one, "tries again", and skipped the lines above)
            log.warning(
                "job %s: done, but its checkpoints and other attempts' models were not deleted (%s); "
                "the reconciler's sweep removes them",
                self.job_id,
                error,
            )
        log.info(
            "job %s: done in %.1fs after %d updates, accuracy %s",
            self.job_id,
            result.train_seconds,
            result.applied_updates,
            result.metrics.get("accuracy"),
        )

    def _recorded_as_model(self, model_dir: Path) -> bool:
        """Whether the version names ``model_dir`` as its model: a finish refused when tried
        again because its first try had committed, and only the reply was lost (the model was
        then deleted under an Available version)."""
        relative = self.store.relative(model_dir)
        with self.sessions() as session:
            named = select(ClassifierVersion.id).where(ClassifierVersion.model_dir == relative)
            return session.scalar(named) is not None

    def _train_or_start_over(
        self, train_here: Callable[[], TrainResult], workdir: Path, progress: ProgressReports
    ) -> TrainResult:
        try:
            return train_here()
        except CheckpointCorrupt as error:
            if progress.resumed_from is None:
                raise
            # Neither kept checkpoint is intact: every retry would fail the same way, and a
            # training from the start costs less than a failed job.
            log.warning("job %s: %s; training from the start", self.job_id, error)
            progress.resumed_from = None
            empty_folder(workdir)
            return train_here()

    def _encoder(self, language: str) -> SentenceEncoder | None:
        """The shared sentence encoder a classifier in ``language`` trains on (loaded once per
        worker process and kept), or None: the n-gram model (no encoder reads the language,
        or TAAS_SENTENCE_ENCODER is off)."""
        spec = encoder_for(language) if self.settings.sentence_encoder else None
        return shared_encoder(spec.name) if spec is not None else None

    def _should_stop(self) -> bool:
        assert self.keeper is not None and self.pointer is not None
        self.pointer.poll()
        return (
            self.keeper.lost
            or self.stop_requested()
            or (self.fair_share is not None and self.fair_share.should_yield())
        )

    def _stopped(self, lease: JobLease, context: JobContext, stopped: TrainingStopped) -> None:
        assert self.keeper is not None and self.pointer is not None
        self.pointer.rewind_if_due()  # else the stop's checkpoint is below the pointer
        if stopped.checkpoint is not None:
            # Recorded even after a tenant's cancel (resume continues from it); refused otherwise.
            self.pointer.record(Path(stopped.checkpoint), stopped.applied_updates)
        if self.keeper.lost:
            log.info("job %s: stopped: %s", self.job_id, self.keeper.reason)
            clean_if_deleted(self.store, self.sessions, context)
            self.pointer.drop_unrecorded_claim()
            return
        # Shutting down, or yielding to a fairer tenant: give the job back so the next worker
        # claims it at once and resumes from the checkpoint just written.
        yielding = self.fair_share is not None and self.fair_share.yielding
        why = "to a tenant holding fewer slots" if yielding else "at shutdown"
        self.writes.until_landed(
            "the release", lambda session: release_job(session, lease, now=utc_now(), why=why), self.keeper
        )
        cause = "a tenant holding fewer slots" if yielding else "worker shutdown"
        raise JobInterrupted(f"job {self.job_id} interrupted by {cause}; checkpoint kept")

    def _fail(self, lease: JobLease, context: JobContext, reason: str) -> None:
        failed = self.writes.until_landed(
            "the failure", lambda session: fail_job(session, lease, reason=reason, now=utc_now()), self.keeper
        )
        if not failed:
            log.info("job %s: failure not recorded, lease lost", self.job_id)
            return
        discard_checkpoints(self.store, context)

    def _retry(self, lease: JobLease, context: JobContext, reason: str, *, counted: bool = True) -> None:
        backoff = BackOff(self.settings.retry_backoff_seconds, self.settings.retry_backoff_max_seconds)
        outcome = self.writes.until_landed(
            "the failed attempt",
            lambda session: retry_job(
                session,
                lease,
                reason=reason,
                max_attempts=self.settings.max_attempts,
                backoff=backoff,
                now=utc_now(),
                counted=counted,
            ),
            self.keeper,
        )
        log.info("job %s: failed attempt recorded: %s", self.job_id, outcome or "lease already lost")
        if outcome == "failed":
            discard_checkpoints(self.store, context)
