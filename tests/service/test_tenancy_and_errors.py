"""API keys (three header forms, rotate, revoke, admin-only routes) and the NLC error body everywhere."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine

from service.core.settings import Settings
from service.tenants.accounts import new_admin_key


def _header_forms(key: str) -> list[dict[str, str]]:
    basic = base64.b64encode(f"apikey:{key}".encode()).decode()
    return [{"Authorization": f"Bearer {key}"}, {"X-API-Key": key}, {"Authorization": f"Basic {basic}"}]


def test_key_is_accepted_in_all_three_header_forms(client: TestClient, tenant: Any) -> None:
    for headers in _header_forms(tenant.api_key):
        assert client.get("/v1/classifiers", headers=headers).status_code == 200, headers


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer nope"}, {"X-API-Key": "nope"}, {"Authorization": "Basic bm9wZQ=="}],
    ids=["missing", "bearer", "x-api-key", "basic-no-colon"],
)
def test_missing_or_unknown_key_is_401_with_a_challenge_no_browser_prompts_for(
    client: TestClient, headers: dict[str, str]
) -> None:
    reply = client.get("/v1/classifiers", headers=headers)

    assert reply.status_code == 401
    assert reply.headers["WWW-Authenticate"] == 'Bearer realm="taas"'  # tests/security/test_cross_site.py
    assert reply.json()["code"] == 401 and reply.json()["error"] == "Unauthorized"


@pytest.mark.parametrize(
    ("authorization", "description"),
    [
        ("Bearer", "no API key after 'Bearer'"),  # was "unsupported Authorization scheme"
        ("Bearer   ", "no API key after 'Bearer'"),
        ("Token abc", "unsupported Authorization scheme: use Bearer, Basic (apikey:KEY) or X-API-Key"),
    ],
)
def test_a_malformed_authorization_header_is_named(
    client: TestClient, authorization: str, description: str
) -> None:
    reply = client.get("/v1/classifiers", headers={"Authorization": authorization})

    assert reply.status_code == 401 and reply.json()["description"] == description


def test_a_maximum_class_count_under_the_minimum_is_refused(
    settings_factory: Callable[..., Settings],
) -> None:
    """TAAS_MIN_CLASSES=10 TAAS_MAX_CLASSES=5 started a platform that refused every training."""
    with pytest.raises(ValueError, match="must be at least TAAS_MIN_CLASSES"):
        settings_factory(min_classes=10, max_classes=5)


def test_revoked_key_fails_at_once(client: TestClient, tenant: Any, admin_headers: dict[str, str]) -> None:
    [key] = [
        k
        for t in client.get(f"/v1/admin/tenants?name={tenant.name}", headers=admin_headers).json()["tenants"]
        if t["tenant_id"] == tenant.id
        for k in t["keys"]
    ]

    reply = client.delete(f"/v1/admin/tenants/{tenant.id}/keys/{key['key_id']}", headers=admin_headers)

    assert reply.status_code == 200
    assert client.get("/v1/classifiers", headers=tenant.headers).status_code == 401


def test_rotate_issues_a_working_key_and_can_revoke_the_others(
    client: TestClient, tenant: Any, admin_headers: dict[str, str]
) -> None:
    kept = client.post(f"/v1/admin/tenants/{tenant.id}/keys", json={}, headers=admin_headers).json()
    assert client.get("/v1/classifiers", headers=tenant.headers).status_code == 200

    newest = client.post(
        f"/v1/admin/tenants/{tenant.id}/keys", json={"revoke_others": True}, headers=admin_headers
    ).json()

    assert client.get("/v1/classifiers", headers={"X-API-Key": newest["api_key"]}).status_code == 200
    for old in (tenant.api_key, kept["api_key"]):
        assert client.get("/v1/classifiers", headers={"X-API-Key": old}).status_code == 401


def test_a_misspelt_field_of_an_admin_request_is_refused_and_changes_nothing(
    client: TestClient, tenant: Any, admin_headers: dict[str, str]
) -> None:
    """`revoke_other` (for revoke_others) issued a new key and left the old ones working."""
    rotated = client.post(
        f"/v1/admin/tenants/{tenant.id}/keys", json={"revoke_other": True}, headers=admin_headers
    )
    name = f"misspelt-{uuid.uuid4().hex[:8]}"
    created = client.post("/v1/admin/tenants", json={"name": name, "quota": 1}, headers=admin_headers)

    assert rotated.status_code == 400
    assert rotated.json()["description"] == "revoke_other: Extra inputs are not permitted"
    assert created.status_code == 400
    assert created.json()["description"] == "quota: Extra inputs are not permitted"
    tenants = client.get(f"/v1/admin/tenants?name={tenant.name}", headers=admin_headers).json()["tenants"]
    assert [len(t["keys"]) for t in tenants if t["tenant_id"] == tenant.id] == [1]
    assert client.get(f"/v1/admin/tenants?name={name}", headers=admin_headers).json()["total"] == 0
    assert client.get("/v1/classifiers", headers=tenant.headers).status_code == 200


def test_a_query_parameter_an_admin_route_does_not_take_is_refused_and_changes_nothing(
    client: TestClient, tenant: Any, admin_headers: dict[str, str]
) -> None:
    """`?revoke_others=true` issued a key and revoked nothing (it is a field of the body)."""
    keys = f"/v1/admin/tenants/{tenant.id}/keys"

    rotated = client.post(f"{keys}?revoke_others=true", headers=admin_headers)
    quotas = client.patch(
        f"/v1/admin/tenants/{tenant.id}/quotas?classifiers=0", json={}, headers=admin_headers
    )

    assert (rotated.status_code, quotas.status_code) == (400, 400)
    assert rotated.json()["description"].startswith("revoke_others: this route takes no such query parameter")
    assert quotas.json()["description"].startswith("classifiers: this route takes no such query parameter")
    tenants = client.get(f"/v1/admin/tenants?name={tenant.name}", headers=admin_headers).json()["tenants"]
    assert [len(t["keys"]) for t in tenants if t["tenant_id"] == tenant.id] == [1]


def test_the_admin_listing_comes_a_page_at_a_time_oldest_first(
    client: TestClient, tenant_factory: Any, admin_headers: dict[str, str]
) -> None:
    prefix = f"paged-{uuid.uuid4().hex[:8]}"
    made = [tenant_factory(f"{prefix}-{i}") for i in range(3)]
    listing = f"/v1/admin/tenants?name={prefix.upper()}&per_page=2"

    first, second, beyond = (client.get(f"{listing}&page={n}", headers=admin_headers) for n in (1, 2, 3))

    assert [(r.status_code, r.json()["total"], r.json()["pages"]) for r in (first, second, beyond)] == [
        (200, 3, 2)
    ] * 3
    pages = [[t["tenant_id"] for t in r.json()["tenants"]] for r in (first, second, beyond)]
    assert pages == [[made[0].id, made[1].id], [made[2].id], []]
    assert first.json()["tenants"][0]["keys"][0]["revoked"] is None
    everyone = client.get("/v1/admin/tenants?per_page=1", headers=admin_headers).json()
    assert everyone["pages"] == everyone["total"] >= 3 and len(everyone["tenants"]) == 1
    for query, field in (("per_page=0", "per_page"), ("per_page=1001", "per_page"), ("page=0", "page")):
        refused = client.get(f"/v1/admin/tenants?{query}", headers=admin_headers)
        assert refused.status_code == 400 and refused.json()["description"].startswith(f"query.{field}: ")
    too_long = client.get(f"/v1/admin/tenants?name={'x' * 257}", headers=admin_headers)
    assert too_long.status_code == 400 and too_long.json()["description"].startswith("query.name: ")
    nul = client.get("/v1/admin/tenants?name=a%00b", headers=admin_headers)  # a 500 on PostgreSQL
    assert nul.status_code == 400 and nul.json()["description"] == "name: must not contain a NUL character"


def test_admin_list_never_shows_secrets(
    client: TestClient, tenant: Any, admin_headers: dict[str, str]
) -> None:
    listing = client.get(f"/v1/admin/tenants?name={tenant.name}", headers=admin_headers)

    assert listing.status_code == 200
    assert tenant.api_key not in listing.text
    assert any(t["name"] == tenant.name for t in listing.json()["tenants"])


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/admin/tenants"), ("POST", "/v1/admin/tenants"), ("POST", "/v1/admin/tenants/x/keys")],
)
def test_admin_routes_refuse_tenant_keys(client: TestClient, tenant: Any, method: str, path: str) -> None:
    reply = client.request(method, path, json={"name": "evil"}, headers=tenant.headers)

    assert reply.status_code == 403
    assert reply.json()["error"] == "Forbidden"


def test_duplicate_tenant_name_is_409(client: TestClient, tenant: Any, admin_headers: dict[str, str]) -> None:
    reply = client.post("/v1/admin/tenants", json={"name": tenant.name}, headers=admin_headers)

    assert reply.status_code == 409 and reply.json()["code"] == 409


def test_a_name_typed_another_way_is_the_same_tenant_and_an_invisible_one_none(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    """NFC and NFD "é" made two tenants that listed alike, and U+200B one that listed blank."""
    composed = client.post("/v1/admin/tenants", json={"name": "caf\u00e9"}, headers=admin_headers)
    decomposed = client.post("/v1/admin/tenants", json={"name": "cafe\u0301"}, headers=admin_headers)
    invisible = client.post("/v1/admin/tenants", json={"name": "\u200b"}, headers=admin_headers)

    assert composed.status_code == 201 and composed.json()["name"] == "caf\u00e9"
    assert decomposed.status_code == 409
    assert invisible.status_code == 400
    assert (
        invisible.json()["description"]
        == "name: has no visible character (only zero-width or format characters)"
    )


def test_unknown_tenant_key_rotation_is_404(client: TestClient, admin_headers: dict[str, str]) -> None:
    reply = client.post("/v1/admin/tenants/no-such-tenant/keys", json={}, headers=admin_headers)

    assert reply.status_code == 404 and reply.json()["description"] == "tenant 'no-such-tenant' not found"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "description"),
    [
        ("GET", "/v1/nowhere", None, 404, "no route for GET /v1/nowhere"),
        ("PUT", "/v1/classifiers", None, 405, "method PUT is not allowed on /v1/classifiers"),
        ("POST", "/v1/classifiers/{cid}/classify", {"txt": "a"}, 400, "text: Field required"),
        ("POST", "/v1/classifiers", {"name": "n"}, 400, "dataset_id: Field required"),
    ],
)
def test_framework_errors_use_the_nlc_body(
    client: TestClient,
    tenant: Any,
    create_classifier: Callable[..., Any],
    method: str,
    path: str,
    body: Any,
    status: int,
    description: str,
) -> None:
    if "{cid}" in path:
        path = path.format(cid=create_classifier(tenant).json()["classifier_id"])

    reply = client.request(method, path, json=body, headers=tenant.headers)

    assert reply.status_code == status
    assert reply.json() == {"code": status, "error": reply.reason_phrase, "description": description}


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", "/v1/classifiers", "GET, HEAD, POST"),
        ("PUT", "/v1/classifiers/{cid}", "DELETE, GET, HEAD, PATCH"),
        ("PUT", "/v1/classifiers/{cid}/classify", "GET, HEAD, POST"),
        ("DELETE", "/v1/classifiers/{cid}/classify_collection", "POST"),
    ],
)
def test_a_405_names_every_method_the_path_takes(
    client: TestClient,
    tenant: Any,
    create_classifier: Callable[..., Any],
    method: str,
    path: str,
    allowed: str,
) -> None:
    path = path.format(cid=create_classifier(tenant).json()["classifier_id"])

    reply = client.request(method, path, headers=tenant.headers)

    assert reply.status_code == 405
    assert reply.headers["allow"] == allowed


def test_unexpected_exception_is_500_nlc_body(settings_factory: Callable[..., Settings], tenant: Any) -> None:
    from service.app import create_app

    app: FastAPI = create_app(settings_factory())

    @app.get("/v1/boom")
    def boom() -> None:
        raise RuntimeError("secret detail")

    with TestClient(app, raise_server_exceptions=False) as c:
        reply = c.get("/v1/boom")

    assert reply.status_code == 500
    assert reply.json()["error"] == "Internal Server Error"
    assert "secret detail" not in reply.text


def test_a_database_with_no_space_left_is_503_naming_that(settings_factory: Callable[..., Settings]) -> None:
    """Every write on a full disk was a 500. The error here is SQLite's own (SQLITE_FULL, a
    database held to one page); PostgreSQL's DiskFull (SQLSTATE 53100) takes the same way."""
    from service.app import create_app

    app: FastAPI = create_app(settings_factory())

    @app.post("/v1/full")
    def full() -> None:
        with create_engine("sqlite://").connect() as connection:
            connection.exec_driver_sql("PRAGMA max_page_count = 1")
            connection.exec_driver_sql("CREATE TABLE t (x BLOB)")
            connection.exec_driver_sql("INSERT INTO t VALUES (randomblob(100000))")

    with TestClient(app, raise_server_exceptions=False) as c:
        reply = c.post("/v1/full")

    assert reply.status_code == 503
    assert reply.json()["description"].startswith("the database has no space left; reference ")


@pytest.mark.parametrize(
    ("texts", "fragment"),
    [
        (["fine", ""], "collection.1.text: text must not be empty"),
        (["x" * 2049], "collection.0.text: text has 2049 characters; the limit is 2048 (max_classify_chars)"),
        ([f"t{i}" for i in range(31)], "max_collection"),
    ],
)
def test_classify_input_rules_are_400_naming_the_limit(
    client: TestClient, tenant: Any, create_classifier: Callable[..., Any], texts: list[str], fragment: str
) -> None:
    cid = create_classifier(tenant).json()["classifier_id"]

    reply = client.post(
        f"/v1/classifiers/{cid}/classify_collection",
        json={"collection": [{"text": t} for t in texts]},
        headers=tenant.headers,
    )

    assert reply.status_code == 400
    assert fragment in reply.json()["description"]


def test_a_new_admin_key_never_starts_with_a_dash() -> None:
    # a bare token_urlsafe starts with '-' once in 64; `taas login URL KEY` then reads it as an option
    assert not any(new_admin_key().startswith("-") for _ in range(2000))
