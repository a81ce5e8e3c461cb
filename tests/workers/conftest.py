"""Fixtures for the worker tests: queued training jobs made through the service core.

``intents_csv``   a small, clearly separable labelled CSV (``text,label`` header) made in code.
``queue_job``     ``queue_job(csv_path, settings=None) -> QueuedJob``: a fresh tenant, its dataset
                  and classifier and a queued job, exactly as the API records them. The wake-up
                  message goes to ``settings.redis_url``; with none set (the default here) no
                  message is sent and the job just waits, queued, for ``run_training_job``.
"""

from __future__ import annotations

import csv
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from service.classifiers import create_classifier
from service.datasets import stage_upload
from service.jobs import latest_job
from service.settings import Settings
from service.store import ArtifactStore
from service.tenancy import create_tenant
from service.training_data import Limits

_INTENTS = {
    "weather": ["will it rain in {}", "weather forecast for {}", "how warm is it in {} today"],
    "flights": ["book a flight to {}", "cheapest plane ticket to {}", "fly me to {} tomorrow"],
    "music": ["play some jazz in {}", "put on my {} playlist", "play the song about {}"],
}
_PLACES = ["paris", "berlin", "tokyo", "lima", "oslo", "cairo", "quito", "perth", "dakar", "hanoi"]


@dataclass(frozen=True)
class QueuedJob:
    """Ids of a queued training job and what it belongs to."""

    job_id: str
    classifier_id: str
    tenant_id: str


@pytest.fixture
def worker_settings(settings_factory: Callable[..., Settings]) -> Settings:
    """Test settings with no broker (jobs are run by calling run_training_job directly)."""
    return settings_factory(redis_url=None)


@pytest.fixture
def intents_csv(tmp_path: Path) -> Path:
    """A 90-row, three-class labelled CSV whose classes a bag of words separates easily."""
    path = tmp_path / "intents.csv"
    with open(path, "w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["text", "label"])
        for label, templates in _INTENTS.items():
            for template in templates:
                for place in _PLACES:
                    writer.writerow([template.format(place), label])
    return path


@pytest.fixture
def queue_job(session: Session, worker_settings: Settings, tmp_path: Path) -> Callable[..., QueuedJob]:
    """Record a tenant, dataset, classifier and queued job for a labelled CSV."""

    def make(csv_path: Path, settings: Settings | None = None) -> QueuedJob:
        settings = settings or worker_settings
        store = ArtifactStore(settings.resolved_artifacts_dir())
        now = datetime.now(UTC)
        issued = create_tenant(session, f"t-{uuid.uuid4().hex[:10]}", max_name_chars=256, now=now)
        upload = tmp_path / f"upload-{uuid.uuid4().hex}.csv"
        shutil.copyfile(csv_path, upload)
        staged = stage_upload(store, upload, "labelled", Limits.from_settings(settings))
        classifier = create_classifier(
            session,
            store,
            settings,
            tenant_id=issued.tenant_id,
            name="intents",
            language="en",
            source=staged,
            now=now,
        )
        job = latest_job(session, classifier.id)
        assert job is not None
        return QueuedJob(job.id, classifier.id, issued.tenant_id)

    return make
