"""The classifier row under concurrent writers: one lock order, and reading the row back.

A transaction that changes a classifier and its jobs locks the classifier before any job row
(:func:`lock_classifier`); the job state machine (:mod:`service.training.jobs`,
:mod:`service.training.leases`), the status writer (:mod:`service.training.status`) and the
catalogue's promotes and deletes all keep that order.
"""

from __future__ import annotations

from sqlalchemy import inspect, select
from sqlalchemy.exc import InvalidRequestError
from sqlalchemy.orm import Session

from service.core.db import hold_write_lock
from service.core.errors import NotFound
from service.core.models import Classifier, TrainingJob


def lock_classifier(session: Session, classifier_id: str) -> bool:
    """Lock the classifier's row for the rest of the transaction (on SQLite, the database's write
    lock); False when it is gone.

    One lock order: a transaction that changes a classifier and its jobs locks the classifier
    before any job row. A worker's finish or a tenant's cancel (job rows, then the classifier's
    status) against a version's delete (the classifier, then its job) deadlocked on PostgreSQL
    in the other order.
    """
    hold_write_lock(session)
    found = session.scalar(select(Classifier.id).where(Classifier.id == classifier_id).with_for_update())
    return found is not None


def lock_existing_classifier(session: Session, classifier_id: str) -> None:
    """:func:`lock_classifier`; when a concurrent delete removed it, roll back and raise NotFound."""
    if not lock_classifier(session, classifier_id):
        session.rollback()
        raise NotFound("classifier", classifier_id)


def lock_classifier_of(session: Session, job_id: str) -> None:
    """:func:`lock_classifier` for the classifier of job ``job_id``."""
    hold_write_lock(session)
    session.execute(
        select(Classifier.id)
        .join(TrainingJob, TrainingJob.classifier_id == Classifier.id)
        .where(TrainingJob.id == job_id)
        .with_for_update(of=Classifier)
    )


def reread(session: Session, classifier: Classifier) -> None:
    """Refresh ``classifier`` after a commit; NotFound when a concurrent delete removed it since."""
    identity = inspect(classifier).identity  # readable however expired the object is
    classifier_id = str(identity[0]) if identity else "?"
    try:
        session.refresh(classifier)
    except InvalidRequestError:
        raise NotFound("classifier", classifier_id) from None
