"""Fixtures for the API tests: NLC uploads, an Available classifier, and what a failed request
must not leave behind (``tests/security`` uses the same fixtures through ``tests.service.helpers``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.models import Classifier, Dataset, TrainingJob
from service.settings import Settings
from service.store import ArtifactStore
from tests.service.helpers import NLC_CSV, make_available, nlc_files, train_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model trained once per session by the real trainer on a few weather questions."""
    return train_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture
def available(
    tenant: Any,
    create_classifier: Callable[..., httpx.Response],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
) -> str:
    """A classifier of ``tenant`` taken through the job state machine to Available."""
    cid = create_classifier(tenant).json()["classifier_id"]
    return make_available(session, store, tenant.id, cid, tiny_model)


@pytest.fixture
def create_classifier(client: TestClient) -> Callable[..., httpx.Response]:
    """POST an NLC create as ``tenant``: ``create_classifier(tenant, csv=..., metadata=...)``."""

    def create(tenant: Any, csv: str | bytes = NLC_CSV, metadata: object | None = None) -> httpx.Response:
        return client.post("/v1/classifiers", files=nlc_files(csv, metadata), headers=tenant.headers)

    return create


@pytest.fixture
def nothing_left_behind(session: Session, settings: Settings) -> Callable[[str], None]:
    """``nothing_left_behind(tenant_id)`` asserts the tenant has no rows and the store no files."""

    def check(tenant_id: str) -> None:
        session.expire_all()
        for model in (Dataset, Classifier, TrainingJob):
            count = session.scalar(
                select(func.count()).select_from(model).where(model.tenant_id == tenant_id)
            )
            assert count == 0, f"{model.__tablename__} has {count} row(s) left"
        root: Path = settings.resolved_artifacts_dir()
        files = [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
        assert files == [], f"files left behind: {files}"

    return check
