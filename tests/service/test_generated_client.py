"""A client generated from ``/openapi.json`` by a well-kept generator (openapi-python-client)
works: it creates a classifier with NLC's multipart upload, polls it, classifies and deletes.

The client is generated once per test session, with no warning (every route's request and reply
is one it can build), and talks to the API on a real socket (uvicorn in a thread).
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from io import BytesIO
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.app import create_app
from service.core.settings import Settings
from service.storage.store import ArtifactStore
from tests.conftest import ADMIN_KEY
from tests.service.helpers import NLC_CSV, make_available, serving_in_thread

pytestmark = [pytest.mark.slow, pytest.mark.dialect_neutral]
BIN = Path(sys.executable).parent
PACKAGE = "taas_generated_client"
# What the generator reads as a file download or upload: it knows application/octet-stream (and
# JSON and forms) only, so the other binary media types the API uses are mapped onto it.
GENERATOR_CONFIG = {
    "content_type_overrides": dict.fromkeys(
        ("application/gzip", "text/csv", "application/x-ndjson"), "application/octet-stream"
    )
}


@pytest.fixture(scope="session")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The client package generated from the API's /openapi.json, imported."""
    folder = tmp_path_factory.mktemp("generated")
    app = create_app(Settings(_env_file=None, data_dir=folder / "var", admin_key=ADMIN_KEY))
    document = TestClient(app).get("/openapi.json").raise_for_status().text  # needs no lifespan
    (folder / "openapi.json").write_text(document)
    (folder / "config.json").write_text(json.dumps(GENERATOR_CONFIG))
    run = subprocess.run(
        [
            str(BIN / "openapi-python-client"),
            "generate",
            "--path",
            str(folder / "openapi.json"),
            "--output-path",
            str(folder / PACKAGE),
            "--meta",
            "none",
            "--config",
            str(folder / "config.json"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},  # its ruff
        timeout=120,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "Warning" not in output and "WARNING" not in output, output  # nothing left out
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(folder))


def _module(package: ModuleType, name: str) -> Any:
    return importlib.import_module(f"{package.__name__}.{name}")


def test_a_generated_client_creates_polls_classifies_and_deletes(
    generated: ModuleType,
    settings: Settings,
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
    wait_until: Callable[..., Any],
) -> None:
    client_module = _module(generated, "client")
    models = _module(generated, "models")
    files = _module(generated, "types")
    with serving_in_thread(create_app(settings)) as port:
        base = f"http://127.0.0.1:{port}"
        made = httpx.post(
            f"{base}/v1/admin/tenants", json={"name": "generated"}, headers={"X-API-Key": ADMIN_KEY}
        )
        tenant = made.raise_for_status().json()
        api = client_module.AuthenticatedClient(base_url=base, token=tenant["api_key"])
        # create, with NLC's multipart form
        upload = models.ClassifierUpload(
            training_data=files.File(payload=BytesIO(NLC_CSV.encode()), file_name="train.csv"),
            training_metadata=models.TrainingMetadata(
                name="weather", language=models.TrainingMetadataLanguage.EN
            ),
        )
        created = _module(generated, "api.classifiers.create_classifier").sync(client=api, body=upload)
        assert isinstance(created, models.ClassifierInfo), created
        assert (created.name, created.status) == ("weather", "Training")
        get_classifier = _module(generated, "api.classifiers.get_classifier")
        # poll: Training until a worker finishes it (here, the job state machine driven directly)
        assert get_classifier.sync(created.classifier_id, client=api).status == "Training"
        make_available(session, store, tenant["tenant_id"], created.classifier_id, tiny_model)
        wait_until(lambda: get_classifier.sync(created.classifier_id, client=api).status == "Available")
        # a page of the listing, with its total
        listed = _module(generated, "api.classifiers.list_classifiers").sync(client=api, limit=10)
        assert [c.classifier_id for c in listed.classifiers] == [created.classifier_id]
        assert (listed.total, listed.limit, listed.offset) == (1, 10, 0)
        # classify, with the key in NLC's Basic form this time
        basic = base64.b64encode(f"apikey:{tenant['api_key']}".encode()).decode()
        nlc = client_module.AuthenticatedClient(base_url=base, token=basic, prefix="Basic")
        answer = _module(generated, "api.classify.classify").sync(
            created.classifier_id, client=nlc, body=models.ClassifyInput(text="is it cold outside")
        )
        assert isinstance(answer, models.Classification), answer
        assert answer.top_class == "temperature" and answer.classes[0].confidence > 0.5
        # delete: gone, and an unknown classifier is the documented error
        _module(generated, "api.classifiers.delete_classifier").sync(created.classifier_id, client=api)
        gone = get_classifier.sync(created.classifier_id, client=api)
        assert isinstance(gone, models.Error) and gone.code == 404
