"""Classifiers: create (rows, then the wake-up message), list, delete (cancel, rows, files),
cancel and resume their training, read its timeline, and set their out-of-scope rate. A
create, cancel or resume also sends the message of the status event it recorded
(``service.webhooks.delivery``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from service.catalogue import versions
from service.catalogue.datasets import StagedDataset, keep_dataset, remove_unrecorded, undone_on_failure
from service.core.errors import BadRequest, Conflict, NotFound
from service.core.models import (
    Classifier,
    ClassifierMode,
    Dataset,
    JobEvent,
    Promote,
    TrainingJob,
)
from service.core.paging import Page, page_of
from service.core.settings import Settings
from service.core.text import unprintable
from service.storage.store import ArtifactStore
from service.tenants import quotas
from service.training import job_views, jobs, locks, status, status_events
from service.training.queue import wake_worker
from service.webhooks import delivery

# The codes Watson NLC accepted, exactly as its API reference spelled them (lower case).
LANGUAGES = ("en", "ar", "fr", "de", "it", "ja", "ko", "pt", "es")


def check_language(language: object, field: str = "language") -> str:
    """One of the language codes NLC accepted, such as ``en`` or ``ja``; BadRequest naming
    ``field`` otherwise."""
    if not isinstance(language, str) or language not in LANGUAGES:
        raise BadRequest(field, f"must be one of NLC's language codes: {', '.join(LANGUAGES)}")
    return language


def check_nlc_name(name: object, field: str, max_chars: int) -> str:
    """NLC's rule for a classifier's name: optional (so it may be empty), a printable string of
    at most ``max_chars``; BadRequest otherwise. An imported bundle's name follows it too, so
    every classifier can be exported and imported back."""
    if not isinstance(name, str) or len(name) > max_chars:
        raise BadRequest(field, f"must be a string of at most {max_chars} characters")
    if problem := unprintable(name):
        raise BadRequest(field, problem)
    return name


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
    promote: Promote = Promote.AUTO,
    mode: ClassifierMode = ClassifierMode.SINGLE_LABEL,
    callback_url: str | None = None,
) -> Classifier:
    """Record a classifier, its version 1 and its queued job (and, for an upload, its own
    dataset) in one commit, then wake a worker. If the message cannot be sent the job stays
    queued for the reconciler. The status events of its training go to ``callback_url``
    (already checked), if any; ``promote`` says when its later versions start serving, ``mode``
    whether it predicts one class per text or several.

    On any failure before the commit nothing is kept: no rows, no files.
    """
    with undone_on_failure(session, store, source):
        keep_dataset(session, source)
        classifier = status.add_classifier(
            session, tenant_id=tenant_id, name=name, language=language, promote=promote, mode=mode, now=now
        )
        job, dataset = versions.add_training(
            session, store, classifier, number=1, source=source, now=now, callback_url=callback_url
        )
        classifier.dataset_id = dataset.id
        session.commit()
    versions.start_training(session, settings, job)
    return classifier


def list_classifiers(
    session: Session, tenant_id: str, *, limit: int | None = None, offset: int = 0
) -> Page[Classifier]:
    """The tenant's classifiers, oldest first: ``limit`` of them from the ``offset``-th (all when
    ``limit`` is None), and how many it has."""
    query = (
        select(Classifier)
        .where(Classifier.tenant_id == tenant_id)
        .order_by(Classifier.created_at, Classifier.id)
    )
    return page_of(session, query, limit=limit, offset=offset)


def get_classifier(session: Session, tenant_id: str, classifier_id: str) -> Classifier:
    """The tenant's classifier; NotFound if unknown or another tenant's."""
    found = session.scalar(
        select(Classifier).where(Classifier.id == classifier_id, Classifier.tenant_id == tenant_id)
    )
    if found is None:
        raise NotFound("classifier", classifier_id)
    return found


def delete_classifier(
    session: Session,
    settings: Settings,
    store: ArtifactStore,
    classifier: Classifier,
    *,
    now: datetime,
    notify: bool = True,
) -> None:
    """Cancel its jobs (a worker stops at its next fenced write), delete its rows (with its
    versions and the datasets they were created with) and record the deletion's status event
    for every callback URL its versions named (each heard of the classifier until now); then
    delete its files and send the events. The classifier's delivered events go with it.
    NotFound when a concurrent delete removed it first (that one records the events).
    ``notify`` False records and sends no event (its tenant is being deleted)."""
    locks.lock_existing_classifier(session, classifier.id)
    shown = job_views.shown_job(session, classifier)
    jobs.cancel_jobs(session, classifier.id, now=now)
    owned = versions.owned_datasets(session, classifier.id)
    hooks = (
        session.scalars(  # oldest first; without one, nobody could ever read the event
            select(TrainingJob.callback_url)
            .where(TrainingJob.classifier_id == classifier.id, TrainingJob.callback_url.is_not(None))
            .group_by(TrainingJob.callback_url)
            .order_by(func.min(TrainingJob.created_at))
        ).all()
        if notify
        else []
    )
    for callback_url in hooks:
        status_events.record_deleted(
            session,
            tenant_id=classifier.tenant_id,
            classifier_id=classifier.id,
            version=shown.version if shown is not None else classifier.latest_version,
            previous=classifier.status,
            description="The classifier was deleted.",
            callback_url=callback_url,
            now=now,
        )
    # after the deletion events: each follows the last event recorded, delivered ones included
    # (forgotten first, a deletion could be dated before a change already delivered)
    status_events.forget_delivered(session, classifier.id)
    session.execute(delete(Classifier).where(Classifier.id == classifier.id))
    for dataset in owned:
        session.execute(delete(Dataset).where(Dataset.id == dataset.id))
    session.commit()
    remove_unrecorded(store, store.classifier_dir(classifier.tenant_id, classifier.id), folder=True)
    for dataset in owned:
        remove_unrecorded(store, store.resolve(dataset.path))
    if notify:
        delivery.send_new_events(session, settings, classifier.id)


def cancel_training(session: Session, settings: Settings, classifier: Classifier, *, now: datetime) -> None:
    """Stop the classifier's training (its worker stops within a heartbeat) and keep the last
    checkpoint for :func:`resume_training`. Conflict when it is not queued or training."""
    if not jobs.cancel_job(session, classifier.id, now=now):
        raise Conflict(f"classifier '{classifier.id}' is not training (status {classifier.status})")
    locks.reread(session, classifier)
    delivery.send_new_events(session, settings, classifier.id)


def resume_training(session: Session, settings: Settings, classifier: Classifier, *, now: datetime) -> None:
    """Queue the classifier's cancelled trainings again (every version's that the cancel
    stopped); the next workers continue each from its last checkpoint.

    Conflict when no training of the classifier is cancelled; QuotaExceeded when the tenant's
    training_jobs quota has no room for all of them. If a wake-up message cannot be sent, its
    job stays queued for the reconciler.
    """
    no_resume = Conflict(f"classifier '{classifier.id}' has no cancelled training to resume")
    cancelled = job_views.cancelled_jobs(session, classifier.id)
    if not cancelled:
        raise no_resume
    quotas.check_can_resume(session, settings, classifier.tenant_id, len(cancelled))
    job_ids = jobs.resume_jobs(session, classifier.id, cancelled, now=now)
    if not job_ids:  # resumed or deleted meanwhile
        raise no_resume
    locks.reread(session, classifier)
    for job_id in job_ids:
        wake_worker(settings, job_id)
    delivery.send_new_events(session, settings, classifier.id)


def training_events(session: Session, classifier: Classifier) -> list[JobEvent]:
    """The timeline of the classifier's training jobs, oldest first."""
    return job_views.job_events(session, classifier.id)


def check_out_of_scope_rate(rate: object, field: str = "out_of_scope_rate") -> float | None:
    """A share of in-scope texts to reject: a number strictly between 0 and 1, or None (the
    model's own); BadRequest naming ``field`` otherwise. 0 would turn detection off and 1 reject
    every text: neither is a rate a tenant means (NaN and the infinities fail the bounds too)."""
    if rate is None:
        return None
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate < 1:
        raise BadRequest(
            field, "must be a number strictly between 0 and 1 (0.02: 2 % of in-scope texts rejected), or null"
        )
    return float(rate)


def set_out_of_scope_rate(
    session: Session, classifier: Classifier, rate: float | None, *, now: datetime
) -> None:
    """Serve ``classifier`` with out-of-scope ``rate`` (already checked), or with each model's
    own rate (None), from its next classify call on: no retraining, since the rate only moves
    the cut on scores every model already gives. The caller announces the change to the lookup
    caches after this commit.

    Conflict for a multi-label classifier (out-of-scope detection is single-label only);
    NotFound when a concurrent delete removed it."""
    if rate is not None and classifier.mode == ClassifierMode.MULTI_LABEL.value:
        raise Conflict(
            f"classifier '{classifier.id}' is multi_label; out-of-scope detection, and so its rate,"
            " is single_label only"
        )
    changed = session.execute(
        update(Classifier)
        .where(Classifier.id == classifier.id)
        .values(out_of_scope_rate=rate, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    session.commit()
    if changed.rowcount == 0:  # type: ignore[attr-defined]
        raise NotFound("classifier", classifier.id)
    locks.reread(session, classifier)
