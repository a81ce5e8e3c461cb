"""Fixtures for the API tests: NLC uploads and what a failed request must not leave behind."""

from __future__ import annotations

import json
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

NLC_CSV = (
    "How hot is it today?,temperature\n"
    "Is it hot outside?,temperature\n"
    '"Will it be cold, tonight?",temperature\n'
    "Is it raining?,conditions\n"
    "Will it snow tomorrow?,conditions,temperature\n"
)


def nlc_files(csv: str | bytes = NLC_CSV, metadata: object | None = None) -> dict[str, Any]:
    """The multipart body the ibm-watson SDK sends for create_classifier (parts without file names)."""
    meta = json.dumps(metadata if metadata is not None else {"language": "en", "name": "weather"})
    return {
        "training_metadata": (None, meta, "application/json"),
        "training_data": (None, csv, "text/csv"),
    }


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
