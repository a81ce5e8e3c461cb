"""GET /metrics: Prometheus text that prometheus_client's parser reads, with every series (the live
workers' included); and the job detail feed of the same trained job."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.app import create_app
from service.core.settings import Settings
from service.training.worker_registry import WorkerInfo
from tests.conftest import METRICS_HEADERS, METRICS_TOKEN
from tests.ops.conftest import FinishedJob

pytestmark = pytest.mark.dialect_neutral


def _samples(client: TestClient) -> dict[str, list[tuple[dict[str, str], float]]]:
    reply = client.get("/metrics", headers=METRICS_HEADERS)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def _total(samples: list[tuple[dict[str, str], float]], **labels: str) -> float:
    return sum(value for found, value in samples if labels.items() <= found.items())


def test_after_a_training_job_metrics_and_its_detail_page_feed_carry_its_series(
    client: TestClient, ops_client: TestClient, finished_job: FinishedJob
) -> None:
    # given: a finished job, its classifier called once (its model files are not real: any
    # answer is a classify call to time)
    headers = finished_job.tenant.headers
    classify = f"/v1/classifiers/{finished_job.classifier_id}/classify"
    status = client.post(classify, json={"text": "book a flight to rome"}, headers=headers).status_code
    # when
    found = _samples(client)
    # then
    route = "/v1/classifiers/{classifier_id}/classify"
    assert _total(found["taas_http_requests_total"], route=route, status=str(status)) == 1
    assert _total(found["taas_http_request_duration_seconds_count"], route=route) == 1
    assert _total(found["taas_classify_latency_seconds_count"], route="classify") == 1
    assert _total(found["taas_jobs"], state="succeeded") >= 1
    assert "taas_queue_depth" in found
    job = finished_job.job_id
    assert _total(found["taas_training_samples_per_second"], job_id=job) > 0
    assert _total(found["taas_ps_updates_total"], job_id=job, kind="applied") > 0
    assert _total(found["taas_ps_updates_total"], job_id=job, kind="pushed") > 0
    assert _total(found["taas_ps_staleness_updates_total"], job_id=job) > 0
    heartbeats = {labels["worker"]: v for labels, v in found["taas_worker_last_heartbeat_timestamp_seconds"]}
    assert heartbeats["ops-test-host:4242"] > 0
    _assert_job_detail(ops_client.get(f"/ops/api/jobs/{job}").json())


def _assert_job_detail(detail: dict[str, Any]) -> None:
    assert detail["state"] == "succeeded" and detail["fraction"] == 1.0
    assert [e["event"] for e in detail["events"]] == ["queued", "claimed", "checkpoint", "done"]
    assert [(p["step"], p["epoch"]) for p in detail["history"]] == [(0, 1), (400, 2), (800, 3)]
    assert all(p["loss"] > 0 and p["samples_per_second"] > 0 for p in detail["history"])
    assert "history" not in detail["progress"] and detail["progress"]["learners"] == 2
    assert detail["progress"]["ps"]["staleness_histogram"][0] == 800
    confusion = detail["model"]["metrics"]["confusion"]
    assert confusion["labels"] == ["flights", "music", "weather"]


def test_unknown_routes_are_counted_under_one_label(client: TestClient) -> None:
    for path in ("/nope/1", "/nope/2"):
        client.get(path)

    found = _samples(client)

    assert _total(found["taas_http_requests_total"], route="<unmatched>", status="404") == 2


def test_metrics_count_the_live_workers_and_the_age_of_each_ones_heartbeat(
    client: TestClient, live_worker: Callable[..., WorkerInfo]
) -> None:
    worker = live_worker()

    found = _samples(client)

    assert _total(found["taas_workers_alive"]) >= 1
    labels = {"worker": worker.worker_id, "host": worker.host, "device": "cuda:0 Test GPU"}
    ages = [value for seen, value in found["taas_worker_last_heartbeat_seconds"] if seen == labels]
    assert len(ages) == 1 and 0 <= ages[0] < 60


@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        (None, 401),
        ("Bearer not-the-token", 401),
        ("Basic " + METRICS_TOKEN, 401),
        (f"Bearer {METRICS_TOKEN}", 200),
    ],
    ids=["none", "wrong", "not-bearer", "the-token"],
)
def test_metrics_answer_only_a_scrape_that_brings_the_metrics_token(
    client: TestClient, tenant: Any, admin_headers: dict[str, str], authorization: str | None, status: int
) -> None:
    """The series name jobs, tenants' throughput and the workers' hosts and pids, and were
    served to anyone who reached the API's port (the Compose proxy's included)."""
    for key in (tenant.headers, admin_headers):  # neither key opens them
        assert client.get("/metrics", headers=key).status_code == 401
    headers = {} if authorization is None else {"Authorization": authorization}

    reply = client.get("/metrics", headers=headers)

    assert reply.status_code == status, reply.text
    if status == 401:
        assert reply.json()["description"].startswith("/metrics needs the metrics token")


def test_without_a_metrics_token_metrics_answer_only_this_host(
    settings_factory: Callable[..., Settings],
) -> None:
    app = create_app(settings_factory(metrics_token=None))
    with (
        TestClient(app, client=("203.0.113.9", 50000)) as remote,
        TestClient(app, client=("127.0.0.1", 50000)) as here,
    ):
        refused, served = remote.get("/metrics"), here.get("/metrics")

    assert refused.status_code == 403
    assert "set TAAS_METRICS_TOKEN" in refused.json()["description"]
    assert served.status_code == 200 and "taas_http_requests_total" in served.text
