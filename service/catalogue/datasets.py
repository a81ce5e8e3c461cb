"""Stored training sets: validate an upload, store it once as canonical CSV, list, delete.

Nothing is left behind on failure. An upload is validated into the store's staging area, then
stored under the id its dataset row will have, here and on the remote store (S3) when there is
one, *before* the transaction that writes the row begins: a slow upload holds no database lock
(SQLite has one for the whole database; a worker's lease renewal would wait behind it). When
that transaction does not commit (a quota, a concurrent delete, a failed write), the stored
file is removed again from both copies (:func:`undone_on_failure`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import and_, select, update
from sqlalchemy.orm import Session

from service.catalogue.dataset_report import report_of_csv
from service.catalogue.training_data import InputFormat, Limits, Summary, convert
from service.core.db import hold_write_lock
from service.core.errors import BadRequest, Conflict, NotFound, unavailable
from service.core.models import (
    MAY_TRAIN_STATES,
    ClassifierVersion,
    Dataset,
    DatasetOrigin,
    TrainingJob,
    new_id,
)
from service.core.paging import Page, page_of
from service.core.text import unprintable
from service.storage.store import ArtifactStore, read_fetched
from service.tenants.accounts import well_formed_id

log = logging.getLogger(__name__)

STORE_REFUSED = "the artifact store could not store the upload"  # a 503, its reason logged


@dataclass(frozen=True)
class StagedDataset:
    """A validated canonical CSV, stored under its dataset's id but not yet recorded: no row
    names it until :func:`add_dataset`'s transaction commits."""

    id: str
    tenant_id: str
    path: Path
    summary: Summary
    report: dict[str, Any] | None  # service.catalogue.dataset_report's, when asked for


def stage_upload(
    store: ArtifactStore,
    upload: Path,
    fmt: InputFormat,
    limits: Limits,
    *,
    tenant_id: str,
    with_report: bool = False,
) -> StagedDataset:
    """Validate ``upload`` and store it as the canonical CSV of a new dataset of ``tenant_id``
    (here and on the remote store), before any database write; ``with_report``: with its
    report (a dataset upload's; an NLC create's data is reported on when first asked). Raises
    InvalidTrainingData, or ServiceUnavailable when the store cannot take it; nothing is kept
    either way."""
    temp = store.temp_path(".csv", owner=tenant_id)
    try:
        summary = convert(upload, temp, fmt, limits)
        report = report_of_csv(temp) if with_report else None
    except OSError as exc:  # the staging folder's disk is full, say: a 500 before
        temp.unlink(missing_ok=True)
        raise unavailable(STORE_REFUSED, exc) from exc
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    dataset_id = new_id()
    dest = store.dataset_path(tenant_id, dataset_id)
    try:
        store.put_file(temp, dest)  # consumes temp; on failure nothing is stored
    except Exception as exc:
        raise unavailable(STORE_REFUSED, exc) from exc
    return StagedDataset(dataset_id, tenant_id, dest, summary, report)


@contextmanager
def undone_on_failure(
    session: Session, store: ArtifactStore, source: StagedDataset | Dataset
) -> Iterator[None]:
    """On any failure inside (a commit included): roll back, and remove a staged upload's file
    from both copies of the store."""
    try:
        yield
    except BaseException:
        session.rollback()
        if isinstance(source, StagedDataset):
            remove_unrecorded(store, source.path)
        raise


def remove_unrecorded(store: ArtifactStore, path: Path, *, folder: bool = False) -> None:
    """Delete a file (or folder) that no row names, here and on the remote: an upload whose row
    was not written, or what a committed deletion removed the rows of. A failure (S3
    unreachable) is logged, not raised: the caller is raising the error that made the file
    unwanted, or its deletion has committed already, and the reconciler's sweep removes what no
    row names (:mod:`workers.unrecorded`). Raised, a committed delete answered a 500 and skipped
    what follows it: the replicas' invalidation, this process's cached model, the webhooks."""
    try:
        store.delete_tree(path) if folder else store.delete_file(path)
    except Exception:
        log.exception("could not remove %s, which no row names; the reconciler's sweep will", path)


def check_name(name: object, field: str, max_chars: int) -> str:
    """A stripped, non-empty, printable name of at most ``max_chars``; BadRequest otherwise."""
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > max_chars:
        raise BadRequest(field, f"must be a string of 1 to {max_chars} characters")
    if problem := unprintable(name):
        raise BadRequest(field, problem)
    return name.strip()


def add_dataset(
    session: Session,
    store: ArtifactStore,
    staged: StagedDataset,
    *,
    name: str,
    origin: DatasetOrigin,
    now: datetime,
) -> Dataset:
    """Add the staged upload's dataset row to the session (flushed, not committed); call it
    inside :func:`undone_on_failure`."""
    dataset = Dataset(
        id=staged.id,
        tenant_id=staged.tenant_id,
        name=name,
        origin=origin.value,
        path=store.relative(staged.path),
        rows=staged.summary.rows,
        classes=staged.summary.classes,
        size_bytes=staged.summary.size_bytes,
        sha256=staged.summary.sha256,
        created_at=now,
        report=staged.report,
    )
    session.add(dataset)
    session.flush()
    return dataset


def create_dataset(
    session: Session, store: ArtifactStore, staged: StagedDataset, *, name: str, now: datetime
) -> Dataset:
    """Record a staged upload as its tenant's dataset; commits. On failure nothing is kept."""
    with undone_on_failure(session, store, staged):
        dataset = add_dataset(session, store, staged, name=name, origin=DatasetOrigin.UPLOAD, now=now)
        session.commit()
    return dataset


def list_datasets(
    session: Session, tenant_id: str, *, limit: int | None = None, offset: int = 0
) -> Page[Dataset]:
    """The tenant's uploaded datasets, oldest first (those owned by a classifier are not listed):
    ``limit`` of them from the ``offset``-th (all when ``limit`` is None), and how many it has."""
    query = (
        select(Dataset)
        .where(Dataset.tenant_id == tenant_id, Dataset.origin == DatasetOrigin.UPLOAD.value)
        .order_by(Dataset.created_at, Dataset.id)
    )
    return page_of(session, query, limit=limit, offset=offset)


def get_dataset(session: Session, tenant_id: str, dataset_id: str) -> Dataset:
    """The tenant's dataset; NotFound if unknown or another tenant's."""
    if not well_formed_id(dataset_id):
        raise NotFound("dataset", dataset_id)
    dataset = session.scalar(select(Dataset).where(Dataset.id == dataset_id, Dataset.tenant_id == tenant_id))
    if dataset is None:
        raise NotFound("dataset", dataset_id)
    return dataset


def compute_report(store: ArtifactStore, dataset: Dataset) -> dict[str, Any]:
    """The report of a dataset stored without one (before reports existed, or with an NLC
    create), from its file; ServiceUnavailable when the store cannot give the file. Blocking
    (about a second for the largest): run it without the request's database slot."""
    path = store.resolve(dataset.path)
    try:
        return read_fetched(store.fetch, path, report_of_csv)
    except OSError as exc:
        raise unavailable(
            f"the file of dataset '{dataset.id}' could not be read from the store", exc
        ) from exc
    finally:
        store.drop_local(path)  # read once: with a remote store, a copy here would only fill the disk


def save_report(session: Session, dataset_id: str, report: dict[str, Any]) -> None:
    """Keep a report computed by :func:`compute_report` in its dataset's row (commits); a
    dataset deleted meanwhile is no error. Two requests that both computed it store the same."""
    session.execute(update(Dataset).where(Dataset.id == dataset_id).values(report=report))
    session.commit()


def trainable_dataset(session: Session, tenant_id: str, dataset_id: str) -> Dataset:
    """The tenant's uploaded dataset that a new classifier or version may train on: NotFound as
    :func:`get_dataset`, BadRequest for the data sent with an NLC create or a version's upload.
    That belongs to its version and is deleted with it; trained on by another, it was deleted
    under that one too (which then failed, or could not resume), although a delete of the
    dataset itself is refused while a training may still need it."""
    dataset = get_dataset(session, tenant_id, dataset_id)
    if dataset.origin != DatasetOrigin.UPLOAD.value:
        raise BadRequest(
            "dataset_id",
            f"dataset {dataset_id} is the training data sent with a classifier's version and goes"
            " with that version: upload it (POST /v1/datasets) to train on it again",
        )
    return dataset


def keep_dataset(session: Session, source: StagedDataset | Dataset) -> None:
    """Keep a stored dataset that a new version will train on from being deleted until the
    transaction ends (FOR KEY SHARE, against :func:`delete_dataset`'s FOR UPDATE; on SQLite the
    write lock); a staged upload is the request's own and needs nothing. NotFound when a
    delete came first. Taken after the tenant's lock (the quota check) and before the
    classifier's: the order every transaction keeps."""
    if isinstance(source, StagedDataset):
        return
    _lock_dataset(session, source.id, share=True)


def keep_dataset_if_there(session: Session, dataset_id: str) -> None:
    """:func:`keep_dataset` for a dataset that may be gone already, which is no error: a promote
    copies its version's dataset id into the classifier, and PostgreSQL's foreign-key check of
    that write waited on a delete of the dataset, then failed (a 500)."""
    _lock_dataset(session, dataset_id, share=True, missing_ok=True)


def _lock_dataset(session: Session, dataset_id: str, *, share: bool, missing_ok: bool = False) -> None:
    """Lock the dataset's row until the transaction ends, FOR KEY SHARE or FOR UPDATE (on
    SQLite the write lock); when a concurrent delete removed it, roll back and raise NotFound
    (unless ``missing_ok``)."""
    hold_write_lock(session)
    query = select(Dataset.id).where(Dataset.id == dataset_id)
    locked = query.with_for_update(read=True, key_share=True) if share else query.with_for_update()
    if session.scalar(locked) is None and not missing_ok:
        session.rollback()
        raise NotFound("dataset", dataset_id)


def delete_dataset(session: Session, store: ArtifactStore, dataset: Dataset) -> None:
    """Delete a dataset row and file; Conflict while a version of a classifier may still train
    on it: its job queued, training, or cancelled (which the tenant may resume)."""
    dataset_id = dataset.id
    _lock_dataset(session, dataset_id, share=False)
    in_use = session.scalar(
        select(ClassifierVersion.classifier_id)
        .join(
            TrainingJob,
            and_(
                TrainingJob.classifier_id == ClassifierVersion.classifier_id,
                TrainingJob.version == ClassifierVersion.number,
            ),
        )
        .where(ClassifierVersion.dataset_id == dataset_id, TrainingJob.state.in_(MAY_TRAIN_STATES))
        .limit(1)
    )
    if in_use is not None:
        problem = (
            f"dataset '{dataset_id}' is in use by classifier '{in_use}', whose training is queued, "
            "running or cancelled (and may be resumed); delete that version or classifier first"
        )
        session.rollback()  # the locks go now, not when the request ends
        raise Conflict(problem)
    path = store.resolve(dataset.path)
    session.delete(dataset)
    session.commit()
    remove_unrecorded(store, path)
