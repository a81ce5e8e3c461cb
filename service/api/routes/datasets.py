"""Stored datasets (extension): upload once, train many classifiers on it."""

from __future__ import annotations

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from service.api import bodies, intake
from service.api.deps import (
    DatasetDep,
    PageDep,
    SessionDep,
    SettingsDep,
    StagingDep,
    StoreDep,
    TenantDep,
    without_db_slot,
)
from service.api.routes.classifiers import base_url
from service.api.routing import Router
from service.api.schemas import DatasetInfo, DatasetList
from service.api.uploads import Upload, read_upload
from service.catalogue import datasets

router = Router(prefix="/v1/datasets", tags=["datasets"])


@router.post("", response_model=DatasetInfo, status_code=201, openapi_extra=bodies.DATASET_UPLOAD)
async def upload_dataset(
    request: Request,
    tenant: TenantDep,
    session: SessionDep,
    settings: SettingsDep,
    store: StoreDep,
    staging: StagingDep,
    name: str | None = None,
) -> DatasetInfo:
    """CSV (header ``text,label``) or JSON Lines, as multipart or as the raw body."""
    upload = await without_db_slot(
        session,
        read_upload(request, staging, settings.max_upload_bytes, intake.DATASET_PARTS),
        discard=Upload.discard,
    )
    dataset = await run_in_threadpool(
        intake.dataset_from_upload, upload, session, store, settings, tenant.id, name
    )
    return DatasetInfo.build(dataset, base_url(request))


@router.get("", response_model=DatasetList, response_model_exclude_unset=True)
def list_datasets(request: Request, tenant: TenantDep, session: SessionDep, page: PageDep) -> DatasetList:
    """The tenant's uploaded datasets, oldest first; with ``limit`` or ``offset`` a page of
    them, and the paging fields."""
    found = datasets.list_datasets(session, tenant.id, limit=page.limit, offset=page.offset)
    shown = [DatasetInfo.build(d, base_url(request)) for d in found.items]
    return DatasetList(datasets=shown, **page.reply_fields(found.total))


@router.get("/{dataset_id}", response_model=DatasetInfo)
def get_dataset(request: Request, dataset: DatasetDep) -> DatasetInfo:
    """One dataset."""
    return DatasetInfo.build(dataset, base_url(request))


@router.delete("/{dataset_id}")
def delete_dataset(dataset: DatasetDep, session: SessionDep, store: StoreDep) -> dict[str, object]:
    """Delete a dataset (409 while a classifier still trains on it)."""
    datasets.delete_dataset(session, store, dataset)
    return {}
