"""Concurrent requests and worker transitions on one classifier, raced for real on both databases.

Every transaction takes its locks in one order (the tenant's row, a dataset's, the classifier's,
then job rows; on SQLite the one write lock first), so none deadlocks on PostgreSQL, none
answers 500, and none leaves half a result: a dataset row no version uses, a second deletion
event, a resumed job past the quota.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, delete, func, select
from sqlalchemy.orm import Session

from service.core.db import session_factory
from service.core.models import (
    ClassifierStatus,
    ClassifierVersion,
    Dataset,
    DatasetOrigin,
    StatusEvent,
    TrainingJob,
    utcnow,
)
from service.storage.store import ArtifactStore
from service.training import jobs, leases
from tests.conftest import TenantHandle
from tests.service.helpers import NLC_CSV, make_available, store_dataset

ROUNDS = 8


def _race(*calls: Callable[[], Any]) -> list[Any]:
    """Run ``calls`` at once (a barrier releases them together); their results in order."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - the test shows it
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def _status(reply: Any) -> Any:
    """A reply's status code; anything else (a raised exception) as it is."""
    return getattr(reply, "status_code", reply)


@pytest.fixture
def serving_with_v2_training(
    client: TestClient,
    tenant: TenantHandle,
    create_classifier: Callable[..., httpx.Response],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
) -> Callable[[], tuple[str, jobs.JobLease]]:
    """A classifier serving version 1 whose version 2 a worker holds; a new one per call."""

    def make() -> tuple[str, jobs.JobLease]:
        cid = make_available(
            session, store, tenant.id, create_classifier(tenant).json()["classifier_id"], tiny_model
        )
        files = {"training_data": (None, NLC_CSV, "text/csv")}
        assert (
            client.post(f"/v1/classifiers/{cid}/versions", files=files, headers=tenant.headers).status_code
            == 201
        )
        job_id = session.scalar(
            select(TrainingJob.id).where(TrainingJob.classifier_id == cid, TrainingJob.version == 2)
        )
        assert job_id is not None
        lease = leases.claim_job(session, job_id, "worker", now=utcnow(), lease=timedelta(seconds=60))
        assert lease is not None
        return cid, lease

    return make


@pytest.mark.parametrize("rival", ["worker finishes", "tenant cancels"])
def test_deleting_a_version_while_its_job_ends_neither_deadlocks_nor_fails(
    client: TestClient,
    tenant: TenantHandle,
    engine: Engine,
    serving_with_v2_training: Callable[[], tuple[str, jobs.JobLease]],
    rival: str,
) -> None:
    sessions = session_factory(engine)

    def finish(lease: jobs.JobLease) -> bool:
        with sessions() as worker:
            return leases.finish_job(worker, lease, model_dir="m", metrics={}, now=utcnow())

    def cancel(cid: str) -> int:
        return client.post(f"/v1/classifiers/{cid}/cancel", headers=tenant.headers).status_code

    for _ in range(ROUNDS):
        cid, lease = serving_with_v2_training()
        ending = partial(finish, lease) if rival == "worker finishes" else partial(cancel, cid)
        ended, deleted = _race(
            ending, partial(client.delete, f"/v1/classifiers/{cid}/versions/2", headers=tenant.headers)
        )

        if rival == "worker finishes":
            # version 2 is deleted (the worker's finish refused), or it serves and cannot be
            assert (ended, _status(deleted)) in [(False, 200), (True, 409)]
        else:
            assert (ended, _status(deleted)) in [(200, 200), (409, 200)]


def test_a_create_from_a_dataset_racing_its_delete_is_a_clean_404_or_409(
    client: TestClient, tenant: TenantHandle, session: Session
) -> None:
    for _ in range(ROUNDS):
        did = store_dataset(client, tenant)
        body = {"name": "c", "language": "en", "dataset_id": did}

        created, deleted = _race(
            partial(client.post, "/v1/classifiers", json=body, headers=tenant.headers),
            partial(client.delete, f"/v1/datasets/{did}", headers=tenant.headers),
        )

        # either the delete came first, or the new classifier's queued job keeps the dataset
        assert (_status(created), _status(deleted)) in [(404, 200), (200, 409)]


def test_a_classifier_deleted_while_a_version_is_added_leaves_no_dataset_behind(
    client: TestClient,
    tenant: TenantHandle,
    create_classifier: Callable[..., httpx.Response],
    session: Session,
) -> None:
    for _ in range(ROUNDS):
        cid = create_classifier(tenant).json()["classifier_id"]
        files = {"training_data": (None, NLC_CSV, "text/csv")}

        added, deleted = _race(
            partial(client.post, f"/v1/classifiers/{cid}/versions", files=files, headers=tenant.headers),
            partial(client.delete, f"/v1/classifiers/{cid}", headers=tenant.headers),
        )

        assert _status(added) in (201, 404) and _status(deleted) == 200
    session.expire_all()
    unused = session.scalar(
        select(func.count())
        .select_from(Dataset)
        .where(
            Dataset.tenant_id == tenant.id,
            Dataset.origin == DatasetOrigin.CLASSIFIER.value,
            ~select(ClassifierVersion.id).where(ClassifierVersion.dataset_id == Dataset.id).exists(),
        )
    )
    assert unused == 0


def test_a_classifier_deleted_twice_at_once_is_deleted_once(
    client: TestClient,
    tenant: TenantHandle,
    create_classifier: Callable[..., httpx.Response],
    session: Session,
) -> None:
    metadata = {"language": "en", "name": "w", "callback_url": "http://93.184.216.34/hooks/taas"}
    for _ in range(ROUNDS):
        cid = create_classifier(tenant, metadata=metadata).json()["classifier_id"]

        replies = _race(*[partial(client.delete, f"/v1/classifiers/{cid}", headers=tenant.headers)] * 2)

        assert sorted(_status(r) for r in replies) == [200, 404]
        session.expire_all()
        deletions = select(func.count()).where(
            StatusEvent.classifier_id == cid, StatusEvent.status == ClassifierStatus.NON_EXISTENT.value
        )
        assert session.scalar(deletions) == 1


def test_resuming_counts_against_the_training_jobs_quota(
    client: TestClient,
    tenant: TenantHandle,
    admin_headers: dict[str, str],
    create_classifier: Callable[..., httpx.Response],
) -> None:
    first = create_classifier(tenant).json()["classifier_id"]
    assert client.post(f"/v1/classifiers/{first}/cancel", headers=tenant.headers).status_code == 200
    client.patch(f"/v1/admin/tenants/{tenant.id}/quotas", json={"training_jobs": 1}, headers=admin_headers)
    assert create_classifier(tenant).status_code == 200  # the cancelled job does not count

    refused = client.post(f"/v1/classifiers/{first}/resume", headers=tenant.headers)

    assert refused.status_code == 403 and "training_jobs" in refused.json()["description"]


def test_two_first_quota_overrides_at_once_both_apply(
    client: TestClient, tenant_factory: Callable[..., TenantHandle], admin_headers: dict[str, str]
) -> None:
    for _ in range(ROUNDS):
        quotas = f"/v1/admin/tenants/{tenant_factory().id}/quotas"

        replies = _race(
            partial(client.patch, quotas, json={"classifiers": 5}, headers=admin_headers),
            partial(client.patch, quotas, json={"versions": 7}, headers=admin_headers),
        )

        assert [_status(r) for r in replies] == [200, 200]  # the second no longer hits the key
        overrides = client.get(quotas, headers=admin_headers).json()["overrides"]
        assert (overrides["classifiers"], overrides["versions"]) == (5, 7)


def test_two_rotations_that_revoke_the_others_leave_one_key(
    client: TestClient, tenant_factory: Callable[..., TenantHandle], admin_headers: dict[str, str]
) -> None:
    for _ in range(ROUNDS):
        tenant = tenant_factory()
        keys = f"/v1/admin/tenants/{tenant.id}/keys"

        replies = _race(
            *[partial(client.post, keys, json={"revoke_others": True}, headers=admin_headers)] * 2
        )

        issued = [r.json()["api_key"] for r in replies]
        working = [
            k for k in issued if client.get("/v1/classifiers", headers={"X-API-Key": k}).status_code == 200
        ]
        assert len(working) == 1


def test_a_promote_while_its_versions_dataset_is_deleted_serves_it_without_one(
    client: TestClient,
    tenant: TenantHandle,
    session: Session,
    engine: Engine,
    store: ArtifactStore,
    tiny_model: Path,
) -> None:
    """The promote copies the version's dataset id into the classifier: on PostgreSQL its
    foreign-key check waited on the dataset's delete, then failed (a 500). Forced here: the
    delete holds the dataset's row while the promote starts, and commits after."""
    datasets = [store_dataset(client, tenant) for _ in range(2)]
    cid = client.post(
        "/v1/classifiers", json={"name": "c", "dataset_id": datasets[0]}, headers=tenant.headers
    ).json()["classifier_id"]
    make_available(session, store, tenant.id, cid, tiny_model)
    versions = f"/v1/classifiers/{cid}/versions"
    assert client.post(versions, json={"dataset_id": datasets[1]}, headers=tenant.headers).status_code == 201
    make_available(session, store, tenant.id, cid, tiny_model, version=2)
    assert client.get(f"/v1/classifiers/{cid}", headers=tenant.headers).json()["serving_version"] == 2

    with session_factory(engine)() as deleter:
        deleter.execute(
            select(Dataset.id).where(Dataset.id == datasets[0]).with_for_update()
        )  # delete_dataset's
        promoted: list[Any] = []
        promoter = threading.Thread(
            target=lambda: promoted.append(client.post(f"{versions}/1/promote", headers=tenant.headers))
        )
        promoter.start()
        promoter.join(1.0)  # waits on the row (PostgreSQL); on SQLite on the write lock held above
        deleter.execute(delete(Dataset).where(Dataset.id == datasets[0]))
        deleter.commit()
    promoter.join(30)

    assert _status(promoted[0]) == 200, promoted
    shown = client.get(f"/v1/classifiers/{cid}", headers=tenant.headers).json()
    assert shown["serving_version"] == 1
