"""Stored datasets (extension): upload once, train many classifiers on it."""

from __future__ import annotations

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from service.api import bodies, intake
from service.api.dataset_report_schemas import DatasetCreated, DatasetReport
from service.api.deps import (
    DatasetDep,
    PageDep,
    SessionDep,
    SettingsDep,
    StagingDep,
    StoreDep,
    TenantDep,
    blocking_without_db_slot,
    without_db_slot,
)
from service.api.routes.classifiers import base_url
from service.api.routing import Router
from service.api.schemas import DatasetInfo, DatasetList
from service.api.uploads import Upload, read_upload
from service.catalogue import datasets

router = Router(prefix="/v1/datasets", tags=["datasets"])


@router.post("", response_model=DatasetCreated, status_code=201, openapi_extra=bodies.DATASET_UPLOAD)
async def upload_dataset(
    request: Request,
    tenant: TenantDep,
    session: SessionDep,
    settings: SettingsDep,
    store: StoreDep,
    staging: StagingDep,
    name: str | None = None,
) -> DatasetCreated:
    """CSV (header ``text,label``) or JSON Lines, as multipart or as the raw body; the reply
    adds the warnings of the dataset's report (``GET /v1/datasets/{id}/report``)."""
    upload = await without_db_slot(
        session,
        read_upload(request, staging, settings.max_upload_bytes, intake.DATASET_PARTS),
        discard=Upload.discard,
    )
    dataset = await run_in_threadpool(
        intake.dataset_from_upload, upload, session, store, settings, tenant.id, name
    )
    shown = DatasetInfo.build(dataset, base_url(request))
    return DatasetCreated(**shown.model_dump(), warnings=(dataset.report or {}).get("warnings", []))


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


@router.get("/{dataset_id}/report", response_model=DatasetReport)
def get_dataset_report(dataset: DatasetDep, session: SessionDep, store: StoreDep) -> DatasetReport:
    """What in the dataset's rows may hurt a classifier: class counts, duplicates, conflicting
    labels, confusable classes, and the warnings these call for. Computed at upload; for a
    dataset stored before reports existed, now, once."""
    report = dataset.report
    if report is None:
        report = blocking_without_db_slot(session, lambda: datasets.compute_report(store, dataset))
        datasets.save_report(session, dataset.id, report)
    return DatasetReport.model_validate(report)


@router.delete("/{dataset_id}")
def delete_dataset(dataset: DatasetDep, session: SessionDep, store: StoreDep) -> dict[str, object]:
    """Delete a dataset (409 while a classifier still trains on it)."""
    datasets.delete_dataset(session, store, dataset)
    return {}
