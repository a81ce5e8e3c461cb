"""run_training_job driven directly (no broker) against the real databases and the real trainer."""

from __future__ import annotations

import errno
import gc
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine.default import DefaultDialect
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from benchmarks.chaos import NGRAM_LANGUAGE
from service.core.models import ClassifierStatus, JobEvent, JobState
from service.core.settings import Settings
from service.storage.store import ArtifactStore
from service.training.jobs import BackOff, requeue_expired
from service.training.leases import claim_job
from trainer.checkpoint import load_verified
from trainer.errors import NonFiniteLoss, TrainerError
from trainer.inference import LoadedModel
from workers import checkpoint_pointer, progress_reports, training_run
from workers.failure_reasons import DISK_FULL, MISSING_DATA
from workers.training_run import JobInterrupted, run_training_job

pytestmark = pytest.mark.integration


def test_queued_job_trains_to_available_with_metrics(
    queue_job: Callable[..., Any], intents_csv: Path, worker_settings: Settings, session: Session
) -> None:
    queued = queue_job(intents_csv)

    run_training_job(queued.job_id, worker_settings, "host-a:1")

    job, classifier = queued.reload(session)
    assert job.state == JobState.SUCCEEDED
    assert (job.epoch, job.attempts, job.lease_owner) == (1, 1, None)
    assert job.progress is not None and job.progress["phase"] in {"saving", "done"}
    assert classifier.status == ClassifierStatus.AVAILABLE
    assert classifier.metrics is not None and classifier.metrics["accuracy"] >= 0.9
    store = ArtifactStore(worker_settings.resolved_artifacts_dir())
    assert classifier.model_dir is not None
    model = LoadedModel.load(store.resolve(classifier.model_dir))
    top_label, _ = model.classify(["book a flight to rome"])[0][0]
    assert top_label == "flights"
    assert not store.resolve(job.checkpoint_dir).exists()


def test_a_workers_jobs_share_one_engine_and_leave_no_dialect_behind(
    queue_job: Callable[..., Any], intents_csv: Path, worker_settings: Settings, session: Session
) -> None:
    """An engine made and disposed per job left its dialect alive in SQLAlchemy's caches: a
    worker held one more after each job (135 after 50 minutes of a soak)."""

    def live_dialects() -> int:
        gc.collect()
        return sum(isinstance(o, DefaultDialect) for o in gc.get_objects())

    counts = []
    for _ in range(3):
        queued = queue_job(intents_csv, language=NGRAM_LANGUAGE)  # any model: not the encoder's test
        run_training_job(queued.job_id, worker_settings, "host-a:1")
        assert queued.reload(session)[0].state == JobState.SUCCEEDED
        counts.append(live_dialects())
    assert counts[2] == counts[0], counts


def test_a_database_blip_while_training_and_at_the_finish_costs_no_attempt(
    queue_job: Callable[..., Any],
    intents_csv: Path,
    settings_factory: Callable[..., Settings],
    session: Session,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A progress write, the checkpoint pointer and the finish each meet the database down once
    (a restart, a failover): the error escaped, the attempt died, and after its lease expired
    the job counted a failed attempt; three such blips Failed it."""
    queued = queue_job(intents_csv)
    blips: dict[str, int] = {}

    def once_unreachable(module: ModuleType, name: str, nth: int) -> None:
        real = getattr(module, name)

        def write(*args: Any, **kwargs: Any) -> Any:
            blips[name] = blips.get(name, 0) + 1
            if blips[name] == nth:
                raise OperationalError("UPDATE training_jobs", {}, Exception("server closed the connection"))
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, write)

    once_unreachable(progress_reports, "record_progress", 2)
    once_unreachable(checkpoint_pointer, "record_checkpoint", 1)
    once_unreachable(training_run, "finish_job", 1)
    settings = settings_factory(redis_url=None, checkpoint_every_updates=100)

    run_training_job(queued.job_id, settings, "host-a:1")

    job, classifier = queued.reload(session)
    assert (job.state, job.attempts, job.failures) == (JobState.SUCCEEDED, 1, 0)
    assert classifier.status == ClassifierStatus.AVAILABLE
    assert blips["record_progress"] > 2 and blips["record_checkpoint"] > 1 and blips["finish_job"] == 2


def test_a_finish_whose_commit_landed_and_whose_reply_was_lost_keeps_its_model(
    queue_job: Callable[..., Any],
    intents_csv: Path,
    worker_settings: Settings,
    session: Session,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tried again, the finish is refused (the job is done already), which read as a lost
    lease: the model was deleted under the version that had just become Available."""
    queued = queue_job(intents_csv, language=NGRAM_LANGUAGE)
    real, tries = training_run.finish_job, []

    def committed_then_cut_off(*args: Any, **kwargs: Any) -> Any:
        tries.append(None)
        done = real(*args, **kwargs)
        if len(tries) == 1:
            raise OperationalError("COMMIT", {}, Exception("server closed the connection"))
        return done

    monkeypatch.setattr(training_run, "finish_job", committed_then_cut_off)

    run_training_job(queued.job_id, worker_settings, "host-a:1")

    job, classifier = queued.reload(session)
    assert (job.state, classifier.status, len(tries)) == (JobState.SUCCEEDED, ClassifierStatus.AVAILABLE, 2)
    assert classifier.model_dir is not None
    assert ArtifactStore(worker_settings.resolved_artifacts_dir()).resolve(classifier.model_dir).is_dir()


def test_an_unreachable_database_is_asked_for_a_checkpoints_pointer_once_a_second(
    queue_job: Callable[..., Any],
    intents_csv: Path,
    settings_factory: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It was asked after every update, and the checkpoint stored for every node again each
    time (an S3 upload): thousands of tries in a 2 s outage. Now once when the checkpoint
    appears and once a second after."""
    queued = queue_job(intents_csv)
    real, refused, published, outage = checkpoint_pointer.record_checkpoint, [], [], [0.0]

    def unreachable_for_a_second(*args: Any, **kwargs: Any) -> Any:
        outage[0] = outage[0] or time.monotonic()
        if time.monotonic() - outage[0] < 1.0:
            refused.append(kwargs["step"])
            raise OperationalError("UPDATE training_jobs", {}, Exception("server closed the connection"))
        return real(*args, **kwargs)

    real_publish = ArtifactStore.publish

    def publish(store: ArtifactStore, path: Path) -> None:
        published.append(path)
        real_publish(store, path)

    monkeypatch.setattr(checkpoint_pointer, "record_checkpoint", unreachable_for_a_second)
    monkeypatch.setattr(ArtifactStore, "publish", publish)

    settings = settings_factory(redis_url=None, checkpoint_every_updates=100)
    run_training_job(queued.job_id, settings, "host-a:1")

    assert refused and max(refused.count(step) for step in refused) <= 2, refused
    assert len(published) == len(set(published))  # each checkpoint (and the model) stored once


def test_an_operational_error_that_outlasts_the_lease_ends_the_attempt(
    queue_job: Callable[..., Any],
    intents_csv: Path,
    settings_factory: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A statement timeout or PostgreSQL's full disk is an OperationalError too, but no outage:
    the lease's renewals succeed, so the finish was tried again for ever."""
    queued = queue_job(intents_csv)

    def timed_out(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("UPDATE", {}, Exception("canceling statement due to statement timeout"))

    monkeypatch.setattr(training_run, "finish_job", timed_out)
    settings = settings_factory(redis_url=None, lease_seconds=2, heartbeat_seconds=0.5)

    with pytest.raises(OperationalError):
        run_training_job(queued.job_id, settings, "host-a:1")


def test_job_whose_row_is_gone_returns_quietly(worker_settings: Settings) -> None:
    run_training_job("00000000-0000-0000-0000-000000000000", worker_settings, "host-a:1")


def test_finished_job_is_left_alone_when_delivered_again(
    queue_job: Callable[..., Any], intents_csv: Path, worker_settings: Settings, session: Session
) -> None:
    queued = queue_job(intents_csv, language=NGRAM_LANGUAGE)
    run_training_job(queued.job_id, worker_settings, "host-a:1")
    _, before = queued.reload(session)
    model_dir, updated_at = before.model_dir, before.updated_at

    run_training_job(queued.job_id, worker_settings, "host-b:2")

    job, classifier = queued.reload(session)
    assert (job.state, job.epoch, job.attempts) == (JobState.SUCCEEDED, 1, 1)
    assert (classifier.model_dir, classifier.updated_at) == (model_dir, updated_at)


def test_worker_whose_lease_was_taken_over_writes_nothing(
    queue_job: Callable[..., Any],
    intents_csv: Path,
    settings_factory: Callable[..., Settings],
    session: Session,
) -> None:
    # A short lease, so that the worker renews (a fenced write) several times a second.
    stale_settings = settings_factory(redis_url=None, lease_seconds=1)
    queued = queue_job(intents_csv, stale_settings)
    taken_over: list[int] = []

    def take_over_once() -> bool:
        # Called by the worker between training steps: another worker claims the job as if
        # this one's lease had expired an hour ago.
        if not taken_over:
            later = datetime.now(UTC) + timedelta(hours=1)
            verdict = requeue_expired(
                session, queued.job_id, max_attempts=3, backoff=BackOff(0, 0), now=later
            )
            assert verdict == "retry"
            lease = claim_job(session, queued.job_id, "host-b:2", now=later, lease=timedelta(hours=1))
            assert lease is not None
            taken_over.append(lease.epoch)
        return False

    run_training_job(queued.job_id, stale_settings, "host-a:1", stop_requested=take_over_once)

    job, classifier = queued.reload(session)
    assert taken_over == [3]  # the reconciler's requeue bumped the epoch, then the claim did
    assert (job.state, job.epoch, job.lease_owner) == (JobState.TRAINING, 3, "host-b:2")
    assert classifier.status == ClassifierStatus.TRAINING
    assert classifier.model_dir is None and classifier.metrics is None
    store = ArtifactStore(stale_settings.resolved_artifacts_dir())
    models = store.model_dir(queued.tenant_id, queued.classifier_id, 1)
    assert not models.exists() or not any(models.iterdir())
    # and its stop checkpoint, which no pointer names, is gone with its folder (it stayed, 95 MB
    # for a 2,000-row job, until the unrecorded sweep)
    assert not (store.resolve(job.checkpoint_dir) / "epoch-1").exists()


def test_a_claim_that_records_a_checkpoint_drops_the_earlier_claims_folders(
    queue_job: Callable[..., Any], intents_csv: Path, worker_settings: Settings, session: Session
) -> None:
    """Each claim trains in checkpoints/epoch-<E>/, and the earlier claims' folders stayed
    until the job ended: four releases (shutdowns, fair-share yields) kept four folders of two
    checkpoints, and a disk the job fits waited for space for ever."""
    queued = queue_job(intents_csv, language=NGRAM_LANGUAGE)
    for worker in range(4):
        with pytest.raises(JobInterrupted):
            run_training_job(queued.job_id, worker_settings, f"host-{worker}:1", stop_requested=lambda: True)

    job, _ = queued.reload(session)
    store = ArtifactStore(worker_settings.resolved_artifacts_dir())
    assert job.checkpoint_path is not None
    assert [p.name for p in store.resolve(job.checkpoint_dir).iterdir()] == ["epoch-4"]
    assert store.resolve(job.checkpoint_path).parent.name == "epoch-4"
    run_training_job(queued.job_id, worker_settings, "host-5:1")
    job, classifier = queued.reload(session)
    assert (job.state, classifier.status) == (JobState.SUCCEEDED, ClassifierStatus.AVAILABLE)


def test_worker_shutting_down_releases_its_lease_and_the_next_one_finishes(
    queue_job: Callable[..., Any], intents_csv: Path, worker_settings: Settings, session: Session
) -> None:
    queued = queue_job(intents_csv, language=NGRAM_LANGUAGE)

    with pytest.raises(JobInterrupted):
        run_training_job(queued.job_id, worker_settings, "host-a:1", stop_requested=lambda: True)

    job, _ = queued.reload(session)
    assert (job.state, job.lease_owner, job.failures) == (JobState.QUEUED, None, 0)
    assert job.checkpoint_step is not None and job.checkpoint_step >= 1
    run_training_job(queued.job_id, worker_settings, "host-b:2")
    job, classifier = queued.reload(session)
    assert (job.state, job.epoch, job.attempts) == (JobState.SUCCEEDED, 2, 2)
    assert classifier.status == ClassifierStatus.AVAILABLE


@pytest.mark.slow
@pytest.mark.parametrize("corrupt", ["recorded", "both kept", "both missing"])
def test_a_corrupt_checkpoint_falls_back_to_the_one_before_or_to_the_start(
    queue_job: Callable[..., Any],
    intents_csv: Path,
    settings_factory: Callable[..., Settings],
    session: Session,
    corrupt: str,
) -> None:
    settings = settings_factory(redis_url=None, learners=1, checkpoint_every_updates=4)
    queued = queue_job(intents_csv, settings)
    store = ArtifactStore(settings.resolved_artifacts_dir())

    def kept() -> list[Path]:
        return list(store.root.rglob("checkpoints/epoch-*/ckpt-*.pt"))

    with pytest.raises(JobInterrupted):  # shut down once the trainer keeps two checkpoints
        run_training_job(queued.job_id, settings, "host-a:1", stop_requested=lambda: len(kept()) >= 2)
    job, _ = queued.reload(session)
    assert job.checkpoint_path is not None and job.checkpoint_step is not None
    recorded_step = job.checkpoint_step
    recorded = store.resolve(job.checkpoint_path)
    for path in [recorded] if corrupt == "recorded" else kept():
        if corrupt == "both missing":  # a crash's, or rotated out by a worker that lost its lease
            path.unlink()  # starting over, checkpoints below the recorded step were refused
            continue
        blob = bytearray(path.read_bytes())
        blob[-100] ^= 0xFF  # a flipped bit in the payload: the checksum no longer matches
        path.write_bytes(bytes(blob))

    run_training_job(queued.job_id, settings, "host-b:2")

    job, classifier = queued.reload(session)
    assert (job.state, job.attempts, job.failures) == (JobState.SUCCEEDED, 2, 0)
    assert classifier.status == ClassifierStatus.AVAILABLE
    resumed = session.scalars(
        select(JobEvent.step).where(JobEvent.job_id == queued.job_id, JobEvent.kind == "resumed")
    ).all()
    if corrupt == "recorded":  # from the older checkpoint
        assert len(resumed) == 1 and resumed[0] is not None and 0 < resumed[0] < recorded_step
    else:  # from the start: no resume
        assert resumed == []


@pytest.mark.slow
@pytest.mark.parametrize("database_blip", [False, True], ids=["database-up", "database-blip"])
def test_a_claim_that_starts_over_points_the_job_at_its_own_checkpoints_at_once(
    queue_job: Callable[..., Any],
    intents_csv: Path,
    settings_factory: Callable[..., Settings],
    session: Session,
    monkeypatch: pytest.MonkeyPatch,
    database_blip: bool,
) -> None:
    """Training from the start below the recorded step (the recorded files gone, or unusable,
    or the training diverged and started over at a lower rate), the pointer kept naming the
    discarded checkpoint until a new one passed its step: a stop before then kept none of the
    new claim's work, and a diverged run was resumed at the rate it had diverged at. With the
    database unreachable while training, the move back is made as the claim stops."""
    settings = settings_factory(redis_url=None, learners=1, checkpoint_every_updates=4)
    queued = queue_job(intents_csv, settings)
    store = ArtifactStore(settings.resolved_artifacts_dir())

    def kept(claim: int) -> list[Path]:
        return list(store.root.rglob(f"checkpoints/epoch-{claim}/ckpt-*.pt"))

    with pytest.raises(JobInterrupted):  # stopped once it keeps two checkpoints
        run_training_job(queued.job_id, settings, "host-a:1", stop_requested=lambda: len(kept(1)) >= 2)
    job, _ = queued.reload(session)
    first_pointer = job.checkpoint_step
    assert first_pointer is not None and first_pointer >= 8
    for path in kept(1):
        path.unlink()

    unreachable = database_blip
    rewind = checkpoint_pointer.rewind_checkpoint

    def blipped(*args: Any, **kwargs: Any) -> bool:
        if unreachable:
            raise OperationalError("UPDATE training_jobs", {}, Exception("connection refused"))
        return rewind(*args, **kwargs)

    def stop_at_its_first_checkpoint() -> bool:
        nonlocal unreachable
        if kept(2):
            unreachable = False  # the database answers again as the claim stops
        return bool(kept(2))

    monkeypatch.setattr(checkpoint_pointer, "rewind_checkpoint", blipped)
    with pytest.raises(JobInterrupted):  # starts over; stopped at its first checkpoint
        run_training_job(queued.job_id, settings, "host-b:2", stop_requested=stop_at_its_first_checkpoint)

    job, _ = queued.reload(session)
    assert job.checkpoint_path is not None and job.checkpoint_step is not None
    assert job.checkpoint_step < first_pointer
    assert store.resolve(job.checkpoint_path).parent.name == "epoch-2"
    run_training_job(queued.job_id, settings, "host-c:3")
    resumed = session.scalars(
        select(JobEvent.step).where(JobEvent.job_id == queued.job_id, JobEvent.kind == "resumed")
    ).all()
    assert resumed == [job.checkpoint_step]  # the third claim resumed the second's work


def test_a_claim_that_resumes_before_a_corrupt_checkpoint_never_records_the_corrupt_one(
    queue_job: Callable[..., Any],
    intents_csv: Path,
    settings_factory: Callable[..., Settings],
    session: Session,
) -> None:
    """The trainer skips an unusable newest checkpoint and resumes from the one before, but
    leaves the file in place until its next save: the pointer, moved back to the one before,
    was moved forward to the corrupt file at the watcher's next scan, and the next save removed
    it, so the job named a checkpoint that was not there (and no new one below its step)."""
    settings = settings_factory(redis_url=None, learners=1, checkpoint_every_updates=4)
    queued = queue_job(intents_csv, settings)
    store = ArtifactStore(settings.resolved_artifacts_dir())

    def kept(claim: int) -> list[Path]:
        return list(store.root.rglob(f"checkpoints/epoch-{claim}/ckpt-*.pt"))

    with pytest.raises(JobInterrupted):  # shut down once the trainer keeps two checkpoints
        run_training_job(queued.job_id, settings, "host-a:1", stop_requested=lambda: len(kept(1)) >= 2)
    job, _ = queued.reload(session)
    assert job.checkpoint_path is not None and job.checkpoint_step is not None
    # the recorded checkpoint, some updates past the one kept before it, is found corrupt
    older = job.checkpoint_step
    corrupt = store.resolve(job.checkpoint_path).with_name(f"ckpt-{older + 20:012d}.pt")
    corrupt.write_bytes(b"not a checkpoint")
    job.checkpoint_path, job.checkpoint_step = store.relative(corrupt), older + 20
    session.commit()

    with pytest.raises(JobInterrupted):  # resumes from the one before, and stops at once
        run_training_job(queued.job_id, settings, "host-b:2", stop_requested=lambda: True)

    job, _ = queued.reload(session)
    assert job.checkpoint_path is not None and job.checkpoint_step is not None
    assert older <= job.checkpoint_step < older + 20
    pointer = store.resolve(job.checkpoint_path)
    assert pointer.parent.name == "epoch-2" and pointer.is_file()
    assert load_verified(pointer)["version"] == job.checkpoint_step


def test_a_worker_whose_store_lacks_the_dataset_says_so_to_the_operator_and_the_tenant(
    queue_job: Callable[..., Any],
    intents_csv: Path,
    settings_factory: Callable[..., Settings],
    session: Session,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    queued = queue_job(intents_csv)
    unshared = settings_factory(redis_url=None, artifacts_dir=tmp_path / "another-store")  # not the API's

    run_training_job(queued.job_id, unshared, "host-a:1")

    job, _ = queued.reload(session)
    assert (job.state, job.failures) == (JobState.QUEUED, 1)  # retried, not failed at once
    [reason] = session.scalars(
        select(JobEvent.detail).where(JobEvent.job_id == queued.job_id, JobEvent.kind == "crashed")
    ).all()
    assert reason == MISSING_DATA  # not the full-disk reason that any OSError gave
    [logged] = [
        r.getMessage() for r in caplog.records if "is not in this worker's artifact store" in r.getMessage()
    ]
    assert "share TAAS_ARTIFACTS_DIR" in logged


def test_a_full_disk_is_waited_out_without_counting_failed_attempts(
    queue_job: Callable[..., Any],
    intents_csv: Path,
    settings_factory: Callable[..., Settings],
    session: Session,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three ENOSPC attempts, a few seconds apart, used to fail a job while an operator had
    barely been paged."""
    settings = settings_factory(max_attempts=1, retry_backoff_max_seconds=0)
    queued = queue_job(intents_csv, settings, language=NGRAM_LANGUAGE)
    real_train = training_run.train

    def no_space(*args: Any, **kwargs: Any) -> Any:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as error:
            raise TrainerError("the checkpoint could not be written") from error

    monkeypatch.setattr(training_run, "train", no_space)
    for _ in range(3):
        run_training_job(queued.job_id, settings, "host-a:1")
        job, classifier = queued.reload(session)
        assert (job.state, job.failures) == (JobState.QUEUED, 0)
        assert classifier.status == ClassifierStatus.TRAINING
    details = session.scalars(
        select(JobEvent.detail).where(JobEvent.job_id == queued.job_id, JobEvent.kind == "crashed")
    ).all()
    assert details == [DISK_FULL] * 3

    monkeypatch.setattr(training_run, "train", real_train)  # space was freed
    run_training_job(queued.job_id, settings, "host-a:1")

    job, classifier = queued.reload(session)
    assert job.state == JobState.SUCCEEDED and classifier.status == ClassifierStatus.AVAILABLE


def test_a_training_that_diverged_at_every_rate_fails_at_once(
    queue_job: Callable[..., Any],
    intents_csv: Path,
    worker_settings: Settings,
    session: Session,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The trainer starts a diverging training over at lower rates itself; the job was then
    retried twice more, each attempt the same trainings of the same data."""
    queued = queue_job(intents_csv)
    attempts: list[int] = []

    def diverged(*args: Any, **kwargs: Any) -> Any:
        attempts.append(1)
        raise NonFiniteLoss(40, math.inf)

    monkeypatch.setattr(training_run, "train", diverged)
    run_training_job(queued.job_id, worker_settings, "host-a:1")

    job, classifier = queued.reload(session)
    assert (job.state, job.attempts, len(attempts)) == (JobState.FAILED, 1, 1)
    assert classifier.status_description.startswith("Training diverged (the loss became infinite or NaN)")


def test_invalid_training_data_fails_the_job_with_a_reason_the_tenant_can_read(
    queue_job: Callable[..., Any], tmp_path: Path, worker_settings: Settings, session: Session
) -> None:
    # The service validates uploads, so break the stored file after it was accepted: the
    # trainer's own validation must fail the job with a reason the tenant can act on.
    two_classes = tmp_path / "two.csv"
    two_classes.write_text("text,label\nhello there,greet\nbye now,leave\n", encoding="utf-8")
    queued = queue_job(two_classes)
    store = ArtifactStore(worker_settings.resolved_artifacts_dir())
    dataset_file = next(store.root.glob(f"tenants/{queued.tenant_id}/datasets/*.csv"))
    dataset_file.write_text("text,label\nonly one class,greet\n", encoding="utf-8")
    checkpoints = store.checkpoint_dir(queued.tenant_id, queued.classifier_id, 1)
    checkpoints.mkdir(parents=True)
    (checkpoints / "ckpt-00000100.pt").write_bytes(b"an earlier attempt's")

    run_training_job(queued.job_id, worker_settings, "host-a:1")

    job, classifier = queued.reload(session)
    assert job.state == JobState.FAILED
    assert not checkpoints.exists()  # a Failed job is never resumed: nothing to keep them for
    assert classifier.status == ClassifierStatus.FAILED
    assert classifier.status_description.startswith("Invalid training data:")
