"""Classify on an Available classifier whose model the real trainer produced."""

from __future__ import annotations

import dataclasses
import math
import shutil
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from service import jobs
from service.models import TrainingJob, utcnow
from service.store import ArtifactStore
from trainer.data import LabelledData
from trainer.engine import train
from trainer.hparams import DEFAULT_HPARAMS

WEATHER = {
    "temperature": [
        "how hot is it",
        "is it cold outside",
        "what is the temperature",
        "will it be warm",
        "freezing today?",
    ],
    "conditions": ["is it raining", "will it snow", "is it sunny", "any storms coming", "is it cloudy"],
}


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model trained once per session by the real trainer on a few weather questions."""
    texts = [t for texts in WEATHER.values() for t in texts]
    labels = [label for label, texts in WEATHER.items() for _ in texts]
    root = tmp_path_factory.mktemp("tiny-model")
    hparams = dataclasses.replace(DEFAULT_HPARAMS, buckets=1 << 12, max_features=4096, min_updates=60)
    result = train(
        LabelledData(texts, labels), workdir=root / "work", out_dir=root / "model", hparams=hparams
    )
    return result.model_dir


@pytest.fixture
def available(
    client: TestClient,
    tenant: Any,
    create_classifier: Callable[..., Any],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
) -> str:
    """A classifier taken through the job state machine to Available with ``tiny_model``."""
    cid = create_classifier(tenant).json()["classifier_id"]
    job_id = session.scalar(select(TrainingJob.id).where(TrainingJob.classifier_id == cid))
    assert job_id is not None
    lease = jobs.claim_job(session, job_id, "test-worker", now=utcnow(), lease=timedelta(seconds=60))
    assert lease is not None
    model_dir = store.model_dir(tenant.id, cid)
    shutil.copytree(tiny_model, model_dir)
    assert jobs.finish_job(
        session, lease, model_dir=store.relative(model_dir), metrics={"accuracy": 1.0}, now=utcnow()
    )
    return cid


def test_classify_answers_nlc_shape_with_confidences_summing_to_one(
    client: TestClient, tenant: Any, available: str
) -> None:
    reply = client.post(
        f"/v1/classifiers/{available}/classify", json={"text": "is it snowing"}, headers=tenant.headers
    )

    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert set(body) == {"classifier_id", "url", "text", "top_class", "classes"}
    confidences = [c["confidence"] for c in body["classes"]]
    assert {c["class_name"] for c in body["classes"]} == set(WEATHER)
    assert confidences == sorted(confidences, reverse=True)
    assert math.isclose(sum(confidences), 1.0, abs_tol=1e-6)
    assert body["top_class"] == body["classes"][0]["class_name"]


def test_classify_collection_answers_each_text(client: TestClient, tenant: Any, available: str) -> None:
    texts = ["how warm is it", "will it rain"]

    reply = client.post(
        f"/v1/classifiers/{available}/classify_collection",
        json={"collection": [{"text": t} for t in texts]},
        headers=tenant.headers,
    )

    assert reply.status_code == 200, reply.text
    collection = reply.json()["collection"]
    assert [item["text"] for item in collection] == texts
    assert all(set(item) == {"text", "top_class", "classes"} for item in collection)


def test_available_classifier_reports_metrics(client: TestClient, tenant: Any, available: str) -> None:
    body = client.get(f"/v1/classifiers/{available}", headers=tenant.headers).json()

    assert body["status"] == "Available"
    assert body["metrics"] == {"accuracy": 1.0}


def test_unreadable_model_is_503(
    client: TestClient, tenant: Any, available: str, store: ArtifactStore
) -> None:
    shutil.rmtree(store.model_dir(tenant.id, available))

    reply = client.post(
        f"/v1/classifiers/{available}/classify", json={"text": "rain?"}, headers=tenant.headers
    )

    assert reply.status_code == 503 and reply.json()["code"] == 503
