"""Fixtures for the worker tests: queued training jobs made through the service core.

``intents_csv``   a small, clearly separable labelled CSV (``text,label`` header) made in code.
``queue_job``     ``queue_job(csv_path, settings=None, tenant_id=None) -> QueuedJob``: a fresh
                  tenant (or ``tenant_id``), its dataset and classifier and a queued job, exactly
                  as the API records them. The wake-up
                  message goes to ``settings.redis_url``; with none set (the default here) no
                  message is sent and the job just waits, queued, for ``run_training_job``.
``start_workers`` ``start_workers(settings, count=1, **TAAS_env) -> list[Popen]``: real
                  ``python -m workers`` processes on ``settings`` (its broker, database, artifact
                  store and fold count), logging to ``worker-<i>.log`` in the test's temp dir;
                  stopped (SIGTERM) after the test.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from service.catalogue.classifiers import create_classifier
from service.catalogue.datasets import stage_upload
from service.catalogue.training_data import Limits
from service.core.models import Classifier, TrainingJob
from service.core.settings import Settings
from service.storage.store import ArtifactStore
from service.tenants.accounts import create_tenant
from service.training.job_views import version_job

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

    def reload(self, session: Session) -> tuple[TrainingJob, Classifier]:
        """The job's and classifier's rows as a worker left them: ends ``session``'s read
        transaction and forgets its loaded rows first."""
        session.rollback()
        session.expire_all()
        job, classifier = session.get(TrainingJob, self.job_id), session.get(Classifier, self.classifier_id)
        assert job is not None and classifier is not None
        return job, classifier


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
    """Record a tenant, dataset, classifier and queued job for a labelled CSV (English: it trains
    on the sentence encoder; ``benchmarks.chaos.NGRAM_LANGUAGE``: on n-grams alone)."""

    def make(
        csv_path: Path, settings: Settings | None = None, tenant_id: str | None = None, language: str = "en"
    ) -> QueuedJob:
        settings = settings or worker_settings
        store = ArtifactStore(settings.resolved_artifacts_dir())
        now = datetime.now(UTC)
        if tenant_id is None:
            tenant_id = create_tenant(
                session, f"t-{uuid.uuid4().hex[:10]}", max_name_chars=256, now=now
            ).tenant_id
        upload = tmp_path / f"upload-{uuid.uuid4().hex}.csv"
        shutil.copyfile(csv_path, upload)
        staged = stage_upload(store, upload, "labelled", Limits.from_settings(settings), tenant_id=tenant_id)
        classifier = create_classifier(
            session,
            store,
            settings,
            tenant_id=tenant_id,
            name="intents",
            language=language,
            source=staged,
            now=now,
        )
        job = version_job(session, classifier.id, 1)  # a new classifier is its version 1
        assert job is not None
        return QueuedJob(job.id, classifier.id, tenant_id)

    return make


def _cross_fit_env(settings: Settings) -> dict[str, str]:
    """``settings``' fold count for the worker's environment (the test settings turn folds off)."""
    folds = settings.cross_fit_folds
    return {} if folds is None else {"TAAS_CROSS_FIT_FOLDS": str(folds)}


@pytest.fixture
def start_workers(tmp_path: Path) -> Iterator[Callable[..., list[subprocess.Popen[bytes]]]]:
    """Start real worker processes; each is terminated (then killed) when the test ends."""
    started: list[subprocess.Popen[bytes]] = []

    def start(settings: Settings, count: int = 1, **env: str) -> list[subprocess.Popen[bytes]]:
        environ = {
            **os.environ,
            "TAAS_DATABASE_URL": settings.resolved_database_url(),
            "TAAS_REDIS_URL": settings.require_redis_url(),
            "TAAS_DATA_DIR": str(settings.data_dir),
            "TAAS_ARTIFACTS_DIR": str(settings.resolved_artifacts_dir()),
            **_cross_fit_env(settings),
            **env,
        }
        batch = []
        for _ in range(count):
            with open(tmp_path / f"worker-{len(started)}.log", "wb") as log:
                worker = subprocess.Popen(
                    [sys.executable, "-m", "workers"], env=environ, stdout=log, stderr=subprocess.STDOUT
                )
            started.append(worker)
            batch.append(worker)
        return batch

    yield start
    for worker in started:
        worker.terminate()
    for worker in started:
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
