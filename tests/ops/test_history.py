"""The job's time series in its progress JSON stays bounded and keeps the newest point, and its
tenant reads it (the console's training curves)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.training.history import MAX_POINTS, recorded, with_point
from tests.ops.conftest import FinishedJob

pytestmark = pytest.mark.dialect_neutral


def test_history_past_its_bound_keeps_every_other_point_and_the_newest() -> None:
    history: list[dict[str, object]] = []
    for step in range(MAX_POINTS + 1):
        history = with_point(history, {"step": step, "loss": 1.0 / (step + 1)}, at=1000.0 + step)

    assert len(history) == MAX_POINTS // 2 + 1
    assert history[-1]["step"] == MAX_POINTS and history[0]["step"] == 0
    assert [p["step"] for p in history] == sorted(p["step"] for p in history)


def test_a_point_carries_the_charted_fields_of_a_progress_report() -> None:
    report = {"epoch": 2, "step": 40, "loss": 0.5, "samples_per_second": 900.0, "validation_accuracy": 0.75}
    (point,) = with_point([], {**report, "phase": "training", "ps": {"pushed": 40}}, at=12.5)
    assert point == {"t": 12.5, **report}


def test_the_next_claim_starts_from_the_series_recorded_with_the_job(
    finished_job: FinishedJob, session: Session
) -> None:
    assert [point["step"] for point in recorded(session, finished_job.job_id)] == [0, 400, 800]


def test_the_tenant_reads_its_versions_series_and_nothing_of_another_version(
    finished_job: FinishedJob, client: TestClient
) -> None:
    url = f"/v1/classifiers/{finished_job.classifier_id}/versions"
    reply = client.get(f"{url}/1/history", headers=finished_job.tenant.headers)
    assert reply.status_code == 200, reply.text
    found = reply.json()
    assert (found["classifier_id"], found["version"]) == (finished_job.classifier_id, 1)
    assert [(p["step"], p["loss"]) for p in found["points"]] == [(0, 1.0), (400, 1 / 401), (800, 1 / 801)]
    assert client.get(f"{url}/2/history", headers=finished_job.tenant.headers).status_code == 404
