"""Per-tenant quotas: the defaults in Settings, the admin's overrides, and the checks that use them.

=================  ===========================================  ===========================
quota              counts                                       checked when
=================  ===========================================  ===========================
``classifiers``    the tenant's classifiers                     a classifier is added
``versions``       the versions of all its classifiers          a version is added (a create,
                                                                a new version, an import)
``training_jobs``  its jobs that are queued or training         a classifier or a version is
                                                                created
``dataset_bytes``  bytes of its stored canonical CSVs           a dataset is stored (either
``dataset_rows``   rows of its stored canonical CSVs            kind: upload or NLC create)
``datasets``       its stored datasets (uploads and NLC         the same
                   creates' training data)
``classify_rps``   texts classified per second (a collection's  every classify call
                   each counted; ``service.tenants.ratelimit``)
=================  ===========================================  ===========================

A check runs inside the transaction that adds the rows, after locking the tenant's row
(``SELECT … FOR NO KEY UPDATE``; on SQLite, which has no row locks, by taking the database's
write lock first: ``service.core.db.hold_write_lock``), so two concurrent creates of one tenant are
serialised and cannot both slip under a limit.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.core.errors import BadRequest, NotFound, QuotaExceeded, QuotaUsedUp, Unauthorized
from service.core.models import (
    ACTIVE_STATES,
    Classifier,
    ClassifierVersion,
    Dataset,
    TenantQuota,
    TrainingJob,
)
from service.core.settings import Settings
from service.tenants.accounts import lock_tenant, require_tenant

_MAX_VALUE = dict.fromkeys(
    ("classifiers", "versions", "training_jobs", "dataset_rows", "datasets", "classify_rps"), 2**31 - 1
)
_MAX_VALUE["dataset_bytes"] = 2**53  # BIGINT column; still exact as a JSON number


@dataclass(frozen=True)
class Quotas:
    """The quotas in force for one tenant."""

    classifiers: int
    versions: int
    training_jobs: int
    dataset_bytes: int
    dataset_rows: int
    datasets: int
    classify_rps: int


QUOTA_NAMES = tuple(f.name for f in fields(Quotas))


@dataclass(frozen=True)
class Usage:
    """What a tenant holds now, in the units of its quotas."""

    classifiers: int
    versions: int
    training_jobs: int
    dataset_bytes: int
    dataset_rows: int
    datasets: int


def defaults(settings: Settings) -> Quotas:
    """The installation's default quotas."""
    return Quotas(**{name: getattr(settings, f"quota_{name}") for name in QUOTA_NAMES})


def effective(settings: Settings, override: TenantQuota | None) -> Quotas:
    """The defaults with a tenant's non-NULL overrides applied."""
    base = asdict(defaults(settings))
    if override is not None:
        base.update({n: v for n in QUOTA_NAMES if (v := getattr(override, n)) is not None})
    return Quotas(**base)


def quotas_for(session: Session, settings: Settings, tenant_id: str) -> Quotas:
    """The quotas in force for ``tenant_id``."""
    return effective(settings, session.get(TenantQuota, tenant_id))


def overrides_for(session: Session, tenant_id: str) -> dict[str, int | None]:
    """The admin's overrides for ``tenant_id`` (None: the default applies)."""
    row = session.get(TenantQuota, tenant_id)
    return {name: getattr(row, name) if row else None for name in QUOTA_NAMES}


def usage(session: Session, tenant_id: str) -> Usage:
    """What the tenant holds now."""
    return usage_by_tenant(session, [tenant_id]).get(tenant_id, Usage(0, 0, 0, 0, 0, 0))


def usage_by_tenant(session: Session, tenant_ids: Collection[str]) -> dict[str, Usage]:
    """What each of ``tenant_ids`` that holds anything holds now: four grouped queries, however
    many tenants (the dashboard's tenant list ran four per tenant)."""

    def grouped(*columns: Any, table: Any, where: tuple[Any, ...] = ()) -> dict[str, tuple[int, ...]]:
        query = (
            select(table.tenant_id, *columns)
            .where(table.tenant_id.in_(tenant_ids), *where)
            .group_by(table.tenant_id)
        )
        return {row[0]: tuple(int(v or 0) for v in row[1:]) for row in session.execute(query)}

    classifiers = grouped(func.count(), table=Classifier)
    versions = grouped(func.count(), table=ClassifierVersion)
    jobs = grouped(func.count(), table=TrainingJob, where=(TrainingJob.state.in_(ACTIVE_STATES),))
    data = grouped(func.sum(Dataset.size_bytes), func.sum(Dataset.rows), func.count(), table=Dataset)
    holders = classifiers.keys() | versions.keys() | jobs.keys() | data.keys()
    return {
        tid: Usage(
            classifiers.get(tid, (0,))[0],
            versions.get(tid, (0,))[0],
            jobs.get(tid, (0,))[0],
            *data.get(tid, (0, 0, 0)),
        )
        for tid in holders
    }


def quotas_by_tenant(session: Session, settings: Settings, tenant_ids: Collection[str]) -> dict[str, Quotas]:
    """The quotas in force for each of ``tenant_ids`` with an override (the others':
    :func:`defaults`)."""
    overrides = select(TenantQuota).where(TenantQuota.tenant_id.in_(tenant_ids))
    return {row.tenant_id: effective(settings, row) for row in session.scalars(overrides)}


def set_overrides(
    session: Session, settings: Settings, tenant_id: str, changes: dict[str, int | None], *, now: datetime
) -> Quotas:
    """Set (an int) or clear (None) some of a tenant's overrides; commits. NotFound, BadRequest."""
    require_tenant(session, tenant_id)
    for name, value in changes.items():
        if name not in QUOTA_NAMES:
            raise BadRequest(name, f"not a quota; the quotas are {', '.join(QUOTA_NAMES)}")
        if value is not None and not 0 <= value <= _MAX_VALUE[name]:
            raise BadRequest(
                name, f"must be an integer from 0 to {_MAX_VALUE[name]}, or null for the default"
            )
    lock_tenant(session, tenant_id)  # two first overrides would both insert the row
    row = session.get(TenantQuota, tenant_id)
    if row is None:
        row = TenantQuota(tenant_id=tenant_id, updated_at=now)
        session.add(row)
    for name, value in changes.items():
        setattr(row, name, value)
    row.updated_at = now
    session.commit()
    return effective(settings, row)


def check_can_create_classifier(
    session: Session, settings: Settings, tenant_id: str, *, dataset_bytes: int = 0, dataset_rows: int = 0
) -> None:
    """Raise QuotaExceeded unless the tenant may add one classifier with one queued job (and, for
    an NLC upload, a dataset of ``dataset_bytes`` and ``dataset_rows``). Locks the tenant's row
    for the rest of the caller's transaction: call it in the transaction that adds the rows."""
    quotas, held = _locked(session, settings, tenant_id)
    _check("classifiers", quotas.classifiers, held.classifiers, 1)
    _check_training(quotas, held, dataset_bytes, dataset_rows)


def check_can_add_version(
    session: Session, settings: Settings, tenant_id: str, *, dataset_bytes: int = 0, dataset_rows: int = 0
) -> None:
    """Raise QuotaExceeded unless the tenant may add one version with one queued job to a
    classifier (and, for an upload, a dataset of this size). Locks the tenant's row, as
    :func:`check_can_create_classifier`."""
    quotas, held = _locked(session, settings, tenant_id)
    _check_training(quotas, held, dataset_bytes, dataset_rows)


def check_can_import_classifier(session: Session, settings: Settings, tenant_id: str) -> None:
    """Raise QuotaExceeded unless the tenant may add one (trained, imported) classifier. Locks
    the tenant's row, as :func:`check_can_create_classifier`."""
    quotas, held = _locked(session, settings, tenant_id)
    _check("classifiers", quotas.classifiers, held.classifiers, 1)
    _check("versions", quotas.versions, held.versions, 1)


def check_can_resume(session: Session, settings: Settings, tenant_id: str, jobs: int) -> None:
    """Raise QuotaExceeded unless the tenant may have ``jobs`` more jobs queued or training (the
    cancelled ones resumed). Locks the tenant's row, as :func:`check_can_create_classifier`."""
    quotas, held = _locked(session, settings, tenant_id)
    _check("training_jobs", quotas.training_jobs, held.training_jobs, jobs)


def check_can_store_dataset(
    session: Session, settings: Settings, tenant_id: str, *, size_bytes: int, rows: int
) -> None:
    """Raise QuotaExceeded unless the tenant may store a dataset of this size. Locks the tenant's
    row for the rest of the caller's transaction."""
    quotas, held = _locked(session, settings, tenant_id)
    _check_data(quotas, held, size_bytes, rows)


# The count quotas an upload adds one to, as the exact checks above count them
CLASSIFIER_UPLOAD = ("classifiers", "versions", "training_jobs", "datasets")
VERSION_UPLOAD = ("versions", "training_jobs", "datasets")
DATASET_UPLOAD = ("datasets",)


def check_room_for_upload(
    session: Session, settings: Settings, tenant_id: str, *, counts: tuple[str, ...]
) -> None:
    """Raise QuotaExceeded when no upload could fit, whatever its size: one of the count quotas
    ``counts`` (``CLASSIFIER_UPLOAD``, ``VERSION_UPLOAD``, ``DATASET_UPLOAD``) is reached, or
    the tenant's dataset rows or bytes are used up.

    Asked before an upload is validated (seconds of CPU for a big one): a tenant at its row
    quota paid that for every refused upload, and slowed every other tenant's requests by
    sending them in a loop. A read, ended here; the
    exact check, with the sizes, is made in the transaction that adds the rows.

    The read ends with a commit, not a rollback: a rollback expires every object in the session,
    the route's classifier among them, whose next use then read it again (a connection held
    through the validation, and a 500 for a classifier deleted meanwhile)."""
    quotas, held = quotas_for(session, settings, tenant_id), usage(session, tenant_id)
    session.commit()  # a read only; what the route's dependencies loaded stays loaded
    for quota in counts:
        _check(quota, getattr(quotas, quota), getattr(held, quota), 1)
    for quota in ("dataset_rows", "dataset_bytes"):
        if getattr(held, quota) >= getattr(quotas, quota):
            raise QuotaUsedUp(quota, getattr(quotas, quota), getattr(held, quota))


def _locked(session: Session, settings: Settings, tenant_id: str) -> tuple[Quotas, Usage]:
    try:
        lock_tenant(session, tenant_id)
    except NotFound:  # the caller's tenant was deleted since its key was checked
        raise Unauthorized("the API key is unknown or revoked") from None
    return quotas_for(session, settings, tenant_id), usage(session, tenant_id)


def _check_training(quotas: Quotas, held: Usage, dataset_bytes: int, dataset_rows: int) -> None:
    _check("versions", quotas.versions, held.versions, 1)
    _check("training_jobs", quotas.training_jobs, held.training_jobs, 1)
    if dataset_bytes or dataset_rows:
        _check_data(quotas, held, dataset_bytes, dataset_rows)


def _check_data(quotas: Quotas, held: Usage, size_bytes: int, rows: int) -> None:
    _check("dataset_bytes", quotas.dataset_bytes, held.dataset_bytes, size_bytes)
    _check("dataset_rows", quotas.dataset_rows, held.dataset_rows, rows)
    _check("datasets", quotas.datasets, held.datasets, 1)


def _check(quota: str, limit: int, held: int, adding: int) -> None:
    if held + adding > limit:
        raise QuotaExceeded(quota, limit, held, adding)
