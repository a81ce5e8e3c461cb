"""Portable model bundles (extension): export a classifier's model, import one as a new classifier."""

from __future__ import annotations

import io
from collections.abc import Callable
from functools import partial
from typing import IO, Annotated, Any, cast

from fastapi import Query, Request
from fastapi.responses import FileResponse
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from service.api import bodies
from service.api.deps import (
    ClassifierDep,
    SessionDep,
    SettingsDep,
    StagingDep,
    StoreDep,
    TenantDep,
    without_db_slot,
)
from service.api.routes.classifiers import base_url
from service.api.routing import Router
from service.api.schemas import ClassifierInfo
from service.api.uploads import RAW_BODY, Upload, read_upload
from service.catalogue import bundles
from service.core.errors import BadRequest, unavailable
from service.core.models import Classifier, ClassifierVersion, utcnow
from service.tenants.staging import Staging

router = Router(prefix="/v1/classifiers", tags=["bundles"])
BUNDLE_MEDIA_TYPE = "application/gzip"


def bundle_response(staging: Staging, filename: str, write: Callable[[IO[bytes]], None]) -> FileResponse:
    """The bundle that ``write`` writes, staged in the tenant's name and sent as a file download;
    the request's :class:`Staging` removes it once the request ends, whatever the reply did. It
    counts against the tenant's ``dataset_bytes`` quota meanwhile (403 once over: refused before
    it is written when nothing fits, removed again when it does not fit once written). The
    staging file is unbuffered, and its failures (a full disk) are a 503 saying so: they were
    reported as the model being unreadable, and the flush when the file closed raised again,
    a 500."""
    staging.check(more_to_come=True)
    path = staging.path(".taas")
    with path.open("wb", buffering=0) as out:
        write(cast(IO[bytes], _StagingFile(out)))
    staging.check()
    return FileResponse(path, media_type=BUNDLE_MEDIA_TYPE, filename=filename)


class _StagingFile(io.RawIOBase):
    """The staging file, whose failures (a write, a seek, a truncate) are a 503 rather than an
    OSError, which the export takes for a model it cannot read."""

    def __init__(self, raw: io.FileIO) -> None:
        self.raw = raw

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        return _staged(lambda: self.raw.write(data) or 0)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return _staged(lambda: self.raw.seek(offset, whence))

    def tell(self) -> int:
        return _staged(self.raw.tell)

    def truncate(self, size: int | None = None) -> int:
        return _staged(lambda: self.raw.truncate(size))


def _staged(operation: Callable[[], int]) -> int:
    try:
        return operation()
    except OSError as exc:
        raise unavailable("the bundle cannot be staged (is the disk full?)", exc) from exc


@router.get(
    "/{classifier_id}/bundle",
    response_class=FileResponse,
    responses={200: {"content": {BUNDLE_MEDIA_TYPE: {}}, "description": "The model as a bundle."}},
)
def export_bundle(
    classifier: ClassifierDep, session: SessionDep, store: StoreDep, staging: StagingDep
) -> FileResponse:
    """The serving version's model as one portable archive (``taas-model-bundle/1``); 409 unless
    Available. ``/versions/{n}/bundle`` exports any Available version."""
    exists = still_there(session, Classifier, classifier.id)
    return bundle_response(
        staging,
        f"{classifier.id}.taas",
        partial(bundles.export, store, classifier, still_exists=exists),
    )


def still_there(
    session: Session, entity: type[Classifier | ClassifierVersion], pk: str
) -> Callable[[], bool]:
    """Whether the row is still in the database, read afresh: an export asks when it could not
    read the model, which a delete committed meanwhile removes."""
    return lambda: session.scalar(select(entity.id).where(entity.id == pk)) is not None


@router.post("/import", response_model=ClassifierInfo, status_code=201, openapi_extra=bodies.BUNDLE_IMPORT)
async def import_bundle(
    request: Request,
    tenant: TenantDep,
    session: SessionDep,
    settings: SettingsDep,
    store: StoreDep,
    staging: StagingDep,
    name: Annotated[str | None, Query(description="The new classifier's name (a raw body's).")] = None,
    language: Annotated[str | None, Query(description="Its language code (a raw body's).")] = None,
) -> ClassifierInfo:
    """A new Available classifier from a bundle: multipart part ``bundle`` (with optional
    ``name`` and ``language`` fields) or the raw body; 400 naming the problem of a bad bundle."""
    upload = await without_db_slot(
        session,
        read_upload(request, staging, settings.max_upload_bytes, frozenset({bundles.BUNDLE_FIELD})),
        discard=Upload.discard,
    )
    try:
        source = upload.files.get(bundles.BUNDLE_FIELD) or upload.files.get(RAW_BODY)
        if source is None:
            raise BadRequest(
                bundles.BUNDLE_FIELD, "no bundle: send a 'bundle' part or the bundle as the body"
            )
        fields = {name: _utf8(name, value) for name, value in upload.fields.items()}
        now = utcnow()
        staged = await without_db_slot(
            session,
            run_in_threadpool(
                lambda: bundles.stage_import(
                    staging,
                    settings,
                    bundle=source,
                    name=fields.get("name", name),
                    language=fields.get("language", language),
                    now=now,
                )
            ),
            discard=partial(bundles.discard_import, store),
        )
    finally:
        upload.discard()
    classifier = await run_in_threadpool(bundles.add_import, session, store, settings, staged, now=now)
    return ClassifierInfo.build_info(classifier, None, base_url(request))


def _utf8(field: str, value: bytes) -> str:
    """A multipart field's text; 400 naming the field when it is not UTF-8 (it was stored with
    replacement characters, where a dataset's ``name`` part or a query is refused)."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(field, f"is not valid UTF-8 (byte {exc.start})") from None
