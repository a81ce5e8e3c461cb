"""Tenant isolation: another tenant's ids are 404 on every route, admin routes refuse tenant keys,
keys are stored hashed and compared in constant time, and a revoked key fails at once."""

from __future__ import annotations

import hashlib
import hmac
import re
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import inspect, text
from sqlalchemy.orm import Session

from service.serving import classifying
from service.tenants import accounts
from tests.conftest import ADMIN_KEY

pytestmark = pytest.mark.dialect_neutral

BODIES: dict[str, Any] = {
    "classify": {"text": "is it raining"},
    "classify_collection": {"collection": [{"text": "is it raining"}]},
}
# Every tenant route that names a resource id: (method, path template).
ID_ROUTES = [
    ("GET", "/v1/classifiers/{classifier_id}"),
    ("DELETE", "/v1/classifiers/{classifier_id}"),
    ("PATCH", "/v1/classifiers/{classifier_id}"),
    ("POST", "/v1/classifiers/{classifier_id}/classify"),
    ("GET", "/v1/classifiers/{classifier_id}/classify"),
    ("POST", "/v1/classifiers/{classifier_id}/classify_collection"),
    ("POST", "/v1/classifiers/{classifier_id}/cancel"),
    ("POST", "/v1/classifiers/{classifier_id}/resume"),
    ("GET", "/v1/classifiers/{classifier_id}/events"),
    ("GET", "/v1/classifiers/{classifier_id}/bundle"),
    ("GET", "/v1/classifiers/{classifier_id}/versions"),
    ("POST", "/v1/classifiers/{classifier_id}/versions"),
    ("GET", "/v1/classifiers/{classifier_id}/versions/{version}"),
    ("DELETE", "/v1/classifiers/{classifier_id}/versions/{version}"),
    ("POST", "/v1/classifiers/{classifier_id}/versions/{version}/promote"),
    ("GET", "/v1/classifiers/{classifier_id}/versions/{version}/bundle"),
    ("GET", "/v1/classifiers/{classifier_id}/versions/{version}/history"),
    ("POST", "/v1/classifiers/{classifier_id}/evaluate"),
    ("GET", "/v1/classifiers/{classifier_id}/evaluations"),
    ("GET", "/v1/classifiers/{classifier_id}/evaluations/{evaluation_id}"),
    ("DELETE", "/v1/classifiers/{classifier_id}/evaluations/{evaluation_id}"),
    ("GET", "/v1/classifiers/{classifier_id}/evaluations/{evaluation_id}/report.html"),
    ("GET", "/v1/datasets/{dataset_id}"),
    ("GET", "/v1/datasets/{dataset_id}/report"),
    ("DELETE", "/v1/datasets/{dataset_id}"),
]


def _routes(app: FastAPI) -> list[tuple[str, str]]:
    # The OpenAPI schema lists every API route (FastAPI nests included routers in app.routes);
    # those that take a key are under /v1 (the health probes take none).
    paths = app.openapi()["paths"].items()
    return sorted((method.upper(), path) for path, ops in paths if path.startswith("/v1/") for method in ops)


def _call(
    client: TestClient, method: str, template: str, ids: dict[str, str], headers: dict[str, str]
) -> Any:
    path = template.format(**ids)
    body = BODIES.get(path.rsplit("/", 1)[-1])
    if method == "GET" and body is not None:  # NLC's GET classify: the text is the query
        return client.request(method, path, params=body, headers=headers)
    return client.request(method, path, json=body, headers=headers)


def test_every_tenant_route_with_an_id_is_covered(app: FastAPI) -> None:
    with_ids = [(m, p) for m, p in _routes(app) if not p.startswith("/v1/admin") and "{" in p]

    assert sorted(with_ids) == sorted(ID_ROUTES)


@pytest.mark.parametrize(("method", "template"), ID_ROUTES, ids=[f"{m} {p}" for m, p in ID_ROUTES])
def test_another_tenants_id_is_404_exactly_like_an_unknown_one(
    client: TestClient, estate_factory: Callable[[], Any], method: str, template: str
) -> None:
    alice, bob = estate_factory(), estate_factory()
    theirs = {
        "classifier_id": alice.classifier["classifier_id"],
        "dataset_id": alice.dataset["dataset_id"],
        "version": "1",
        "evaluation_id": alice.evaluation["evaluation_id"],
    }
    unknown = {
        "classifier_id": str(uuid.uuid4()),
        "dataset_id": str(uuid.uuid4()),
        "version": "1",
        "evaluation_id": str(uuid.uuid4()),
    }

    foreign = _call(client, method, template, theirs, bob.tenant.headers)
    missing = _call(client, method, template, unknown, bob.tenant.headers)

    assert foreign.status_code == missing.status_code == 404
    assert re.sub(r"'[^']*'", "ID", foreign.json()["description"]) == re.sub(
        r"'[^']*'", "ID", missing.json()["description"]
    )
    # and nothing of Alice's was touched
    own = alice.tenant.headers
    assert (
        client.get(f"/v1/classifiers/{theirs['classifier_id']}", headers=own).json()["status"] == "Available"
    )
    assert client.get(f"/v1/datasets/{theirs['dataset_id']}", headers=own).status_code == 200
    assert client.get(alice.evaluation["url"], headers=own).status_code == 200


def test_urls_copied_from_another_tenants_replies_are_404(
    client: TestClient, estate_factory: Callable[[], Any]
) -> None:
    alice, bob = estate_factory(), estate_factory()

    copied = (
        alice.classifier["url"],
        alice.dataset["url"],
        alice.classifier["url"] + "/classify",
        alice.evaluation["url"],
        alice.evaluation["report_html_url"],
    )
    for url in copied:
        path = urlsplit(url).path
        method = "POST" if path.endswith("/classify") else "GET"
        reply = client.request(method, path, json=BODIES["classify"], headers=bob.tenant.headers)
        assert reply.status_code == 404, (path, reply.text)


def test_training_on_another_tenants_dataset_is_404(
    client: TestClient, estate_factory: Callable[[], Any]
) -> None:
    alice, bob = estate_factory(), estate_factory()

    reply = client.post(
        "/v1/classifiers",
        json={"name": "stolen", "language": "en", "dataset_id": alice.dataset["dataset_id"]},
        headers=bob.tenant.headers,
    )

    assert reply.status_code == 404
    assert client.get("/v1/classifiers", headers=bob.tenant.headers).json()["classifiers"] == [
        {k: bob.classifier[k] for k in ("classifier_id", "url", "name", "language", "created")}
    ]


def test_lists_show_only_the_callers_own_resources(
    client: TestClient, estate_factory: Callable[[], Any]
) -> None:
    alice, bob = estate_factory(), estate_factory()

    for path in ("/v1/classifiers", "/v1/datasets"):
        listing = client.get(path, headers=bob.tenant.headers).text
        assert alice.classifier["classifier_id"] not in listing
        assert alice.dataset["dataset_id"] not in listing


def test_every_admin_route_refuses_tenant_keys_and_unknown_keys(
    app: FastAPI, client: TestClient, tenant: Any
) -> None:
    admin_routes = [(m, p) for m, p in _routes(app) if p.startswith("/v1/admin")]
    assert len(admin_routes) >= 6

    for method, template in admin_routes:
        path = re.sub(r"\{[^}]+\}", tenant.id, template)
        as_tenant = client.request(method, path, json={"name": "x"}, headers=tenant.headers)
        as_nobody = client.request(method, path, json={"name": "x"}, headers={"X-API-Key": "taas_guess"})
        assert as_tenant.status_code == 403, (method, path)
        assert as_nobody.status_code == 401, (method, path)


def test_every_tenant_route_refuses_the_admin_key(app: FastAPI, client: TestClient) -> None:
    tenant_routes = [(m, p) for m, p in _routes(app) if not p.startswith("/v1/admin")]

    for method, template in tenant_routes:
        path = re.sub(r"\{[^}]+\}", str(uuid.uuid4()), template)
        reply = client.request(method, path, json={}, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        assert reply.status_code == 403, (method, path, reply.text)


def test_keys_are_stored_only_as_their_sha256(
    client: TestClient, estate_factory: Callable[[], Any], session: Session
) -> None:
    alice = estate_factory()
    key = alice.tenant.api_key

    stored = session.execute(
        text("SELECT key_hash, prefix FROM api_keys WHERE tenant_id = :t"), {"t": alice.tenant.id}
    ).one()
    assert stored.key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert len(stored.prefix) < 16 and key.startswith(stored.prefix)
    for table in inspect(session.get_bind()).get_table_names():
        for row in session.execute(text(f"SELECT * FROM {table}")):  # noqa: S608 - table names from the schema
            assert all(key not in str(value) for value in row), table


def test_keys_are_compared_in_constant_time(
    client: TestClient, estate_factory: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = estate_factory()
    compared: list[str] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append(a)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)  # the module tenancy and serving use
    assert accounts.hmac is hmac and classifying.hmac is hmac
    digest = hashlib.sha256(alice.tenant.api_key.encode()).hexdigest()
    cid = alice.classifier["classifier_id"]

    assert client.get("/v1/classifiers", headers=alice.tenant.headers).status_code == 200
    assert (
        client.post(
            f"/v1/classifiers/{cid}/classify", json=BODIES["classify"], headers=alice.tenant.headers
        ).status_code
        == 200
    )
    assert compared.count(digest) == 2


def test_a_revoked_key_fails_at_once_on_every_route(
    client: TestClient, estate_factory: Callable[[], Any], admin_headers: dict[str, str]
) -> None:
    alice = estate_factory()
    cid = alice.classifier["classifier_id"]
    classify = f"/v1/classifiers/{cid}/classify"
    assert client.post(classify, json=BODIES["classify"], headers=alice.tenant.headers).status_code == 200

    rotated = client.post(
        f"/v1/admin/tenants/{alice.tenant.id}/keys", json={"revoke_others": True}, headers=admin_headers
    )

    assert client.post(classify, json=BODIES["classify"], headers=alice.tenant.headers).status_code == 401
    assert client.get("/v1/datasets", headers=alice.tenant.headers).status_code == 401
    fresh = {"X-API-Key": rotated.json()["api_key"]}
    assert client.post(classify, json=BODIES["classify"], headers=fresh).status_code == 200
