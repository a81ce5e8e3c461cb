"""Classifier versions (extension): train the next version while the current one serves, list
and read versions and their training curves, promote one (a rollback promotes an older one),
delete one, export one."""

from __future__ import annotations

from functools import partial

from fastapi import Path, Request
from fastapi.responses import FileResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from service.api import bodies, intake
from service.api.deps import (
    ClassifierDep,
    InvalidationsDep,
    ModelCacheDep,
    SessionDep,
    SettingsDep,
    StagingDep,
    StoreDep,
    without_db_slot,
)
from service.api.routes.bundles import BUNDLE_MEDIA_TYPE, bundle_response, still_there
from service.api.routes.classifiers import base_url
from service.api.routing import Router
from service.api.schemas import TrainingHistory, VersionFromDataset, VersionInfo, VersionList
from service.api.uploads import Upload, is_training_json, read_json, read_upload
from service.catalogue import bundles, versions
from service.core.models import Classifier, ClassifierVersion, utcnow
from service.training import job_views
from service.training.history import HISTORY_KEY

router = Router(prefix="/v1/classifiers/{classifier_id}/versions", tags=["versions"])
VersionNumber = Path(ge=1, le=2**31 - 1, description="The version number: 1, 2, …")


def _info(request: Request, session: Session, classifier: Classifier, number: int) -> VersionInfo:
    view = versions.read_versions(session, classifier, number)
    job = job_views.version_job(session, classifier.id, number)
    return VersionInfo.build(view.versions[0], view.serving_version, job, base_url(request))


@router.post("", response_model=VersionInfo, status_code=201, openapi_extra=bodies.NEW_VERSION)
async def create_version(
    request: Request,
    classifier: ClassifierDep,
    session: SessionDep,
    settings: SettingsDep,
    store: StoreDep,
    staging: StagingDep,
) -> VersionInfo:
    """Train version N+1 while the serving version keeps serving: NLC's multipart
    (``training_data``, optional ``training_metadata`` with a ``callback_url``) or JSON
    ``{"dataset_id", "callback_url"}``. It serves once Available if the classifier's ``promote``
    is ``auto``; with ``manual``, on a promote call."""
    if is_training_json(request):
        spec = VersionFromDataset.model_validate(await without_db_slot(session, read_json(request)))
        create = partial(intake.version_from_dataset, spec)
    else:
        upload = await without_db_slot(
            session,
            read_upload(request, staging, settings.max_upload_bytes, frozenset({intake.TRAINING_DATA})),
            discard=Upload.discard,
        )
        create = partial(intake.version_from_upload, upload)
    version = await run_in_threadpool(create, session, store, settings, classifier)
    return _info(request, session, classifier, version.number)


@router.get("", response_model=VersionList)
def list_versions(request: Request, classifier: ClassifierDep, session: SessionDep) -> VersionList:
    """Every version of the classifier, oldest first, with status, dataset, metrics and progress."""
    serving, found = versions.read_versions(session, classifier)
    newest = versions.version_jobs(session, classifier.id)  # after: a version's job is made with it
    url = base_url(request)
    return VersionList(
        classifier_id=classifier.id,
        serving_version=serving,
        versions=[VersionInfo.build(v, serving, newest.get(v.number), url) for v in found],
    )


@router.get("/{version}", response_model=VersionInfo)
def get_version(
    request: Request, classifier: ClassifierDep, session: SessionDep, version: int = VersionNumber
) -> VersionInfo:
    """One version."""
    return _info(request, session, classifier, version)


@router.get("/{version}/history", response_model=TrainingHistory)
def get_version_history(
    classifier: ClassifierDep, session: SessionDep, version: int = VersionNumber
) -> TrainingHistory:
    """The version's training as a time series (loss, validation accuracy, samples/s by step
    and time), for a training curve; empty before its training has reported."""
    versions.get_version(session, classifier, version)  # 404 for a version it does not have
    job = job_views.version_job(session, classifier.id, version)
    series = ((job.progress if job is not None else None) or {}).get(HISTORY_KEY)
    return TrainingHistory(
        classifier_id=classifier.id, version=version, points=series if isinstance(series, list) else []
    )


@router.post("/{version}/promote", response_model=VersionInfo)
def promote_version(
    request: Request,
    classifier: ClassifierDep,
    session: SessionDep,
    settings: SettingsDep,
    invalidations: InvalidationsDep,
    version: int = VersionNumber,
) -> VersionInfo:
    """Make an Available version the serving one, atomically, on every API replica; promoting
    an older version is a rollback. 409 unless the version is Available."""
    versions.promote(session, settings, classifier, version, now=utcnow())
    invalidations.announce(classifier.tenant_id)
    return _info(request, session, classifier, version)


@router.delete("/{version}")
def delete_version(
    classifier: ClassifierDep,
    session: SessionDep,
    settings: SettingsDep,
    store: StoreDep,
    models: ModelCacheDep,
    version: int = VersionNumber,
) -> dict[str, object]:
    """Delete a version that does not serve (its training stops); 409 for the serving one."""
    versions.delete_version(session, settings, store, classifier, version, now=utcnow())
    models.evict(classifier.id, under=store.version_dir(classifier.tenant_id, classifier.id, version))
    return {}


@router.get(
    "/{version}/bundle",
    response_class=FileResponse,
    responses={200: {"content": {BUNDLE_MEDIA_TYPE: {}}, "description": "The version's model as a bundle."}},
)
def export_version_bundle(
    classifier: ClassifierDep,
    session: SessionDep,
    store: StoreDep,
    staging: StagingDep,
    version: int = VersionNumber,
) -> FileResponse:
    """The version's model as one portable archive; 409 unless the version is Available."""
    found = versions.get_version(session, classifier, version)
    return bundle_response(
        staging,
        f"{classifier.id}-v{version}.taas",
        partial(
            bundles.export,
            store,
            classifier,
            version=found,
            still_exists=still_there(session, ClassifierVersion, found.id),
        ),
    )
