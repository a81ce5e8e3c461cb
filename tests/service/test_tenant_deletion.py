"""Deleting a tenant (DELETE /v1/admin/tenants/{id}): its keys stop at once, every row and file it
owns goes, another tenant's stay, and the same request finishes a deletion cut off part-way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.catalogue import tenant_deletion
from service.core.errors import Unauthorized
from service.core.models import Base, Classifier, Tenant, utcnow
from service.core.settings import Settings
from service.storage.store import ArtifactStore
from service.tenants import quotas
from tests.conftest import TenantHandle
from tests.service.helpers import store_dataset

DATASET = b"text,label\nhot today,weather\ncold rain,weather\nplay jazz,music\nplay rock,music\n"


def _rows_of(session: Session, tenant_id: str) -> dict[str, int]:
    """Rows naming the tenant, per table that has a tenant_id column."""
    session.expire_all()
    counts = {}
    for table in Base.metadata.sorted_tables:
        if "tenant_id" in table.c:
            counts[table.name] = session.scalar(
                select(func.count()).select_from(table).where(table.c.tenant_id == tenant_id)
            )
    counts["tenants"] = session.scalar(select(func.count()).where(Tenant.id == tenant_id))
    return {name: n for name, n in counts.items() if n}


def _estate(
    client: TestClient, tenant: TenantHandle, create_classifier: Callable[..., httpx.Response]
) -> None:
    """A stored dataset, a classifier trained on it, and one from an NLC upload."""
    dataset = store_dataset(client, tenant, DATASET)
    assert client.post(
        "/v1/classifiers", json={"name": "from-dataset", "dataset_id": dataset}, headers=tenant.headers
    ).is_success
    assert create_classifier(tenant).is_success


def test_deleting_a_tenant_removes_all_it_owns_and_nothing_of_another(
    client: TestClient,
    session: Session,
    settings: Settings,
    tenant_factory: Callable[..., TenantHandle],
    admin_headers: dict[str, str],
    create_classifier: Callable[..., httpx.Response],
) -> None:
    leaving, staying = tenant_factory(), tenant_factory()
    _estate(client, leaving, create_classifier)
    _estate(client, staying, create_classifier)
    staying_rows = _rows_of(session, staying.id)
    root = settings.resolved_artifacts_dir() / "tenants"
    assert (root / leaving.id).is_dir()

    reply = client.delete(f"/v1/admin/tenants/{leaving.id}", headers=admin_headers)

    assert reply.status_code == 200, reply.text
    assert reply.json() == {"tenant_id": leaving.id, "classifiers": 2, "datasets": 2}
    assert _rows_of(session, leaving.id) == {}
    assert not (root / leaving.id).exists()
    assert client.get("/v1/classifiers", headers=leaving.headers).status_code == 401
    assert _rows_of(session, staying.id) == staying_rows
    assert len(client.get("/v1/classifiers", headers=staying.headers).json()["classifiers"]) == 2
    again = client.delete(f"/v1/admin/tenants/{leaving.id}", headers=admin_headers)
    assert again.status_code == 404 and again.json()["description"] == f"tenant '{leaving.id}' not found"


def test_a_deletion_cut_off_part_way_is_finished_by_the_same_request(
    client: TestClient,
    session: Session,
    settings: Settings,
    tenant: TenantHandle,
    admin_headers: dict[str, str],
    create_classifier: Callable[..., httpx.Response],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _estate(client, tenant, create_classifier)
    real_delete = tenant_deletion.classifiers.delete_classifier
    calls = 0

    def crash_on_the_second(*args: Any, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("the API process died here")
        real_delete(*args, **kwargs)

    monkeypatch.setattr(tenant_deletion.classifiers, "delete_classifier", crash_on_the_second)
    with pytest.raises(RuntimeError):
        client.delete(f"/v1/admin/tenants/{tenant.id}", headers=admin_headers)
    assert client.get("/v1/classifiers", headers=tenant.headers).status_code == 401  # keys went first
    assert _rows_of(session, tenant.id)["classifiers"] == 1

    monkeypatch.setattr(tenant_deletion.classifiers, "delete_classifier", real_delete)
    reply = client.delete(f"/v1/admin/tenants/{tenant.id}", headers=admin_headers)

    assert reply.status_code == 200 and reply.json()["classifiers"] == 1
    assert _rows_of(session, tenant.id) == {}
    assert not (settings.resolved_artifacts_dir() / "tenants" / tenant.id).exists()


def test_a_deletion_that_fails_at_the_folder_is_finished_by_the_same_request(
    client: TestClient,
    session: Session,
    settings: Settings,
    tenant: TenantHandle,
    admin_headers: dict[str, str],
    create_classifier: Callable[..., httpx.Response],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The folder went after the row: a remote store's error (or a crash) between the two left
    the folder for good, and the repeated DELETE was a 404. The store's error is a 503 (it was a
    500) that says to delete it again."""
    _estate(client, tenant, create_classifier)

    def store_down(*_: Any) -> None:
        raise OSError("the object store is unreachable")

    with monkeypatch.context() as patched:
        patched.setattr(ArtifactStore, "delete_tenant", store_down)
        refused = client.delete(f"/v1/admin/tenants/{tenant.id}", headers=admin_headers)
    assert refused.status_code == 503 and "delete it again" in refused.json()["description"]
    assert "classifiers" not in _rows_of(session, tenant.id)  # each classifier went, the row stayed
    assert client.get("/v1/classifiers", headers=tenant.headers).status_code == 401

    assert client.delete(f"/v1/admin/tenants/{tenant.id}", headers=admin_headers).status_code == 200
    assert _rows_of(session, tenant.id) == {}
    assert not (settings.resolved_artifacts_dir() / "tenants" / tenant.id).exists()


def test_a_write_the_deletion_overtook_is_refused_as_an_unknown_key(
    client: TestClient,
    session: Session,
    settings: Settings,
    tenant: TenantHandle,
    admin_headers: dict[str, str],
) -> None:
    """An upload authenticated before the deletion went on to insert its dataset, and the
    foreign key failed it (a 500)."""
    assert client.delete(f"/v1/admin/tenants/{tenant.id}", headers=admin_headers).status_code == 200

    with pytest.raises(Unauthorized, match="the API key is unknown or revoked"):
        quotas.check_can_store_dataset(session, settings, tenant.id, size_bytes=10, rows=1)


def test_a_deletion_racing_another_of_the_same_tenant_finishes_without_an_error(
    client: TestClient,
    session: Session,
    settings: Settings,
    tenant: TenantHandle,
    admin_headers: dict[str, str],
    create_classifier: Callable[..., httpx.Response],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two deletions of one tenant at once (the dashboard and `taas tenants delete`, or a retry):
    the other took every classifier first, and the loop's next one, expired by the rollback of
    the first NotFound, was reloaded from a row that was gone: ObjectDeletedError, a 500."""
    _estate(client, tenant, create_classifier)
    real_delete = tenant_deletion.classifiers.delete_classifier
    store = ArtifactStore(settings.resolved_artifacts_dir())
    raced = False

    def the_other_deletion_goes_first(*args: Any, **kwargs: Any) -> None:
        nonlocal raced
        if not raced:
            raced = True
            for other in session.scalars(select(Classifier).where(Classifier.tenant_id == tenant.id)).all():
                real_delete(session, settings, store, other, now=utcnow(), notify=False)
        real_delete(*args, **kwargs)

    monkeypatch.setattr(tenant_deletion.classifiers, "delete_classifier", the_other_deletion_goes_first)
    reply = client.delete(f"/v1/admin/tenants/{tenant.id}", headers=admin_headers)

    assert reply.status_code == 200, reply.text
    assert _rows_of(session, tenant.id) == {}
