"""Stored training sets: validate an upload, store it once as canonical CSV, list, delete.

Nothing is left behind on failure: the canonical file is written to the store's staging
area, validated, and moved into place only together with the commit of its row.
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from service.db import hold_write_lock
from service.errors import BadRequest, Conflict, NotFound
from service.models import ClassifierVersion, Dataset, DatasetOrigin, JobState, TrainingJob
from service.store import ArtifactStore
from service.tenancy import well_formed_id
from service.training_data import InputFormat, Limits, Summary, convert, unprintable


@dataclass(frozen=True)
class StagedDataset:
    """A validated canonical CSV in the staging area, not yet stored or recorded."""

    path: Path
    summary: Summary


def stage_upload(store: ArtifactStore, upload: Path, fmt: InputFormat, limits: Limits) -> StagedDataset:
    """Validate ``upload`` into a staged canonical CSV. Raises InvalidTrainingData (nothing kept)."""
    staged = store.temp_path(".csv")
    try:
        return StagedDataset(staged, convert(upload, staged, fmt, limits))
    except BaseException:
        staged.unlink(missing_ok=True)
        raise


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
    tenant_id: str,
    name: str,
    origin: DatasetOrigin,
    now: datetime,
) -> Dataset:
    """Add the dataset row to the session (flushed, not committed); pair with :func:`commit_files`."""
    dataset = Dataset(
        tenant_id=tenant_id,
        name=name,
        origin=origin.value,
        path="",
        rows=staged.summary.rows,
        classes=staged.summary.classes,
        size_bytes=staged.summary.size_bytes,
        sha256=staged.summary.sha256,
        created_at=now,
    )
    session.add(dataset)
    session.flush()
    dataset.path = store.relative(store.dataset_path(tenant_id, dataset.id))
    session.flush()
    return dataset


def commit_files(session: Session, store: ArtifactStore, moves: list[tuple[Path, Path]]) -> None:
    """Move each staged file to its destination, then commit; on any failure undo both.

    Raises whatever failed, after rolling back and removing every staged and moved file.
    """
    try:
        for source, dest in moves:
            store.put_file(source, dest)
        session.commit()
    except BaseException:
        session.rollback()
        for path in (p for move in moves for p in move):
            with suppress(OSError):
                path.unlink(missing_ok=True)
        raise


def create_dataset(
    session: Session, store: ArtifactStore, staged: StagedDataset, *, tenant_id: str, name: str, now: datetime
) -> Dataset:
    """Store a staged upload as a tenant's dataset; commits. On failure nothing is kept."""
    try:
        dataset = add_dataset(
            session, store, staged, tenant_id=tenant_id, name=name, origin=DatasetOrigin.UPLOAD, now=now
        )
    except BaseException:
        session.rollback()
        staged.path.unlink(missing_ok=True)
        raise
    commit_files(session, store, [(staged.path, store.resolve(dataset.path))])
    return dataset


def list_datasets(session: Session, tenant_id: str) -> list[Dataset]:
    """The tenant's uploaded datasets, oldest first (those owned by a classifier are not listed)."""
    return list(
        session.scalars(
            select(Dataset)
            .where(Dataset.tenant_id == tenant_id, Dataset.origin == DatasetOrigin.UPLOAD.value)
            .order_by(Dataset.created_at, Dataset.id)
        )
    )


_MAY_TRAIN = (JobState.QUEUED.value, JobState.TRAINING.value, JobState.CANCELLED.value)


def get_dataset(session: Session, tenant_id: str, dataset_id: str) -> Dataset:
    """The tenant's dataset; NotFound if unknown or another tenant's."""
    if not well_formed_id(dataset_id):
        raise NotFound("dataset", dataset_id)
    dataset = session.scalar(select(Dataset).where(Dataset.id == dataset_id, Dataset.tenant_id == tenant_id))
    if dataset is None:
        raise NotFound("dataset", dataset_id)
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


def _lock_dataset(session: Session, dataset_id: str, *, share: bool) -> None:
    """Lock the dataset's row until the transaction ends, FOR KEY SHARE or FOR UPDATE (on
    SQLite the write lock); when a concurrent delete removed it, roll back and raise NotFound."""
    hold_write_lock(session)
    query = select(Dataset.id).where(Dataset.id == dataset_id)
    locked = query.with_for_update(read=True, key_share=True) if share else query.with_for_update()
    if session.scalar(locked) is None:
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
        .where(ClassifierVersion.dataset_id == dataset_id, TrainingJob.state.in_(_MAY_TRAIN))
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
    store.delete_file(path)
