"""Uploads to S3 (a real moto server) hold no database lock, and an upload the database then
refuses, or S3 does not take, leaves nothing behind.

Every upload (a dataset, an NLC create, a new version, a bundle import) is stored before the
transaction that checks the tenant's quota and writes the rows. Were it sent inside that
transaction, it would hold SQLite's one write lock, which every writer shares (a worker's lease
renewal too), or on PostgreSQL the tenant's row lock, for as long as the upload takes.
"""

from __future__ import annotations

import io
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from service.core.settings import Settings
from service.storage import layout
from service.storage.s3 import S3ArtifactStore
from service.storage.store import ArtifactStore
from tests.conftest import TenantHandle
from tests.service.helpers import NLC_CSV, nlc_files, train_tiny_model
from trainer.bundle import write_bundle
from workers.reconciler import run_forever
from workers.unrecorded import sweep_unrecorded

pytestmark = pytest.mark.integration

DATASET_CSV = b"text,label\n" + b"".join(
    f"{text},{label}\n".encode() for text, label in [("is it hot", "temp"), ("will it rain", "rain")] * 3
)


@pytest.fixture
def settings(s3_node_settings: Callable[..., Settings]) -> Settings:
    """An API node whose artifact store is the bucket (the ``client`` fixture builds on these)."""
    return s3_node_settings(reconcile_every_seconds=0.1)  # the staging sweep's period


def _tenant_lock_is_free(database_url: str, tenant_id: str) -> bool:
    """Whether another connection could take, at once, the lock an upload's transaction takes
    for its quota check: SQLite's write lock, or the tenant's row on PostgreSQL."""
    if database_url.startswith("sqlite"):
        probe = sqlite3.connect(str(make_url(database_url).database), timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:  # "database is locked"
            return False
        finally:
            probe.close()
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT id FROM tenants WHERE id = :id FOR UPDATE NOWAIT"), {"id": tenant_id})
            conn.rollback()
        return True
    except OperationalError:  # lock_not_available
        return False
    finally:
        engine.dispose()


@pytest.fixture
def lock_seen_by_uploads(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> Iterator[list[bool]]:
    """Each real S3 upload first records whether the tenants' lock is free at that moment."""
    seen: list[bool] = []
    upload = S3ArtifactStore.upload

    def probing_upload(self: S3ArtifactStore, source: Path, key: str) -> None:
        seen.append(_tenant_lock_is_free(settings.database_url, key.split("/")[1]))
        upload(self, source, key)

    monkeypatch.setattr(S3ArtifactStore, "upload", probing_upload)
    yield seen


def _bundle(tmp_path: Path) -> bytes:
    out = io.BytesIO()
    write_bundle(train_tiny_model(tmp_path / "tiny"), out, about={"name": "weather", "language": "en"})
    return out.getvalue()


def _remote_keys(bucket: str, endpoint: str, prefix: str) -> list[str]:
    listing = boto3.client("s3", endpoint_url=endpoint).list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [item["Key"] for item in listing.get("Contents", [])]


def _post_dataset(client: TestClient, tenant: TenantHandle) -> httpx.Response:
    files = {"training_data": ("data.csv", DATASET_CSV, "text/csv")}
    return client.post("/v1/datasets", files=files, headers=tenant.headers)


def _import(client: TestClient, tenant: TenantHandle, bundle: bytes) -> httpx.Response:
    files = {"bundle": ("model.taas", bundle, "application/gzip")}
    return client.post("/v1/classifiers/import", files=files, headers=tenant.headers)


def test_every_upload_reaches_s3_while_no_database_lock_is_held(
    client: TestClient, tenant: TenantHandle, lock_seen_by_uploads: list[bool], tmp_path: Path
) -> None:
    assert _post_dataset(client, tenant).status_code == 201
    created = client.post("/v1/classifiers", files=nlc_files(), headers=tenant.headers)
    assert created.status_code == 200, created.text
    classifier_id = created.json()["classifier_id"]
    version = client.post(
        f"/v1/classifiers/{classifier_id}/versions",
        files={"training_data": (None, NLC_CSV, "text/csv")},
        headers=tenant.headers,
    )
    assert version.status_code == 201, version.text
    assert _import(client, tenant, _bundle(tmp_path)).status_code == 201

    # three datasets and the imported model's files, each uploaded with the lock free
    assert len(lock_seen_by_uploads) > 3
    assert all(lock_seen_by_uploads), lock_seen_by_uploads


def test_an_upload_is_kept_in_s3_only_not_on_the_api_nodes_disk(
    client: TestClient, tenant: TenantHandle, settings: Settings, s3_bucket: str, s3_endpoint: str
) -> None:
    """The API node never reads a dataset again (a worker fetches it from S3), so it keeps no copy."""
    created = _post_dataset(client, tenant)

    assert created.status_code == 201, created.text
    key = f"taas/{layout.dataset_key(tenant.id, created.json()['dataset_id'])}"
    assert _remote_keys(s3_bucket, s3_endpoint, key) == [key]
    local = settings.resolved_artifacts_dir() / layout.tenant_prefix(tenant.id)
    assert not [p for p in local.rglob("*") if p.is_file()]
    assert not [p for p in (settings.resolved_artifacts_dir() / "tmp").rglob("*") if p.is_file()]


def _quota(client: TestClient, admin: dict[str, str], tenant: TenantHandle, **changes: int) -> None:
    reply = client.patch(f"/v1/admin/tenants/{tenant.id}/quotas", json=changes, headers=admin)
    assert reply.status_code == 200, reply.text


def test_an_upload_the_quota_refuses_leaves_no_object_in_s3(
    client: TestClient,
    tenant: TenantHandle,
    admin_headers: dict[str, str],
    settings: Settings,
    s3_bucket: str,
    s3_endpoint: str,
    tmp_path: Path,
) -> None:
    _quota(client, admin_headers, tenant, dataset_bytes=10, classifiers=0)
    refused: list[Any] = [
        _post_dataset(client, tenant),
        client.post("/v1/classifiers", files=nlc_files(), headers=tenant.headers),
        _import(client, tenant, _bundle(tmp_path)),
    ]

    assert [r.status_code for r in refused] == [403, 403, 403], [r.text for r in refused]
    assert "quota 'dataset_bytes' exceeded" in refused[0].json()["description"]
    prefix = f"taas/{layout.tenant_prefix(tenant.id)}/"
    assert _remote_keys(s3_bucket, s3_endpoint, prefix) == []
    local = settings.resolved_artifacts_dir() / layout.tenant_prefix(tenant.id)
    assert not [p for p in local.rglob("*") if p.is_file()]


def test_an_upload_s3_does_not_take_is_503_naming_the_store_in_the_log_only_and_leaves_nothing(
    client: TestClient,
    tenant: TenantHandle,
    settings: Settings,
    s3_bucket: str,
    s3_endpoint: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    boto3.client("s3", endpoint_url=s3_endpoint).delete_bucket(Bucket=s3_bucket)  # S3 loses it

    reply = _post_dataset(client, tenant)

    assert reply.status_code == 503, reply.text
    description = reply.json()["description"]
    assert description.startswith("the artifact store could not store the upload; reference ")
    assert s3_bucket not in description  # the operator's bucket is not the tenant's to read
    reference = description.rsplit("reference ", 1)[1].split()[0]
    assert any(reference in r.getMessage() and s3_bucket in r.getMessage() for r in caplog.records)
    assert client.get("/v1/datasets", headers=tenant.headers).json()["datasets"] == []
    local = settings.resolved_artifacts_dir() / layout.tenant_prefix(tenant.id)
    assert not [p for p in local.rglob("*") if p.is_file()]
    assert client.get("/v1/classifiers", headers=tenant.headers).json()["classifiers"] == []


def test_an_api_node_sweeps_its_own_staging_leftovers(client: TestClient, settings: Settings) -> None:
    """No reconciler shares this node's disk, so the API process sweeps its staging area."""
    staging = settings.resolved_artifacts_dir() / "tmp"
    staging.mkdir(parents=True, exist_ok=True)
    cut_off, receiving = staging / "cut-off.csv", staging / "receiving.csv"
    for path in (cut_off, receiving):
        path.write_bytes(b"text,label\n")
    long_ago = time.time() - 2 * settings.temp_max_age_seconds
    os.utime(cut_off, (long_ago, long_ago))

    deadline = time.monotonic() + 10
    while cut_off.exists() and time.monotonic() < deadline:
        time.sleep(0.05)

    assert not cut_off.exists(), "the staging leftover of a crash was not swept"
    assert receiving.exists(), "a staging file in use was swept"


def test_the_reconciler_sweeps_what_no_row_records_in_s3_where_no_node_has_a_copy(
    client: TestClient,
    tenant: TenantHandle,
    settings: Settings,
    session: Session,
    s3_bucket: str,
    s3_endpoint: str,
) -> None:
    """An API node killed between an upload and its commit left the object in S3 only (an upload
    keeps no local copy), where a sweep of the node's own root never looked."""
    recorded = _post_dataset(client, tenant)
    assert recorded.status_code == 201, recorded.text
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    unrecorded = [
        layout.dataset_key(tenant.id, str(uuid.uuid4())),
        f"{layout.model_prefix(tenant.id, str(uuid.uuid4()), 1)}/weights.pt",
        layout.dataset_key(str(uuid.uuid4()), str(uuid.uuid4())),  # a deleted tenant's
    ]
    for key in unrecorded:
        s3.put_object(Bucket=s3_bucket, Key=f"taas/{key}", Body=b"x")
    time.sleep(2.5)  # S3 keeps whole seconds
    fresh = layout.dataset_key(tenant.id, str(uuid.uuid4()))  # its commit may be on its way
    s3.put_object(Bucket=s3_bucket, Key=f"taas/{fresh}", Body=b"x")

    swept = sweep_unrecorded(session, ArtifactStore.open(settings), max_age_seconds=1.5)

    assert swept == 3
    remaining = _remote_keys(s3_bucket, s3_endpoint, "taas/")
    assert sorted(remaining) == sorted(
        f"taas/{key}" for key in (layout.dataset_key(tenant.id, recorded.json()["dataset_id"]), fresh)
    )


def test_the_reconciler_process_sweeps_the_bucket_not_only_its_own_disk(
    settings_factory: Callable[..., Settings], tmp_path: Path, s3_bucket: str, s3_endpoint: str
) -> None:
    """``taas reconcile`` (its loop, :func:`run_forever`) on a node of its own: a deleted
    tenant's object lies in S3 only. The loop opened its node's folder without the bucket, so
    it never swept S3 at all."""
    settings = settings_factory(
        artifacts_dir=tmp_path / "reconciler-node",
        artifacts_url=f"s3://{s3_bucket}/taas",
        s3_endpoint_url=s3_endpoint,
        s3_addressing_style="path",
        temp_max_age_seconds=1.0,
        reconcile_every_seconds=0.1,
    )
    leftover = f"taas/{layout.dataset_key(str(uuid.uuid4()), str(uuid.uuid4()))}"
    boto3.client("s3", endpoint_url=s3_endpoint).put_object(Bucket=s3_bucket, Key=leftover, Body=b"x")
    time.sleep(2.5)  # S3 keeps whole seconds
    stop = threading.Event()
    reconciler = threading.Thread(target=run_forever, args=(settings, stop), daemon=True)
    reconciler.start()
    try:
        deadline = time.monotonic() + 10
        while leftover in _remote_keys(s3_bucket, s3_endpoint, "taas/") and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        reconciler.join(timeout=10)
    assert _remote_keys(s3_bucket, s3_endpoint, "taas/") == []
