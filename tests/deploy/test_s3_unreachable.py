"""An API node whose S3 store stops answering (a real moto server, and a client of it swapped
for one aimed at a closed port): every request that needs S3 is a 503 or does without it, never
a 500, and everything works again once S3 answers.

botocore's errors are no OSErrors: a cold load or a bundle export raised them past the handlers
that make a store failure a 503, and a delete raised them after its commit (a 500 for a delete
that had happened, skipping the replicas' invalidation and this node's cached model: the node
went on serving the deleted classifier).
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.core.models import ClassifierStatus, JobEvent, JobState, TrainingJob
from service.core.settings import Settings
from service.storage import layout
from service.storage.base import StoreUnavailable
from service.storage.s3 import S3ArtifactStore
from service.storage.store import ArtifactStore
from tests.conftest import REDIS_TEST_URL, TenantHandle
from tests.service.helpers import nlc_files, train_tiny_model
from trainer.bundle import write_bundle
from workers.failure_reasons import STORE_UNAVAILABLE
from workers.training_run import run_training_job
from workers.unrecorded import sweep_unrecorded

pytestmark = [pytest.mark.integration, pytest.mark.dialect_neutral]


@pytest.fixture
def settings(s3_node_settings: Callable[..., Settings]) -> Settings:
    """An API node whose artifact store is the bucket (the ``client`` fixture builds on these)."""
    return s3_node_settings()


def _free_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _closed_port_url() -> str:
    """An endpoint nothing listens on: connections are refused."""
    return f"http://127.0.0.1:{_free_port()}"


@pytest.fixture
def s3_down(client: TestClient) -> Iterator[Callable[[bool], None]]:
    """``s3_down(True)``: the API node's S3 client is aimed at a closed port (connection
    refused, one try); ``s3_down(False)``: at the real server again."""
    remote = client.app.state.store.remote  # type: ignore[attr-defined]
    assert isinstance(remote, S3ArtifactStore)
    reachable = remote.client
    unreachable = boto3.client(
        "s3", endpoint_url=_closed_port_url(), config=Config(retries={"max_attempts": 1}, connect_timeout=1)
    )

    def switch(down: bool) -> None:
        remote.client = unreachable if down else reachable

    yield switch
    switch(False)


@pytest.fixture
def imported(client: TestClient, tenant: TenantHandle, tmp_path: Path) -> str:
    """A classifier of ``tenant`` from a bundle (its model in S3 and in this node's copy)."""
    out = io.BytesIO()
    write_bundle(train_tiny_model(tmp_path / "tiny"), out, about={"name": "weather", "language": "en"})
    files = {"bundle": ("model.taas", out.getvalue(), "application/gzip")}
    reply = client.post("/v1/classifiers/import", files=files, headers=tenant.headers)
    assert reply.status_code == 201, reply.text
    return str(reply.json()["classifier_id"])


def _classify(client: TestClient, tenant: TenantHandle, classifier_id: str) -> int:
    reply = client.post(
        f"/v1/classifiers/{classifier_id}/classify", json={"text": "is it hot"}, headers=tenant.headers
    )
    return reply.status_code


def _remote_keys(bucket: str, endpoint: str, prefix: str) -> list[str]:
    listing = boto3.client("s3", endpoint_url=endpoint).list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [item["Key"] for item in listing.get("Contents", [])]


def test_a_cold_load_and_an_export_while_s3_is_unreachable_are_503s_until_it_answers(
    client: TestClient,
    tenant: TenantHandle,
    imported: str,
    settings: Settings,
    s3_down: Callable[[bool], None],
) -> None:
    store: ArtifactStore = client.app.state.store  # type: ignore[attr-defined]
    for copy in settings.resolved_artifacts_dir().rglob("model/imported"):
        store.drop_local(copy)  # the node's sweeper dropped it: a load downloads it again
    s3_down(True)

    assert _classify(client, tenant, imported) == 503
    export = client.get(f"/v1/classifiers/{imported}/bundle", headers=tenant.headers)
    assert export.status_code == 503, export.text
    assert "cannot be read; reference " in export.json()["description"]

    s3_down(False)
    assert _classify(client, tenant, imported) == 200
    assert client.get(f"/v1/classifiers/{imported}/bundle", headers=tenant.headers).status_code == 200


def test_a_delete_while_s3_is_unreachable_is_done_and_the_reconciler_sweeps_the_objects_later(
    client: TestClient,
    tenant: TenantHandle,
    imported: str,
    settings: Settings,
    session: Session,
    s3_bucket: str,
    s3_endpoint: str,
    s3_down: Callable[[bool], None],
) -> None:
    dataset = client.post(
        "/v1/datasets",
        content=b"text,label\nhot,t\ncold,t\nrain,c\n",
        headers={**tenant.headers, "Content-Type": "text/csv"},
    )
    assert dataset.status_code == 201, dataset.text
    assert _classify(client, tenant, imported) == 200  # loaded: served from memory
    s3_down(True)

    deleted = client.delete(f"/v1/classifiers/{imported}", headers=tenant.headers)
    assert deleted.status_code == 200, deleted.text
    assert _classify(client, tenant, imported) == 404, "the node still served the deleted classifier"
    assert len(client.app.state.models) == 0  # type: ignore[attr-defined]
    dataset_id = dataset.json()["dataset_id"]
    assert client.delete(f"/v1/datasets/{dataset_id}", headers=tenant.headers).status_code == 200
    local = settings.resolved_artifacts_dir() / layout.tenant_prefix(tenant.id)
    assert not [p for p in local.rglob("*") if p.is_file()], "this node's copies go at once"

    s3_down(False)
    prefix = f"taas/{layout.tenant_prefix(tenant.id)}/"
    assert _remote_keys(s3_bucket, s3_endpoint, prefix), "S3 kept what it could not be asked to delete"
    sweep_unrecorded(session, ArtifactStore.open(settings), max_age_seconds=-60)
    assert _remote_keys(s3_bucket, s3_endpoint, prefix) == []


def test_a_tenant_deletion_while_s3_is_unreachable_is_503_and_finished_by_the_same_request(
    client: TestClient,
    tenant: TenantHandle,
    imported: str,
    admin_headers: dict[str, str],
    s3_bucket: str,
    s3_endpoint: str,
    s3_down: Callable[[bool], None],
) -> None:
    s3_down(True)
    refused = client.delete(f"/v1/admin/tenants/{tenant.id}", headers=admin_headers)
    assert refused.status_code == 503, refused.text
    assert "delete it again" in refused.json()["description"]

    s3_down(False)
    done = client.delete(f"/v1/admin/tenants/{tenant.id}", headers=admin_headers)
    assert done.status_code == 200, done.text
    assert _remote_keys(s3_bucket, s3_endpoint, f"taas/{layout.tenant_prefix(tenant.id)}/") == []


def test_a_worker_waits_out_an_unreachable_store_without_counting_failed_attempts(
    client: TestClient, tenant: TenantHandle, settings: Settings, session: Session, tmp_path: Path
) -> None:
    """A job whose worker node could not reach S3 for a few seconds used to be Failed after
    its attempts ran out (three, a few seconds apart), with a reason naming the disk."""
    created = client.post("/v1/classifiers", files=nlc_files(), headers=tenant.headers)
    assert created.status_code == 200, created.text
    classifier_id = created.json()["classifier_id"]
    job_id = session.scalar(select(TrainingJob.id).where(TrainingJob.classifier_id == classifier_id))
    assert job_id is not None
    worker = settings.model_copy(
        update={"artifacts_dir": tmp_path / "worker", "max_attempts": 1, "retry_backoff_max_seconds": 0}
    )

    run_training_job(job_id, worker.model_copy(update={"s3_endpoint_url": _closed_port_url()}), "node-a:1")

    job = session.get(TrainingJob, job_id)
    assert job is not None and (job.state, job.failures) == (JobState.QUEUED.value, 0)
    crashed = select(JobEvent.detail).where(JobEvent.job_id == job_id, JobEvent.kind == "crashed")
    assert session.scalars(crashed).all() == [STORE_UNAVAILABLE]
    session.rollback()

    run_training_job(job_id, worker, "node-a:1")  # S3 answers again
    reply = client.get(f"/v1/classifiers/{classifier_id}", headers=tenant.headers)
    assert reply.json()["status"] == ClassifierStatus.AVAILABLE.value


def test_a_job_done_while_s3_stops_answering_is_done_and_its_worker_drops_its_copies(
    client: TestClient,
    tenant: TenantHandle,
    settings: Settings,
    session: Session,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S3 failing as the worker deleted a finished job's checkpoints reached the attempt's
    error handling: "tries again" in the log for a job that had succeeded, and this node's
    copies of its dataset and model were not dropped."""
    created = client.post("/v1/classifiers", files=nlc_files(), headers=tenant.headers)
    classifier_id = created.json()["classifier_id"]
    job_id = session.scalar(select(TrainingJob.id).where(TrainingJob.classifier_id == classifier_id))
    assert job_id is not None
    worker = settings.model_copy(update={"artifacts_dir": tmp_path / "worker"})

    def unanswered(*_: object, **__: object) -> None:
        raise StoreUnavailable("artifact store s3://taas/taas: connection refused")

    monkeypatch.setattr(ArtifactStore, "delete_tree", unanswered)  # only the clean-up deletes trees
    run_training_job(job_id, worker, "node-a:1")

    job = session.get(TrainingJob, job_id)
    assert job is not None and job.state == JobState.SUCCEEDED.value
    assert session.scalars(select(JobEvent.kind).where(JobEvent.job_id == job_id)).all()[-1] == "done"
    leftovers = [p for p in (tmp_path / "worker" / "tenants").rglob("*") if p.is_file()]
    assert not [p for p in leftovers if "checkpoints" not in p.parts], leftovers


@pytest.mark.parametrize("command", ["api", "worker", "reconcile"])
@pytest.mark.parametrize(
    ("url", "endpoint", "named"),
    [
        (
            "s3://absent-bucket/taas",
            None,
            "there is no such bucket (create it, or correct TAAS_ARTIFACTS_URL)",
        ),
        ("s3://taas/taas", "closed", "Could not connect to the endpoint URL"),
    ],
)
def test_the_processes_refuse_a_store_they_cannot_reach_in_one_line(
    tmp_path: Path,
    s3_endpoint: str,
    aws_env: dict[str, str],
    command: str,
    url: str,
    endpoint: str | None,
    named: str,
) -> None:
    """They started as if all were well, and a wrong bucket or endpoint showed only as a 503 per
    upload or jobs waiting for the store."""
    taas = str(Path(sys.executable).with_name("taas"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAAS_")}
    env.update(
        TAAS_DATA_DIR=str(tmp_path / "var"),
        TAAS_ADMIN_KEY="k" * 32,
        TAAS_REDIS_URL=REDIS_TEST_URL,
        TAAS_ARTIFACTS_URL=url,
        TAAS_S3_ENDPOINT_URL=_closed_port_url() if endpoint == "closed" else s3_endpoint,
        TAAS_S3_ADDRESSING_STYLE="path",
    )
    assert subprocess.run([taas, "migrate"], env=env, capture_output=True, timeout=60).returncode == 0

    port = ["--port", str(_free_port())] if command == "api" else []
    result = subprocess.run([taas, command, *port], env=env, capture_output=True, text=True, timeout=120)

    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: artifact bucket {url} is not reachable: ")
    assert named in result.stderr and "TAAS_ARTIFACTS_URL" in result.stderr
