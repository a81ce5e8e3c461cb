"""Fixtures for the ops dashboard and /metrics tests.

``ops_client``   the test ``client`` logged in to /ops with the admin key (session cookie set).
``csrf``         the CSRF token of that session, read from a page as a browser would.
``finished_job`` a classifier created over the API whose job a worker (:data:`WORKER`) took
                 through the real state machine to succeeded, reporting trainer-shaped progress
                 with its time series on the way (no training: the real one is in the browser
                 test); its ids.
``live_worker``  ``live_worker(job_id=None) -> WorkerInfo``: the entry of a fresh worker (a host of
                 its own, a GPU, K=4) in the app's registry, beating now; removed after the test.
``artifacts_dir`` the folder for files CI keeps (the browser tests' screenshots).
``browser``      Debian's chromium under Playwright (the test is skipped where there is none).
``embedded_platform``, ``platform_factory``, ``intents_nlc``: `taas up` and its training data,
                 from ``tests/e2e/conftest.py``.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.core.models import TrainingJob, utcnow
from service.core.settings import Settings
from service.training import history, leases
from service.training.worker_registry import WorkerInfo, WorkerRegistry, connect
from tests.conftest import ADMIN_KEY, REPO_ROOT, TenantHandle
from tests.e2e.conftest import embedded_platform, intents_nlc, platform_factory  # noqa: F401  (fixtures)
from tests.service.helpers import nlc_files
from trainer.progress import Progress

_PLACES = ["paris", "berlin", "tokyo", "lima", "oslo", "cairo", "quito", "perth", "dakar", "hanoi"]
_TEMPLATES = {
    "weather": ["will it rain in {}", "weather forecast for {}", "how warm is it in {} today"],
    "flights": ["book a flight to {}", "cheapest plane ticket to {}", "fly me to {} tomorrow"],
    "music": ["play some jazz in {}", "put on my {} playlist", "play the song about {}"],
}
INTENTS_NLC = "\n".join(
    f"{t.format(p)},{label}" for label, ts in _TEMPLATES.items() for t in ts for p in _PLACES
)


WORKER = "ops-test-host:4242"
METRICS = {
    "accuracy": 1.0,
    "macro_f1": 1.0,
    "n": 30,
    "confusion": {"labels": ["flights", "music", "weather"], "matrix": [[10, 0, 0], [0, 10, 0], [0, 0, 10]]},
}


@dataclass(frozen=True)
class FinishedJob:
    job_id: str
    classifier_id: str
    tenant: TenantHandle


def log_in(client: TestClient, key: str = ADMIN_KEY) -> None:
    """Post the login form as a browser would."""
    client.post("/ops/login", data={"key": key}, follow_redirects=False)


@pytest.fixture
def ops_client(client: TestClient) -> TestClient:
    log_in(client)
    assert client.cookies.get("taas_ops"), "login set no session cookie"
    return client


@pytest.fixture
def csrf(ops_client: TestClient) -> str:
    page = ops_client.get("/ops").text
    found = re.search(r'name="csrf-token" content="([^"]+)"', page)
    assert found is not None
    return found.group(1)


@pytest.fixture
def finished_job(client: TestClient, tenant: TenantHandle, session: Session) -> FinishedJob:
    created = client.post(
        "/v1/classifiers",
        files=nlc_files(INTENTS_NLC, {"name": "intents", "language": "en"}),
        headers=tenant.headers,
    )
    assert created.status_code == 200, created.text
    classifier_id = created.json()["classifier_id"]
    job_id = session.scalar(select(TrainingJob.id).where(TrainingJob.classifier_id == classifier_id))
    assert job_id is not None
    lease = leases.claim_job(session, job_id, WORKER, now=utcnow(), lease=timedelta(seconds=60))
    assert lease is not None
    series: list[dict[str, Any]] = []
    for step in (0, 400, 800):
        report = _progress(step).as_dict()
        series = history.with_point(series, report, at=time.time() + step / 400)
        assert leases.record_progress(session, lease, {**report, history.HISTORY_KEY: series}, now=utcnow())
    assert leases.record_checkpoint(session, lease, path="ckpt", step=800, now=utcnow())
    assert leases.finish_job(
        session, lease, model_dir="model", metrics=METRICS, now=utcnow(), applied_updates=800
    )
    return FinishedJob(job_id, classifier_id, tenant)


def _progress(step: int) -> Progress:
    """What the trainer reports at ``step`` of 800 (two learners, a parameter server)."""
    ps = {
        "version": step,
        "pushed": step,
        "applied": step,
        "staleness_histogram": [step, 0, 0, 0, 0, 0, 0],
    }
    return Progress(
        phase="training",
        epoch=1 + step // 400,
        step=step,
        total_steps=800,
        loss=1.0 / (1 + step),
        samples_per_second=1500.0 + step,
        eta_seconds=(800 - step) / 100,
        checkpoints=step // 400,
        resumed=0,
        learners=2,
        ps=ps,
    )


@pytest.fixture
def live_worker(settings: Settings) -> Iterator[Callable[..., WorkerInfo]]:
    client = connect(settings.require_redis_url())
    registry = WorkerRegistry(client)
    published: list[WorkerInfo] = []

    def publish(job_id: str | None = None) -> WorkerInfo:
        now, host, pid = time.time(), f"gpu-{uuid.uuid4().hex[:8]}", 4242
        info = WorkerInfo(f"{host}:{pid}", host, pid, "cuda:0 Test GPU", 4, job_id, now - 60, now)
        registry.publish(info, ttl_seconds=60)
        published.append(info)
        return info

    yield publish
    for info in published:
        registry.remove(info.worker_id)
    client.close()


@pytest.fixture
def artifacts_dir() -> Path:
    """Where tests leave files for CI to keep (screenshots): ``$TAAS_TEST_ARTIFACTS`` or
    ``test-artifacts/`` in the repository (git ignores it)."""
    folder = Path(os.environ.get("TAAS_TEST_ARTIFACTS") or REPO_ROOT / "test-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
def browser() -> Iterator[Any]:
    """Debian's chromium driven by Playwright; ``.ci/run`` and ``make test`` install it, and a
    test is skipped only where none can be found."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extras)")
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no chromium at {CHROMIUM}: install Debian's package (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield launched
        launched.close()
