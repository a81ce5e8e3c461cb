"""NLC v1 classifier routes: response shapes, tenancy, status while training, delete."""

from __future__ import annotations

import gzip
import json
import socket
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from benchmarks.chaos import free_port
from service.app import create_app
from service.core.models import Dataset, JobEvent, JobState, TrainingJob, utcnow
from service.core.settings import Settings
from service.training import leases
from tests.service.helpers import nlc_files, store_dataset

pytestmark = pytest.mark.dialect_neutral

NLC_CLASSIFIER_KEYS = {"classifier_id", "name", "language", "created", "url", "status", "status_description"}


def test_create_answers_nlc_classifier_in_training(
    tenant: Any, create_classifier: Callable[..., httpx.Response]
) -> None:
    reply = create_classifier(tenant)

    assert reply.status_code == 200
    body = reply.json()
    assert NLC_CLASSIFIER_KEYS <= body.keys()
    assert (body["name"], body["language"], body["status"]) == ("weather", "en", "Training")
    assert body["url"].endswith(f"/v1/classifiers/{body['classifier_id']}")
    assert datetime.fromisoformat(body["created"]).tzinfo is not None
    assert body["created"].endswith("Z")


def test_create_records_a_queued_job_with_its_event(
    tenant: Any, create_classifier: Callable[..., httpx.Response], session: Session
) -> None:
    classifier_id = create_classifier(tenant).json()["classifier_id"]

    job = session.scalar(select(TrainingJob).where(TrainingJob.classifier_id == classifier_id))
    assert job is not None and job.state == JobState.QUEUED
    kinds = session.scalars(select(JobEvent.kind).where(JobEvent.job_id == job.id)).all()
    assert kinds == ["queued"]


def test_stored_training_data_is_canonical_csv_one_row_per_class(
    tenant: Any, create_classifier: Callable[..., httpx.Response], session: Session, store: Any
) -> None:
    create_classifier(tenant)

    dataset = session.scalar(select(Dataset).where(Dataset.tenant_id == tenant.id))
    assert dataset is not None
    lines = store.resolve(dataset.path).read_text("utf-8").splitlines()
    assert lines[0] == "text,label"
    assert '"Will it be cold, tonight?",temperature' in lines
    assert "Will it snow tomorrow?,conditions" in lines and "Will it snow tomorrow?,temperature" in lines
    assert (dataset.rows, dataset.classes) == (6, 2)


def test_list_shows_only_own_classifiers_in_nlc_shape(
    client: TestClient, tenant_factory: Callable[..., Any], create_classifier: Callable[..., httpx.Response]
) -> None:
    alice, bob = tenant_factory(), tenant_factory()
    mine = create_classifier(alice).json()["classifier_id"]
    create_classifier(bob)

    body = client.get("/v1/classifiers", headers=alice.headers).json()

    assert [c["classifier_id"] for c in body["classifiers"]] == [mine]
    assert set(body["classifiers"][0]) == {"classifier_id", "url", "name", "language", "created"}


def test_get_reports_status_and_progress_extension(
    client: TestClient, tenant: Any, create_classifier: Callable[..., httpx.Response]
) -> None:
    classifier_id = create_classifier(tenant).json()["classifier_id"]

    body = client.get(f"/v1/classifiers/{classifier_id}", headers=tenant.headers).json()

    assert NLC_CLASSIFIER_KEYS <= body.keys()
    assert body["status"] == "Training"
    assert body["progress"]["phase"] == "queued"
    assert {
        "epoch",
        "step",
        "total_steps",
        "loss",
        "samples_per_second",
        "eta_seconds",
        "checkpoints",
        "resumed",
    } <= (body["progress"].keys())
    assert body["metrics"] is None


def test_a_cancelled_training_reports_no_eta(
    client: TestClient, tenant: Any, create_classifier: Callable[..., httpx.Response], session: Session
) -> None:
    classifier_id = create_classifier(tenant).json()["classifier_id"]
    job_id = session.scalar(select(TrainingJob.id).where(TrainingJob.classifier_id == classifier_id))
    lease = leases.claim_job(session, job_id, "w1", now=utcnow(), lease=timedelta(seconds=60))
    assert lease is not None
    assert leases.record_progress(
        session, lease, {"phase": "training", "step": 5, "eta_seconds": 12.0}, now=utcnow()
    )
    url = f"/v1/classifiers/{classifier_id}"
    assert client.get(url, headers=tenant.headers).json()["progress"]["eta_seconds"] == 12.0

    assert client.post(f"{url}/cancel", headers=tenant.headers).status_code == 200

    progress = client.get(url, headers=tenant.headers).json()["progress"]
    assert (progress["state"], progress["step"], progress["eta_seconds"]) == ("cancelled", 5, None)


def test_classify_while_training_is_409(
    client: TestClient, tenant: Any, create_classifier: Callable[..., httpx.Response]
) -> None:
    classifier_id = create_classifier(tenant).json()["classifier_id"]

    for path, body in (
        ("classify", {"text": "hot?"}),
        ("classify_collection", {"collection": [{"text": "hot?"}]}),
    ):
        reply = client.post(f"/v1/classifiers/{classifier_id}/{path}", json=body, headers=tenant.headers)
        assert reply.status_code == 409
        assert reply.json()["code"] == 409 and "Training" in reply.json()["description"]


def test_delete_answers_empty_object_and_removes_rows_and_files(
    client: TestClient,
    tenant: Any,
    create_classifier: Callable[..., httpx.Response],
    nothing_left_behind: Callable[[str], None],
) -> None:
    classifier_id = create_classifier(tenant).json()["classifier_id"]

    reply = client.delete(f"/v1/classifiers/{classifier_id}", headers=tenant.headers)

    assert (reply.status_code, reply.json()) == (200, {})
    assert client.get(f"/v1/classifiers/{classifier_id}", headers=tenant.headers).status_code == 404
    nothing_left_behind(tenant.id)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/classifiers/{cid}", None),
        ("DELETE", "/v1/classifiers/{cid}", None),
        ("POST", "/v1/classifiers/{cid}/classify", {"text": "hot?"}),
        ("POST", "/v1/classifiers/{cid}/classify_collection", {"collection": [{"text": "hot?"}]}),
        ("GET", "/v1/datasets/{did}", None),
        ("DELETE", "/v1/datasets/{did}", None),
        ("POST", "/v1/classifiers", {"name": "steal", "language": "en", "dataset_id": "{did}"}),
    ],
)
def test_another_tenants_ids_are_not_found(
    client: TestClient,
    tenant_factory: Callable[..., Any],
    create_classifier: Callable[..., httpx.Response],
    method: str,
    path: str,
    body: dict[str, Any] | None,
) -> None:
    owner, intruder = tenant_factory(), tenant_factory()
    cid = create_classifier(owner).json()["classifier_id"]
    did = client.post(
        "/v1/datasets?name=d",
        content=b"text,label\na,x\nb,y\n",
        headers={**owner.headers, "content-type": "text/csv"},
    ).json()["dataset_id"]
    if body and "dataset_id" in body:
        body = {**body, "dataset_id": did}

    reply = client.request(method, path.format(cid=cid, did=did), json=body, headers=intruder.headers)

    assert reply.status_code == 404
    assert reply.json()["code"] == 404 and reply.json()["error"] == "Not Found"
    assert client.get(f"/v1/classifiers/{cid}", headers=owner.headers).status_code == 200


def test_create_from_a_stored_dataset_refuses_a_misspelt_field(
    client: TestClient, tenant: Any, session: Session
) -> None:
    did = store_dataset(client, tenant)

    reply = client.post(
        "/v1/classifiers",
        json={"name": "c", "dataset_id": did, "callbak_url": "https://example.com/hook"},
        headers=tenant.headers,
    )

    assert reply.status_code == 400
    assert reply.json()["description"] == "callbak_url: Extra inputs are not permitted"
    assert client.get("/v1/classifiers", headers=tenant.headers).json()["classifiers"] == []


def test_create_from_stored_dataset_trains_on_it(client: TestClient, tenant: Any, session: Session) -> None:
    did = store_dataset(client, tenant)

    reply = client.post(
        "/v1/classifiers",
        json={"name": "from-ds", "language": "en", "dataset_id": did},
        headers=tenant.headers,
    )

    assert reply.status_code == 200 and reply.json()["status"] == "Training"
    assert client.get(f"/v1/datasets/{did}", headers=tenant.headers).json()["rows"] == 3


def test_a_dataset_is_kept_while_a_version_may_still_train_on_it(
    client: TestClient, tenant: Any, available: str
) -> None:
    def upload() -> str:
        reply = client.post(
            "/v1/datasets?name=d",
            content=b"text,label\nhot,t\ncold,t\nrain,c\n",
            headers={**tenant.headers, "content-type": "text/csv"},
        )
        return str(reply.json()["dataset_id"])

    def delete(dataset_id: str) -> Any:
        return client.delete(f"/v1/datasets/{dataset_id}", headers=tenant.headers)

    # version 2 of a classifier whose serving version 1 trained on other data
    retrain = upload()
    queued = client.post(
        f"/v1/classifiers/{available}/versions", json={"dataset_id": retrain}, headers=tenant.headers
    )
    assert queued.status_code == 201, queued.text
    refused = delete(retrain)
    assert refused.status_code == 409
    assert f"in use by classifier '{available}'" in refused.json()["description"]

    # a cancelled training may be resumed, so its data stays too
    first = upload()
    cid = client.post(
        "/v1/classifiers", json={"name": "c", "language": "en", "dataset_id": first}, headers=tenant.headers
    ).json()["classifier_id"]
    assert client.post(f"/v1/classifiers/{cid}/cancel", headers=tenant.headers).status_code == 200
    assert delete(first).status_code == 409

    assert client.delete(f"/v1/classifiers/{cid}", headers=tenant.headers).status_code == 200
    assert delete(first).status_code == 200
    assert client.get(f"/v1/datasets/{first}", headers=tenant.headers).status_code == 404


@pytest.mark.parametrize("answers", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["down", "hung"])
def test_a_create_while_redis_is_down_is_accepted_and_logged_in_one_line(
    settings_factory: Callable[..., Settings],
    admin_headers: dict[str, str],
    caplog: pytest.LogCaptureFixture,
    answers: bool,
) -> None:
    """Hung: a Redis that takes connections and never answers (stopped with SIGSTOP, say); the
    create waited on its reply for ever, holding a database connection."""
    hung = socket.create_server(("127.0.0.1", 0), backlog=16)  # listens; nobody ever answers
    port = hung.getsockname()[1] if answers else free_port()
    settings = settings_factory(redis_url=f"redis://127.0.0.1:{port}/0")
    name = f"outage-{'hung' if answers else 'down'}"
    with hung, TestClient(create_app(settings)) as client:
        key = client.post("/v1/admin/tenants", json={"name": name}, headers=admin_headers).json()["api_key"]

        created = client.post(
            "/v1/classifiers", files=nlc_files(), headers={"Authorization": f"Bearer {key}"}
        )

    assert created.status_code == 200 and created.json()["status"] == "Training"  # the reconciler sends it
    [warned] = [r for r in caplog.records if "could not enqueue job" in r.getMessage()]
    assert warned.levelname == "WARNING" and warned.exc_info is None  # an outage, not a bug: no traceback


def test_a_gzipped_body_is_read_as_the_plain_one_within_the_same_limits(
    client: TestClient,
    tenant: Any,
    available: str,
    create_classifier: Callable[..., httpx.Response],
    settings: Settings,
) -> None:
    """The IBM SDK's set_enable_gzip_compression(True) gzips every request body: its classify
    was a 400 ("body: not UTF-8") and its create a 400 naming a part it could not find."""
    url = f"/v1/classifiers/{available}/classify"
    body = json.dumps({"text": "is it cold outside"}).encode()
    zipped = {**tenant.headers, "Content-Type": "application/json", "Content-Encoding": "gzip"}

    plain = client.post(url, content=body, headers={**tenant.headers, "Content-Type": "application/json"})
    inflated = client.post(url, content=gzip.compress(body), headers=zipped)
    bomb = client.post(url, content=gzip.compress(b" " * (settings.max_json_bytes + 1)), headers=zipped)
    cut = client.post(url, content=gzip.compress(body)[:-6], headers=zipped)
    garbage = client.post(url, content=b"not gzip at all", headers=zipped)
    brotli = client.post(url, content=body, headers={**zipped, "Content-Encoding": "br"})
    two_members = client.post(url, content=gzip.compress(body) + gzip.compress(b" "), headers=zipped)

    def endless_header() -> Iterator[bytes]:  # chunked; its file name never ends: inflates to nothing
        yield b"\x1f\x8b\x08\x08\x00\x00\x00\x00\x00\x03"
        for _ in range(settings.max_json_bytes // 65536 + 2):
            yield b"A" * 65536

    unbounded = client.post(url, content=endless_header(), headers=zipped)

    assert inflated.status_code == 200 and inflated.json() == plain.json()
    assert bomb.status_code == 413  # counted inflated: 10 KB that inflate past the limit
    assert cut.status_code == 400 and "cut short" in cut.json()["description"]
    assert garbage.status_code == 400 and "not valid gzip" in garbage.json()["description"]
    assert brotli.status_code == 415
    assert two_members.status_code == 400 and "bytes follow the gzip stream" in two_members.text
    assert unbounded.status_code == 413  # the gzipped bytes have the limit too
    assert brotli.json()["description"].startswith("Content-Encoding 'br' is not read here")

    request = client.build_request("POST", "/v1/classifiers", files=nlc_files(), headers=tenant.headers)
    multipart = {"Content-Type": request.headers["content-type"], "Content-Encoding": "gzip"}
    created = client.post(
        "/v1/classifiers", content=gzip.compress(request.read()), headers={**tenant.headers, **multipart}
    )
    assert created.status_code == 200, created.text
