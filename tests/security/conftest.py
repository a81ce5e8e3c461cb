"""Fixtures for the security tests: two tenants, each with an Available classifier, an
evaluation of it and a dataset."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.storage.store import ArtifactStore
from tests.service.helpers import make_available, nlc_files, serving_in_thread, train_tiny_model

LABELLED = "text,label\nhot today?,temperature\nraining?,conditions\ncold tonight?,temperature\n"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model trained once per session by the real trainer."""
    return train_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@dataclass(frozen=True)
class Estate:
    """What a tenant owns, as its own replies named it."""

    tenant: Any
    classifier: dict[str, Any]  # the create reply of an Available classifier
    dataset: dict[str, Any]  # the upload reply
    evaluation: dict[str, Any]  # the evaluate reply (queued) of the classifier


@pytest.fixture
def estate_factory(
    client: TestClient,
    tenant_factory: Callable[..., Any],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
) -> Callable[[], Estate]:
    """``estate_factory()``: a new tenant with an Available classifier, an evaluation of it and an
    uploaded dataset."""

    def build() -> Estate:
        tenant = tenant_factory()
        created = client.post("/v1/classifiers", files=nlc_files(), headers=tenant.headers)
        assert created.status_code == 200, created.text
        make_available(session, store, tenant.id, created.json()["classifier_id"], tiny_model)
        dataset = client.post(
            "/v1/datasets?name=mine", content=LABELLED, headers={**tenant.headers, "Content-Type": "text/csv"}
        )
        assert dataset.status_code == 201, dataset.text
        evaluation = client.post(
            f"/v1/classifiers/{created.json()['classifier_id']}/evaluate",
            content=LABELLED,
            headers={**tenant.headers, "Content-Type": "text/csv"},
        )
        assert evaluation.status_code == 202, evaluation.text
        return Estate(tenant, created.json(), dataset.json(), evaluation.json())

    return build


@contextmanager
def serving(app: FastAPI) -> Iterator[tuple[int, FastAPI]]:
    """``app`` served by uvicorn on a free local port, in a thread, until the block ends: its
    port, and the app."""
    with serving_in_thread(app) as port:
        yield port, app
