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
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from service.core.db import session_factory, shared_engine
from service.core.models import Classifier, ClassifierVersion
from service.core.settings import Settings
from service.serving.invalidation import announce
from service.storage.base import StoreUnavailable
from service.storage.store import ArtifactStore, read_fetched
from service.training import history
from service.training.job_views import JobContext, job_context
from service.training.jobs import BackOff, JobLease
from service.training.leases import (
    claim_job,
    fail_job,
    finish_job,
    record_checkpoint,
    record_progress,
    record_resumed,
    release_job,
    retry_job,
    rewind_checkpoint,
)
from trainer.checkpoint import KEEP, checkpoint_version, list_checkpoints
from trainer.data import read_labelled_csv
from trainer.encoder import SentenceEncoder, shared_encoder
from trainer.engine import Progress, TrainResult, train
from trainer.errors import (
    CheckpointCorrupt,
    InvalidTrainingData,
    NonFiniteLoss,
    TrainerError,
    TrainingStopped,
    WeightsOutOfBounds,
)
from trainer.hparams import DEFAULT_HPARAMS, HParams, encoder_for
from trainer.sentence_features import CACHE_FILE as VECTORS_CACHE
from workers.fair_share import FairShare
from workers.lease import LeaseKeeper

log = logging.getLogger(__name__)
T = TypeVar("T")
# What a database that cannot be reached for a while raises (a restart, a failover, a full
# connection pool, SQLite's lock held too long).
_UNREACHABLE = (OperationalError, InterfaceError, PoolTimeout)

GENERIC_FAILURE = "Training failed because of an internal error; the operators have the details."
IO_FAILURE = (
    "Training could not read or write its files (for example a full or read-only disk); "
    "the operators have the details."
)
DISK_FULL = (
    "Training is waiting for disk space on its worker (the operators have the details); it "
    "tries again every few minutes, and this does not count as a failed attempt."
)
STORE_UNAVAILABLE = (
    "Training is waiting for the artifact store, which does not answer (the operators have the "
    "details); it tries again every few minutes, and this does not count as a failed attempt."
)
MISSING_DATA = (
    "Training could not find its training data in the worker's artifact store (the API and "
    "every worker must share it); the operators have the details."
)


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
        self.keeper: LeaseKeeper | None = None
        self.fair_share = (
            FairShare(sessions, job_id, every_seconds=settings.heartbeat_seconds)
            if settings.yield_to_fairer
            else None
        )
        self.checkpoints: _CheckpointWatcher | None = None
        self.resumed_from: int | None = None
        self._last_progress = 0.0
        self._last_phase = ""
        self._history: list[dict[str, object]] = []
        self._resume_unrecorded: int | None = None  # a resume whose record the database missed
        self._rewind_unrecorded: int | None = None  # likewise, a move of the pointer back to a step
        self._earlier_claims_dropped = False
        self._published: Path | None = None  # the checkpoint last stored for every node, this session

    def run(self) -> None:
        with self.sessions() as session:
            lease = claim_job(
                session,
                self.job_id,
                self.worker_id,
                now=_now(),
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
                self._fail(lease, context, _tenant_reason(error))
            except (NonFiniteLoss, WeightsOutOfBounds) as error:
                # the trainer has started over at a half, a quarter and an eighth of the rate
                # already: another attempt would train the same data the same way, three times
                log.warning("job %s: training diverged at every learning rate: %s", self.job_id, error)
                self._fail(lease, context, _tenant_reason(error))
            except SQLAlchemyError:
                raise
            except DatasetMissing as missing:
                log.error("job %s: attempt %d failed: %s", self.job_id, lease.attempt, missing)
                self._retry(lease, context, MISSING_DATA)
            except (TrainerError, OSError) as error:
                if (waits := _waits_for(error)) is not None:
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
                reason = IO_FAILURE if isinstance(error, OSError) else _tenant_reason(error)
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
        self.resumed_from = _seed_workdir(self.store, context, workdir)
        with self.sessions() as session:
            self._history = history.recorded(session, self.job_id)
        # The watcher records checkpoints past the pointer's step; a training that begins below
        # it (starting over, or from the checkpoint kept before an unusable one) moves the
        # pointer back first (_training_began)
        self.checkpoints = _CheckpointWatcher(workdir, lease, self, context.checkpoint_step)
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
                on_progress=self._on_progress,
                should_stop=self._should_stop,
                multi_label=context.multi_label,
                encoder=self._encoder(context.language),
            )

        try:
            result = self._train_or_start_over(train_here, workdir)
            shutil.rmtree(model_dir, ignore_errors=True)
            model_dir.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging, model_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.store.publish(model_dir)  # stored for every node before a classifier can point at it
        finished = self._fenced(
            "the finish",
            lambda session: finish_job(
                session,
                lease,
                model_dir=self.store.relative(model_dir),
                metrics=result.metrics,
                now=_now(),
                applied_updates=result.applied_updates,
            ),
        )
        if not finished and not self._recorded_as_model(model_dir):
            log.warning("job %s: lease lost before the model could be recorded", self.job_id)
            self.store.delete_tree(model_dir)
            self._clean_if_deleted(context)
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

    def _train_or_start_over(self, train_here: Callable[[], TrainResult], workdir: Path) -> TrainResult:
        try:
            return train_here()
        except CheckpointCorrupt as error:
            if self.resumed_from is None:
                raise
            # Neither kept checkpoint is intact: every retry would fail the same way, and a
            # training from the start costs less than a failed job.
            log.warning("job %s: %s; training from the start", self.job_id, error)
            self.resumed_from = None
            _empty(workdir)
            return train_here()

    def _on_progress(self, progress: Progress) -> None:
        clock = time.monotonic()
        phase_changed = progress.phase != self._last_phase
        if phase_changed and progress.phase == "training":
            self._training_began(progress.step)
        if not phase_changed and clock - self._last_progress < self.settings.progress_every_seconds:
            return
        self._last_phase, self._last_progress = progress.phase, clock
        # in use, whenever the last checkpoint was written: a process sharing this root sweeps
        # the checkpoint folders untouched for the copy age (ArtifactStore.sweep_work_copies)
        if self.checkpoints is not None:
            with contextlib.suppress(OSError):  # a mark only: the checkpoint's own write reports trouble
                os.utime(self.checkpoints.workdir)
        # at the start of training, or with a later progress report when the database missed it
        if self._rewind_unrecorded is not None:
            self._rewind_pointer(self._rewind_unrecorded)
        if self._resume_unrecorded is not None:
            self._record_resumed(self._resume_unrecorded)
        self._write_progress(progress)

    def _training_began(self, step: int) -> None:
        """The trainer began a training session at update ``step``: resuming the recorded
        checkpoint, or the one kept before it when that was unusable, or from the start (the
        first claim, or the recorded files were gone or unusable, or it started over at a lower
        learning rate after the training diverged, its checkpoints discarded).

        Below the pointer's step, the pointer is moved back to what the session continues from
        (that checkpoint, or none): it named work this session does not continue, and it kept
        naming it until a new checkpoint passed its step, so a stop before then resumed the
        discarded run (a diverged one: at the rate it diverged at) or started over again."""
        if self.resumed_from is not None and step == 0:  # nothing was resumed, after all
            self.resumed_from = None
        if self.resumed_from is not None:
            if step < self.resumed_from:
                log.warning(
                    "job %s: the checkpoint at update %d is unusable; resuming from update %d",
                    self.job_id,
                    self.resumed_from,
                    step,
                )
            self._resume_unrecorded = step
        # a session after a start over may write a file under a name the last one stored (the
        # same step): stored again, or the remote kept the discarded run's file under that name
        self._published = None
        assert self.checkpoints is not None
        _drop_skipped(self.checkpoints.workdir, step)
        if step < self.checkpoints.recorded:
            self._rewind_unrecorded = step

    def _rewind_pointer(self, step: int) -> None:
        """Point the job at this claim's checkpoint of update ``step``, or at none for update 0."""
        assert self.keeper is not None and self.checkpoints is not None
        lease, workdir = self.keeper.lease, self.checkpoints.workdir
        path = next((path for version, path in list_checkpoints(workdir) if version == step), None)
        if path is not None:  # a hard link of an earlier claim's file, not stored under this name
            self._publish(path)
        relative = None if path is None else self.store.relative(path)
        written = self._unless_unreachable(
            "the checkpoint pointer",
            lambda session: rewind_checkpoint(session, lease, path=relative, step=step, now=_now()),
        )
        if written is None:
            return  # tried again at the next progress report; the watcher waits for it
        self._rewind_unrecorded = None
        if not written:
            self.keeper.mark_lost("checkpoint pointer refused")
            return
        self.checkpoints.recorded = step if path is not None else -1
        log.info(
            "job %s: checkpoint pointer moved back to %s", self.job_id, relative or "none (from the start)"
        )

    def _write_progress(self, progress: Progress) -> None:
        assert self.keeper is not None
        lease = self.keeper.lease
        report = progress.as_dict()
        self._history = history.with_point(self._history, report, time.time())
        report[history.HISTORY_KEY] = self._history
        written = self._unless_unreachable(
            "progress", lambda session: record_progress(session, lease, report, now=_now())
        )
        if written is False:
            self.keeper.mark_lost("progress write refused")

    def _record_resumed(self, step: int) -> None:
        assert self.keeper is not None
        lease = self.keeper.lease
        written = self._unless_unreachable(
            "the resume", lambda session: record_resumed(session, lease, step=step, now=_now())
        )
        if written is None:
            return  # tried again at the next progress report
        self._resume_unrecorded = None
        if not written:
            self.keeper.mark_lost("resume record refused")
        log.info("job %s: resumed from the checkpoint at update %d", self.job_id, step)

    def _unless_unreachable(self, what: str, write: Callable[[Session], bool]) -> bool | None:
        """A fenced write made while training; None, logged, when the database cannot be
        reached (the caller writes it again later: training goes on meanwhile, and the lease
        keeper gives the lease up if the outage outlasts it)."""
        try:
            with self.sessions() as session:
                return write(session)
        except _UNREACHABLE as error:
            log.warning("job %s: %s not recorded, the database is unreachable: %s", self.job_id, what, error)
            return None

    def _fenced(self, what: str, write: Callable[[Session], T]) -> T:
        """A fenced write after training (the finish, a release, a failure), tried again while
        the database cannot be reached, for as long as the lease holds; the last error once it
        is lost, or at once before the lease keeper runs. (The error escaped at once: a blip of
        seconds cost the attempt, and three of them Failed the job, "its worker stopped
        responding".)"""
        pause, deadline = 0.5, time.monotonic() + self.settings.lease_seconds
        while True:
            try:
                with self.sessions() as session:
                    return write(session)
            except _UNREACHABLE as error:
                # a lease's time at most: an OperationalError that is no outage (a statement
                # timeout, PostgreSQL's full disk) while the renewals succeed would loop for ever
                if self.keeper is None or self.keeper.lost or time.monotonic() > deadline:
                    raise
                log.warning(
                    "job %s: %s not recorded, the database is unreachable (%s); again in %.1f s",
                    self.job_id,
                    what,
                    error,
                    pause,
                )
                time.sleep(pause)
                pause = min(pause * 2, 5.0)

    def _encoder(self, language: str) -> SentenceEncoder | None:
        """The shared sentence encoder a classifier in ``language`` trains on (loaded once per
        worker process and kept), or None: the n-gram model (no encoder reads the language,
        or TAAS_SENTENCE_ENCODER is off)."""
        spec = encoder_for(language) if self.settings.sentence_encoder else None
        return shared_encoder(spec.name) if spec is not None else None

    def _should_stop(self) -> bool:
        assert self.keeper is not None and self.checkpoints is not None
        self.checkpoints.poll()
        return (
            self.keeper.lost
            or self.stop_requested()
            or (self.fair_share is not None and self.fair_share.should_yield())
        )

    def _stopped(self, lease: JobLease, context: JobContext, stopped: TrainingStopped) -> None:
        assert self.keeper is not None
        if self._rewind_unrecorded is not None:  # else the stop's checkpoint is below the pointer
            self._rewind_pointer(self._rewind_unrecorded)
        if stopped.checkpoint is not None:
            # Recorded even after a tenant's cancel (resume continues from it); refused otherwise.
            self._record_checkpoint(lease, Path(stopped.checkpoint), stopped.applied_updates)
        if self.keeper.lost:
            log.info("job %s: stopped: %s", self.job_id, self.keeper.reason)
            self._clean_if_deleted(context)
            self._drop_unrecorded_claim()
            return
        # Shutting down, or yielding to a fairer tenant: give the job back so the next worker
        # claims it at once and resumes from the checkpoint just written.
        yielding = self.fair_share is not None and self.fair_share.yielding
        why = "to a tenant holding fewer slots" if yielding else "at shutdown"
        self._fenced("the release", lambda session: release_job(session, lease, now=_now(), why=why))
        cause = "a tenant holding fewer slots" if yielding else "worker shutdown"
        raise JobInterrupted(f"job {self.job_id} interrupted by {cause}; checkpoint kept")

    def _record_checkpoint(self, lease: JobLease, path: Path, step: int) -> bool | None:
        """Point the job at the checkpoint ``path``: False when refused (the lease is lost),
        None when the database cannot be reached (the watcher tries again at its next poll)."""
        self._publish(path)
        relative = self.store.relative(path)
        recorded = self._unless_unreachable(
            "the checkpoint pointer",
            lambda session: record_checkpoint(session, lease, path=relative, step=step, now=_now()),
        )
        if recorded:  # past the step a rewind the database missed would have gone back to
            self._rewind_unrecorded = None
        if recorded and not self._earlier_claims_dropped:
            # The pointer names this claim's folder now, and no earlier claim can move it: their
            # folders only filled the disk (four yields of a 2,000-row job: 730 MB, and a disk
            # that the job would fit waited for space for ever). A later claim's is left alone:
            # this lease may have run out since.
            for folder in path.parent.parent.iterdir():
                if _claim_epoch(folder.name) < lease.epoch:
                    self.store.delete_tree(folder)
            self._earlier_claims_dropped = True
        return recorded

    def _publish(self, path: Path) -> None:
        """Store the checkpoint ``path`` for every node (and remove the rotated-out one) before
        the pointer names it; once, however many tries the pointer takes."""
        if path != self._published:
            vectors = path.parent / VECTORS_CACHE
            if self._published is None and vectors.is_file():  # once a claim: a resume skips the encoder
                self.store.publish(vectors)
            self.store.publish(path)
            self.store.prune(path.parent)
            self._published = path

    def _drop_unrecorded_claim(self) -> None:
        """After the lease was lost: remove this claim's checkpoint folder unless the job's
        pointer names it (then the next claim resumes from it, and drops it once it records its
        own). A worker that woke after its job had finished wrote its stop checkpoint, 95 MB,
        into a finished version."""
        assert self.checkpoints is not None
        workdir = self.checkpoints.workdir
        try:
            with self.sessions() as session:
                now = job_context(session, self.job_id)
        except _UNREACHABLE:
            return  # the next claim removes it once it records a checkpoint of its own
        folder = self.store.relative(workdir)
        if now is not None and not (now.checkpoint_path or "").startswith(f"{folder}/"):
            self.store.delete_tree(workdir)

    def _clean_if_deleted(self, context: JobContext) -> None:
        """A classifier or version deleted while training: remove what this worker wrote after
        the API removed its files (a last checkpoint)."""
        with self.sessions() as session:
            if job_context(session, self.job_id) is not None:
                return
            classifier_gone = session.get(Classifier, context.classifier_id) is None
        if classifier_gone:
            self.store.delete_classifier(context.tenant_id, context.classifier_id)
        else:
            self.store.delete_tree(
                self.store.version_dir(context.tenant_id, context.classifier_id, context.version)
            )

    def _fail(self, lease: JobLease, context: JobContext, reason: str) -> None:
        failed = self._fenced(
            "the failure", lambda session: fail_job(session, lease, reason=reason, now=_now())
        )
        if not failed:
            log.info("job %s: failure not recorded, lease lost", self.job_id)
            return
        self._discard_checkpoints(context)

    def _discard_checkpoints(self, context: JobContext) -> None:
        """A Failed job is never resumed (a resume takes cancelled jobs), so its checkpoints
        would only fill the disk. (One whose worker was lost is the reconciler's sweep's:
        ``workers.unrecorded``.)"""
        self.store.delete_tree(self.store.resolve(context.checkpoint_dir))

    def _retry(self, lease: JobLease, context: JobContext, reason: str, *, counted: bool = True) -> None:
        backoff = BackOff(self.settings.retry_backoff_seconds, self.settings.retry_backoff_max_seconds)
        outcome = self._fenced(
            "the failed attempt",
            lambda session: retry_job(
                session,
                lease,
                reason=reason,
                max_attempts=self.settings.max_attempts,
                backoff=backoff,
                now=_now(),
                counted=counted,
            ),
        )
        log.info("job %s: failed attempt recorded: %s", self.job_id, outcome or "lease already lost")
        if outcome == "failed":
            self._discard_checkpoints(context)


class _CheckpointWatcher:
    """Records each new checkpoint the trainer writes as the job's fenced checkpoint pointer.

    Polled from ``should_stop`` after every update: one ``stat`` of the folder, and a listing
    only when its mtime changed (the trainer renames a new file in) or a second has passed, so
    the pointer moves within one update of the file appearing.
    """

    def __init__(self, workdir: Path, lease: JobLease, run: _JobRun, seeded: int | None) -> None:
        self.workdir = workdir
        self.lease = lease
        self.run = run
        self.recorded = -1 if seeded is None else seeded
        self._mtime = 0
        self._scanned = 0.0

    def poll(self) -> None:
        try:
            mtime = os.stat(self.workdir).st_mtime_ns
        except FileNotFoundError:
            return
        clock = time.monotonic()
        if mtime == self._mtime and clock - self._scanned < 1.0:
            return
        self._mtime, self._scanned = mtime, clock
        found = list_checkpoints(self.workdir)
        if not found or found[0][0] <= self.recorded:
            return
        version, path = found[0]
        recorded = self.run._record_checkpoint(self.lease, path, version)
        if recorded is None:  # not recorded: tried again at the next scan, within a second
            return
        self.recorded = version
        if not recorded:
            assert self.run.keeper is not None
            self.run.keeper.mark_lost("checkpoint pointer refused")


def _claim_epoch(name: str) -> int:
    """The epoch of a claim's checkpoint folder ``epoch-<E>``; a large number for anything else
    (never taken for an earlier claim's)."""
    prefix, _, epoch = name.partition("-")
    return int(epoch) if prefix == "epoch" and epoch.isdigit() else 2**62


def _seed_workdir(store: ArtifactStore, context: JobContext, workdir: Path) -> int | None:
    """Put the job's recorded checkpoint, the older one the trainer kept beside it, and the
    cached sentence embeddings of its texts (the encoder's minute on 10,000 texts) into this
    claim's fresh ``workdir``; returns the recorded step, None when there is nothing to
    resume from.

    The trainer resumes from the newest intact file there, so a recorded checkpoint that is
    found corrupt (a bad disk, an altered object) costs the updates since its predecessor
    instead of failing every attempt. Hard links (the trainer never rewrites a file in place,
    it writes a new one and renames), or copies across file systems.
    """
    _empty(workdir)
    if context.checkpoint_path is None:
        return None
    recorded = store.resolve(context.checkpoint_path)
    seeded = 0
    for source in _kept_with(store, recorded):
        target = workdir / source.name
        try:  # a store that does not answer is raised: the attempt waits for it
            read_fetched(store.fetch, source, partial(_link_or_copy, target=target))
        except FileNotFoundError:
            continue
        seeded += 1
    if not seeded:
        log.warning("job %s: recorded checkpoint %s is missing; starting over", context.job_id, recorded)
        return None
    with contextlib.suppress(FileNotFoundError):  # the texts' embeddings, when the job has an encoder
        read_fetched(
            store.fetch,
            recorded.parent / VECTORS_CACHE,
            partial(_link_or_copy, target=workdir / VECTORS_CACHE),
        )
    return context.checkpoint_step


def _link_or_copy(source: Path, target: Path) -> None:
    """``target`` the same file as ``source``: a hard link, or a copy across file systems;
    FileNotFoundError when ``source`` is gone."""
    try:
        os.link(source, target)
    except FileNotFoundError:
        raise
    except OSError:
        shutil.copyfile(source, target)


def _drop_skipped(workdir: Path, step: int) -> None:
    """Remove the checkpoints past ``step`` from ``workdir``, where a training session began at
    ``step``: files the trainer found unusable and skipped. It removes them itself only at its
    next save, and until then the watcher took the newest for a new checkpoint: it moved the
    pointer back onto the unusable file, which that save then deleted."""
    for version, path in list_checkpoints(workdir):
        if version > step:
            path.unlink(missing_ok=True)


def _empty(folder: Path) -> None:
    """Make ``folder`` an empty directory."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)


def _kept_with(store: ArtifactStore, recorded: Path) -> list[Path]:
    """``recorded`` and the older checkpoints its folder keeps (here or in the remote store),
    newest first. Newer files there were never recorded and are left out."""
    folder = recorded.parent
    names = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    if store.remote is not None:
        names |= {key.rsplit("/", 1)[-1] for key in store.remote.list_keys(store.relative(folder))}
    newest = checkpoint_version(recorded.name) or 0
    versions = ((checkpoint_version(name), name) for name in names)
    older = sorted(((v, name) for v, name in versions if v is not None and v < newest), reverse=True)
    return [recorded] + [folder / name for _, name in older[: KEEP - 1]]


def _waits_for(error: BaseException) -> tuple[str, str] | None:
    """What an attempt that failed for want of something only the operators can give back
    waits for, as (the log's words, the tenant's reason); None for a failure of the attempt
    itself. Found anywhere in ``error``'s chain: a full disk or quota, or a remote artifact
    store that does not answer (three attempts a few seconds apart used to fail the job, while
    an operator had barely been paged)."""
    for seen in _chain(error):
        if isinstance(seen, StoreUnavailable):
            return "the artifact store is unavailable", STORE_UNAVAILABLE
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return "the disk is full", DISK_FULL
    return None


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and the errors it was raised from (or during), newest first."""
    seen: BaseException | None = error
    chain: set[int] = set()
    while seen is not None and id(seen) not in chain:
        yield seen
        chain.add(id(seen))
        seen = seen.__cause__ or seen.__context__


def _tenant_reason(error: TrainerError) -> str:
    if isinstance(error, InvalidTrainingData):
        return f"Invalid training data: {error}"
    if isinstance(error, NonFiniteLoss):
        return "Training diverged (the loss became infinite or NaN); check the training data."
    if isinstance(error, WeightsOutOfBounds):
        return "Training diverged (its weights grew too large to serve); check the training data."
    return GENERIC_FAILURE  # checkpoint and engine errors name server paths: keep them in the log


def _now() -> datetime:
    return datetime.now(UTC)
