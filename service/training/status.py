"""Every change of a classifier's or a version's status, and the rules of the classifier's view.

A version is added Training (:func:`add_version`) and its status then moves with its training
job (:func:`change`, called by the job state machine once it has won its compare-and-set); a
classifier is created Training (:func:`add_classifier`) or, imported from a bundle, Available
(:func:`imported_classifier`, :func:`add_imported`); a promote switches the version it serves
(:func:`serve`). Each change records its status event in the same transaction
(``service.training.status_events``, the webhook outbox). Nothing here commits.

A classifier row carries the NLC view (status, model, metrics) of one version: the serving one
once a version has been Available, and before that the newest one (its training is what an NLC
client waits for, :func:`show_training`). :func:`shows` and :func:`promotes_on_available` are
the rules, shared with ``service.catalogue.versions``, which promotes and deletes versions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Update, func, select, update
from sqlalchemy.orm import Session

from service.core.models import (
    Classifier,
    ClassifierMode,
    ClassifierStatus,
    ClassifierVersion,
    Promote,
    TrainingJob,
    new_id,
)
from service.training import status_events
from service.training.job_views import version_job, version_of_job

AVAILABLE_DESCRIPTION = "The classifier instance is now available and is ready to take classifier requests."
TRAINING_DESCRIPTION = (
    "The classifier instance is in its training phase, not yet ready to accept classify requests"
)
CANCELLED_DESCRIPTION = (
    "Training was cancelled; its last checkpoint is kept. POST /v1/classifiers/{id}/resume continues it."
)


def shows(serving_version: int | None, latest_version: int, number: int) -> bool:
    """Whether the classifier's view shows version ``number``."""
    if serving_version is not None:
        return number == serving_version
    return number == latest_version


def promotes_on_available(
    serving_version: int | None, newest_available: int | None, promote: str, number: int
) -> bool:
    """Whether version ``number``, just Available, starts serving: always when none serves yet,
    else with ``promote`` ``auto`` if it is newer than the serving one and than every other
    Available one (``newest_available``). An older version that finishes late never replaces
    a newer one, serving or not: after a rollback from version 3 to 1, version 2 finishing
    served, undoing the tenant's choice."""
    if serving_version is None:
        return True
    return promote == Promote.AUTO.value and number > max(serving_version, newest_available or 0)


def add_classifier(
    session: Session,
    *,
    tenant_id: str,
    name: str,
    language: str,
    promote: Promote,
    mode: ClassifierMode,
    now: datetime,
) -> Classifier:
    """Add a new classifier, Training, its version 1 to come (:func:`add_version`); flushed, so
    that it has its id, not committed."""
    shown = (ClassifierStatus.TRAINING, TRAINING_DESCRIPTION)
    classifier = _classifier(tenant_id, name, language, mode, now, *shown, promote=promote.value)
    session.add(classifier)
    session.flush()
    return classifier


def imported_classifier(
    *,
    tenant_id: str,
    name: str,
    language: str,
    mode: ClassifierMode,
    metrics: Any,
    now: datetime,
) -> Classifier:
    """A new classifier imported from a bundle, Available and serving its version 1, with the
    metrics the exporter measured; not added (:func:`add_imported` adds it once its model is
    stored)."""
    shown = (ClassifierStatus.AVAILABLE, AVAILABLE_DESCRIPTION)
    # its own id at once: its model is stored under it before the row is added
    return _classifier(
        tenant_id, name, language, mode, now, *shown, id=new_id(), serving_version=1, metrics=metrics
    )


def add_imported(session: Session, classifier: Classifier, *, now: datetime) -> None:
    """Add :func:`imported_classifier`'s ``classifier`` (its model stored in ``model_dir``) and its
    version 1, with the version's status event (not committed)."""
    session.add(classifier)
    _add_version(
        session,
        classifier,
        1,
        callback_url=None,
        now=now,
        status=classifier.status,
        status_description=classifier.status_description,
        model_dir=classifier.model_dir,
        metrics=classifier.metrics,
    )


def add_version(
    session: Session,
    classifier: Classifier,
    *,
    number: int,
    dataset_id: str | None,
    now: datetime,
    callback_url: str | None,
) -> ClassifierVersion:
    """Add version ``number`` of ``classifier``, Training on ``dataset_id``, with its status event
    for ``callback_url`` (not committed)."""
    return _add_version(
        session,
        classifier,
        number,
        callback_url=callback_url,
        now=now,
        dataset_id=dataset_id,
        status=ClassifierStatus.TRAINING.value,
        status_description=TRAINING_DESCRIPTION,
    )


def show_training(session: Session, classifier_id: str, *, dataset_id: str) -> None:
    """Move the classifier's view to its newest version, just added in training on
    ``dataset_id``: while no version serves, the view shows the newest (not committed)."""
    session.execute(
        _update_classifier(classifier_id).values(
            status=ClassifierStatus.TRAINING.value,
            status_description=TRAINING_DESCRIPTION,
            model_dir=None,
            metrics=None,
            dataset_id=dataset_id,
        )
    )


def serve(session: Session, classifier: Classifier, version: ClassifierVersion, *, now: datetime) -> None:
    """Make ``version`` (Available, checked by the caller, which holds the classifier's lock) the
    one ``classifier`` serves: the view (status, model, metrics, dataset) switches in one UPDATE,
    and replacing a serving version records the promote's status event (not committed)."""
    replaced = classifier.serving_version
    session.execute(
        _update_classifier(classifier.id).values(
            serving_version=version.number,
            status=version.status,
            status_description=version.status_description,
            model_dir=version.model_dir,
            metrics=version.metrics,
            dataset_id=version.dataset_id,
            updated_at=now,
        )
    )
    if replaced is not None:
        job = version_job(session, classifier.id, version.number)
        status_events.record_promoted(
            session,
            tenant_id=classifier.tenant_id,
            classifier_id=classifier.id,
            version=version.number,
            replaced=replaced,
            callback_url=None if job is None else job.callback_url,
            now=now,
        )


def change(
    session: Session,
    job_id: str,
    status: ClassifierStatus,
    description: str,
    now: datetime,
    **values: Any,
) -> None:
    """Set the status (and ``values``) of the job's version, and record the change, if it is one,
    as a status event for the job's callback URL (not committed). The classifier's NLC view
    follows when it shows this version (:func:`shows`), and an Available version that should
    serve is promoted (:func:`promotes_on_available`).

    The caller has just won a compare-and-set on the job, and the classifier row is locked here
    (``service.catalogue.versions`` takes the same lock to promote or delete a version), so the
    statuses read are the ones replaced."""
    row = session.execute(
        select(
            Classifier.id.label("classifier_id"),
            Classifier.tenant_id,
            Classifier.serving_version,
            Classifier.latest_version,
            Classifier.promote,
            ClassifierVersion.id.label("version_id"),
            ClassifierVersion.number,
            ClassifierVersion.status,
            ClassifierVersion.dataset_id,
            TrainingJob.callback_url,
        )
        .join(TrainingJob, TrainingJob.classifier_id == Classifier.id)
        .join(ClassifierVersion, version_of_job())
        .where(TrainingJob.id == job_id)
        .with_for_update(of=Classifier)
    ).one()
    changes = {"status": status.value, "status_description": description, "updated_at": now, **values}
    session.execute(
        update(ClassifierVersion)
        .where(ClassifierVersion.id == row.version_id)
        .values(**changes)
        .execution_options(synchronize_session=False)
    )
    promoted = status is ClassifierStatus.AVAILABLE and promotes_on_available(
        row.serving_version,
        _newest_available(session, row.classifier_id, row.number),
        row.promote,
        row.number,
    )
    if promoted:
        view = {**changes, "serving_version": row.number, "dataset_id": row.dataset_id}
        session.execute(_update_classifier(row.classifier_id).values(**view))
    elif shows(row.serving_version, row.latest_version, row.number):
        session.execute(_update_classifier(row.classifier_id).values(**changes))
    if row.status != status.value:
        status_events.record(
            session,
            tenant_id=row.tenant_id,
            classifier_id=row.classifier_id,
            version=row.number,
            previous=row.status,
            status=status.value,
            description=description,
            callback_url=row.callback_url,
            now=now,
        )
    if promoted and row.serving_version is not None:
        status_events.record_promoted(
            session,
            tenant_id=row.tenant_id,
            classifier_id=row.classifier_id,
            version=row.number,
            replaced=row.serving_version,
            callback_url=row.callback_url,
            now=now,  # recorded after the Available above (status_events.AFTER_THE_LAST)
        )


def _newest_available(session: Session, classifier_id: str, other_than: int) -> int | None:
    """The highest number among the classifier's Available versions but ``other_than``."""
    return session.scalar(
        select(func.max(ClassifierVersion.number)).where(
            ClassifierVersion.classifier_id == classifier_id,
            ClassifierVersion.status == ClassifierStatus.AVAILABLE.value,
            ClassifierVersion.number != other_than,
        )
    )


def _update_classifier(classifier_id: str) -> Update:
    return (
        update(Classifier).where(Classifier.id == classifier_id).execution_options(synchronize_session=False)
    )


def _classifier(
    tenant_id: str,
    name: str,
    language: str,
    mode: ClassifierMode,
    now: datetime,
    shown: ClassifierStatus,
    description: str,
    **view: Any,
) -> Classifier:
    return Classifier(
        tenant_id=tenant_id,
        name=name,
        language=language,
        status=shown.value,
        status_description=description,
        latest_version=1,
        mode=mode.value,
        created_at=now,
        updated_at=now,
        **view,
    )


def _add_version(
    session: Session,
    classifier: Classifier,
    number: int,
    *,
    callback_url: str | None,
    now: datetime,
    **fields: Any,
) -> ClassifierVersion:
    version = ClassifierVersion(
        classifier_id=classifier.id,
        tenant_id=classifier.tenant_id,
        number=number,
        created_at=now,
        updated_at=now,
        **fields,
    )
    session.add(version)
    status_events.record_created(session, version, callback_url=callback_url, now=now)
    return version
