"""Classifier versions: train a new version while the current one serves, list them, promote one
(a rollback is a promote of an older one) and delete one that does not serve.

Each version has its own dataset, training job, model folder and metrics
(``ClassifierVersion``); the classifier row holds the NLC view of the serving version
(:mod:`service.training.status`), so NLC clients, which know nothing of versions, see the promoted
model throughout, and classify never waits for a retrain. Every change here locks the classifier
row first (the job state machine takes the same lock), so a promote, a delete and a version
finishing its training are serialised on PostgreSQL; SQLite has one writer at a time.

A promote changes what classify serves: the caller announces the tenant
(``service.serving.invalidation``) after the commit, so every API replica drops its cached lookup.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from service.catalogue.datasets import (
    StagedDataset,
    add_dataset,
    keep_dataset,
    keep_dataset_if_there,
    remove_unrecorded,
    undone_on_failure,
)
from service.core.errors import Conflict, NotFound
from service.core.models import (
    Classifier,
    ClassifierStatus,
    ClassifierVersion,
    Dataset,
    DatasetOrigin,
    TrainingJob,
)
from service.core.settings import Settings
from service.storage.store import ArtifactStore
from service.training import job_views, jobs, locks, status, status_events
from service.training.queue import wake_worker
from service.webhooks import delivery


def add_training(
    session: Session,
    store: ArtifactStore,
    classifier: Classifier,
    *,
    number: int,
    source: StagedDataset | Dataset,
    now: datetime,
    callback_url: str | None,
) -> tuple[TrainingJob, Dataset]:
    """Add version ``number`` of ``classifier`` with its queued job, and for an upload its own
    dataset (not committed; call it inside :func:`service.catalogue.datasets.undone_on_failure`)."""
    if isinstance(source, StagedDataset):
        dataset = add_dataset(
            session, store, source, name=classifier.name, origin=DatasetOrigin.CLASSIFIER, now=now
        )
    else:
        dataset = source
    checkpoint_dir = store.relative(store.checkpoint_dir(classifier.tenant_id, classifier.id, number))
    job = jobs.create_job(
        session,
        classifier,
        version=number,
        dataset_id=dataset.id,
        checkpoint_dir=checkpoint_dir,
        now=now,
        callback_url=callback_url,
    )
    return job, dataset


def start_training(session: Session, settings: Settings, job: TrainingJob) -> None:
    """After a new training's commit: wake a worker and send its status event. If the message
    cannot be sent the job stays queued for the reconciler."""
    wake_worker(settings, job.id)
    delivery.send_new_events(session, settings, job.classifier_id)


def create_version(
    session: Session,
    store: ArtifactStore,
    settings: Settings,
    classifier: Classifier,
    *,
    source: StagedDataset | Dataset,
    now: datetime,
    callback_url: str | None = None,
) -> ClassifierVersion:
    """Train version N+1 of ``classifier`` on ``source`` (the quota was checked in this
    transaction) and wake a worker; the serving version keeps serving. While no version serves
    yet, the classifier's view moves to the new one. On any failure before the commit nothing
    is kept."""
    with undone_on_failure(session, store, source):
        keep_dataset(session, source)
        locks.lock_existing_classifier(session, classifier.id)
        numbered = session.execute(
            update(Classifier)
            .where(Classifier.id == classifier.id)
            .values(latest_version=Classifier.latest_version + 1, updated_at=now)
            .returning(Classifier.latest_version, Classifier.serving_version)
            .execution_options(synchronize_session=False)
        ).one()
        job, dataset = add_training(
            session,
            store,
            classifier,
            number=numbered.latest_version,
            source=source,
            now=now,
            callback_url=callback_url,
        )
        if numbered.serving_version is None:
            status.show_training(session, classifier.id, dataset_id=dataset.id)
        session.commit()
    start_training(session, settings, job)
    locks.reread(session, classifier)
    return get_version(session, classifier, numbered.latest_version)


class VersionsView(NamedTuple):
    """What a listing shows: the serving version's number and the versions, read together."""

    serving_version: int | None
    versions: list[ClassifierVersion]


def read_versions(session: Session, classifier: Classifier, number: int | None = None) -> VersionsView:
    """The classifier's versions, oldest first (only version ``number`` if given), with the
    number of the one serving, in ONE statement. Each statement reads one snapshot (READ
    COMMITTED), and the classifier row a route's dependency read belongs to an earlier
    transaction: a promote of 3 and a delete of 2 committed between two reads listed
    ``serving_version`` 2 beside versions without a 2, and none marked serving. NotFound when
    nothing is left: the version, or the classifier deleted since its dependency found it."""
    query = (
        select(ClassifierVersion, Classifier.serving_version)
        .join(Classifier, Classifier.id == ClassifierVersion.classifier_id)
        .where(ClassifierVersion.classifier_id == classifier.id)
        .order_by(ClassifierVersion.number)
    )
    if number is not None:
        query = query.where(ClassifierVersion.number == number)
    rows = session.execute(query).all()
    if not rows:
        raise NotFound("classifier", classifier.id) if number is None else NotFound("version", str(number))
    return VersionsView(rows[0].serving_version, [row.ClassifierVersion for row in rows])


def get_version(session: Session, classifier: Classifier, number: int) -> ClassifierVersion:
    """Version ``number`` of ``classifier``; NotFound if it has none such."""
    found = session.scalar(
        select(ClassifierVersion).where(
            ClassifierVersion.classifier_id == classifier.id, ClassifierVersion.number == number
        )
    )
    if found is None:
        raise NotFound("version", str(number))
    return found


def version_jobs(session: Session, classifier_id: str) -> dict[int, TrainingJob]:
    """The newest training job of each version of the classifier, by version number."""
    newest: dict[int, TrainingJob] = {}
    for job in session.scalars(
        select(TrainingJob).where(TrainingJob.classifier_id == classifier_id).order_by(TrainingJob.created_at)
    ):
        newest[job.version] = job
    return newest


def promote(
    session: Session, settings: Settings, classifier: Classifier, number: int, *, now: datetime
) -> Classifier:
    """Make version ``number`` the serving one, atomically: the classifier's view (status,
    model, metrics, dataset) switches in one UPDATE. Promoting an older version is a rollback.
    NotFound, or Conflict unless the version is Available. The caller announces the tenant."""
    dataset_id = session.scalar(
        select(ClassifierVersion.dataset_id).where(
            ClassifierVersion.classifier_id == classifier.id, ClassifierVersion.number == number
        )
    )
    if dataset_id is not None:  # before the classifier's lock: the order every transaction keeps
        keep_dataset_if_there(session, dataset_id)
    locks.lock_existing_classifier(session, classifier.id)
    session.refresh(classifier)
    version = get_version(session, classifier, number)  # its dataset id is still that one, or None
    if version.status != ClassifierStatus.AVAILABLE.value or not version.model_dir:
        session.rollback()
        raise Conflict(
            f"version {number} of classifier '{classifier.id}' is {version.status}; "
            "only an Available version can serve"
        )
    if classifier.serving_version == number:
        session.rollback()
        return classifier
    status.serve(session, classifier, version, now=now)
    session.commit()
    locks.reread(session, classifier)
    delivery.send_new_events(session, settings, classifier.id)
    return classifier


def delete_version(
    session: Session,
    settings: Settings,
    store: ArtifactStore,
    classifier: Classifier,
    number: int,
    *,
    now: datetime,
) -> None:
    """Delete a version that the classifier does not show: stop its training (the worker stops
    at its next fenced write), delete its job, its rows and the dataset it was created with,
    record the deletion's status event, then delete its files and send the event. NotFound;
    Conflict for the serving version (promote another one first) and, while none serves, for
    the newest (delete the classifier instead)."""
    locks.lock_existing_classifier(session, classifier.id)
    session.refresh(classifier)
    version = get_version(session, classifier, number)
    if status.shows(classifier.serving_version, classifier.latest_version, number):
        session.rollback()
        if classifier.serving_version == number:
            raise Conflict(
                f"version {number} serves classifier '{classifier.id}'; "
                "promote another version first, or delete the classifier"
            )
        raise Conflict(
            f"version {number} is the newest version of classifier '{classifier.id}' and none "
            "serves yet; delete the classifier instead"
        )
    job = job_views.version_job(session, classifier.id, number)
    model_dir = version.model_dir
    jobs.cancel_version_jobs(session, classifier.id, number, now=now)
    status_events.record_deleted(
        session,
        tenant_id=classifier.tenant_id,
        classifier_id=classifier.id,
        version=number,
        previous=version.status,
        description=f"Version {number} was deleted.",
        callback_url=None if job is None else job.callback_url,
        now=now,
    )
    owned = session.scalar(
        select(Dataset).where(
            Dataset.id == version.dataset_id, Dataset.origin == DatasetOrigin.CLASSIFIER.value
        )
    )
    session.execute(
        delete(TrainingJob).where(TrainingJob.classifier_id == classifier.id, TrainingJob.version == number)
    )
    session.execute(delete(ClassifierVersion).where(ClassifierVersion.id == version.id))
    if owned is not None:
        session.execute(delete(Dataset).where(Dataset.id == owned.id))
    session.commit()
    folder = store.version_dir(classifier.tenant_id, classifier.id, number)
    remove_unrecorded(store, folder, folder=True)
    if model_dir is not None and not store.resolve(model_dir).is_relative_to(folder):
        # a version 1 trained before versions existed: migration 0005 left its model and
        # checkpoints where they were, in the classifier's folder, and they stayed for ever
        legacy = store.classifier_dir(classifier.tenant_id, classifier.id)
        remove_unrecorded(store, legacy / "model", folder=True)
        remove_unrecorded(store, legacy / "checkpoints", folder=True)
    if owned is not None:
        remove_unrecorded(store, store.resolve(owned.path))
    delivery.send_new_events(session, settings, classifier.id)


def owned_datasets(session: Session, classifier_id: str) -> list[Dataset]:
    """The datasets that versions of the classifier were created with (uploads, not stored
    datasets that they name): they go with the classifier."""
    return list(
        session.scalars(
            select(Dataset)
            .join(ClassifierVersion, ClassifierVersion.dataset_id == Dataset.id)
            .where(
                ClassifierVersion.classifier_id == classifier_id,
                Dataset.origin == DatasetOrigin.CLASSIFIER.value,
            )
        )
    )
