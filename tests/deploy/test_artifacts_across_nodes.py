"""Nodes that share no file system: an API node and two worker nodes, each with its own local
artifact root, that meet only in S3 (a real moto server) and the database.

Worker A trains until its first checkpoint and is stopped (a node shutting down); worker B, with
nothing on its disk, resumes from that checkpoint in S3 and finishes; the API node classifies
with the model it fetched from S3, and drops that copy once no load has asked for it lately;
deleting the classifier removes its objects from S3.
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.core.models import TrainingJob
from service.core.settings import Settings
from service.storage import layout
from service.storage.store import ArtifactStore
from tests.conftest import TenantHandle
from trainer.checkpoint import checkpoint_path
from trainer.errors import TrainingStopped
from trainer.progress import Progress
from workers import training_run
from workers.training_run import JobInterrupted, run_training_job

# The database is not what this test is about: SQLite only (the job protocol runs on both
# databases in tests/workers and tests/e2e).
pytestmark = [pytest.mark.integration, pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]

_INTENTS = {
    "weather": ["will it rain in {}", "weather forecast for {}", "how warm is it in {} today"],
    "flights": ["book a flight to {}", "cheapest plane ticket to {}", "fly me to {} tomorrow"],
}
_PLACES = ["paris", "berlin", "tokyo", "lima", "oslo", "cairo", "quito", "perth"]


@pytest.fixture
def node(s3_node_settings: Callable[..., Settings], tmp_path: Path) -> Callable[[str], Settings]:
    """``node(name)``: settings of one node, with its own data dir and the shared bucket."""

    def make(name: str) -> Settings:
        return s3_node_settings(
            data_dir=tmp_path / name,
            artifacts_dir=tmp_path / name / "artifacts",
            learners=1,
            checkpoint_every_updates=4,
            reconcile_every_seconds=0.2,  # the API node's local sweeper runs this often
        )

    return make


@pytest.fixture
def settings(node: Callable[[str], Settings]) -> Settings:
    """The API node's settings (the ``client`` and ``tenant`` fixtures build on these)."""
    return node("api")


def _remote_keys(bucket: str, endpoint: str, prefix: str) -> list[str]:
    listing = boto3.client("s3", endpoint_url=endpoint).list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [item["Key"] for item in listing.get("Contents", [])]


def _training_csv(path: Path) -> bytes:
    with open(path, "w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        for label, templates in _INTENTS.items():
            for template in templates:
                for place in _PLACES:
                    writer.writerow([template.format(place), label])
    return path.read_bytes()


def _classify(client: TestClient, tenant: TenantHandle, classifier_id: str) -> str:
    reply = client.post(
        f"/v1/classifiers/{classifier_id}/classify",
        json={"text": "book a flight to rome"},
        headers=tenant.headers,
    )
    assert reply.status_code == 200, reply.text
    return str(reply.json()["top_class"])


def _classify_until_swept(
    client: TestClient, tenant: TenantHandle, classifier_id: str, copy: Path, max_age: float
) -> None:
    """Age the API node's model copy past ``max_age``; its sweeper drops it while the model
    keeps serving from memory. A copy loaded within ``max_age`` is left alone."""
    time.sleep(1.0)  # five sweeps of a fresh copy
    assert copy.is_dir(), "a copy loaded lately is kept"
    long_ago = time.time() - 2 * max_age
    os.utime(copy, (long_ago, long_ago))
    deadline = time.monotonic() + 30
    while copy.exists():
        assert time.monotonic() < deadline, "the API node never dropped its stale model copy"
        time.sleep(0.05)
    assert _classify(client, tenant, classifier_id) == "flights"
    assert not copy.exists(), "serving a loaded model reads no file"


def _create(client: TestClient, tenant: TenantHandle, tmp_path: Path, name: str) -> tuple[str, str]:
    """Create a classifier named ``name``; returns its id and its training job's."""
    created = client.post(
        "/v1/classifiers",
        files={
            "training_data": ("train.csv", _training_csv(tmp_path / "train.csv"), "text/csv"),
            "training_metadata": (None, json.dumps({"name": name, "language": "en"}), "application/json"),
        },
        headers=tenant.headers,
    )
    assert created.status_code == 200, created.text
    classifier_id = created.json()["classifier_id"]
    events = client.get(f"/v1/classifiers/{classifier_id}/events", headers=tenant.headers).json()["events"]
    return classifier_id, str(events[0]["job_id"])


@pytest.mark.slow
def test_worker_nodes_resume_and_serve_through_s3_only(
    client: TestClient,
    tenant: TenantHandle,
    node: Callable[[str], Settings],
    settings: Settings,
    tmp_path: Path,
    s3_endpoint: str,
    s3_bucket: str,
) -> None:
    classifier_id, job_id = _create(client, tenant, tmp_path, "nodes")
    classifier_keys = f"taas/{layout.classifier_prefix(tenant.id, classifier_id)}/"

    worker_a, worker_b = node("worker-a"), node("worker-b")
    a_root = worker_a.resolved_artifacts_dir()
    with pytest.raises(JobInterrupted):  # node A shuts down right after its first checkpoint
        run_training_job(
            job_id, worker_a, "node-a:1", stop_requested=lambda: any(a_root.rglob("checkpoints/*/ckpt-*"))
        )
    checkpoints = [k for k in _remote_keys(s3_bucket, s3_endpoint, classifier_keys) if "/checkpoints/" in k]
    assert checkpoints, "the checkpoint was not stored in S3 before its pointer was recorded"
    kept_on_a = list((a_root / "tenants").rglob("*"))
    assert any(p.is_file() for p in kept_on_a), "node A keeps its copies for a retry there"

    leftover = worker_b.resolved_artifacts_dir() / "tmp" / "killed-worker.model"
    leftover.mkdir(parents=True)  # what a worker SIGKILLed mid-save leaves in its staging area
    long_ago = time.time() - 2 * worker_b.temp_max_age_seconds
    os.utime(leftover, (long_ago, long_ago))
    run_training_job(job_id, worker_b, "node-b:1")  # node B: nothing on its disk but S3's copy
    assert not leftover.exists(), "a worker node sweeps its own staging area as a job starts"
    b_files = [p for p in worker_b.resolved_artifacts_dir().rglob("*") if p.is_file()]
    assert b_files == [], "a worker drops its copies of the dataset and model once they are in S3"

    timeline = client.get(f"/v1/classifiers/{classifier_id}/events", headers=tenant.headers).json()["events"]
    resumed = [e for e in timeline if e["event"] == "resumed"]
    assert resumed and resumed[0]["worker"] == "node-b:1" and resumed[0]["step"] > 0
    assert timeline[-1]["event"] == "done"
    assert (
        client.get(f"/v1/classifiers/{classifier_id}", headers=tenant.headers).json()["status"] == "Available"
    )

    api_root = settings.resolved_artifacts_dir()
    assert not list(api_root.rglob("model")), "the API node has no model before its first classify"
    reply = client.post(
        f"/v1/classifiers/{classifier_id}/classify",
        json={"text": "book a flight to rome"},
        headers=tenant.headers,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["top_class"] == "flights"
    [copy] = api_root.rglob("model/epoch-*")
    assert any(copy.iterdir()), "the API node serves a copy fetched from S3"
    _classify_until_swept(client, tenant, classifier_id, copy, settings.model_copy_max_age_seconds)
    client.app.state.models.evict(classifier_id)  # type: ignore[attr-defined]  # memory pressure
    assert _classify(client, tenant, classifier_id) == "flights"
    assert any(copy.iterdir()), "a load after the sweep fetches the folder again"
    remote = _remote_keys(s3_bucket, s3_endpoint, classifier_keys)
    assert remote and not [k for k in remote if "/checkpoints/" in k], "checkpoints are removed once done"

    # node A's copies of the job that finished on B, once untouched for the max age, are
    # dropped as A starts its next job (they stayed on its disk for good)
    long_ago = time.time() - 2 * worker_a.model_copy_max_age_seconds
    for path in kept_on_a:
        os.utime(path, (long_ago, long_ago))
    next_id, next_job = _create(client, tenant, tmp_path, "next")
    run_training_job(next_job, worker_a, "node-a:2")
    assert not [p for p in (a_root / "tenants").rglob("*") if p.is_file()]
    assert client.delete(f"/v1/classifiers/{next_id}", headers=tenant.headers).status_code == 200

    assert client.delete(f"/v1/classifiers/{classifier_id}", headers=tenant.headers).status_code == 200
    assert _remote_keys(s3_bucket, s3_endpoint, classifier_keys) == []
    dataset_key = f"taas/{layout.tenant_prefix(tenant.id)}/datasets/"
    assert _remote_keys(s3_bucket, s3_endpoint, dataset_key) == []


def test_a_checkpoint_that_a_restarted_training_writes_again_under_its_name_is_stored_again(
    client: TestClient,
    tenant: TenantHandle,
    node: Callable[[str], Settings],
    session: Session,
    tmp_path: Path,
    s3_endpoint: str,
    s3_bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A training that diverged starts over at a lower rate and, the cadence being in updates,
    writes its first checkpoint under the name of the diverged run's last one: a worker stores
    each checkpoint once, and took it for stored already, so S3 kept the diverged file under the
    name the pointer gave, and a resume on another node took up the run at the rate that had
    diverged."""
    _, job_id = _create(client, tenant, tmp_path, "restarted")

    def diverges_once(data: object, *, workdir: Path, on_progress: Any, should_stop: Any, **_: Any) -> Any:
        for run in (b"diverged", b"steadied"):  # the training, then its start over
            for phase in ("preparing", "training"):
                on_progress(Progress(phase, 1, 0, 8, None, 0.0, None, 0, 0, 1))
            checkpoint = checkpoint_path(workdir, 4)
            checkpoint.write_bytes(run)
            time.sleep(1.1)  # the watcher lists the folder at least once a second
            should_stop()
            if run == b"diverged":
                checkpoint.unlink()
        raise TrainingStopped(4, str(checkpoint))

    monkeypatch.setattr(training_run, "train", diverges_once)
    with pytest.raises(JobInterrupted):
        run_training_job(job_id, node("worker-a"), "node-a:1")

    job = session.get(TrainingJob, job_id)
    assert job is not None and job.checkpoint_path is not None
    stored = boto3.client("s3", endpoint_url=s3_endpoint).get_object(
        Bucket=s3_bucket, Key=f"taas/{job.checkpoint_path}"
    )
    assert stored["Body"].read() == b"steadied"


def test_a_training_that_writes_no_checkpoint_for_the_copy_age_keeps_its_folder(
    client: TestClient,
    tenant: TenantHandle,
    node: Callable[[str], Settings],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another worker process on this node's root drops the checkpoint folders untouched for
    the copy age as it starts a job. A folder counted as in use only while checkpoints landed
    in it, so a cadence as long as that age (an operator's TAAS_CHECKPOINT_EVERY_SECONDS) lost
    a running job's folder under it."""
    _, job_id = _create(client, tenant, tmp_path, "long")
    worker = node("worker-a")
    sibling = ArtifactStore.open(worker)  # another worker process sharing the node's root
    kept: list[bool] = []

    def trains_long(data: object, *, workdir: Path, on_progress: Any, should_stop: Any, **_: Any) -> Any:
        for phase in ("preparing", "training"):
            on_progress(Progress(phase, 1, 0, 8, None, 0.0, None, 0, 0, 1))
        checkpoint = checkpoint_path(workdir, 4)
        checkpoint.write_bytes(b"w")
        long_ago = time.time() - 2 * worker.model_copy_max_age_seconds
        for path in (workdir.parent, workdir, checkpoint):  # the last checkpoint, long ago
            os.utime(path, (long_ago, long_ago))
        time.sleep(1.1)  # a progress report a second
        on_progress(Progress("training", 1, 5, 8, None, 0.0, None, 1, 0, 1))
        sibling.sweep_work_copies(worker.model_copy_max_age_seconds)
        kept.append(checkpoint.is_file())
        should_stop()
        raise TrainingStopped(4, str(checkpoint))

    monkeypatch.setattr(training_run, "train", trains_long)
    with pytest.raises(JobInterrupted):
        run_training_job(job_id, worker, "node-a:1")
    assert kept == [True]
