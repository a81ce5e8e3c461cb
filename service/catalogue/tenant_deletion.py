"""Deleting a tenant and everything it owns (``DELETE /v1/admin/tenants/{id}``, `taas tenants
delete`, the dashboard's Delete button): an operator offboarding a customer, or erasing its
data on request.

In an order that makes a deletion cut off part-way (a crash, a lost connection) harmless and
the same request the way to finish it:

1. every key of the tenant is revoked, in one commit: from then on nothing of the tenant is
   reachable (on every API replica once the invalidation is announced);
2. each classifier goes as ``DELETE /v1/classifiers/{id}`` takes it, its trainings cancelled
   (a worker stops at its next fenced write), its rows and its files, but without status
   events: the tenant's receivers are not told of a deletion of the tenant itself;
3. its folder in the artifact store goes: datasets, and whatever a crash left unrecorded;
4. the tenant's row goes, and with it (ON DELETE CASCADE) its datasets, keys, status events
   and quota overrides; then the folder once more, for what a request the deletion overtook
   wrote meanwhile (the reconciler removes a tenant's folder left without its row too,
   workers/unrecorded.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from service.catalogue import classifiers
from service.catalogue.datasets import remove_unrecorded
from service.core.errors import NotFound, unavailable
from service.core.models import Classifier, Dataset, Tenant
from service.core.settings import Settings
from service.serving.invalidation import Invalidations
from service.serving.model_cache import ModelCache
from service.storage.store import ArtifactStore
from service.tenants import accounts


@dataclass(frozen=True)
class TenantDeleted:
    """What a deletion removed."""

    tenant_id: str
    classifiers: list[str]
    datasets: int  # every dataset it held, those its classifiers were created with included


def delete_tenant(
    session: Session,
    settings: Settings,
    store: ArtifactStore,
    tenant_id: str,
    *,
    now: datetime,
    invalidations: Invalidations,
    models: ModelCache,
) -> TenantDeleted:
    """Delete the tenant with every key, classifier, dataset and file (see the module's
    docstring for the order), telling the API replicas once its keys are revoked, and drop
    its classifiers from this process's ``models``. NotFound when there is no such tenant."""
    accounts.require_tenant(session, tenant_id)
    accounts.revoke_all_keys(session, tenant_id, now=now)
    invalidations.announce(tenant_id)
    datasets = session.scalar(select(func.count()).where(Dataset.tenant_id == tenant_id)) or 0
    deleted = []
    owned = session.scalars(
        select(Classifier.id).where(Classifier.tenant_id == tenant_id).order_by(Classifier.id)
    ).all()
    for classifier_id in owned:
        # each read afresh: a NotFound's rollback expires what was loaded, and reloading a
        # classifier that a concurrent deletion removed meanwhile raised ObjectDeletedError (a 500)
        classifier = session.get(Classifier, classifier_id)
        if classifier is None:  # a concurrent delete took it first
            continue
        try:
            classifiers.delete_classifier(session, settings, store, classifier, now=now, notify=False)
        except NotFound:  # ... or took it while this one waited for its lock
            continue
        models.evict(classifier_id)
        deleted.append(classifier_id)
    # the folder before the row, which stays the mark a repeated request finishes from (after
    # the row, a crash between the two left the folder, and the repeat was a 404); and again
    # after, for what a request the deletion overtook wrote meanwhile
    try:
        store.delete_tenant(tenant_id)
    except OSError as exc:  # S3 unreachable, say: the row stays, and the same request finishes
        raise unavailable(
            f"the files of tenant '{tenant_id}' could not be deleted; delete it again", exc
        ) from exc
    session.execute(delete(Tenant).where(Tenant.id == tenant_id))
    session.commit()
    remove_unrecorded(store, store.tenant_dir(tenant_id), folder=True)
    return TenantDeleted(tenant_id, deleted, datasets)
