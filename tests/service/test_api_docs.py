"""The API's contract and its pages: /openapi.json documents every body and both key forms,
/docs and /redoc are served from the package, / leads to /docs, and /healthz and /readyz
answer without a key."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.core.settings import Settings
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.dialect_neutral

STATIC = REPO_ROOT / "service" / "api" / "static"


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    """A client of an app whose lifespan does not run (no database, no Redis): what needs
    neither (the document, the pages, /healthz) is tested once, not once per database."""
    folder = tmp_path_factory.mktemp("bare")
    return TestClient(create_app(Settings(_env_file=None, data_dir=folder, admin_key="a" * 40)))


def _operations(client: TestClient) -> list[tuple[str, str, dict[str, Any]]]:
    paths = client.get("/openapi.json").json()["paths"]
    return [(method, path, op) for path, ops in paths.items() for method, op in ops.items()]


def test_every_route_that_reads_its_body_itself_documents_it(bare: TestClient) -> None:
    bodies = {(m, p): op.get("requestBody", {}).get("content", {}) for m, p, op in _operations(bare)}

    assert set(bodies["post", "/v1/classifiers"]) == {"multipart/form-data", "application/json"}
    assert set(bodies["post", "/v1/classifiers/{classifier_id}/versions"]) == {
        "multipart/form-data",
        "application/json",
    }
    assert set(bodies["post", "/v1/classifiers/import"]) == {
        "multipart/form-data",
        "application/gzip",
        "application/octet-stream",
    }
    assert set(bodies["post", "/v1/datasets"]) == {"multipart/form-data", "text/csv", "application/x-ndjson"}
    create = bodies["post", "/v1/classifiers"]["multipart/form-data"]
    assert create["encoding"] == {"training_metadata": {"contentType": "application/json"}}
    schemas = bare.get("/openapi.json").json()["components"]["schemas"]
    upload = schemas["ClassifierUpload"]
    assert upload["properties"]["training_data"] == {
        **upload["properties"]["training_data"],
        "format": "binary",
    }
    assert set(upload["required"]) == {"training_data", "training_metadata"}
    assert schemas["TrainingMetadata"]["properties"]["language"]["enum"][0] == "en"


def test_every_v1_operation_takes_either_key_form_and_the_probes_none(bare: TestClient) -> None:
    document = bare.get("/openapi.json").json()
    schemes = document["components"]["securitySchemes"]

    assert schemes["basicAuth"] == {**schemes["basicAuth"], "type": "http", "scheme": "basic"}
    assert schemes["bearerAuth"] == {**schemes["bearerAuth"], "type": "http", "scheme": "bearer"}
    assert schemes["apiKeyHeader"] == {**schemes["apiKeyHeader"], "in": "header", "name": "X-API-Key"}
    for method, path, operation in _operations(bare):
        if path.startswith("/v1/"):
            assert operation["security"] == [{"basicAuth": []}, {"bearerAuth": []}, {"apiKeyHeader": []}]
            names = {p["name"].lower() for p in operation.get("parameters", [])}
            assert not names & {"authorization", "x-api-key"}, (method, path)  # the schemes say it
        else:
            assert path in {"/healthz", "/readyz"} and "security" not in operation


def test_operation_ids_are_the_route_functions_names(bare: TestClient) -> None:
    ids = [op["operationId"] for _, _, op in _operations(bare)]

    assert len(ids) == len(set(ids))
    assert {"create_classifier", "classify", "list_datasets", "promote_version", "readyz"} <= set(ids)


def test_request_bodies_carry_examples(bare: TestClient) -> None:
    schemas = bare.get("/openapi.json").json()["components"]["schemas"]

    for name in ("ClassifyInput", "ClassifyCollectionInput", "CreateFromDataset", "TrainingMetadata"):
        assert schemas[name]["examples"], name


def test_docs_and_redoc_load_their_assets_from_the_package(bare: TestClient) -> None:
    pages = {path: bare.get(path) for path in ("/docs", "/redoc")}

    for path, page in pages.items():
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), path
        sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert sources and all(s.startswith("/docs/assets/") for s in sources), (path, sources)
        for source in sources:
            asset = bare.get(source)
            assert asset.status_code == 200 and asset.content, source
        assert "https://" not in page.text, path  # no CDN, no web fonts
        policy = page.headers["content-security-policy"]  # nor from a script (ReDoc's logo)
        assert "default-src 'none'" in policy and "script-src 'self'" in policy, path
    assert "validatorUrl" in pages["/docs"].text  # no badge from validator.swagger.io


def test_the_vendored_assets_are_the_npm_packages_files() -> None:
    listed = re.findall(
        r"\| `([^`]+)` \| `[^`]+` \| [^|]+ \| `([0-9a-f]{64})` \|", (STATIC / "SOURCES.md").read_text()
    )

    assert len(listed) == 4
    for name, sha256 in listed:
        assert hashlib.sha256((STATIC / name).read_bytes()).hexdigest() == sha256, name
    for licence in ("swagger-ui.LICENSE", "swagger-ui.NOTICE", "redoc.LICENSE"):
        assert (STATIC / licence).stat().st_size > 0


def test_the_home_page_leads_to_the_console(bare: TestClient) -> None:
    reply = bare.get("/", follow_redirects=False)

    assert reply.status_code == 307 and reply.headers["location"] == "/console"
    assert bare.head("/", follow_redirects=False).status_code == 307


def test_healthz_answers_without_a_key(bare: TestClient) -> None:
    reply = bare.get("/healthz")

    assert reply.status_code == 200 and reply.json() == {"status": "ok"}


def test_readyz_is_ready_when_database_redis_and_store_answer(client: TestClient) -> None:
    reply = client.get("/readyz")

    assert reply.status_code == 200, reply.text
    assert reply.json() == {"status": "ready", "checks": {"database": True, "redis": True, "store": True}}


def test_readyz_is_503_naming_what_does_not_answer(settings_factory: Callable[..., Settings]) -> None:
    settings = settings_factory(redis_url="redis://127.0.0.1:9/0")  # the discard port: nothing listens
    with TestClient(create_app(settings)) as client:
        reply = client.get("/readyz")

    assert reply.status_code == 503
    assert reply.json() == {"status": "unready", "checks": {"database": True, "redis": False, "store": True}}


def test_the_probes_answer_head(client: TestClient) -> None:
    assert client.head("/healthz").status_code == client.head("/readyz").status_code == 200
