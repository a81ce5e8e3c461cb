"""Fixtures for the API tests: NLC uploads, an Available classifier, and what a failed request
must not leave behind (``tests/security`` uses the same fixtures through ``tests.service.helpers``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.storage.store import ArtifactStore
from tests.service.helpers import NLC_CSV, make_available, nlc_files, train_tiny_model
from trainer.encoder import shared_encoder
from trainer.encoder.registry import MINILM


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model trained once per session by the real trainer on a few weather questions."""
    return train_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def encoder_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same weather questions' model, trained on the shared sentence encoder too."""
    return train_tiny_model(tmp_path_factory.mktemp("encoder-model"), encoder=shared_encoder(MINILM.name))


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
