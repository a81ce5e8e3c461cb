"""Evaluations: a trained version scored on a tenant's own test file, run as a job.

The API records an evaluation with its test rows (:func:`create_evaluation`) and sends
``taas.evaluate``; a worker claims it under a lease (:func:`claim`), answers the rows with the
version's model, renews the lease with each progress report (:func:`record_progress`) and writes
the report in the rows' place (:func:`complete`), or the reason it cannot (:func:`fail`). Every
write after the claim is a compare-and-set on the claim's ``attempt``: a worker whose lease
expired and whose evaluation another worker took writes nothing. The reconciler gives an expired
lease's evaluation back to the queue (:func:`requeue_expired`, failed after ``max_attempts``
claims) and re-sends a queued one whose message is lost (:func:`evaluations_to_send`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Update, func, or_, select, update
from sqlalchemy.orm import Session

from service.core.errors import Conflict, NotFound
from service.core.models import (
    Classifier,
    ClassifierStatus,
    ClassifierVersion,
    Evaluation,
    EvaluationState,
)

PENDING_PER_CLASSIFIER = 5  # evaluations of one classifier queued or running at once
KEPT_PER_CLASSIFIER = 50  # a classifier's newest evaluations kept; an older finished one goes
_PENDING = (EvaluationState.QUEUED.value, EvaluationState.RUNNING.value)


def create_evaluation(
    session: Session,
    classifier: Classifier,
    version: ClassifierVersion,
    *,
    name: str,
    texts: Sequence[str],
    labels: Sequence[str],
    now: datetime,
) -> Evaluation:
    """Record a queued evaluation of ``version`` on the rows ``texts[i], labels[i]`` and commit.

    Conflict when the version is not Available (nothing to score) or the classifier already has
    PENDING_PER_CLASSIFIER evaluations queued or running. Of the finished ones, the classifier
    keeps its KEPT_PER_CLASSIFIER newest.
    """
    if version.status != ClassifierStatus.AVAILABLE.value or version.model_dir is None:
        raise Conflict(
            f"version {version.number} is {version.status}: only an Available version can be evaluated"
        )
    pending = session.scalar(
        select(func.count())
        .select_from(Evaluation)
        .where(Evaluation.classifier_id == classifier.id, Evaluation.state.in_(_PENDING))
    )
    if pending and pending >= PENDING_PER_CLASSIFIER:
        raise Conflict(
            f"the classifier has {pending} evaluations queued or running (at most "
            f"{PENDING_PER_CLASSIFIER}): retry when one has ended"
        )
    evaluation = Evaluation(
        tenant_id=classifier.tenant_id,
        classifier_id=classifier.id,
        version_id=version.id,
        version=version.number,
        name=name,
        rows=len(texts),
        test_rows={"texts": list(texts), "labels": list(labels)},
        created_at=now,
        enqueued_at=now,
    )
    session.add(evaluation)
    session.flush()
    _prune(session, classifier.id)
    session.commit()
    return evaluation


def _prune(session: Session, classifier_id: str) -> None:
    """Delete the classifier's finished evaluations past its KEPT_PER_CLASSIFIER newest: a
    report is kept with its version, but a tenant scoring every night would pile them up."""
    newest = (
        select(Evaluation.id)
        .where(Evaluation.classifier_id == classifier_id)
        .order_by(Evaluation.created_at.desc(), Evaluation.id)
        .limit(KEPT_PER_CLASSIFIER)
    )
    kept = set(session.scalars(newest))
    for old in session.scalars(
        select(Evaluation).where(
            Evaluation.classifier_id == classifier_id,
            Evaluation.state.not_in(_PENDING),
            Evaluation.id.not_in(kept),
        )
    ):
        session.delete(old)


def get_evaluation(session: Session, classifier: Classifier, evaluation_id: str) -> Evaluation:
    """The classifier's evaluation ``evaluation_id``; NotFound if it has none such."""
    found = session.scalar(
        select(Evaluation).where(Evaluation.id == evaluation_id, Evaluation.classifier_id == classifier.id)
    )
    if found is None:
        raise NotFound("evaluation", evaluation_id)
    return found


def list_evaluations(
    session: Session, classifier: Classifier, version: int | None = None
) -> list[Evaluation]:
    """The classifier's evaluations (of one version if given), newest first."""
    query = select(Evaluation).where(Evaluation.classifier_id == classifier.id)
    if version is not None:
        query = query.where(Evaluation.version == version)
    return list(session.scalars(query.order_by(Evaluation.created_at.desc(), Evaluation.id)))


def delete_evaluation(session: Session, classifier: Classifier, evaluation_id: str) -> None:
    """Delete one evaluation, whatever its state (a worker running it then writes nothing)."""
    session.delete(get_evaluation(session, classifier, evaluation_id))
    session.commit()


class Claimed:
    """What a worker needs of the evaluation it claimed: the fencing ``attempt``, the version's
    model folder (store-relative), the classifier's out-of-scope rate and the test rows."""

    def __init__(self, evaluation: Evaluation, model_dir: str, rate: float | None) -> None:
        rows = evaluation.test_rows or {}
        self.id, self.attempt = evaluation.id, evaluation.attempt
        self.model_dir, self.rate = model_dir, rate
        self.texts: list[str] = list(rows.get("texts", []))
        self.labels: list[str] = list(rows.get("labels", []))


def claim(session: Session, evaluation_id: str, *, now: datetime, hold: timedelta) -> Claimed | None:
    """Take a queued evaluation (or a running one whose lease expired) for ``hold``; None when
    it is gone, finished or held by a live worker."""
    taken = _changed(
        session,
        update(Evaluation)
        .where(
            Evaluation.id == evaluation_id,
            or_(
                Evaluation.state == EvaluationState.QUEUED.value,
                (Evaluation.state == EvaluationState.RUNNING.value) & (Evaluation.lease_expires_at < now),
            ),
        )
        .values(
            state=EvaluationState.RUNNING.value,
            attempt=Evaluation.attempt + 1,
            lease_expires_at=now + hold,
            started_at=now,
            done=0,
        ),
    )
    if not taken:
        session.rollback()
        return None
    found = session.execute(
        select(Evaluation, ClassifierVersion.model_dir, Classifier.out_of_scope_rate)
        .join(ClassifierVersion, ClassifierVersion.id == Evaluation.version_id)
        .join(Classifier, Classifier.id == Evaluation.classifier_id)
        .where(Evaluation.id == evaluation_id)
    ).one_or_none()
    session.commit()
    if found is None or found.model_dir is None:
        return None  # deleted meanwhile: the cascade took the evaluation too
    return Claimed(found.Evaluation, found.model_dir, found.out_of_scope_rate)


def _changed(session: Session, statement: Update) -> bool:
    """Whether ``statement`` (a compare-and-set) changed a row."""
    return bool(session.execute(statement).rowcount)  # type: ignore[attr-defined]


def _fenced(evaluation_id: str, attempt: int) -> Update:
    return update(Evaluation).where(
        Evaluation.id == evaluation_id,
        Evaluation.attempt == attempt,
        Evaluation.state == EvaluationState.RUNNING.value,
    )


def record_progress(
    session: Session, evaluation_id: str, attempt: int, done: int, *, now: datetime, hold: timedelta
) -> bool:
    """Texts answered so far, and the lease renewed for ``hold``; False when the claim is lost
    (the evaluation was deleted, or another worker took it over): the worker stops."""
    kept = _changed(session, _fenced(evaluation_id, attempt).values(done=done, lease_expires_at=now + hold))
    session.commit()
    return kept


def complete(
    session: Session, evaluation_id: str, attempt: int, report: dict[str, Any], *, now: datetime
) -> bool:
    """Keep the report in the test rows' place; False when the claim was lost."""
    kept = _changed(
        session,
        _fenced(evaluation_id, attempt).values(
            state=EvaluationState.COMPLETED.value,
            report=report,
            done=Evaluation.rows,
            test_rows=None,
            lease_expires_at=None,
            finished_at=now,
        ),
    )
    session.commit()
    return kept


def fail(session: Session, evaluation_id: str, attempt: int, reason: str, *, now: datetime) -> bool:
    """Record why the evaluation cannot be run; its rows go. False when the claim was lost."""
    kept = _changed(
        session,
        _fenced(evaluation_id, attempt).values(
            state=EvaluationState.FAILED.value,
            error=reason,
            test_rows=None,
            lease_expires_at=None,
            finished_at=now,
        ),
    )
    session.commit()
    return kept


def mark_enqueued(session: Session, evaluation_id: str, *, now: datetime) -> None:
    """Remember that a ``taas.evaluate`` message for the evaluation was sent at ``now``."""
    session.execute(update(Evaluation).where(Evaluation.id == evaluation_id).values(enqueued_at=now))
    session.commit()


def requeue_expired(session: Session, *, now: datetime, max_attempts: int) -> dict[str, list[str]]:
    """Running evaluations whose worker stopped renewing its lease: back to the queue, or,
    after ``max_attempts`` claims, Failed. Returns the ids of each (``requeued``, ``failed``)."""
    expired = session.execute(
        select(Evaluation.id, Evaluation.attempt).where(
            Evaluation.state == EvaluationState.RUNNING.value, Evaluation.lease_expires_at < now
        )
    ).all()
    moved: dict[str, list[str]] = {"requeued": [], "failed": []}
    for row in expired:
        if row.attempt >= max_attempts:
            if fail(
                session,
                row.id,
                row.attempt,
                f"the worker running it stopped {row.attempt} times (a crash, or a model too large "
                "for it); evaluate again once the workers are healthy",
                now=now,
            ):
                moved["failed"].append(row.id)
            continue
        requeued = _changed(
            session,
            _fenced(row.id, row.attempt).values(
                state=EvaluationState.QUEUED.value, lease_expires_at=None, enqueued_at=None
            ),
        )
        session.commit()
        if requeued:
            moved["requeued"].append(row.id)
    return moved


def evaluations_to_send(
    session: Session, *, now: datetime, grace: timedelta, in_queue: Collection[str]
) -> list[str]:
    """Queued evaluations whose message is not in the queue (``in_queue``: the evaluation id
    of each message the broker holds) and was last sent more than ``grace`` ago, or never
    (given back by :func:`requeue_expired`)."""
    rows = session.execute(
        select(Evaluation.id, Evaluation.enqueued_at)
        .where(Evaluation.state == EvaluationState.QUEUED.value)
        .order_by(Evaluation.created_at)
    ).all()
    session.rollback()
    messages = Counter(in_queue)
    return [
        row.id
        for row in rows
        if not messages[row.id] and (row.enqueued_at is None or row.enqueued_at < now - grace)
    ]
