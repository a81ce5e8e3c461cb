"""Classifiers: create (rows, then the wake-up message), list, delete (cancel, rows, files),
cancel and resume their training, and read its timeline. A create, cancel or resume also sends
the message of the status event it recorded (``service.webhooks``)."""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from service import jobs, status_events, webhooks
from service.datasets import StagedDataset, add_dataset, commit_files
from service.errors import BadRequest, Conflict, NotFound
from service.models import Classifier, ClassifierStatus, Dataset, DatasetOrigin, JobEvent
from service.queue import enqueue_training
from service.settings import Settings
from service.store import ArtifactStore

log = logging.getLogger(__name__)
# The codes Watson NLC accepted, exactly as its API reference spelled them (lower case).
_LANGUAGES = ("en", "ar", "fr", "de", "it", "ja", "ko", "pt", "es")


def check_language(language: object) -> str:
    """One of the language codes NLC accepted, such as ``en`` or ``ja``; BadRequest otherwise."""
    if not isinstance(language, str) or language not in _LANGUAGES:
        raise BadRequest("language", f"must be one of NLC's language codes: {', '.join(_LANGUAGES)}")
    return language


def create_classifier(
    session: Session,
    store: ArtifactStore,
    settings: Settings,
    *,
    tenant_id: str,
    name: str,
    language: str,
    source: StagedDataset | Dataset,
    now: datetime,
    callback_url: str | None = None,
) -> Classifier:
    """Record a classifier and its queued job (and, for an upload, its own dataset) in one commit,
    then wake a worker. If the message cannot be sent the job stays queued for the reconciler.
    The status events of its training go to ``callback_url`` (already checked), if any.

    On any failure before the commit nothing is kept: no rows, no files.
    """
    moves: list[tuple[Path, Path]] = []
    try:
        if isinstance(source, StagedDataset):
            dataset = add_dataset(
                session,
                store,
                source,
                tenant_id=tenant_id,
                name=name,
                origin=DatasetOrigin.CLASSIFIER,
                now=now,
            )
            moves.append((source.path, store.resolve(dataset.path)))
        else:
            dataset = source
        classifier = Classifier(
            tenant_id=tenant_id,
            name=name,
            language=language,
            dataset_id=dataset.id,
            status=ClassifierStatus.TRAINING.value,
            status_description=jobs.TRAINING_DESCRIPTION,
            created_at=now,
            updated_at=now,
        )
        session.add(classifier)
        session.flush()
        checkpoint_dir = store.relative(store.checkpoint_dir(tenant_id, classifier.id))
        job = jobs.create_job(
            session, classifier, checkpoint_dir=checkpoint_dir, now=now, callback_url=callback_url
        )
        status_events.record_created(session, classifier, callback_url=callback_url, now=now)
    except BaseException:
        session.rollback()
        if isinstance(source, StagedDataset):
            source.path.unlink(missing_ok=True)
        raise
    commit_files(session, store, moves)
    try:
        enqueue_training(settings, job.id)
    except Exception:
        log.exception("could not enqueue job %s; it stays queued for the reconciler", job.id)
    webhooks.send_new_events(session, settings, classifier.id)
    return classifier


def list_classifiers(session: Session, tenant_id: str) -> list[Classifier]:
    """The tenant's classifiers, oldest first."""
    return list(
        session.scalars(
            select(Classifier)
            .where(Classifier.tenant_id == tenant_id)
            .order_by(Classifier.created_at, Classifier.id)
        )
    )


def get_classifier(session: Session, tenant_id: str, classifier_id: str) -> Classifier:
    """The tenant's classifier; NotFound if unknown or another tenant's."""
    found = session.scalar(
        select(Classifier).where(Classifier.id == classifier_id, Classifier.tenant_id == tenant_id)
    )
    if found is None:
        raise NotFound("classifier", classifier_id)
    return found


def delete_classifier(
    session: Session, store: ArtifactStore, classifier: Classifier, *, now: datetime
) -> None:
    """Cancel its jobs (a worker stops at its next fenced write), delete its rows (and the dataset
    it was created with), then its files."""
    jobs.cancel_jobs(session, classifier.id, now=now)
    owned = session.scalar(
        select(Dataset).where(
            Dataset.id == classifier.dataset_id, Dataset.origin == DatasetOrigin.CLASSIFIER.value
        )
    )
    session.execute(delete(Classifier).where(Classifier.id == classifier.id))
    if owned is not None:
        session.execute(delete(Dataset).where(Dataset.id == owned.id))
    session.commit()
    store.delete_classifier(classifier.tenant_id, classifier.id)
    if owned is not None:
        store.delete_file(store.resolve(owned.path))


def cancel_training(session: Session, settings: Settings, classifier: Classifier, *, now: datetime) -> None:
    """Stop the classifier's training (its worker stops within a heartbeat) and keep the last
    checkpoint for :func:`resume_training`. Conflict when it is not queued or training."""
    if not jobs.cancel_job(session, classifier.id, now=now):
        raise Conflict(f"classifier '{classifier.id}' is not training (status {classifier.status})")
    session.refresh(classifier)
    webhooks.send_new_events(session, settings, classifier.id)


def resume_training(session: Session, settings: Settings, classifier: Classifier, *, now: datetime) -> None:
    """Queue a cancelled training again; the next worker continues from its last checkpoint.

    Conflict when the classifier's training was not cancelled. If the wake-up message cannot
    be sent, the job stays queued for the reconciler.
    """
    job_id = jobs.resume_job(session, classifier.id, now=now)
    if job_id is None:
        raise Conflict(f"classifier '{classifier.id}' has no cancelled training to resume")
    session.refresh(classifier)
    try:
        enqueue_training(settings, job_id)
    except Exception:
        log.exception("could not enqueue job %s; it stays queued for the reconciler", job_id)
    webhooks.send_new_events(session, settings, classifier.id)


def training_events(session: Session, classifier: Classifier) -> list[JobEvent]:
    """The timeline of the classifier's training jobs, oldest first."""
    return jobs.job_events(session, classifier.id)
