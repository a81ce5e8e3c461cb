"""NLC v1 classifiers: create, list, get, delete; change, cancel, resume and the training timeline
(extensions)."""

from __future__ import annotations

from functools import lru_cache, partial

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from service.api import bodies, intake
from service.api.deps import (
    ClassifierDep,
    InvalidationsDep,
    ModelCacheDep,
    PageDep,
    SessionDep,
    SettingsDep,
    StagingDep,
    StoreDep,
    TenantDep,
    without_db_slot,
)
from service.api.routing import Router
from service.api.schemas import (
    ClassifierChange,
    ClassifierInfo,
    ClassifierList,
    ClassifierSummary,
    CreateFromDataset,
    StatusEventInfo,
    TrainingEvent,
    TrainingEvents,
)
from service.api.uploads import Upload, is_training_json, read_json, read_upload
from service.catalogue import classifiers
from service.core.models import utcnow
from service.training import job_views, status_events

router = Router(prefix="/v1/classifiers", tags=["classifiers"])


def base_url(request: Request) -> str:
    """The service's external base URL (no trailing slash)."""
    scope = request.scope
    host = next((value for name, value in scope["headers"] if name == b"host"), None)
    server = scope.get("server")
    return _base_url(
        scope["scheme"], host, None if server is None else tuple(server), scope.get("root_path", "")
    )


@lru_cache(maxsize=256)
def _base_url(scheme: str, host: bytes | None, server: tuple[str, int] | None, root_path: str) -> str:
    # Starlette's own rules, memoised: parsing the URL anew costs a classify call ~30 µs.
    scope = {
        "type": "http",
        "scheme": scheme,
        "server": server,
        "root_path": root_path,
        "path": "/",
        "query_string": b"",
        "headers": [] if host is None else [(b"host", host)],
    }
    return str(Request(scope).base_url).rstrip("/")


@router.post("", response_model=ClassifierInfo, openapi_extra=bodies.NEW_CLASSIFIER)
async def create_classifier(
    request: Request,
    tenant: TenantDep,
    session: SessionDep,
    settings: SettingsDep,
    store: StoreDep,
    staging: StagingDep,
) -> ClassifierInfo:
    """NLC multipart create, or JSON ``{"name", "language", "dataset_id"}`` (extension); either
    may name a ``callback_url`` for status webhooks (extension)."""
    if is_training_json(request):
        spec = CreateFromDataset.model_validate(await without_db_slot(session, read_json(request)))
        create = partial(intake.classifier_from_dataset, spec)
    else:
        upload = await without_db_slot(
            session,
            read_upload(request, staging, settings.max_upload_bytes, frozenset({intake.TRAINING_DATA})),
            discard=Upload.discard,
        )
        create = partial(intake.classifier_from_upload, upload)
    classifier = await run_in_threadpool(create, session, store, settings, tenant.id)
    return ClassifierInfo.build_info(classifier, job_views.shown_job(session, classifier), base_url(request))


@router.get("", response_model=ClassifierList, response_model_exclude_unset=True)
def list_classifiers(
    request: Request, tenant: TenantDep, session: SessionDep, page: PageDep
) -> ClassifierList:
    """Every classifier of the caller's tenant, oldest first; with ``limit`` or ``offset``
    (extension) a page of them, and the paging fields."""
    found = classifiers.list_classifiers(session, tenant.id, limit=page.limit, offset=page.offset)
    shown = [ClassifierSummary.build(c, base_url(request)) for c in found.items]
    return ClassifierList(classifiers=shown, **page.reply_fields(found.total))


@router.get("/{classifier_id}", response_model=ClassifierInfo)
def get_classifier(request: Request, classifier: ClassifierDep, session: SessionDep) -> ClassifierInfo:
    """Status, training progress and (once Available) evaluation metrics."""
    return ClassifierInfo.build_info(classifier, job_views.shown_job(session, classifier), base_url(request))


@router.patch("/{classifier_id}", response_model=ClassifierInfo)
def change_classifier(
    request: Request,
    classifier: ClassifierDep,
    body: ClassifierChange,
    session: SessionDep,
    invalidations: InvalidationsDep,
) -> ClassifierInfo:
    """Change the classifier's out-of-scope rate without retraining (extension); null puts back
    the model's own. Every API replica classifies with it from the reply on. 409 for a
    multi-label classifier."""
    if "out_of_scope_rate" in body.model_fields_set:
        rate = classifiers.check_out_of_scope_rate(body.out_of_scope_rate)
        classifiers.set_out_of_scope_rate(session, classifier, rate, now=utcnow())
        invalidations.announce(classifier.tenant_id)
    return ClassifierInfo.build_info(classifier, job_views.shown_job(session, classifier), base_url(request))


@router.delete("/{classifier_id}")
def delete_classifier(
    classifier: ClassifierDep,
    session: SessionDep,
    settings: SettingsDep,
    store: StoreDep,
    models: ModelCacheDep,
    invalidations: InvalidationsDep,
) -> dict[str, object]:
    """Stop its training, delete its rows and files; NLC answers ``{}``."""
    tenant_id = classifier.tenant_id
    classifiers.delete_classifier(session, settings, store, classifier, now=utcnow())
    invalidations.announce(tenant_id)
    models.evict(classifier.id)
    return {}


@router.post("/{classifier_id}/cancel", response_model=ClassifierInfo)
def cancel_training(
    request: Request, classifier: ClassifierDep, session: SessionDep, settings: SettingsDep
) -> ClassifierInfo:
    """Stop the training within seconds and keep its last checkpoint (extension); 409 if not training."""
    classifiers.cancel_training(session, settings, classifier, now=utcnow())
    return ClassifierInfo.build_info(classifier, job_views.shown_job(session, classifier), base_url(request))


@router.post("/{classifier_id}/resume", response_model=ClassifierInfo)
def resume_training(
    request: Request, classifier: ClassifierDep, session: SessionDep, settings: SettingsDep
) -> ClassifierInfo:
    """Continue a cancelled training from its last checkpoint (extension); 409 if not cancelled."""
    classifiers.resume_training(session, settings, classifier, now=utcnow())
    return ClassifierInfo.build_info(classifier, job_views.shown_job(session, classifier), base_url(request))


@router.get("/{classifier_id}/events", response_model=TrainingEvents)
def training_events(classifier: ClassifierDep, session: SessionDep) -> TrainingEvents:
    """Every transition of the classifier's training, with time, worker and attempt, and its
    newest status events with their webhook delivery attempts (extension)."""
    found = classifiers.training_events(session, classifier)
    changes = status_events.recent_events(session, classifier.id)
    return TrainingEvents(
        classifier_id=classifier.id,
        events=[TrainingEvent.build(e) for e in found],
        status_events=[StatusEventInfo.build(e, attempts) for e, attempts in changes],
    )
